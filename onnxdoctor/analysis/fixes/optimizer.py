"""The dynamo exporter's own graph optimizer, switched off (`optimize=False`).

torch.onnx.export(dynamo=True) runs onnxscript's optimizer on the graph it translated: constant
folding, dropping no-op arithmetic, simplifying patterns. Such rewrites are meant to keep the
numbers, but a fold can change them: an epsilon below float32's resolution next to a larger
constant is dropped (`x + 1e-15` where x can be 0, then 0/0 is NaN), a folded constant is computed
in another precision, a pattern is replaced by one that rounds otherwise. Exporting again without
the optimizer is cheap and mechanical, and verified like any fix: when the unoptimized graph
matches PyTorch, the optimizer changed the numbers. ONNX Runtime still optimizes the graph when it
loads it, so the cost at run time is small.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import Recipe, Unoptimized, UseExporter

CODES = ("OD501", "OD601", "OD603")

SNIPPET = "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True, optimize=False)\n"


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Export with the same exporter, its optimizer off (a dynamo export of a script only)."""
    if ctx.exporter != "dynamo" or ctx.target_kind != "script":
        return []
    where = f" (the first value that differs comes from {finding.op})" if finding.op and finding.code == "OD601" else ""
    return [Fix(
        kind="export_options",
        title=f"Export without torch.onnx's graph optimizer (optimize=False){where}",
        snippet=SNIPPET,
        applicability=Applicability.SAFE,
        cost=("a larger file with the constants torch.onnx would have folded; ONNX Runtime still optimizes "
              "the graph when it loads it"),
        recipe=Recipe("export_options", (Unoptimized(), UseExporter("dynamo"))),
    )]
