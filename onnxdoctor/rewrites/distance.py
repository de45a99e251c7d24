"""Distances: cdist and pdist as explicit differences and norms."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

CDIST = r'''
def cdist(x1, x2, p=2.0, compute_mode=None):
    """torch.cdist from explicit differences (no matmul shortcut: no cancellation either)."""
    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()  # [..., P, R, M]
    if p == 0:
        return (diff != 0).to(x1.dtype).sum(-1)
    if p == float("inf"):
        return diff.amax(-1)
    if p == 1:
        return diff.sum(-1)
    if p == 2:
        return torch.sqrt((diff * diff).sum(-1))
    return torch.pow(torch.pow(diff, p).sum(-1), 1.0 / p)
'''

PDIST = r'''
def pdist(x, p=2.0):
    """torch.pdist: distances between every pair of rows i < j, in torch's row-major order."""
    n = x.shape[0]
    first, second = torch.triu_indices(n, n, 1, device=x.device)
    diff = (x[first] - x[second]).abs()
    if p == 0:
        return (diff != 0).to(x.dtype).sum(-1)
    if p == float("inf"):
        return diff.amax(-1)
    if p == 1:
        return diff.sum(-1)
    if p == 2:
        return torch.sqrt((diff * diff).sum(-1))
    return torch.pow(torch.pow(diff, p).sum(-1), 1.0 / p)
'''

REWRITES = (
    Rewrite(
        op="aten::cdist",
        family="distance",
        targets=("aten.cdist.default", "aten._cdist_forward.default"),
        function="cdist",
        source=CDIST,
        exactness=Exactness.ROUNDING,
        error="another summation order: a few ulps (more exact than torch's matmul path for "
        "p = 2 on large inputs)",
        limits="memory grows as P x R x M (the explicit differences)",
        reported_as=("aten::_cdist_forward",),
    ),
    Rewrite(
        op="aten::pdist",
        family="distance",
        targets=("aten.pdist.default", "aten._pdist_forward.default"),
        function="pdist",
        source=PDIST,
        exactness=Exactness.ROUNDING,
        error="another summation order: a few ulps",
        limits="static number of rows; memory grows as n^2 x M",
        reported_as=("aten::_pdist_forward",),
    ),
)
