"""A size computed from shapes, given to torch.nn.functional where it takes ints (OD299).

Under the TorchScript tracer a tensor's sizes are 0-d tensors, and so is arithmetic on them
(`stride = fine.shape[2] // coarse.shape[2]`). torch.nn.functional parses an int-or-tuple
argument by iterating anything iterable, and a 0-d tensor is, until iterating it raises
"iteration over a 0-d tensor" (EfficientLoFTR's `F.unfold(x, kernel_size=(W, W), stride=stride)`,
EffLOFTR-trt-ort#2). The user's fix in that thread is `int(stride)`: the value becomes a constant of
the graph, which the check at other inputs then holds to account like any frozen value. Exported
with that parsing reading a 0-d integer tensor as its int (recipe.EagerExport.int_sizes).
"""

from __future__ import annotations

from pathlib import Path

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.sources import source_lines
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe, UseExporter

CODES = ("OD299",)


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """int() around the size argument, for a functional that iterated a traced size."""
    if (ctx.target_kind != "script" or ctx.exporter != "torchscript"
            or "iteration over a 0-d tensor" not in ctx.export_error):
        return []
    where = f" at {finding.source}" if finding.source else ""
    called = f" ({finding.op})" if finding.op else ""
    line = _line(ctx, finding.source)
    return [Fix(
        kind="int_sizes",
        title=f"Pass the size computed from shapes{where} to the functional{called} as a Python int: int(size)",
        snippet=("# Under the TorchScript tracer sizes are 0-d tensors; torch.nn.functional iterates a\n"
                 "# tensor given where it takes an int or a tuple of ints. Wrap that argument in int():\n"
                 + (f"# {finding.source}:  {line}\n" if line else "")
                 + "# e.g.  stride = int(fine.shape[2] // coarse.shape[2])  (a constant of the graph)\n"),
        applicability=Applicability.SAFE,
        cost="the size is the example's, a constant of the graph: checked at other inputs like any frozen value",
        recipe=Recipe("int_sizes", (EagerExport(int_sizes=True), UseExporter("torchscript")), isolated=True),
    )]


def _line(ctx: FixContext, source: str | None) -> str:
    """The text of the user's line `file.py:N` in the model's folder ("" where unreadable)."""
    lines = source_lines(source, Path(ctx.target_path).parent) if ctx.target_path else []
    return lines[0].strip() if lines else ""
