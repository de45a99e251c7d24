"""Cumulative ops: cumprod, cummax, cummin (as masked reductions over a triangular mask)."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

CUMPROD = r'''
def cumprod(x, dim, *, dtype=None):
    """torch.cumprod as a product over a lower-triangular mask (no scan op in ONNX)."""
    if dtype is not None:
        x = x.to(dtype)
    elif not x.is_floating_point() and not x.is_complex():
        x = x.to(torch.int64)  # torch promotes integer and bool inputs
    if x.dim() == 0:
        return x.clone()
    dim = dim % x.dim()
    n = x.shape[dim]
    moved = x.movedim(dim, -1)  # [..., n]
    keep = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()  # keep[k, j]: j <= k
    terms = torch.where(keep, moved.unsqueeze(-2), torch.ones((), dtype=x.dtype, device=x.device))
    return terms.prod(-1).movedim(-1, dim)
'''

CUMULATIVE_EXTREME = r'''
def _cumulative_extreme(x, dim, largest):
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    n = x.shape[dim]
    moved = x.movedim(dim, -1)  # [..., n]
    keep = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()  # keep[k, j]: j <= k
    rows = moved.unsqueeze(-2)  # [..., 1, j]
    if x.is_floating_point():
        fill = float("-inf") if largest else float("inf")
    else:
        info = torch.iinfo(x.dtype)
        fill = info.min if largest else info.max
    masked = torch.where(keep, rows, torch.full((), fill, dtype=x.dtype, device=x.device))
    values = masked.amax(-1) if largest else masked.amin(-1)
    hit = keep & (rows == values.unsqueeze(-1))
    if x.is_floating_point():
        # Once a NaN is seen the running extreme is NaN, at the last NaN's position.
        nan = keep & rows.isnan()
        seen = nan.any(-1)
        values = torch.where(seen, torch.full_like(values, float("nan")), values)
        seen = seen.unsqueeze(-1)
        hit = (seen & nan) | (~seen & hit)  # logical ops: ONNX Runtime has no bool Where kernel
    positions = torch.arange(n, device=x.device)
    indices = torch.where(hit, positions, -1).amax(-1)  # the last position, as torch does
    return values.movedim(-1, dim), indices.movedim(-1, dim)
'''

CUMMAX = CUMULATIVE_EXTREME + r'''

def cummax(x, dim):
    """torch.cummax: running maximum and the (last) position it was reached at."""
    return _cumulative_extreme(x, dim, True)
'''

CUMMIN = CUMULATIVE_EXTREME + r'''

def cummin(x, dim):
    """torch.cummin: running minimum and the (last) position it was reached at."""
    return _cumulative_extreme(x, dim, False)
'''

_N2 = "memory and time grow as n^2 along dim (fine for n up to a few thousand)"

REWRITES = (
    Rewrite(
        op="aten::cumprod",
        family="cumulative",
        targets=("aten.cumprod.default",),
        function="cumprod",
        source=CUMPROD,
        exactness=Exactness.ROUNDING,
        error="the products are taken in another order: a few ulps",
        limits=_N2,
        reported_as=("prims::prod",),
    ),
    Rewrite(
        op="aten::cummax",
        family="cumulative",
        targets=("aten.cummax.default",),
        function="cummax",
        source=CUMMAX,
        exactness=Exactness.EXACT,
        error="same values and indices (NaN propagates as in torch)",
        limits=_N2,
    ),
    Rewrite(
        op="aten::cummin",
        family="cumulative",
        targets=("aten.cummin.default",),
        function="cummin",
        source=CUMMIN,
        exactness=Exactness.EXACT,
        error="same values and indices (NaN propagates as in torch)",
        limits=_N2,
    ),
)

LOGCUMSUMEXP = r'''
def logcumsumexp(x, dim):
    """torch.logcumsumexp with each prefix shifted by its own running maximum, over a triangular
    mask: one maximum for the whole axis (the exporters' lowering) underflows every prefix far
    below it to -inf."""
    if x.dim() == 0:
        return x.clone()
    dim = dim % x.dim()
    n = x.shape[dim]
    if n == 0:
        return x.clone()
    moved = x.movedim(dim, -1)  # [..., n]
    keep = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()  # keep[k, j]: j <= k
    masked = torch.where(keep, moved.unsqueeze(-2), torch.full((), float("-inf"), dtype=x.dtype, device=x.device))
    top = masked.amax(-1, keepdim=True)  # the running maximum of each prefix
    # A prefix of -inf (or holding +inf) is not shifted: exp and log then give torch's -inf / inf.
    shift = torch.where(torch.isfinite(top), top, torch.zeros((), dtype=x.dtype, device=x.device))
    total = (masked - shift).exp().sum(-1).log() + shift.squeeze(-1)
    return total.movedim(-1, dim)
'''

REWRITES = (
    *REWRITES,
    Rewrite(
        op="aten::logcumsumexp",
        family="cumulative",
        targets=("aten.logcumsumexp.default",),
        function="logcumsumexp",
        source=LOGCUMSUMEXP,
        exactness=Exactness.ROUNDING,
        error="the sums are taken in another order and shifted by each prefix's maximum: a few ulps",
        limits=_N2,
    ),
)
