"""forward() takes a branch written for the export only (`if torch.onnx.is_in_onnx_export():`),
and the export or the exported model fails: export the eager branch instead.

The worker records, for every export, whether forward() asked torch.onnx.is_in_onnx_export() and
was told true (`export_branch` in the EXPORT record). Such branches were often written for an
older exporter or another runtime (TensorRT plugins, a custom node, a multiplication by the flag
itself); the eager branch is what PyTorch computes, and the fix is judged against exactly that.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe, UseExporter

# Anything the export-only branch may have caused: a failed export, a graph the checker or
# ONNX Runtime refuses, numbers that differ. (OD401, a custom node, is custom_domain's.)
CODES = ("OD202", "OD203", "OD204", "OD205", "OD299", "OD301", "OD302", "OD304", "OD402", "OD501", "OD601")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The eager branch, where forward() took one written for the export."""
    if ctx.target_kind != "script" or not ctx.export_facts.get("export_branch"):
        return []
    what = "the branch forward() takes for the export"
    # With either exporter: the eager branch may hold what failed the run's own exporter too.
    return [eager_branch_fix(what, finding.source), eager_branch_fix(what, finding.source, ctx.other_exporter())]


def eager_branch_fix(what: str, where: str | None, exporter: str | None = None) -> Fix:
    """Export with torch.onnx.is_in_onnx_export() false: forward() takes its eager branch (with
    `exporter`, that exporter; else the run's)."""
    place = f" at {where}" if where else ""
    export = "torch.onnx.export(model, example_inputs, 'model.onnx'" + (
        f", dynamo={exporter == 'dynamo'})" if exporter else ")")
    snippet = (
        "import torch\n\n"
        f"# forward() writes {what}{place} while torch.onnx.is_in_onnx_export() is true; with it\n"
        "# false during the export the exporter traces the eager branch instead.\n"
        "# (A module that did `from torch.onnx import is_in_onnx_export` holds its own name: set that too.)\n"
        "in_export = torch.onnx.is_in_onnx_export\n"
        "torch.onnx.is_in_onnx_export = lambda: False\n"
        "try:\n"
        f"    {export}\n"
        "finally:\n"
        "    torch.onnx.is_in_onnx_export = in_export\n"
    )
    return Fix(
        kind="eager_branch",
        title=f"Export forward()'s eager branch instead of {what} "
              "(torch.onnx.is_in_onnx_export() false during the export"
              + (f"; {exporter} exporter)" if exporter else ")"),
        snippet=snippet,
        applicability=Applicability.UNSAFE,
        cost="none at run time; during the export every check of torch.onnx.is_in_onnx_export() reads false, "
             "libraries' included",
        recipe=Recipe("eager_branch", (EagerExport(not_in_export=True),
                                       *((UseExporter(exporter),) if exporter else ()))),
    )
