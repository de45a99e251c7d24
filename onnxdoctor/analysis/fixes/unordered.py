"""Results whose order PyTorch leaves unspecified, asked for in order (pytorch/pytorch#37846).

`torch.topk(..., sorted=False)` returns the k elements in whatever order its kernel leaves them
(PyTorch's CPU and CUDA kernels differ), and the exported TopK(sorted=0) in ONNX Runtime's: the
same elements, another order, which the comparison calls a mismatch. With `sorted=True` both
return them largest first (smallest first for largest=False): one order, which the check can
hold the export to. Verified with every topk of the model sorted, in PyTorch and in the export.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD601",)

# What the check runs: every topk of the model asks for sorted results (the user edits the call).
SORTED_TOPK = """import torch

_topk = torch.topk


def _sorted_topk(input, k, dim=-1, largest=True, sorted=True, *, out=None):
    return _topk(input, k, dim, largest, True)


torch.topk = _sorted_topk
torch.Tensor.topk = lambda self, k, dim=-1, largest=True, sorted=True: _topk(self, k, dim, largest, True)
"""

SNIPPET = """# torch.topk(..., sorted=False) leaves the order of its k results unspecified (PyTorch's CPU
# and CUDA kernels differ, ONNX Runtime's TopK differs again): ask for them in order.
# before:  values, indices = torch.topk(scores, k, largest=False, sorted=False)
values, indices = torch.topk(scores, k, largest=False, sorted=True)
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """topk asked for sorted results, for a mismatch first found at a topk's nodes."""
    diverging = ctx.diverging
    if ctx.target_kind != "script" or not (diverging.get("torch_op") == "aten::topk" or diverging.get("op") == "TopK"):
        return []
    source = finding.source or diverging.get("source")
    return [Fix(
        kind="sorted_topk",
        title="Ask torch.topk for sorted results (sorted=False leaves their order unspecified)"
              + (f" at {source}" if source else ""),
        snippet=SNIPPET,
        applicability=Applicability.SAFE,
        cost="the k results come largest first (smallest first with largest=False): code that relied on "
             "sorted=False's order relied on an unspecified one; sorting k elements costs little",
        recipe=Recipe("sorted_topk", (LoadCode(SORTED_TOPK),), isolated=True),
    )]
