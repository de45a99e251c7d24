"""A Transpose whose `perm` counts an axis from the end, written as the axis it means.

torch's `permute` takes negative dims (`s.permute(1, -1, 0)`); the TorchScript exporter writes
them into Transpose's `perm` unchanged, and the schema takes a permutation of 0..rank-1: the full
checker's shape inference ("Invalid attribute perm {1, -1, 0}") and ONNX Runtime refuse the file.
The perm's length is the rank, so each negative entry has one meaning; rewriting it is exact.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import NonNegativePerms, Recipe

CODES = ("OD301", "OD303", "OD304", "OD499", "OD501")

SNIPPET = """import onnx
from onnxdoctor.onnxkit.transforms import non_negative_perms

# after torch.onnx.export(..., 'model.onnx'):
model = onnx.load('model.onnx')
# Transpose takes perm as axes counted from 0: -1 is the last axis, rank - 1
onnx.save(non_negative_perms(model), 'model.onnx')
# or in the model: permute(1, 2, 0) instead of permute(1, -1, 0)
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The perm written with non-negative axes, for a Transpose refused for a negative one."""
    if "Transpose" not in f"{finding.op} {finding.onnx_op}" or "perm" not in finding.message:
        return []
    where = f" at {finding.source}" if finding.source else ""
    return [Fix(
        kind="non_negative_perm",
        title=f"Give Transpose its perm as axes counted from 0 (a permute{where} with a negative dim)",
        snippet=ctx.rewrite_snippet(SNIPPET),
        applicability=Applicability.SAFE,
        cost="none: the same transpose, written as the schema takes it",
        recipe=Recipe("non_negative_perm", (ctx.file_rewrite(NonNegativePerms()),)),
    )]
