"""Searching, order statistics and counting: searchsorted, kthvalue, median, nanmedian, mode."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

SEARCHSORTED = r'''
def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    """torch.searchsorted by counting: the index is how many boundaries lie below each value."""
    sequence = sorted_sequence
    if sorter is not None:
        sequence = torch.gather(sequence, -1, sorter)
    right = right or side == "right"
    if sequence.dim() == 1:
        boundaries = sequence.reshape([1] * values.dim() + [-1])
    else:
        boundaries = sequence.unsqueeze(-2)  # [..., 1, n] against values [..., m, 1]
    above = (boundaries > values.unsqueeze(-1)) if right else (boundaries >= values.unsqueeze(-1))
    index = sequence.shape[-1] - above.to(torch.int64).sum(-1)
    return index.to(torch.int32 if out_int32 else torch.int64)


def searchsorted_scalar(sorted_sequence, value, *, out_int32=False, right=False, side=None, sorter=None):
    """torch.searchsorted with a Python number as the value: a 0-d result."""
    values = torch.full((), value, dtype=sorted_sequence.dtype, device=sorted_sequence.device)
    return searchsorted(sorted_sequence, values, out_int32=out_int32, right=right, side=side, sorter=sorter)
'''

KTHVALUE = r'''
def kthvalue(x, k, dim=-1, keepdim=False):
    """torch.kthvalue as the last of the k smallest values (TopK)."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64)
    values, indices = torch.topk(x, k, dim, largest=False, sorted=True)
    values, indices = values.narrow(dim, k - 1, 1), indices.narrow(dim, k - 1, 1)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices
'''

MEDIAN = r'''
def median(x):
    """torch.median(x): the lower median of all elements; NaN when any element is NaN."""
    flat = x.reshape(-1)
    value = torch.topk(flat, (flat.shape[0] - 1) // 2 + 1, largest=False, sorted=True).values[-1]
    if x.is_floating_point():
        value = torch.where(flat.isnan().any(), torch.full_like(value, float("nan")), value)
    return value
'''

MEDIAN_DIM = r'''
def median_dim(x, dim=-1, keepdim=False):
    """torch.median(x, dim): the lower median along dim; NaN (and its index) where a NaN is."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64)
    dim = dim % x.dim()
    k = (x.shape[dim] - 1) // 2 + 1
    values, indices = torch.topk(x, k, dim, largest=False, sorted=True)
    values, indices = values.narrow(dim, k - 1, 1), indices.narrow(dim, k - 1, 1)
    if x.is_floating_point():
        nan = x.isnan()
        has_nan = nan.any(dim, keepdim=True)
        values = torch.where(has_nan, torch.full_like(values, float("nan")), values)
        indices = torch.where(has_nan, nan.to(torch.int64).argmax(dim, keepdim=True), indices)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices
'''

NANMEDIAN_DIM = r'''
def nanmedian_dim(x, dim=-1, keepdim=False):
    """torch.nanmedian(x, dim): the lower median of the non-NaN values; NaN where all are NaN."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64)
    dim = dim % x.dim()
    nan = x.isnan()
    # NaNs sort last once they are +inf; the median's position counts only the other values.
    ordered, order = torch.sort(torch.where(nan, torch.full_like(x, float("inf")), x), dim)
    count = (~nan).to(torch.int64).sum(dim, keepdim=True)
    position = torch.clamp((count - 1) // 2, min=0)
    values = torch.gather(ordered, dim, position)
    indices = torch.gather(order, dim, position)
    values = torch.where(count == 0, torch.full_like(values, float("nan")), values)
    if not keepdim:
        values, indices = values.squeeze(dim), indices.squeeze(dim)
    return values, indices


def nanmedian(x):
    """torch.nanmedian(x): the lower median of all non-NaN elements."""
    return nanmedian_dim(x.reshape(-1), 0)[0]
'''

MODE = r'''
def mode(x, dim=-1, keepdim=False):
    """torch.mode: the most frequent value along dim (the smallest of equally frequent ones)."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64)
    dim = dim % x.dim()
    moved = x.movedim(dim, -1)  # [..., n]
    n = moved.shape[-1]
    counts = (moved.unsqueeze(-1) == moved.unsqueeze(-2)).to(torch.int64).sum(-1)
    most = counts.amax(-1, keepdim=True)
    if x.is_floating_point():
        largest = torch.full_like(moved, float("inf"))
    else:
        largest = torch.full_like(moved, torch.iinfo(x.dtype).max)
    values = torch.where(counts == most, moved, largest).amin(-1)
    positions = torch.arange(n, device=x.device)
    indices = torch.where(moved == values.unsqueeze(-1), positions, -1).amax(-1)
    if keepdim:
        values, indices = values.unsqueeze(dim), indices.unsqueeze(dim)
    return values, indices
'''

SORT_STABLE = r'''
def sort_stable(x, *, stable=None, dim=-1, descending=False):
    """torch.sort(..., stable=...) by ranking: each element's position counts the elements that go
    before it (smaller ones, and equal ones earlier in the input); NaN sorts as the largest value."""
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    moved = x.movedim(dim, -1)  # [..., n]
    n = moved.shape[-1]
    mine, other = moved.unsqueeze(-1), moved.unsqueeze(-2)  # [..., i, 1] against [..., 1, j]
    positions = torch.arange(n, device=x.device)
    if x.is_floating_point():
        mine_nan, other_nan = mine.isnan(), other.isnan()
        smaller = (other < mine) | (mine_nan & ~other_nan)
        larger = (other > mine) | (other_nan & ~mine_nan)
        equal = (other == mine) | (mine_nan & other_nan)
    else:
        smaller, larger, equal = other < mine, other > mine, other == mine
    ahead = larger if descending else smaller
    earlier = positions.unsqueeze(-1) > positions  # [i, j]: j comes before i in the input
    rank = (ahead | (equal & earlier)).to(torch.int64).sum(-1)  # [..., i]
    # The element whose rank is r goes to position r.
    placed = (rank.unsqueeze(-1) == positions).to(torch.int64)  # [..., i, r]
    indices = (placed * positions.unsqueeze(-1)).sum(-2)  # [..., r]
    values = torch.gather(moved, -1, indices)
    return values.movedim(-1, dim), indices.movedim(-1, dim)
'''

REWRITES = (
    Rewrite(
        op="aten::searchsorted",
        family="sorting",
        targets=("aten.searchsorted.Tensor", "aten.searchsorted.Scalar"),
        functions=("searchsorted", "searchsorted_scalar"),
        function="searchsorted",
        source=SEARCHSORTED,
        exactness=Exactness.EXACT,
        error="same indices",
        limits="memory grows as values x boundaries; NaN inside sorted_sequence is not supported; "
        "a Python-number value (searchsorted.Scalar) needs a 1-D sorted_sequence",
    ),
    Rewrite(
        op="aten::kthvalue",
        family="sorting",
        targets=("aten.kthvalue.default",),
        function="kthvalue",
        source=KTHVALUE,
        exactness=Exactness.EXACT,
        error="same values; with ties the index can name another equal element",
        limits="k must be a Python int; NaN ordering follows ONNX Runtime's TopK",
    ),
    Rewrite(
        op="aten::median",
        family="sorting",
        targets=("aten.median.default",),
        function="median",
        source=MEDIAN,
        exactness=Exactness.EXACT,
        error="same value (lower median)",
        limits="non-empty input",
    ),
    Rewrite(
        op="aten::median.dim",
        family="sorting",
        targets=("aten.median.dim",),
        function="median_dim",
        source=MEDIAN_DIM,
        exactness=Exactness.EXACT,
        error="same values; with ties the index can name another equal element",
        limits="non-empty reduced dimension",
    ),
    Rewrite(
        op="aten::nanmedian",
        family="sorting",
        targets=("aten.nanmedian.dim", "aten.nanmedian.default"),
        functions=("nanmedian_dim", "nanmedian"),
        function="nanmedian_dim",
        source=NANMEDIAN_DIM,
        exactness=Exactness.EXACT,
        error="same values; with ties the index can name another equal element",
        limits="floating-point input",
    ),
    Rewrite(
        op="aten::mode",
        family="sorting",
        targets=("aten.mode.default",),
        function="mode",
        source=MODE,
        exactness=Exactness.EXACT,
        error="same values; the index is the last position of the mode",
        limits="memory grows as n^2 along dim; NaN values are not counted as equal",
    ),
    Rewrite(
        op="aten::sort.stable",
        family="sorting",
        targets=("aten.sort.stable",),
        function="sort_stable",
        source=SORT_STABLE,
        exactness=Exactness.EXACT,
        error="same values and indices: equal values keep their input order (torch's stable "
        "order), NaN sorts as the largest value",
        limits="memory grows as n^2 along dim (fine for n up to a few thousand)",
        reported_as=("aten::sort",),
    ),
)
