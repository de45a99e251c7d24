"""Reductions whose ONNX export drops PyTorch's NaN rule: amax and amin, argmax and argmin.

torch.amax/amin return NaN for a slice holding a NaN. Both exporters write them as ONNX
ReduceMax/ReduceMin, and ONNX Runtime's CPU kernels skip NaN there (a depth map with holes marked
NaN gets the largest valid depth instead of NaN). The rewrite takes the maximum with NaN replaced by
-inf (+inf for the minimum), one dim at a time through max.dim / min.dim (an amax inside the
function would be decomposed again), and puts NaN back where the slice held one.
"""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

EXTREMA = r'''
def _extreme(x, dim, keepdim, largest):
    dims = sorted({d % x.dim() for d in dim} if len(dim) else range(x.dim()), reverse=True)
    nan = torch.isnan(x)
    out = torch.where(nan, torch.full_like(x, float("-inf") if largest else float("inf")), x)
    for d in dims:
        out = (torch.max if largest else torch.min)(out, dim=d, keepdim=True).values
        nan = nan.any(dim=d, keepdim=True)
    out = torch.where(nan, torch.full_like(out, float("nan")), out)
    if not keepdim:
        for d in dims:
            out = out.squeeze(d)
    return out


def amax(x, dim=(), keepdim=False):
    """torch.amax, NaN in a slice giving NaN as PyTorch does."""
    return _extreme(x, dim, keepdim, True)


def amin(x, dim=(), keepdim=False):
    """torch.amin, NaN in a slice giving NaN as PyTorch does."""
    return _extreme(x, dim, keepdim, False)


def _extreme_index(x, dim, keepdim, largest):
    if dim is None:
        index = _extreme_index(x.reshape(-1), 0, False, largest)
        return index.reshape([1] * x.dim()) if keepdim else index
    nan = torch.isnan(x)
    filled = torch.where(nan, torch.full_like(x, float("-inf") if largest else float("inf")), x)
    # max.dim / min.dim, not argmax: an argmax here would be rewritten again. Both give the first
    # index of the extreme, as torch.argmax does.
    index = (torch.max if largest else torch.min)(filled, dim=dim, keepdim=True).indices
    first_nan = torch.max(nan.to(torch.int64), dim=dim, keepdim=True).indices
    index = torch.where(nan.any(dim=dim, keepdim=True), first_nan, index)
    return index if keepdim else index.squeeze(dim)


def argmax(x, dim=None, keepdim=False):
    """torch.argmax: the first NaN's index in a slice that holds one, as PyTorch does."""
    return _extreme_index(x, dim, keepdim, True)


def argmin(x, dim=None, keepdim=False):
    """torch.argmin, the same way."""
    return _extreme_index(x, dim, keepdim, False)
'''

REWRITES = (
    Rewrite(
        op="aten::amax",
        family="reduction",
        targets=("aten.amax.default",),
        function="amax",
        source=EXTREMA,
        exactness=Exactness.EXACT,
        error="the same values, NaN where a slice holds one",
        limits="floating-point input (an integer one has no NaN and exports as it is)",
        mismatch_only=True,
    ),
    Rewrite(
        op="aten::amin",
        family="reduction",
        targets=("aten.amin.default",),
        function="amin",
        source=EXTREMA,
        exactness=Exactness.EXACT,
        error="the same values, NaN where a slice holds one",
        limits="floating-point input (an integer one has no NaN and exports as it is)",
        mismatch_only=True,
    ),
    Rewrite(
        op="aten::argmax",
        family="reduction",
        targets=("aten.argmax.default", "aten.argmin.default"),
        functions=("argmax", "argmin"),
        function="argmax",
        source=EXTREMA,
        exactness=Exactness.EXACT,
        error="the same indices, the first NaN's where a slice holds one",
        limits="floating-point input (an integer one has no NaN and exports as it is); both argmax and "
        "argmin of the model are replaced",
        reported_as=("aten::argmin",),
        mismatch_only=True,
    ),
)
