"""atan2 and angle, which the dynamo exporter gets wrong on the negative real axis.

torch 2.13's translation of atan2 gives -pi where y is +0 and x negative (the phase of a negative
real number, onnxscript#2720), where PyTorch gives +pi; `angle` of a complex tensor goes through it.
Written with the quadrant taken from the signs of y and x, zeros' signs included (the sign of a
zero is read as that of its reciprocal's infinity, since ONNX has no signbit).
"""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

ATAN2 = r'''
def atan2(self, other):
    """torch.atan2(y, x): atan(y / x), moved by pi toward y's side where x is negative (-0
    included), and +-pi/2 or a signed zero or +-pi where x is zero."""
    y, x = torch.broadcast_tensors(self, other)
    y_negative = (y < 0) | ((y == 0) & (1.0 / y < 0))
    x_negative = (x < 0) | ((x == 0) & (1.0 / x < 0))
    base = torch.atan(y / torch.where(x == 0, torch.ones_like(x), x))
    half_turn = torch.where(y_negative, -math.pi, math.pi).to(base.dtype)
    turned = torch.where(x_negative, base + half_turn, base)
    on_axis = torch.where(y == 0, torch.where(x_negative, half_turn, y),
                          torch.where(y_negative, -math.pi / 2, math.pi / 2).to(base.dtype))
    return torch.where((x == 0) & ~torch.isnan(y), on_axis, turned)  # NaN stays NaN


def angle(self):
    """torch.angle: atan2(imag, real) of a complex tensor; pi for negative real numbers, 0 for
    the others (NaN stays NaN)."""
    if self.is_complex():
        return atan2(self.imag, self.real)
    return torch.where(self < 0, math.pi, torch.where(torch.isnan(self), self, 0.0)).to(self.dtype)
'''

REWRITES = (
    Rewrite(
        op="aten::atan2",
        family="angle",
        targets=("aten.atan2.default",),
        function="atan2",
        source=ATAN2,
        exactness=Exactness.ROUNDING,
        error="atan of y / x rounded by another library (about 1e-7); the quadrant and the axes as PyTorch's",
        limits="float tensors; x and y both infinite give NaN (PyTorch: a multiple of pi/4)",
        mismatch_only=True,
    ),
    Rewrite(
        op="aten::angle",
        family="angle",
        targets=("aten.angle.default",),
        function="angle",
        source=ATAN2,
        exactness=Exactness.ROUNDING,
        error="atan of imag / real rounded by another library (about 1e-7); pi on the negative real axis",
        limits="as atan2's: infinite real and imaginary parts together give NaN",
        mismatch_only=True,
    ),
)
