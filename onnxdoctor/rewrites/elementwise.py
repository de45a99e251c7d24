"""Elementwise ops: hypot, copysign, frexp, and sign with PyTorch's NaN rule."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

HYPOT = r'''
def hypot(x, y):
    """torch.hypot, scaled by the larger magnitude so that squares neither overflow nor underflow."""
    a, b = x.abs(), y.abs()
    big, small = torch.maximum(a, b), torch.minimum(a, b)
    ratio = torch.where(big == 0, torch.zeros_like(big), small / big)
    result = big * torch.sqrt(1.0 + ratio * ratio)
    return torch.where(torch.isinf(a) | torch.isinf(b), torch.full_like(result, float("inf")), result)
'''

COPYSIGN = r'''
def copysign(x, other):
    """torch.copysign: |x| with the sign of `other` (-0.0 counts as negative, via 1/other)."""
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    other = torch.as_tensor(other, dtype=x.dtype, device=x.device)
    negative = (other < 0) | ((other == 0) & (1.0 / other < 0))
    return torch.where(negative, -x.abs(), x.abs())
'''

FREXP = r'''
def _scale(value, exponent):
    # value / 2**exponent in two exact halves: 2**128 alone overflows float32.
    half = torch.floor(exponent / 2.0)
    return value / torch.pow(2.0, half) / torch.pow(2.0, exponent - half)


def frexp(x):
    """torch.frexp: x = mantissa * 2**exponent with 0.5 <= |mantissa| < 1 (0 for 0)."""
    a = x.abs()
    finite = torch.isfinite(x) & (a > 0)
    safe = torch.where(finite, a, torch.ones_like(a))
    exponent = torch.floor(torch.log2(safe)) + 1.0
    mantissa = _scale(safe, exponent)
    # log2 can be one off near powers of two: put the mantissa back into [0.5, 1).
    exponent = torch.where(mantissa >= 1.0, exponent + 1.0, torch.where(mantissa < 0.5, exponent - 1.0, exponent))
    mantissa = _scale(safe, exponent)
    mantissa = torch.where(finite, torch.where(x < 0, -mantissa, mantissa), x)
    return mantissa, torch.where(finite, exponent, torch.zeros_like(exponent)).to(torch.int32)
'''

# torch.sign(nan) is 0; ONNX's Sign gives NaN, and both exporters write Sign (pytorch#41245: a
# missing-value encoder's NaN rows come back all NaN). Two comparisons are false for NaN.
SIGN = r'''
def sign(x):
    """torch.sign: 0 for NaN, as PyTorch gives."""
    if x.dtype == torch.bool:
        return x
    return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)
'''

REWRITES = (
    Rewrite(
        op="aten::hypot",
        family="elementwise",
        targets=("aten.hypot.default",),
        function="hypot",
        source=HYPOT,
        exactness=Exactness.ROUNDING,
        error="one or two ulps (torch's kernel rounds once)",
        limits="floating-point inputs",
        reported_as=("prims::hypot",),
    ),
    Rewrite(
        op="aten::copysign",
        family="elementwise",
        targets=("aten.copysign.Tensor", "aten.copysign.Scalar"),
        function="copysign",
        source=COPYSIGN,
        exactness=Exactness.EXACT,
        error="same values",
        limits="the sign bit of a NaN in `other` is not visible to ONNX ops: NaN counts as positive",
        reported_as=("prims::signbit", "aten::signbit"),
    ),
    Rewrite(
        op="aten::frexp",
        family="elementwise",
        targets=("aten.frexp.Tensor",),
        function="frexp",
        source=FREXP,
        exactness=Exactness.EXACT,
        error="same mantissa and exponent (powers of two divide exactly)",
        limits="float32/float64 input; subnormal inputs (below about 1e-38 in float32) are not "
        "covered, since 2**exponent underflows there",
        reported_as=("prims::frexp",),
    ),
    Rewrite(
        op="aten::sign",
        family="elementwise",
        targets=("aten.sign.default",),
        function="sign",
        source=SIGN,
        exactness=Exactness.EXACT,
        error="the same values, 0 for NaN as PyTorch gives",
        limits="unsigned and bool inputs as they are; the sign of -0.0 is 0 as in torch",
        reported_as=("prims::sign",),
        mismatch_only=True,
    ),
)
