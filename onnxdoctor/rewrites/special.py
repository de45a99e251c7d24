"""Special functions: erfinv, ndtri, lgamma, digamma, i0 (series and polynomial approximations)."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

ERFINV = r'''
def erfinv(y):
    """torch.erfinv: Giles' single-precision polynomials, then one Newton step on ONNX Erf."""
    w = -torch.log((1.0 - y) * (1.0 + y))
    small = w - 2.5
    p = torch.full_like(y, 2.81022636e-08)
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p = c + p * small
    large = torch.sqrt(torch.clamp(w, min=5.0)) - 3.0
    q = torch.full_like(y, -0.000200214257)
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        q = c + q * large
    x = torch.where(w < 5.0, p, q) * y
    # Newton: erf(x) = y, erf'(x) = 2/sqrt(pi) exp(-x^2).
    x = x - (torch.erf(x) - y) / (1.1283791670955126 * torch.exp(-x * x))
    x = torch.where(y.abs() == 1.0, y * float("inf"), x)
    return torch.where(y.abs() > 1.0, torch.full_like(y, float("nan")), x)
'''

NDTRI = ERFINV + r'''

def ndtri(p):
    """torch.special.ndtri: the normal quantile, sqrt(2) * erfinv(2p - 1)."""
    return 1.4142135623730951 * erfinv(2.0 * p - 1.0)
'''

LGAMMA = r'''
def lgamma(x):
    """torch.lgamma: Stirling's series after shifting x by 6; reflection for x < 0.5."""
    pi = 3.141592653589793
    reflect = x < 0.5
    z = torch.where(reflect, 1.0 - x, x)  # z >= 0.5
    shift = torch.zeros_like(z)
    for k in range(6):
        shift = shift + torch.log(z + k)
    s = z + 6.0
    r = 1.0 / (s * s)
    series = (1.0 / 12.0 - r * (1.0 / 360.0 - r * (1.0 / 1260.0 - r * (1.0 / 1680.0)))) / s
    value = (s - 0.5) * torch.log(s) - s + 0.9189385332046727 + series - shift
    # lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x)
    sine = torch.sin(pi * (x - torch.floor(x))).abs()
    reflected = torch.log(pi / sine) - value
    result = torch.where(reflect, reflected, value)
    pole = (x <= 0) & (x == torch.floor(x))
    result = torch.where(pole, torch.full_like(x, float("inf")), result)
    return torch.where(x == float("inf"), x, torch.where(x == float("-inf"), -x, result))
'''

DIGAMMA = r'''
def digamma(x):
    """torch.digamma: asymptotic series after shifting x by 6; reflection for x < 0.5."""
    pi = 3.141592653589793
    reflect = x < 0.5
    z = torch.where(reflect, 1.0 - x, x)
    shift = torch.zeros_like(z)
    for k in range(6):
        shift = shift + 1.0 / (z + k)
    s = z + 6.0
    r = 1.0 / (s * s)
    series = r * (1.0 / 12.0 - r * (1.0 / 120.0 - r * (1.0 / 252.0 - r * (1.0 / 240.0 - r / 132.0))))
    value = torch.log(s) - 0.5 / s - series - shift
    # digamma(x) = digamma(1 - x) - pi / tan(pi x), with tan taken on the fractional part
    reflected = value - pi / torch.tan(pi * (x - torch.floor(x)))
    result = torch.where(reflect, reflected, value)
    integer = x == torch.floor(x)
    result = torch.where((x < 0) & integer, torch.full_like(x, float("nan")), result)
    result = torch.where(x == 0, torch.full_like(x, float("-inf")), result)
    return torch.where(x == float("inf"), x, result)
'''

I0 = r'''
def i0(x):
    """torch.i0: Abramowitz & Stegun 9.8.1 (|x| <= 3.75) and 9.8.2 (|x| > 3.75)."""
    a = x.abs()
    t = a / 3.75
    t2 = t * t
    near = 1.0 + t2 * (3.5156229 + t2 * (3.0899424 + t2 * (1.2067492 + t2 * (0.2659732 + t2 * (
        0.0360768 + t2 * 0.0045813)))))
    u = 3.75 / torch.clamp(a, min=3.75)
    poly = 0.39894228 + u * (0.01328592 + u * (0.00225319 + u * (-0.00157565 + u * (0.00916281 + u * (
        -0.02057706 + u * (0.02635537 + u * (-0.01647633 + u * 0.00392377)))))))
    half = torch.exp(a / 2.0)  # exp(a) in two halves: I0 stays finite a little past exp's overflow
    far = half * (half * poly / torch.sqrt(torch.clamp(a, min=3.75)))
    result = torch.where(a <= 3.75, near, far)
    return torch.where(torch.isinf(x), torch.full_like(x, float("nan")), result)  # as torch's kernel
'''

REWRITES = (
    Rewrite(
        op="aten::erfinv",
        family="special",
        targets=("aten.erfinv.default",),
        function="erfinv",
        source=ERFINV,
        exactness=Exactness.APPROXIMATION,
        error="relative error below 1e-6 for |y| <= 0.999 in float32 (Giles' polynomial plus one "
        "Newton step); the absolute error grows as |y| -> 1, where erfinv itself is steep",
        limits="floating-point input; +-1 gives +-inf and |y| > 1 NaN, as in torch",
        reported_as=("prims::erf_inv",),
    ),
    Rewrite(
        op="aten::special_ndtri",
        family="special",
        targets=("aten.special_ndtri.default",),
        function="ndtri",
        source=NDTRI,
        exactness=Exactness.APPROXIMATION,
        error="relative error below 1e-5 for p in [1e-3, 1 - 1e-3] in float32; 2p - 1 loses "
        "relative precision for p near 0",
        limits="floating-point input; p below about 1e-6 is not accurate in float32",
        reported_as=("prims::ndtri", "aten::ndtri"),
    ),
    Rewrite(
        op="aten::lgamma",
        family="special",
        targets=("aten.lgamma.default",),
        function="lgamma",
        source=LGAMMA,
        exactness=Exactness.APPROXIMATION,
        error="absolute error below 1e-5 in float32 for x in [-100, 1e6] away from the poles "
        "(Stirling's series after a shift by 6: truncation below 1e-10)",
        limits="floating-point input; close to the negative poles the reflection loses digits",
        reported_as=("prims::lgamma",),
    ),
    Rewrite(
        op="aten::digamma",
        family="special",
        targets=("aten.digamma.default",),
        function="digamma",
        source=DIGAMMA,
        exactness=Exactness.APPROXIMATION,
        error="absolute error below 1e-5 in float32 for x in [-100, 1e6] away from the poles "
        "(asymptotic series after a shift by 6)",
        limits="floating-point input; close to the negative poles the reflection loses digits",
        reported_as=("prims::digamma", "aten::special_digamma", "aten::special_psi"),
    ),
    Rewrite(
        op="aten::i0",
        family="special",
        targets=("aten.i0.default",),
        function="i0",
        source=I0,
        exactness=Exactness.APPROXIMATION,
        error="relative error below 2e-7 (Abramowitz & Stegun 9.8.1 / 9.8.2) plus float32 rounding",
        limits="floating-point input; +-inf gives NaN, as torch's own kernel does",
        reported_as=("prims::bessel_i0", "aten::special_i0"),
    ),
)
