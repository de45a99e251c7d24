"""Scattering with a reduction: scatter_reduce's mean, scatter(..., reduce=), index_reduce."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

SCATTER_REDUCE = r'''
def _scatter_mode(reduce):
    """torch.scatter's reduce names -> scatter_reduce's (both keep self's values: include_self)."""
    modes = {"add": "sum", "multiply": "prod"}
    if reduce not in modes:
        raise ValueError(f"scatter reduce={reduce!r}: torch accepts 'add' and 'multiply'")
    return modes[reduce]


def scatter_reduce_src(x, dim, index, src, *, reduce):
    """x.scatter(dim, index, src, reduce=...) as scatter_reduce (ScatterElements' reduction)."""
    # scatter reads only the part of src that index covers.
    src = src[tuple(slice(0, size) for size in index.shape)]
    return x.scatter_reduce(dim, index, src, _scatter_mode(reduce), include_self=True)


def scatter_reduce_value(x, dim, index, value, *, reduce):
    """x.scatter(dim, index, value, reduce=...) with a Python number as the source."""
    src = torch.full(index.shape, value, dtype=x.dtype, device=x.device)
    return x.scatter_reduce(dim, index, src, _scatter_mode(reduce), include_self=True)
'''

SCATTER_MEAN = r'''
def _scatter_mean(x, dim, index, src, include_self):
    """scatter_reduce's "mean" from two scatter-adds: the sum, and how many values each position
    averages (1 for a position nothing is scattered to, which keeps x there)."""
    src = src[tuple(slice(0, size) for size in index.shape)]
    ones = torch.ones_like(src)
    if include_self:
        total, count = x, torch.ones_like(x)
    else:
        # Positions something is scattered to start from zero: x is not part of their mean.
        total = x.scatter(dim, index, 0)
        count = torch.ones_like(x).scatter(dim, index, 0)
    total = total.scatter_add(dim, index, src)
    count = count.scatter_add(dim, index, ones)
    if x.is_floating_point():
        return total / count
    return torch.div(total, count, rounding_mode="floor")


def scatter_reduce_mean(x, dim, index, src, reduce, *, include_self=True):
    """x.scatter_reduce(..., "mean"); the other modes are left to the exporter (NotImplemented
    keeps the op as it is: they export correctly)."""
    if reduce != "mean":
        return NotImplemented
    return _scatter_mean(x, dim, index, src, include_self)
'''

INDEX_REDUCE = SCATTER_MEAN + r'''

def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    """x.index_reduce(dim, index, source, reduce) as a scatter with the index spread along every
    other dimension of source ("mean" through scatter-adds, see scatter_reduce_mean)."""
    dim = dim % max(x.dim(), 1)
    shape = [1] * source.dim()
    shape[dim] = -1
    spread = index.reshape(shape).expand(source.shape)
    if reduce == "mean":
        return _scatter_mean(x, dim, spread, source, include_self)
    return x.scatter_reduce(dim, spread, source, reduce, include_self=include_self)
'''

REWRITES = (
    Rewrite(
        op="aten::scatter_reduce.two",
        family="scatter",
        targets=("aten.scatter_reduce.two",),
        function="scatter_reduce_mean",
        source=SCATTER_MEAN,
        exactness=Exactness.ROUNDING,
        error="the same means, summed in another order (rounding only); integer means round "
        "down (floor division), as torch's",
        limits="rewrites reduce='mean' only (the TorchScript exporter refuses it and the dynamo "
        "exporter of torch 2.13 writes a plain ScatterElements that overwrites instead of "
        "averaging: wrong numbers, no error); the other modes export as they are",
        reported_as=("aten::scatter_reduce",),
    ),
    Rewrite(
        op="aten::scatter.reduce",
        family="scatter",
        targets=("aten.scatter.reduce", "aten.scatter.value_reduce"),
        functions=("scatter_reduce_src", "scatter_reduce_value"),
        function="scatter_reduce_src",
        source=SCATTER_REDUCE,
        exactness=Exactness.ROUNDING,
        error="'multiply' is exact; 'add' sums repeated indices in another order than torch's CPU "
        "kernel (floating-point rounding only)",
        limits="reduce='add' or 'multiply' (torch's only modes); ONNX Runtime's ScatterElements "
        "needs opset 16 or later for a reduction (the dynamo exporter writes 18)",
        reported_as=("aten::scatter",),
    ),
    Rewrite(
        op="aten::index_reduce",
        family="scatter",
        targets=("aten.index_reduce.default",),
        function="index_reduce",
        source=INDEX_REDUCE,
        exactness=Exactness.ROUNDING,
        error="'prod', 'amax', 'amin' are exact; 'mean' sums in another order (rounding only); "
        "integer 'mean' rounds as scatter_reduce does (floor division, like torch)",
        limits="a 1-D index; the same modes and include_self as torch",
    ),
)
