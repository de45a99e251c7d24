"""Windows built with `as_strided`, frozen to the example's strides or read past a slice.

`Tensor.as_strided` indexes storage, not the tensor: strides read off the input
(`x.as_strided(size, (x.stride(0) // 2, x.stride(1) - 3, 3))`, pytorch#90607) are numbers to the
TorchScript tracer, so the graph holds the example's and gives other values at every other size,
and the dynamo exporter has no function for the symbolic `aten.sym_stride`; windows over a slice
that reach past its end (`torch.as_strided(x[0:6], (6, 4), (1, 1))`, onnxruntime#28342) read the
parent's storage in eager, while both exporters gather from the slice and ONNX Runtime stops out
of bounds. As a gather from the flattened base at `offset + sum(arange(size_i) * stride_i)`, with
the strides computed from the traced sizes, the graph reads what eager reads at every size
(recipe.EagerExport.strided_views).
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.dynamic_shapes import torchscript_steps
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe

# Wrong numbers at the example or at other sizes, a gather out of bounds at run time, and the
# dynamo exporter's refusal of the symbolic stride.
CODES = ("OD210", "OD501", "OD601", "OD603", "OD802", "OD803", "OD202", "OD299")

_SNIPPET = """\
# as_strided indexes the storage a tensor views, with strides the TorchScript tracer records as the
# example's numbers. The same windows as a gather from the flattened storage, each index traced:
def strided_gather(x, size, stride, offset=None):
    base = x._base if x._base is not None else x  # a slice's windows may reach into its parent
    assert base.is_contiguous()  # its flattened values are then its storage, in order
    start = x.storage_offset() if offset is None else offset
    index = torch.zeros((), dtype=torch.long, device=x.device) + (start - base.storage_offset())
    for count, step in zip(size, stride):
        index = index.unsqueeze(-1) + torch.arange(count, device=x.device) * step
    return base.reshape(-1)[index]

# and strides computed from the sizes, which the tracer follows, instead of x.stride():
def contiguous_strides(x):
    strides, step = [], 1
    for size in reversed(x.shape):
        strides.insert(0, step)
        step = step * size
    return strides
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The TorchScript export with as_strided as a gather and strides from the traced sizes."""
    named = {finding.op, finding.torch_op, ctx.op}
    if ctx.target_kind != "script" or not ("aten::as_strided" in named or "sym_stride" in ctx.export_error):
        return []
    where = f" ({finding.source})" if finding.source else ""
    return [Fix(
        kind="strided_views",
        title=f"Compute the as_strided windows{where} as a gather, with strides from the traced sizes",
        snippet=_SNIPPET,
        applicability=Applicability.SAFE,
        cost=("one Gather with an index computed per call (a few Range/Mul/Add nodes); the result is a "
              "copy, not a view, so writes into it no longer reach the tensor it was taken from"),
        recipe=Recipe("strided_views", torchscript_steps(ctx, EagerExport(strided_views=True)), isolated=True),
    )]
