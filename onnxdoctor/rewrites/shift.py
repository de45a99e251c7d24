"""torch.roll by a shift known only at run time (a data-dependent or symbolic size).

The dynamo exporter writes roll's shifts as a node attribute, so a shift computed in the graph
(`x.roll(-round(shift.item() * bins))`, pesto#38) fails: "Unsupported attribute type: list". As
gathers of `(arange(n) - shift) mod n` along each dim the shift is a tensor like any other.
"""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

ROLL = r'''
def roll(self, shifts, dims=()):
    """torch.roll: along each dim, the element at (i - shift) mod n moves to i; with no dims, the
    flattened tensor is rolled and given its shape back."""
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    if not dims:
        flat = self.reshape(-1)
        n = flat.shape[0]
        index = torch.remainder(torch.arange(n, device=self.device) - shifts[0], n)
        return flat.index_select(0, index).reshape(self.shape)
    out = self
    for shift, dim in zip(shifts, dims):
        n = out.shape[dim]
        index = torch.remainder(torch.arange(n, device=self.device) - shift, n)
        out = out.index_select(dim, index)
    return out
'''

REWRITES = (
    Rewrite(
        op="aten::roll",
        family="shift",
        targets=("aten.roll.default",),
        function="roll",
        source=ROLL,
        exactness=Exactness.EXACT,
        error="the same elements, moved by a gather",
        limits="any shift, negative or larger than the dim included; one gather per rolled dim",
        when=r"Unsupported attribute type|SymInt|symbolic",
    ),
)
