"""Complex-valued code as (real, imaginary) pairs: the complex ops the dynamo exporter does not lower.

The dynamo exporter represents a complex tensor as a real one with a trailing dimension of 2 and
lowers the FFT ops, `view_as_real` and `view_as_complex` that way, but not `torch.complex`, a
complex `unsqueeze`/`squeeze` or a complex `matmul` (pytorch/pytorch#126972: rfft, a complex
matmul per bin, irfft). These functions write each of those on the `view_as_real` pair, so the
complex values only ever pass through ops the exporter lowers. A table entry replaces the op for
real tensors too, so the real branch is the same op spelled without calling itself (reshape for
(un)squeeze, einsum for matmul).
"""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

PAIRS = r'''
def _unsqueeze(x, d):
    shape = list(x.shape)
    return x.reshape(shape[:d] + [1] + shape[d:])


def _squeeze(x, d):
    shape = list(x.shape)
    return x.reshape(shape[:d] + shape[d + 1:]) if shape[d] == 1 else x


def _mm(a, b):
    """matmul through einsum (lowered to MatMul), 1-D operands as matmul treats them."""
    va, vb = a.dim() == 1, b.dim() == 1
    a2 = a.reshape([1] + list(a.shape)) if va else a
    b2 = b.reshape(list(b.shape) + [1]) if vb else b
    # The batch dims broadcast by hand: ONNX Runtime's Einsum wants the same rank under "...".
    batch = list(torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    a2 = a2.expand(batch + list(a2.shape[-2:]))
    b2 = b2.expand(batch + list(b2.shape[-2:]))
    r = torch.einsum("...ij,...jk->...ik", a2, b2)
    if vb:
        r = r.reshape(list(r.shape[:-1]))
    if va:
        r = r.reshape(list(r.shape[:-2]) + list(r.shape[-1:]))
    return r


def complex_(real, imag):
    """torch.complex: the pair stacked, viewed as complex."""
    return torch.view_as_complex(torch.stack([real, imag], -1))


def unsqueeze(x, dim):
    """unsqueeze; a complex tensor's pair gets the new dim before its trailing (re, im) one."""
    d = dim if dim >= 0 else dim + x.dim() + 1
    return torch.view_as_complex(_unsqueeze(torch.view_as_real(x), d)) if x.is_complex() else _unsqueeze(x, d)


def squeeze_dim(x, dim):
    """squeeze(dim), the same way."""
    d = dim if dim >= 0 else dim + x.dim()
    return torch.view_as_complex(_squeeze(torch.view_as_real(x), d)) if x.is_complex() else _squeeze(x, d)


def matmul(a, b):
    """matmul; a complex product as four real ones: (ar br - ai bi) + i (ar bi + ai br)."""
    if not (a.is_complex() or b.is_complex()):
        return _mm(a, b)
    ar, ai = torch.view_as_real(a).unbind(-1) if a.is_complex() else (a, torch.zeros_like(a))
    br, bi = torch.view_as_real(b).unbind(-1) if b.is_complex() else (b, torch.zeros_like(b))
    return torch.view_as_complex(torch.stack([_mm(ar, br) - _mm(ai, bi), _mm(ar, bi) + _mm(ai, br)], -1))
'''

REWRITES = (
    Rewrite(
        op="aten::complex",
        family="complex",
        targets=("aten.complex.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.matmul.default"),
        functions=("complex_", "unsqueeze", "squeeze_dim", "matmul"),
        function="complex_",
        source=PAIRS,
        exactness=Exactness.ROUNDING,
        error="a complex matmul as four real ones: the same products, summed in another order; "
        "the other ops are exact",
        limits="complex64/complex128 through view_as_real (the dynamo exporter's representation); "
        "every matmul of the model is replaced (real ones through einsum, the same MatMul in ONNX); "
        "other complex ops (complex division, angle, ...) are not covered",
        reported_as=("aten::unsqueeze", "aten::squeeze", "aten::matmul"),
    ),
)
