"""Histograms: histc (equal-width bins counted with a scatter-add)."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

HISTC = r'''
def histc(x, bins=100, min=0, max=0):
    """torch.histc with its CPU kernel's formula: bin = int((v - min) * bins / (max - min)), the
    value max itself in the last bin; min == max takes the data's range (widened by 1 each side
    when the data are all equal), as torch does."""
    flat = x.reshape(-1)
    low = torch.full((), min, dtype=x.dtype, device=x.device)
    high = torch.full((), max, dtype=x.dtype, device=x.device)
    if min == max:
        low, high = flat.min(), flat.max()
        same = low == high
        low, high = torch.where(same, low - 1, low), torch.where(same, high + 1, high)
    inside = (flat >= low) & (flat <= high)
    position = ((flat - low) * bins / (high - low)).to(torch.int64)
    position = torch.clamp(position, 0, bins - 1)
    position = torch.where(inside, position, torch.full_like(position, bins))  # a spare bin
    counts = torch.zeros(bins + 1, dtype=x.dtype, device=x.device)
    counts = counts.scatter_add(0, position, torch.ones_like(flat))
    return counts[:bins]
'''

REWRITES = (
    Rewrite(
        op="aten::histc",
        family="histogram",
        targets=("aten.histc.default",),
        function="histc",
        source=HISTC,
        exactness=Exactness.EXACT,
        error="the same counts: the same float formula as torch's CPU kernel (checked at and one "
        "ulp either side of every bin edge)",
        limits="floating-point input; NaN values are not counted (as torch); min/max must be "
        "Python numbers (they are in torch's signature)",
    ),
)
