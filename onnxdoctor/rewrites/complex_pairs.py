"""Complex-valued code as (real, imaginary) pairs: the complex ops the dynamo exporter does not lower.

The dynamo exporter represents a complex tensor as a real one with a trailing dimension of 2 and
lowers the FFT ops, `view_as_real` and `view_as_complex` that way, but not `torch.complex`, a
complex `unsqueeze`/`squeeze`, a complex `matmul` (pytorch/pytorch#126972: rfft, a complex
matmul per bin, irfft), a complex `exp`, `split` or `repeat`, a complex `alias` or zero padding,
a product with a Python complex number (`magnitude * torch.exp(phase * 1j)`, MB-iSTFT-VITS2#3), a
complex einsum of two operands and the copy and slice_scatter of a complex slice assignment (a
Fourier layer's per-mode weights written into the low modes), or a complex select and stack (a
linear recurrence's steps and states, pytorch#137864), complex values reordered (fftshift's
index_select, roll, flip, gather, advanced indexing, diagonal) or padded by reflection, or the STFT of complex
samples (radar I/Q, pytorch#65666). These functions write each of
those on the `view_as_real` pair, so the complex values only ever pass through ops the exporter
lowers. A table entry replaces the op for
real tensors too, so the real branch is the same op spelled without calling itself (reshape for
(un)squeeze, einsum for matmul), or returns NotImplemented, which leaves the op as it is.
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


def einsum(equation, tensors, *, path=None):
    """einsum of two operands, one of them complex (a Fourier layer's per-mode weights,
    PhysicsNeMo's FNO): four real einsums, (ar br - ai bi) + i (ar bi + ai br)."""
    operands = list(tensors)
    if len(operands) != 2 or not any(t.is_complex() for t in operands):
        return NotImplemented
    a, b = operands
    ar, ai = torch.view_as_real(a).unbind(-1) if a.is_complex() else (a, torch.zeros_like(a))
    br, bi = torch.view_as_real(b).unbind(-1) if b.is_complex() else (b, torch.zeros_like(b))
    re = torch.einsum(equation, ar, br) - torch.einsum(equation, ai, bi)
    im = torch.einsum(equation, ar, bi) + torch.einsum(equation, ai, br)
    return torch.view_as_complex(torch.stack([re, im], -1))


def copy(x, src, non_blocking=False):
    """copy into a complex tensor (a slice assignment of complex modes, out_ft[:, :, :m] = ...):
    src's pair broadcast to x's shape, its trailing (re, im) dim kept."""
    if not (x.is_complex() and src.is_complex()):
        return NotImplemented
    pair = torch.view_as_real(src.to(x.dtype))
    return torch.view_as_complex(pair.expand(list(x.shape) + [2]).contiguous())


def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    """slice_scatter of complex values (the rest of a slice assignment): the pairs scattered on
    the same dim, their trailing (re, im) dim whole."""
    if not (x.is_complex() and src.is_complex()):
        return NotImplemented
    d = dim if dim >= 0 else dim - 1
    return torch.view_as_complex(torch.slice_scatter(torch.view_as_real(x), torch.view_as_real(src.to(x.dtype)),
                                                     d, start, end, step))


def zeros(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """A complex tensor of zeros (the modes a Fourier layer fills): zero pairs viewed as complex."""
    if dtype not in (torch.complex64, torch.complex128):
        return NotImplemented
    real = torch.float32 if dtype == torch.complex64 else torch.float64
    return torch.view_as_complex(torch.zeros(list(size) + [2], dtype=real, device=device))


def exp(x):
    """exp of a complex tensor: exp(re) (cos im + i sin im); real tensors keep the exporter's Exp."""
    if not x.is_complex():
        return NotImplemented  # run_decompositions then records aten.exp itself
    re, im = torch.view_as_real(x).unbind(-1)
    return torch.polar(torch.exp(re), im)


def split(x, split_size, dim=0):
    """split / chunk of a complex tensor: the pair split on the same dim (before its trailing
    (re, im) one), each part viewed as complex again."""
    if not x.is_complex():
        return NotImplemented
    d = dim if dim >= 0 else dim + x.dim()
    return [torch.view_as_complex(part) for part in torch.view_as_real(x).split(split_size, d)]


def split_with_sizes(x, split_sizes, dim=0):
    """split into given sizes, the same way."""
    return split(x, list(split_sizes), dim)


def repeat(x, repeats):
    """repeat of a complex tensor: the pair repeated, its trailing (re, im) dim once."""
    if not x.is_complex():
        return NotImplemented
    return torch.view_as_complex(torch.view_as_real(x).repeat(list(repeats) + [1]))


def mul_scalar(x, other):
    """x * a Python complex number (`phase * 1j`): the pair times (re, im) of the number; products
    of tensors are left to the exporter, which lowers complex ones."""
    if isinstance(other, torch.Tensor) or not (isinstance(other, complex) or x.is_complex()):
        return NotImplemented
    other = complex(other)
    xr, xi = torch.view_as_real(x).unbind(-1) if x.is_complex() else (x, torch.zeros_like(x))
    re = xr * other.real - xi * other.imag
    im = xr * other.imag + xi * other.real
    return torch.view_as_complex(torch.stack([re, im], -1))


def select(x, dim, index):
    """select of a complex tensor (one step of a recurrence, `Bu[:, t]`): the pair selected on
    the same dim, its trailing (re, im) dim whole."""
    if not x.is_complex():
        return NotImplemented
    d = dim if dim >= 0 else dim - 1
    return torch.view_as_complex(torch.view_as_real(x).select(d, index))


def stack(tensors, dim=0):
    """stack of complex tensors (a recurrence's states): the pairs stacked before their trailing
    (re, im) dim."""
    tensors = list(tensors)
    if not any(t.is_complex() for t in tensors):
        return NotImplemented
    d = dim if dim >= 0 else dim + tensors[0].dim() + 1
    return torch.view_as_complex(torch.stack([torch.view_as_real(t.to(torch.promote_types(t.dtype, torch.complex64)))
                                              for t in tensors], d))


def alias(x):
    """alias of a complex tensor (slicing a complex spectrum whole, FourCastNet's AFNO filter,
    pytorch/pytorch#81075): the same values through the pair."""
    if not x.is_complex():
        return NotImplemented
    return torch.view_as_complex(torch.view_as_real(x).clone())


def constant_pad_nd(x, pad, value=0):
    """Zero padding of a complex tensor (HTDemucs' spectrogram, ailia-models#866): the pair padded,
    its trailing (re, im) dim not; F.pad lists the last dim first."""
    if not x.is_complex() or (value is not None and value != 0):
        return NotImplemented
    return torch.view_as_complex(torch.nn.functional.pad(torch.view_as_real(x), [0, 0] + list(pad)))


def pad(x, pad, mode="constant", value=None):
    """F.pad of a complex tensor, the same way; reflect, replicate and circular padding too (a
    centred STFT of complex samples pads by reflection)."""
    if mode == "constant":
        return constant_pad_nd(x, pad, 0 if value is None else value)
    # The pair has one dim more, and F.pad pads at most 3 dims of a 2-D to 5-D input this way.
    if not x.is_complex() or len(pad) // 2 + 1 > 3 or not 2 <= x.dim() + 1 <= 5:
        return NotImplemented
    return torch.view_as_complex(torch.nn.functional.pad(torch.view_as_real(x), [0, 0] + list(pad), mode=mode)
                                 .contiguous())


def _complex_parts(x):
    """A tensor's (real, imaginary) parts as two real tensors."""
    return torch.view_as_real(x).unbind(-1) if x.is_complex() else (x, torch.zeros_like(x))


def _from_parts(re, im):
    return torch.view_as_complex(torch.stack([re, im], -1))


def index_select_pairs(x, dim, index):
    """index_select of a complex tensor (fftshift's reordering, a bin selection): the pair
    selected on the same dim."""
    if not x.is_complex():
        return NotImplemented
    d = dim if dim >= 0 else dim + x.dim()
    return torch.view_as_complex(torch.view_as_real(x).index_select(d, index).contiguous())


def roll_pairs(x, shifts, dims=()):
    """roll of a complex tensor along given dims: the pair rolled on the same dims."""
    dims = list(dims)
    if not x.is_complex() or not dims:
        return NotImplemented  # a roll of the flattened tensor would mix real and imaginary parts
    return torch.view_as_complex(torch.view_as_real(x).roll(list(shifts), [d if d >= 0 else d + x.dim()
                                                                           for d in dims]).contiguous())


def flip_pairs(x, dims):
    """flip of a complex tensor: the pair flipped on the same dims."""
    if not x.is_complex():
        return NotImplemented
    return torch.view_as_complex(torch.view_as_real(x).flip([d if d >= 0 else d + x.dim() for d in dims])
                                 .contiguous())


def gather_pairs(x, dim, index, sparse_grad=False):
    """gather of a complex tensor: each part gathered with the same index."""
    if not x.is_complex():
        return NotImplemented
    re, im = _complex_parts(x)
    return _from_parts(re.gather(dim, index), im.gather(dim, index))


def index_pairs(x, indices):
    """Advanced indexing of a complex tensor (`spec[:, bins]`): the pair indexed on its leading
    dims, its trailing (re, im) dim whole."""
    if not x.is_complex():
        return NotImplemented
    return torch.view_as_complex(torch.ops.aten.index.Tensor(torch.view_as_real(x), list(indices)).contiguous())


def diagonal_pairs(x, offset=0, dim1=0, dim2=1):
    """diagonal of a complex tensor (the trace of a beamformer's PSD matrix): the pair's diagonal,
    which torch puts last, moved back before the trailing (re, im) dim."""
    if not x.is_complex():
        return NotImplemented
    d1, d2 = (d if d >= 0 else d + x.dim() for d in (dim1, dim2))
    return torch.view_as_complex(torch.view_as_real(x).diagonal(offset, d1, d2).movedim(-2, -1).contiguous())


def stft_pairs(x, n_fft, hop_length=None, win_length=None, window=None, normalized=False, onesided=None,
         return_complex=None, align_to_window=None):
    """STFT of complex samples (radar I/Q): linear, so the STFT of the real part plus i times the
    STFT of the imaginary part, each two-sided."""
    if not x.is_complex() or return_complex is False or align_to_window:
        return NotImplemented
    parts = [torch.view_as_real(torch.stft(p, n_fft, hop_length, win_length, window, center=False,
                                           normalized=normalized, onesided=False, return_complex=True)).unbind(-1)
             for p in _complex_parts(x)]
    (ar, ai), (br, bi) = parts
    return _from_parts(ar - bi, ai + br)
'''

REWRITES = (
    Rewrite(
        op="aten::complex",
        family="complex",
        targets=("aten.complex.default", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.matmul.default",
                 "aten.exp.default", "aten.mul.Scalar", "aten.mul.Tensor", "aten.split.Tensor",
                 "aten.split_with_sizes.default", "aten.repeat.default", "aten.alias.default",
                 "aten.constant_pad_nd.default", "aten.pad.default", "aten.einsum.default", "aten.copy.default",
                 "aten.slice_scatter.default", "aten.zeros.default", "aten.select.int", "aten.stack.default",
                 "aten.index_select.default", "aten.roll.default", "aten.flip.default", "aten.gather.default",
                 "aten.index.Tensor", "aten.stft.default", "aten.diagonal.default"),
        functions=("complex_", "unsqueeze", "squeeze_dim", "matmul", "exp", "mul_scalar", "mul_scalar", "split",
                   "split_with_sizes", "repeat", "alias", "constant_pad_nd", "pad", "einsum", "copy", "slice_scatter", "zeros",
                   "select", "stack", "index_select_pairs", "roll_pairs", "flip_pairs", "gather_pairs", "index_pairs",
                   "stft_pairs", "diagonal_pairs"),
        function="complex_",
        source=PAIRS,
        exactness=Exactness.ROUNDING,
        error="a complex matmul as four real ones: the same products, summed in another order; "
        "the other ops are exact",
        limits="complex64/complex128 through view_as_real (the dynamo exporter's representation); "
        "every matmul of the model is replaced (real ones through einsum, the same MatMul in ONNX); exp "
        "and multiplication by a Python number only where complex values are involved; padding of complex "
        "values with zeros, or by reflection, replication or wrapping of up to two dims; einsum of two operands "
        "only; a roll without dims and conj are not covered; a complex STFT is two real two-sided ones "
        "(not with align_to_window)",
        reported_as=("aten::unsqueeze", "aten::squeeze", "aten::matmul", "aten::exp", "aten::mul", "aten::split",
                     "aten::chunk", "aten::repeat", "aten::alias", "aten::constant_pad_nd", "aten::pad",
                     "aten::einsum", "aten::copy", "aten::slice_scatter", "aten::zeros", "aten::select", "aten::stack",
                     "aten::index_select", "aten::roll", "aten::flip", "aten::gather", "aten::index", "aten::stft",
                     "aten::diagonal"),
    ),
)
