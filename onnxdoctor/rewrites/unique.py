"""Data-dependent selection: unique_consecutive, masked_select (outputs sized by the data)."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

UNIQUE_CONSECUTIVE = r'''
def unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    """torch.unique_consecutive: the first element of each run of equal values (or slices along
    dim), found by comparing neighbours; counts from where the runs start."""
    if dim is None:
        rows = x.reshape(-1, 1)
        size = rows.shape[0]
    else:
        dim = dim % x.dim()
        rows = x.movedim(dim, 0).reshape(x.shape[dim], -1)
        size = x.shape[dim]
    if size == 0:
        values = x.reshape(-1) if dim is None else x
        empty = torch.zeros(0, dtype=torch.int64, device=x.device)
        return values, empty, empty
    changed = (rows[1:] != rows[:-1]).any(-1)  # NaN != NaN: each NaN is its own run, as in torch
    first = torch.ones(1, dtype=torch.bool, device=x.device)
    starts_run = torch.cat([first, changed])
    starts = torch.nonzero(starts_run).reshape(-1)
    if dim is None:
        values = x.reshape(-1)[starts]
    else:
        values = x.index_select(dim, starts)
    empty = torch.zeros(0, dtype=torch.int64, device=x.device)
    inverse, counts = empty, empty
    if return_inverse:
        inverse = starts_run.to(torch.int64).cumsum(0) - 1
        inverse = inverse.reshape(x.shape) if dim is None else inverse
    if return_counts:
        ends = torch.cat([starts[1:], torch.full((1,), size, dtype=torch.int64, device=x.device)])
        counts = ends - starts
    return values, inverse, counts
'''

MASKED_SELECT = r'''
def masked_select(x, mask):
    """torch.masked_select: the broadcast input's elements where the mask is true, in order."""
    x, mask = torch.broadcast_tensors(x, mask)
    return x.reshape(-1)[torch.nonzero(mask.reshape(-1)).reshape(-1)]
'''

REWRITES = (
    Rewrite(
        op="aten::unique_consecutive",
        family="unique",
        targets=("aten.unique_consecutive.default",),
        function="unique_consecutive",
        source=UNIQUE_CONSECUTIVE,
        exactness=Exactness.EXACT,
        error="same values, inverse and counts",
        limits="the output length depends on the data (ONNX NonZero): the exported graph has a "
        "dynamic output size; outputs not asked for are empty int64 tensors, as torch's",
    ),
    Rewrite(
        op="aten::masked_select",
        family="unique",
        targets=("aten.masked_select.default",),
        function="masked_select",
        source=MASKED_SELECT,
        exactness=Exactness.EXACT,
        error="same values in the same (row-major) order",
        limits="the output length depends on the mask (ONNX NonZero): a dynamic output size",
    ),
)
