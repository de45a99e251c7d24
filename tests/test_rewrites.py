"""The op-rewrite library against eager PyTorch: exported for real, run in ONNX Runtime.

Each rewrite gets a case that applies the op to several inputs (shapes and edge values: empty,
ties, negatives, inf/NaN where the op defines them); the cases of one op family share a model,
exported once with their rewrites through run_decompositions and the dynamo exporter, run in an
ONNX Runtime session, and every output is compared with PyTorch's own kernel. The torch-free parts (metadata, lookup, snippets)
are checked without exporting.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from onnxdoctor.rewrites import REWRITES, Exactness, Rewrite, find_rewrites

NAN, INF = float("nan"), float("inf")


@dataclass(frozen=True)
class Case:
    """A rewrite's test: the torch call, its inputs, which outputs to compare and how closely."""

    call: Callable[..., Any]
    inputs: tuple[torch.Tensor, ...]
    # Output positions (of the flattened outputs of one call) compared; None: all of them.
    compare: tuple[int, ...] | None = None
    atol: float = 1e-4
    rtol: float = 1e-4
    relative_only: bool = False  # compare |a - b| <= rtol * |b| (values spanning decades)
    extra: dict[str, Any] = field(default_factory=dict)


def _g(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _spd(n: int, batch: int = 2) -> torch.Tensor:
    a = _g(batch, n, n, seed=n)
    return a @ a.mT + n * torch.eye(n)


# Seeded outside the calls: a generator inside forward() would be captured by torch.export.
_LAYER_WEIGHTS = [_g(*shape, seed=s, scale=0.3) for s, shape in enumerate(
    [(24, 8), (24,), (8, 8), (8,), (8,), (8,), (8,), (8,), (16, 8), (16,), (8, 16), (8,)])]
_HEAD_MASK = _g(2, 2, 5, 5, seed=9) > 0.8

def _encoder_layer(x: torch.Tensor, gelu: bool, norm_first: bool, mask_type: int | None) -> torch.Tensor:
    """torch's fast-path encoder layer on `x` (batch, length, 8) with seeded weights, the mask of
    `mask_type` (1: the second sample's last two positions padded; 0: causal; 2: per head)."""
    e, n = x.shape[-1], x.shape[1]
    w = _LAYER_WEIGHTS
    mask = {None: None, 0: torch.ones(n, n, dtype=torch.bool).triu(1),
            1: torch.arange(n).expand(x.shape[0], n) >= torch.tensor([[n], [n - 2]]),
            2: _HEAD_MASK}[mask_type]
    return torch._transformer_encoder_layer_fwd(x, e, 2, w[0], w[1], w[2], w[3], gelu, norm_first, 1e-5, w[4] + 1,
                                                w[5], w[6] + 1, w[7], w[8], w[9], w[10], w[11], mask, mask_type)


def _multi_head_attention(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """torch's fast-path attention, self and cross (keys from `x` reversed), weights averaged or not."""
    e, n = x.shape[-1], x.shape[1]
    w = _LAYER_WEIGHTS[:4]
    padded = torch.arange(n).expand(x.shape[0], n) >= torch.tensor([[n], [n - 1]])
    mha = torch._native_multi_head_attention
    return (*mha(x, x, x, e, 2, *w, padded, True, True, 1),
            *mha(x, x.flip(1), x.flip(1), e, 4, *w, None, True, False),
            mha(x, x, x, e, 2, *w, torch.ones(n, n, dtype=torch.bool).triu(1), False, True, 0)[0])


def _complex_calls(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """torch.complex, complex unsqueeze/squeeze/matmul, complex exp, products with a Python complex
    number, a complex alias, zero padding, select and stack, reordering and the STFT of complex
    values (the real matmul, exp, products and pads go through the table too)."""
    z = torch.complex(x, x.flip(-1))
    y = (z @ z.mT.unsqueeze(0)).squeeze(0)
    spectrum = torch.exp(x) * torch.exp(torch.sin(x) * 1j)  # magnitude * exp(phase * 1j), MB-iSTFT-VITS2#3
    halves = torch.stack(torch.chunk(z, 2, dim=-1), dim=0)  # complex split (USRNet's splits(), pytorch#128324)
    return (torch.view_as_real(y), x @ x.mT, x[0] @ x.mT, torch.view_as_real(spectrum),
            torch.view_as_real(z * (0.5 - 2j)), x * 3.0, torch.view_as_real(halves.repeat(1, 2, 1)),
            torch.view_as_real(torch.cat(z.split([1, 3], dim=1)[::-1], dim=1)), x.repeat(2, 1),
            # A whole-range slice of a complex tensor (an alias: FourCastNet's AFNO, pytorch#81075),
            # zero padding of one (HTDemucs' spectrogram, ailia-models#866) and of a real one.
            torch.view_as_real(z[:, 0:4] * 2), torch.view_as_real(torch.nn.functional.pad(z, (1, 2))),
            torch.nn.functional.pad(x, (2, 1)),
            # A Fourier layer's per-mode weights (PhysicsNeMo's FNO), and a real einsum beside them.
            torch.view_as_real(torch.einsum("ij,kj->ik", z, z.flip(0))), torch.einsum("ij,kj->ik", x, x),
            torch.view_as_real(_low_modes(z)),
            # A complex recurrence's steps and states (an LRU, pytorch#137864): select and stack.
            torch.view_as_real(torch.stack([z[:, 0], z[:, 1] * (0.5 + 1j) + z.select(-1, 2)], dim=-1)),
            # Reordering complex values (fftshift's index_select, a roll, a flip, gathered and indexed
            # bins) and the centred STFT of complex samples (reflection padding, radar I/Q, pytorch#65666).
            torch.view_as_real(z.index_select(1, torch.tensor([3, 0]))), torch.view_as_real(z.roll(1, 1)),
            torch.view_as_real(z.flip(0)), torch.view_as_real(z.gather(1, torch.tensor([[1, 0], [3, 3], [2, 1]]))),
            torch.view_as_real(z[:, torch.tensor([2, 0])]), torch.view_as_real(z[:, :3].diagonal(0, -2, -1)),
            torch.view_as_real(torch.stft(z.reshape(1, -1), 4, 2, window=torch.hann_window(4), center=True,
                                          return_complex=True)))


def _pairs_as_complex(real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
    """A complex tensor from its parts, through view_as_complex (which the dynamo exporter lowers)."""
    return torch.view_as_complex(torch.stack([real, imag], -1))


def _low_modes(z: torch.Tensor) -> torch.Tensor:
    """A Fourier layer's output spectrum: complex zeros with the low modes written in (a complex
    slice assignment: copy and slice_scatter)."""
    out = torch.zeros(z.shape[0], z.shape[1] + 2, dtype=torch.cfloat)
    out[:, :2] = z[:, :2] * 2
    return out


def _observed(channels: int) -> tuple[torch.Tensor, ...]:
    """A fused observer's state after one forward with fake quantization on: the scale and zero
    point it wrote from a running range of [-1.3, 2.1] (and -0.5, 0.4 for other channels)."""
    low, high = torch.tensor([-1.3, -0.5, 0.0][:channels]), torch.tensor([2.1, 0.4, 3.0][:channels])
    scale, zero = torch.ones(channels), torch.zeros(channels, dtype=torch.int32)
    torch.fused_moving_avg_obs_fake_quant(torch.zeros(2, 3, 4), torch.tensor([0]), torch.tensor([1]), low, high, scale,
                                          zero, 0.01, 0, 255, 1, channels > 1)
    return low, high, scale, zero


def _svd_invariants(u: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """What does not depend on the singular vectors' signs: S, U S V^T, V U^T."""
    return s, (u * s.unsqueeze(-2)) @ v.mT, v @ u.mT


def _sym(n: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    a = _g(batch, n, n, seed=seed)
    return a + a.mT


def _unsigned(m: torch.Tensor) -> torch.Tensor:
    """Columns of an eigen/singular vector matrix with their first nonzero entry made positive:
    the sign is arbitrary (LAPACK's choice), so both sides are compared after this."""
    first = torch.gather(m, -2, (m.abs() > 1e-6).to(torch.int64).argmax(-2, keepdim=True))
    return m * torch.where(first < 0, -1.0, 1.0)


def _eigh_unsigned(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w, v = torch.linalg.eigh(a, UPLO="U")
    return w, _unsigned(v)


_IDX = torch.tensor([[0, 1, 2, 0], [1, 0, 2, 2]])
_RRELU = torch.nn.RReLU(0.05, 0.45).eval()
_EDGES = torch.linspace(-1.0, 1.0, 9)
BOUNDARIES = torch.tensor([-1.0, 0.0, 0.0, 1.0, 2.5])

_GROUPS_B = torch.randn(3, 16, 8, generator=torch.Generator().manual_seed(7))
_WIDE_B = torch.randn(16, 24, generator=torch.Generator().manual_seed(8))


def _grouped(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """torch._grouped_mm in its four layouts (bfloat16, the only type its CPU kernel takes)."""
    a, a3 = x.bfloat16(), x[:6].reshape(3, 2, 16).bfloat16()
    int32 = torch.int32
    return tuple(y.float() for y in (
        torch._grouped_mm(a, _GROUPS_B.bfloat16(), offs=torch.tensor([2, 5, 7], dtype=int32)),
        torch._grouped_mm(a3, _GROUPS_B.bfloat16()),
        torch._grouped_mm(a3, _WIDE_B.bfloat16(), offs=torch.tensor([8, 16, 24], dtype=int32)),
        torch._grouped_mm(a, _WIDE_B[:, :8].bfloat16(), offs=torch.tensor([8, 16], dtype=int32)),
    ))


_SPECIAL_FLOATS = torch.tensor([0.0, -0.0, 1.0, -1.5, 3.0e38, -1.0e-40, 1.4e-45, 1.1754944e-38, float("inf"),
                                -float("inf"), 0.1, 123456.789, -2.0 ** -126, 7.0e-39])


def _bitcasts(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """float32 -> int32 -> float32: every class of value (subnormals, -0.0, infinities, powers of two)."""
    bits = x.view(torch.int32)
    return bits, (bits + 1).view(torch.float32)  # the next pattern up: NaNs, subnormals, the largest float


def _uneven_ellipses(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Operands whose ellipses cover 1 and 0 dims, and 2 and 1 (broadcast from the right)."""
    keys, latents = x.reshape(2, 3, 4), x[0, :8].reshape(2, 4)
    return (torch.einsum("...nd,...d->...n", keys, x[1, 4:8]),
            torch.einsum("...ld,...md->...lm", latents, keys),
            torch.einsum("b...d,...d->b...", x.reshape(2, 1, 3, 4), latents[:1].expand(3, 4)))


CASES: dict[str, Case] = {
    "aten::einsum": Case(_uneven_ellipses, (_g(2, 12, seed=13),)),
    "aten::view.dtype": Case(_bitcasts, (torch.cat([_SPECIAL_FLOATS, _g(50, seed=11) * 1e3, _g(50, seed=12) * 1e-30]),),
                             atol=0.0, rtol=0.0),
    "aten::_grouped_mm": Case(_grouped, (_g(7, 16, seed=9),), atol=0.06, rtol=0.01),
    # 26 -> 64 is where ONNX Runtime's own Resize picks a neighbouring pixel (onnxruntime#12098).
    # Random ops: their values are never PyTorch's; the family test compares them in distribution.
    "aten::bernoulli": Case(lambda x: (torch.bernoulli(torch.sigmoid(x)), torch.empty_like(x).bernoulli_(0.3)),
                            (_g(4, 8),), compare=()),
    "aten::uniform": Case(lambda x: torch.empty_like(x).uniform_(-2.0, 5.0) + x, (_g(4, 8),), compare=()),
    # With replacement (more samples than classes), and without (the Gumbel top-k), rows of
    # unequal probabilities; compared in distribution with the family's other random ops.
    "aten::multinomial": Case(
        lambda x: (torch.multinomial(torch.softmax(x, -1), 7, replacement=True),
                   torch.multinomial(torch.softmax(x * 2.0, -1), 3)),
        (_g(3, 5, seed=17),), compare=(),
    ),
    "aten::randperm": Case(lambda x: x[:, torch.randperm(x.shape[1])], (_g(3, 6),), compare=()),
    "aten::upsample_nearest1d": Case(
        lambda x: (F.interpolate(x, size=64), F.interpolate(x, scale_factor=2.5)), (_g(1, 2, 26),), atol=0.0, rtol=0.0,
    ),
    "aten::upsample_nearest2d": Case(
        lambda x: (F.interpolate(x, size=(64, 40)), F.interpolate(x, scale_factor=2.5),
                   F.interpolate(x, scale_factor=(1.7, 3.0))),
        (_g(1, 2, 26, 26),), atol=0.0, rtol=0.0,
    ),
    "aten::upsample_nearest3d": Case(
        lambda x: (F.interpolate(x, size=(1, 3, 64)), F.interpolate(x, scale_factor=(1.0, 2.0, 2.5))),
        (_g(1, 1, 1, 2, 26),), atol=0.0, rtol=0.0,
    ),
    "aten::searchsorted": Case(
        lambda x: (torch.searchsorted(BOUNDARIES, x), torch.searchsorted(BOUNDARIES, x, right=True),
                   torch.searchsorted(BOUNDARIES.expand(x.shape[0], 5).contiguous(), x, side="right"),
                   torch.searchsorted(BOUNDARIES, 0.0), torch.searchsorted(BOUNDARIES, 2.75, out_int32=True)),
        (torch.tensor([[-2.0, -1.0, 0.0, 0.5], [1.0, 2.5, 3.0, INF]]), _g(3, 7), torch.empty(0, 4)),
    ),
    "aten::kthvalue": Case(
        lambda x: torch.kthvalue(x, 2, -1), (_g(3, 5), _g(2, 4, 6, seed=1) * -1e3, torch.tensor([[INF, -INF, 0.0]])),
    ),
    "aten::median": Case(lambda x: torch.median(x), (_g(3, 5), _g(4), torch.tensor([[1.0, NAN], [2.0, 3.0]]))),
    "aten::median.dim": Case(
        lambda x: torch.median(x, 1), (_g(3, 5), _g(2, 6, 3, seed=2), torch.tensor([[1.0, NAN, 3.0], [4.0, 2.0, -1.0]])),
    ),
    "aten::nanmedian": Case(
        lambda x: (torch.nanmedian(x, -1), torch.nanmedian(x)),
        (_g(3, 5), torch.tensor([[1.0, NAN, 3.0, 0.0], [NAN, NAN, NAN, NAN], [NAN, 5.0, -2.0, NAN]])),
        compare=(0, 2),  # indices of ties may differ; values are exact
    ),
    "aten::mode": Case(
        lambda x: torch.mode(x, -1),
        (torch.tensor([[1.0, 2.0, 2.0, 3.0, 3.0], [5.0, -1.0, 5.0, 0.0, -1.0]]),
         torch.randint(0, 3, (4, 7), generator=torch.Generator().manual_seed(3)).float(), _g(2, 4)),
    ),
    "aten::sort.stable": Case(
        lambda x: (torch.sort(x, stable=True), torch.sort(x, dim=0, descending=True, stable=True)),
        (torch.tensor([[3.0, 1.0, 3.0, -2.0], [0.0, 0.0, -1.0, 0.0]]), _g(4, 5),
         torch.tensor([[INF, NAN, -INF, 1.0, NAN]]), torch.tensor([[2, 1, 2], [0, 0, 5]])),
    ),
    "aten::cumprod": Case(
        lambda x: torch.cumprod(x, 1),
        (_g(3, 6), torch.tensor([[1.0, -2.0, 0.0, 3.0], [INF, 2.0, -1.0, NAN]]), torch.empty(2, 0)),
    ),
    "aten::cummax": Case(
        lambda x: torch.cummax(x, -1),
        (_g(3, 6), torch.tensor([[1.0, 3.0, 3.0, 2.0, 5.0, 5.0], [-1.0, NAN, 2.0, NAN, 0.0, 9.0]]),
         torch.tensor([[-INF, -INF, 1.0]])),
    ),
    "aten::logcumsumexp": Case(
        # Prefixes far below the axis's maximum (the exporters' lowering underflows them to -inf),
        # -inf and +inf entries, a NaN, and an empty axis.
        lambda x: (torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0)),
        (_g(3, 6), torch.cat([torch.full((2, 5), -200.0), _g(2, 3) * 50], 1),
         torch.tensor([[-INF, -INF, 1.0, INF], [NAN, 0.0, -INF, 2.0]]), torch.empty(2, 0)),
    ),
    "aten::cummin": Case(
        lambda x: torch.cummin(x, 0),
        (_g(5, 3), torch.tensor([[3.0, 1.0], [1.0, NAN], [0.5, 0.0], [1.0, -4.0]]),
         torch.tensor([[2, 7], [2, 1], [0, 1]])),
    ),
    "aten::linalg_inv": Case(
        lambda x: (torch.linalg.inv(x), torch.inverse(x)),
        (_g(2, 3, 3, seed=4) + 3 * torch.eye(3), torch.tensor([[0.0, 2.0], [3.0, 1.0]]), _spd(5, 1)),
    ),
    "aten::linalg_solve": Case(
        lambda a: (torch.linalg.solve(a, a[..., 0]), torch.linalg.solve(a, a.mT @ a + 1.0),
                   torch.linalg.solve(a, torch.ones_like(a), left=False),
                   # A complex system (an MVDR beamformer's weights, onnx#5847), solved as a real one.
                   torch.view_as_real(torch.linalg.solve(_pairs_as_complex(a, 0.5 * a.mT),
                                                         _pairs_as_complex(a[..., :1], a[..., -1:])))),
        (_g(2, 3, 3, seed=9) + 3 * torch.eye(3), torch.tensor([[0.0, 2.0], [3.0, 1.0]]), _spd(5, 1)),
    ),
    "aten::linalg_cholesky": Case(lambda x: (torch.linalg.cholesky(x), torch.linalg.cholesky(x, upper=True)), (_spd(3), _spd(6, 1), torch.eye(2))),
    "aten::linalg_slogdet": Case(
        lambda x: (torch.linalg.slogdet(x), torch.logdet(x)), (_g(2, 3, 3, seed=5), -_spd(4, 1), _spd(2)),
    ),
    "aten::linalg_vander": Case(lambda x: torch.linalg.vander(x), (_g(5), torch.tensor([[0.0, -1.0, 2.0]]))),
    # Singular vectors are unique up to sign: compared through what is invariant (S, U S V^T, V U^T).
    "aten::svd": Case(
        # 2 x 2 and 2 x 3 (wide: the transposed route) keep the unrolled graph, and the test, small.
        lambda x: _svd_invariants(*torch.svd(x)), (_g(2, 2, 2, seed=11), _g(2, 3, seed=13)),
    ),
    # Offsets both ways, new dims moved to the front and crossed, inf and NaN kept on the diagonal
    # (no 0 * inf off it).
    "aten::diag_embed": Case(
        lambda x: (torch.diag_embed(x), torch.diag_embed(x, 1, 0, 2), torch.diag_embed(x, -2, -1, 0)),
        (_g(2, 3, seed=15), torch.tensor([[1.0, INF, NAN], [-INF, 0.0, 2.0]])),
    ),
    "aten::complex": Case(lambda x: _complex_calls(x), (_g(3, 4, seed=14),)),
    "aten::erfinv": Case(
        lambda x: torch.erfinv(x),
        (torch.linspace(-0.999, 0.999, 101), torch.tensor([-1.0, 1.0, 0.0, 1.5, NAN, -0.5])),
    ),
    "aten::special_ndtri": Case(
        lambda x: torch.special.ndtri(x), (torch.linspace(1e-3, 1 - 1e-3, 57), torch.tensor([0.0, 1.0, 0.5])),
    ),
    "aten::lgamma": Case(
        lambda x: torch.lgamma(x),
        (torch.linspace(0.01, 50.0, 97), torch.tensor([-2.5, -0.5, -1.0, 0.0, 1.0, 2.0, INF, 1e6, -10.3])),
    ),
    "aten::digamma": Case(
        lambda x: torch.digamma(x),
        (torch.linspace(0.05, 60.0, 97), torch.tensor([-2.5, -0.5, -1.0, 0.0, 1.0, 2.0, INF, 1e5, -10.3])),
    ),
    "aten::i0": Case(
        lambda x: torch.i0(x),
        (torch.linspace(-20.0, 20.0, 81), torch.tensor([0.0, 3.75, -3.75, 80.0, -INF, NAN])),
        relative_only=True,
        rtol=1e-5,
    ),
    "aten::hypot": Case(
        lambda x: torch.hypot(x, x.flip(-1)),
        (_g(3, 4), torch.tensor([3.0, 0.0, 1e30, -INF, NAN, 4.0]), torch.tensor([1e-30, 0.0, -1e-30, 2.0])),
    ),
    "aten::copysign": Case(
        lambda x: torch.copysign(x, x.flip(-1)),
        (_g(3, 4), torch.tensor([1.0, -0.0, 0.0, INF, -2.0, 3.0])),
    ),
    "aten::frexp": Case(
        lambda x: torch.frexp(x),
        (_g(3, 4, scale=100.0), torch.tensor([0.0, -0.0, 1.0, 0.5, -8.0, 3.0e38, 1e-30, 0.75])),
    ),
    # divisor_override with padding, a stride other than the kernel, and ceil_mode's last window.
    "aten::avg_pool2d": Case(
        lambda x: (F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, divisor_override=4),
                   F.avg_pool2d(x, (2, 3), (3, 2), divisor_override=7), F.avg_pool2d(x, 2, divisor_override=1),
                   F.avg_pool2d(x, 3, 1, 1)),
        (_g(2, 3, 7, 8, seed=12),),
    ),
    # Class indices with weights and an ignored target, each reduction; class probabilities.
    "aten::cross_entropy_loss": Case(
        lambda x: (F.cross_entropy(x, torch.tensor([0, 3, -100, 2, 1]), label_smoothing=0.2),
                   F.cross_entropy(x, torch.tensor([0, 3, 4, 2, 1]), weight=torch.linspace(0.5, 2.0, 5),
                                   label_smoothing=0.1, reduction="sum"),
                   F.cross_entropy(x, torch.tensor([1, 3, 4, -100, 1]), weight=torch.linspace(2.0, 0.5, 5),
                                   label_smoothing=0.3),
                   F.cross_entropy(x, torch.tensor([0, 3, 4, 2, 1]), label_smoothing=0.25, reduction="none"),
                   F.cross_entropy(x, torch.softmax(x.flip(0), 1), label_smoothing=0.15),
                   F.cross_entropy(x, torch.tensor([0, 3, 4, 2, 1]))),
        (_g(5, 5, seed=13),),
    ),
    # Learnable scale and zero point: zero points that round (2.6) and that leave the range (300).
    "aten::_fake_quantize_learnable_per_tensor_affine": Case(
        lambda x: (torch._fake_quantize_learnable_per_tensor_affine(x, torch.tensor([0.05]), torch.tensor([2.6]),
                                                                    0, 255, 1.0),
                   torch._fake_quantize_learnable_per_tensor_affine(x, torch.tensor([0.02]), torch.tensor([300.0]),
                                                                    0, 255, 1.0),
                   torch._fake_quantize_learnable_per_channel_affine(x, torch.tensor([0.1, 0.03, 0.2]),
                                                                     torch.tensor([0.0, -3.4, 7.5]), 1, -8, 7, 1.0)),
        (_g(2, 3, 4, 5, seed=14, scale=3.0),), atol=0.0, rtol=0.0,
    ),
    # The fused observer + fake-quantize of a QAT model, its observer off: per tensor, per channel,
    # and with fake quantization off (x itself). Its scale and zero point are those a forward
    # with fake quantization on writes from the running range (_observed).
    "aten::fused_moving_avg_obs_fake_quant": Case(
        lambda x, states={n: _observed(n) for n in (1, 3)}: tuple(  # noqa: B008 - made once, before the trace
            torch.fused_moving_avg_obs_fake_quant(x, torch.tensor([0]), torch.tensor([on]),
                                                  *(t.clone() for t in states[channels]), 0.01, 0, 255, 1, channels > 1)
            for on, channels in ((1, 1), (1, 3), (0, 1))),
        (_g(2, 3, 4, seed=21, scale=4.0),), atol=0.0, rtol=0.0,
    ),
    # torch.sparse.mm / addmm reached with dense operands (a sparse input is given dense).
    "aten::_sparse_mm": Case(
        lambda x: (torch.sparse.mm(x, x[:, :3]), torch.sparse.addmm(x[:, :3], x, x[:, :3] * 2, beta=0.5, alpha=2.0)),
        (_g(4, 4, seed=15), _g(5, 5, seed=16)),
    ),
    "aten::adaptive_max_pool2d": Case(
        lambda x: (torch.nn.functional.adaptive_max_pool2d(x, (3, 3), return_indices=True),
                   torch.nn.functional.adaptive_max_pool1d(x.flatten(2), 5, return_indices=True)),
        (_g(1, 2, 7, 7), _g(2, 1, 5, 8, seed=6), torch.ones(1, 1, 4, 4),
         # NaN in a window: torch's max is NaN there, ONNX Runtime's ReduceMax skips it.
         torch.tensor([[[[0.5, float("nan"), 2.0, -1.0], [1.0, 3.0, 0.0, 4.0], [2.0, 1.0, float("nan"), 0.0]]]])),
    ),
    "aten::adaptive_avg_pool2d": Case(
        lambda x: (torch.nn.functional.adaptive_avg_pool2d(x, (3, 6)),
                   torch.nn.functional.adaptive_avg_pool2d(x, (1, 1)),
                   torch.nn.functional.adaptive_avg_pool1d(x.flatten(2), 5)),
        (_g(1, 2, 7, 7), _g(2, 1, 5, 8, seed=6)),
    ),
    "aten::cdist": Case(
        lambda x: (torch.cdist(x, x.flip(-2)), torch.cdist(x, x * 2, p=1.0), torch.cdist(x, x + 1, p=INF)),
        (_g(2, 4, 3), _g(5, 2, seed=7)),
    ),
    "aten::bitwise_and": Case(
        # The general and/or/xor (one step per bit) on the 8-bit types; masks and shifts on int32
        # too (its general ops run the same code with 32 steps: exporting them costs a minute).
        lambda x: (x & 15, x >> 4, x << 3, x >> (x.flip(-1) % 4))
        + ((x & x.flip(-1), x | x.flip(-1), x ^ x.flip(-1)) if x.dtype != torch.int32 else ()),
        (torch.tensor([[0, 1, 15, 16, 127, 128, 200, 255]], dtype=torch.uint8),
         torch.tensor([[0, -1, 7, -8, 127, -128, 33, -77]], dtype=torch.int8),
         torch.tensor([[0, -1, 2**31 - 1, -(2**31), 12345, -98765, 1 << 20, 255]], dtype=torch.int32)),
        atol=0.0, rtol=0.0,
    ),
    # Projection, two layers, both directions, batch_first: every branch of the unrolled cell.
    "aten::scatter_reduce.two": Case(
        lambda x: (x.scatter_reduce(0, _IDX, x * 2 - 1, "mean"), x.scatter_reduce(1, _IDX, x[:2] * 3, "mean", include_self=False)),
        (_g(3, 4), torch.tensor([[1, -2, 3, 0], [5, 1, 2, 3], [-1, 4, 5, 6]])),
    ),
    "aten::scatter.reduce": Case(
        lambda x: (x.scatter(0, _IDX, x * 10, reduce="add"), x.scatter(1, _IDX, x[:2] + 1, reduce="multiply"),
                   x.scatter(0, _IDX, 2.5, reduce="add"), x.scatter(0, _IDX.flip(-1), -3.0, reduce="multiply")),
        (_g(3, 4), torch.tensor([[1.0, -2.0, INF, 0.0], [NAN, 1.0, 2.0, 3.0], [-0.0, 4.0, 5.0, 6.0]])),
    ),
    "aten::index_reduce": Case(
        lambda x: (x.index_reduce(0, _IDX[0, :3], x[[2, 0, 1]] * 3, "prod"),
                   x.index_reduce(0, _IDX[1, :3], x * 2, "mean"),
                   x.index_reduce(1, _IDX[1], -x, "amax", include_self=False),
                   x.index_reduce(1, _IDX[0], x + 1, "amin")),
        (_g(3, 4), torch.tensor([[1.0, -2.0, 3.0, 0.0], [5.0, 1.0, 2.0, 3.0], [-1.0, 4.0, 5.0, 6.0]])),
    ),
    "aten::unique_consecutive": Case(
        lambda x: (torch.unique_consecutive(x), torch.unique_consecutive(x, return_inverse=True, return_counts=True),
                   torch.unique_consecutive(x, return_counts=True, dim=0)),
        (torch.tensor([[1.0, 1.0, 2.0], [2.0, 2.0, 3.0], [2.0, 2.0, 3.0], [0.0, 0.0, 0.0]]),
         torch.tensor([[5, 5], [5, 5], [-1, 7]])),
    ),
    "aten::masked_select": Case(
        lambda x: (torch.masked_select(x, x > 0), torch.masked_select(x, torch.tensor([True, False, True, True]))),
        (_g(3, 4), torch.tensor([[-1.0, 0.0, 2.0, NAN]]), -torch.ones(2, 4)),
    ),
    "aten::histc": Case(
        lambda x: (torch.histc(x, 5), torch.histc(x, 8, -1.0, 1.0), torch.histc(x, 3, 0.5, 0.5)),
        (_g(40), torch.cat([_EDGES, torch.nextafter(_EDGES, _EDGES + 1), torch.nextafter(_EDGES, _EDGES - 1)]),
         torch.full((5,), 2.0)),
        atol=0.0, rtol=0.0,
    ),
    "aten::linalg_eigh": Case(
        # One batch: random symmetric, diagonal (nothing to rotate), and only the upper triangle
        # filled in (UPLO="U" must mirror it). One Jacobi run: the graph is large; eigvalsh is
        # the same function without vectors (checked end to end in docs/rewrites.md).
        lambda a: _eigh_unsigned(a),
        (torch.cat([_sym(3, 2), torch.diag(torch.tensor([3.0, -1.0, 2.0]))[None], _sym(3, seed=2).triu()]),),
    ),
    "aten::linalg_solve_triangular": Case(
        lambda a: (torch.linalg.solve_triangular(a.triu(), a.mT, upper=True),
                   torch.linalg.solve_triangular(a, a[..., :2, :] * 2, upper=False, left=False),
                   torch.linalg.solve_triangular(a, a.mT, upper=False, unitriangular=True),
                   torch.triangular_solve(a[..., :1].exp(), a, upper=True)[0]),
        (_g(2, 3, 3, seed=6) + 3 * torch.eye(3),),
    ),
    "aten::_transformer_encoder_layer_fwd": Case(
        lambda x: (_encoder_layer(x, False, False, None), _encoder_layer(x, True, True, 1),
                   _encoder_layer(x, False, False, 0), _encoder_layer(x, True, False, 2)),
        (_g(2, 5, 8, seed=3),),
    ),
    "aten::_native_multi_head_attention": Case(_multi_head_attention, (_g(2, 4, 8, seed=4),)),
    "aten::cholesky_solve": Case(
        lambda a: (torch.cholesky_solve(a[..., :2] * 2, torch.linalg.cholesky(a)),
                   torch.cholesky_solve(a, torch.linalg.cholesky(a, upper=True), upper=True),
                   torch.cholesky_inverse(torch.linalg.cholesky(a))),
        (_spd(4),),
    ),
    "aten::adaptive_avg_pool3d": Case(
        lambda x: (torch.nn.functional.adaptive_avg_pool3d(x, (2, 3, 2)), torch.nn.functional.adaptive_avg_pool3d(x, 1)),
        (_g(1, 2, 3, 5, 4), _g(2, 1, 2, 2, 7, seed=1)),
    ),
    "aten::adaptive_max_pool3d": Case(
        lambda x: torch.nn.functional.adaptive_max_pool3d(x, (2, 3, 2), return_indices=True),
        (_g(1, 2, 3, 5, 4), _g(2, 1, 2, 4, 7, seed=1)),
    ),
    # Far below -18, where ONNX Runtime's Sigmoid is 0 and Log(Sigmoid(x)) is -inf.
    "aten::log_sigmoid": Case(lambda x: F.logsigmoid(x), (_g(4, 8, scale=60.0), torch.tensor([-200.0, -20.0, 0.0, 30.0]))),
    # A NaN in some slices: PyTorch's amax/amin give NaN there, ONNX Runtime's ReduceMax skips it.
    "aten::amax": Case(lambda x: (torch.amax(x, dim=(1, 2)), torch.amax(x, -1, keepdim=True), torch.amax(x)),
                       (torch.tensor([[[1.0, NAN], [3.0, -2.0]], [[0.5, 4.0], [-INF, 2.0]]]),)),
    "aten::amin": Case(lambda x: (torch.amin(x, dim=0), torch.amin(x, dim=(-1,), keepdim=True)),
                       (torch.tensor([[1.0, NAN, -3.0], [2.0, 0.0, INF]]),)),
    # A NaN first, later and twice in a slice; a slice without NaN; the flattened form.
    "aten::argmax": Case(lambda x: (torch.argmax(x, 1), torch.argmin(x, 1, keepdim=True), torch.argmax(x),
                                    torch.argmin(x, 0)),
                         (torch.tensor([[NAN, 1.0, 5.0], [0.3, NAN, 9.0], [2.0, -1.0, 4.0], [1.0, NAN, NAN]]),)),
    # NaN, both zeros, infinities: torch.sign(nan) is 0 where ONNX's Sign gives NaN.
    "aten::sign": Case(lambda x: torch.sign(x), (torch.tensor([NAN, -0.0, 0.0, -INF, INF, -2.5, 3.0]),),
                       atol=0.0, rtol=0.0),
    "aten::rrelu_with_noise": Case(
        lambda x: (torch.nn.functional.rrelu(x, 0.1, 0.3, training=False), _RRELU(x)),
        (_g(3, 4), torch.tensor([-INF, -1.0, -0.0, 0.0, 2.0, NAN])),
    ),
    # Even and odd lengths, a sample spacing; added to the input so the case has one.
    "aten::fft_rfftfreq": Case(lambda x: (x[:5] + torch.fft.rfftfreq(8), x[:4] + torch.fft.rfftfreq(7, d=0.25)),
                               (_g(9),), atol=0.0, rtol=0.0),
    "aten::fft_fftfreq": Case(lambda x: (x[:8] + torch.fft.fftfreq(8), x[:7] + torch.fft.fftfreq(7, d=0.5)),
                              (_g(9),), atol=0.0, rtol=0.0),
    # Rows: y, x. Both signs of zero on both axes, each quadrant, and a broadcast y.
    "aten::atan2": Case(lambda t: (torch.atan2(t[0], t[1]), torch.atan2(t[0, :1], t[1]), torch.atan2(t[1], t[0])),
                        (torch.tensor([[0.0, -0.0, 1.0, -1.0, 0.0, -0.0, 2.0, -3.0, 0.0, -0.0, 0.5, -0.5],
                                       [-1.0, -1.0, -2.0, -2.0, 0.0, 0.0, 0.0, 0.0, -0.0, -0.0, 3.0, 4.0]]),)),
    "aten::angle": Case(lambda x: (torch.angle(torch.complex(x, torch.zeros_like(x))),
                                   torch.angle(torch.complex(x, x.flip(-1))), torch.angle(x)),
                        (torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0, -1.0]),)),
    "aten::roll": Case(lambda x: (x.roll(3, -1), x.roll(-7, 0), x.roll((1, -2), (0, 1)), x.roll(5)),
                       (_g(4, 6),)),
    "aten::hamming_window": Case(
        lambda x: (x[:8] * torch.hamming_window(8), x[:5] * torch.hamming_window(5, periodic=False),
                   x[:6] * torch.hamming_window(6, True, 0.5), x[:7] * torch.hamming_window(7, False, 0.6, 0.3),
                   x[:1] * torch.hamming_window(1)),
        (torch.ones(8), _g(8)),
        atol=1e-6,
    ),
    "aten::pdist": Case(lambda x: (torch.pdist(x), torch.pdist(x, p=3.0)), (_g(5, 3), _g(2, 4, seed=8))),
}


class _Calls(torch.nn.Module):
    def __init__(self, call: Callable[..., Any]) -> None:
        super().__init__()
        self.call = call

    def forward(self, *xs: torch.Tensor) -> Any:
        return tuple(self.call(x) for x in xs)


def _compile(rewrite: Rewrite) -> dict[str, Any]:
    scope: dict[str, Any] = {"torch": torch, "math": math}
    exec(compile(rewrite.source, f"<rewrite {rewrite.op}>", "exec"), scope)  # noqa: S102
    return scope


def _table(rewrite: Rewrite) -> dict[Any, Callable[..., Any]]:
    scope = _compile(rewrite)
    table = {}
    for target in rewrite.targets:
        namespace, name, overload = target.split(".")
        table[getattr(getattr(getattr(torch.ops, namespace), name), overload)] = scope[rewrite.function_for(target)]
    return table


def _targets(program: Any) -> set[str]:
    return {str(n.target) for n in program.graph.nodes if n.op == "call_function"}


def _flat(value: Any) -> list[torch.Tensor]:
    leaves, _ = torch.utils._pytree.tree_flatten(value)
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _close(actual: np.ndarray, expected: np.ndarray, case: Case) -> str | None:
    if actual.shape != expected.shape:
        return f"shape {actual.shape} != {expected.shape}"
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return f"NaN positions differ: {a} vs {e}"
    finite = np.isfinite(e)
    if not np.array_equal(a[~finite & ~np.isnan(e)], e[~finite & ~np.isnan(e)]):
        return f"infinities differ: {a} vs {e}"
    err = np.abs(a[finite] - e[finite])
    bound = case.rtol * np.abs(e[finite]) + (0.0 if case.relative_only else case.atol)
    if err.size and not np.all(err <= bound):
        worst = int(np.argmax(err - bound))
        return f"max error {err[worst]:.3g} at expected {e[finite][worst]:.6g} (bound {bound[worst]:.3g})"
    return None


def _problems(rewrite: Rewrite, case: Case, got: list[np.ndarray]) -> list[str]:
    """Where the ONNX Runtime outputs of one case differ from PyTorch's own kernel."""
    with torch.no_grad():
        expected_per_input = [_flat(case.call(x)) for x in case.inputs]
    position = 0
    problems = []
    for index, expected in enumerate(expected_per_input):
        for k, reference in enumerate(expected):
            actual = got[position]
            position += 1
            if case.compare is not None and k not in case.compare:
                continue
            problem = _close(actual, reference.numpy(), case)
            if problem:
                problems.append(f"{rewrite.op} input {index} output {k}: {problem}")
    return problems


def _output_count(case: Case) -> int:
    with torch.no_grad():
        return sum(len(_flat(case.call(x))) for x in case.inputs)


class _Family(torch.nn.Module):
    """Every case of one family in one model: one export per family, not per rewrite."""

    def __init__(self, cases: list[Case]) -> None:
        super().__init__()
        self.cases = cases

    def forward(self, *xs: torch.Tensor) -> Any:
        outputs, start = [], 0
        for case in self.cases:
            outputs.append(tuple(case.call(x) for x in xs[start : start + len(case.inputs)]))
            start += len(case.inputs)
        return tuple(outputs)


def test_every_rewrite_has_metadata_a_snippet_that_parses_and_a_test_case() -> None:
    ops = [r.op for r in REWRITES]
    assert len(ops) == len(set(ops)) >= 20
    for rewrite in REWRITES:
        assert rewrite.exactness in Exactness and rewrite.error and rewrite.limits
        assert rewrite.op.startswith("aten::") and rewrite.targets
        tree = ast.parse(rewrite.snippet())
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert rewrite.function in defined and set(rewrite.functions) <= defined
        assert {function for _, function in rewrite.calls} <= defined
        # An op torch.export cannot capture has its cases in tests/test_first_seen_batch112.py
        # (its call patched while the TorchScript exporter traces the model).
        assert rewrite.op in CASES or not rewrite.captured, f"{rewrite.op} has no test case"


def test_failure_spellings_find_the_rewrite() -> None:
    assert [r.op for r in find_rewrites("aten::cumprod")] == ["aten::cumprod"]
    assert [r.op for r in find_rewrites("aten.searchsorted.Tensor")] == ["aten::searchsorted"]
    assert "aten::erfinv" in [r.op for r in find_rewrites("prims::erf_inv")]
    assert "aten::linalg_inv" in [r.op for r in find_rewrites("aten::linalg_inv_ex")]
    assert "aten::median.dim" in [r.op for r in find_rewrites("aten::median")]
    assert "aten::adaptive_max_pool2d" in [r.op for r in find_rewrites("adaptive_max_pool2d")]
    # dynamo names the kernel it reached, not the Python API's op
    assert [r.op for r in find_rewrites("aten::_linalg_eigh")] == ["aten::linalg_eigh"]
    assert [r.op for r in find_rewrites("aten::rrelu_with_noise_functional")] == ["aten::rrelu_with_noise"]
    assert [r.op for r in find_rewrites("aten::_adaptive_avg_pool3d")] == ["aten::adaptive_avg_pool3d"]
    assert find_rewrites("aten::relu") == () and find_rewrites(None) == ()
    # Offered for a mismatch only: an opset-8 upsample failure is fixed by a newer opset.
    assert all(r.mismatch_only for r in find_rewrites("aten::upsample_nearest2d"))


FAMILIES = sorted({r.family for r in REWRITES})


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_rewrites_of_a_family_export_and_match_pytorch_in_onnx_runtime(family: str, tmp_path: Any) -> None:
    # One export per family (the fixed cost of an export and a session is most of a small case).
    import onnxruntime as ort

    rewrites = [r for r in REWRITES if r.family == family and r.captured]
    cases = [CASES[r.op] for r in rewrites]
    inputs = tuple(x for case in cases for x in case.inputs)
    exported = torch.export.export(_Family(cases).eval(), inputs)
    table: dict[Any, Callable[..., Any]] = {}
    # In-place calls (Tensor.uniform_) reach the table as their functional overloads.
    called = _targets(exported) | _targets(exported.run_decompositions({}))
    for rewrite in rewrites:
        assert called & set(rewrite.targets), f"the test model never calls {rewrite.targets}"
        table.update(_table(rewrite))
    program = exported.run_decompositions(table)
    for rewrite in rewrites:
        # A rewrite that returns NotImplemented for some arguments keeps the op there on
        # purpose (scatter_reduce's modes other than mean): its own test checks that.
        if "return NotImplemented" not in rewrite.source:
            assert not _targets(program) & set(rewrite.targets), f"{rewrite.op} still in the program"
    path = tmp_path / "model.onnx"
    torch.onnx.export(program, inputs, str(path), dynamo=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert len(names) == len(inputs), f"inputs {names} for {len(inputs)} tensors"
    got = session.run(None, {name: x.numpy() for name, x in zip(names, inputs, strict=True)})
    problems, position = [], 0
    for rewrite, case in zip(rewrites, cases, strict=True):
        count = _output_count(case)
        problems += _problems(rewrite, case, got[position : position + count])
        position += count
    assert position == len(got)
    assert not problems, "; ".join(problems)
    if any(r.exactness is Exactness.DISTRIBUTION for r in rewrites):
        _assert_same_distribution(_Family(cases).eval(), inputs, session, names)


def _assert_same_distribution(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], session: Any,
                              names: list[str]) -> None:
    """Random rewrites: over many runs, ONNX Runtime's outputs are distributed as eager PyTorch's."""
    import torch.utils._pytree as pytree

    from onnxdoctor.worker.randomness import compare_in_distribution

    feeds = {name: x.numpy() for name, x in zip(names, inputs, strict=True)}

    def run_torch(seed: int) -> list[Any]:
        torch.manual_seed(seed)
        with torch.no_grad():
            return [t.numpy() for t in pytree.tree_leaves(model(*inputs))]

    drawn = compare_in_distribution(run_torch, lambda: session.run(None, feeds), 60.0, 1e-4, 1e-3)
    assert drawn["matched"] is True, drawn["message"]


def test_scatter_reduce_rewrite_replaces_mean_and_leaves_the_modes_the_exporter_maps() -> None:
    # The dynamo exporter maps sum/prod/amax/amin correctly and gets "mean" wrong: the rewrite
    # returns NotImplemented for the others, so run_decompositions keeps them as they are.
    (rewrite,) = find_rewrites("aten::scatter_reduce.two")
    model = _Calls(lambda x: (x.scatter_reduce(0, _IDX, x[:2], "amax"), x.scatter_reduce(0, _IDX, x[:2], "mean")))
    program = torch.export.export(model.eval(), (_g(3, 4),)).run_decompositions(_table(rewrite))
    modes = [n.args[4] for n in program.graph.nodes if str(n.target) == "aten.scatter_reduce.two"]
    assert modes == ["amax"]
    x = _g(3, 4, seed=1)
    assert torch.allclose(program.module()(x)[0][1], model(x)[0][1])


@pytest.mark.slow
def test_adaptive_avg_pool_rewrite_computes_its_windows_at_run_time(tmp_path: Any) -> None:
    # Windows from the input's symbolic size: ceil written without a negative floor division, which
    # the dynamo exporter turns into ONNX's truncating Div (a window one short at other sizes).
    import onnxruntime as ort
    from torch.export import Dim

    (rewrite,) = find_rewrites("aten::adaptive_avg_pool2d")

    class Pyramid(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (torch.nn.functional.adaptive_avg_pool2d(x, (3, 6)),
                    torch.nn.functional.adaptive_avg_pool2d(x, (None, 1)))

    example = torch.randn(2, 3, 12, 12)
    program = torch.export.export(Pyramid(), (example,), dynamic_shapes=({2: Dim.AUTO, 3: Dim.AUTO},))
    program = program.run_decompositions(_table(rewrite))
    path = tmp_path / "pyramid.onnx"
    torch.onnx.export(program, (example,), str(path), dynamo=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for size in ((12, 12), (16, 20), (9, 13)):
        x = torch.randn(2, 3, *size)
        got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        for expected, actual in zip(Pyramid()(x), got, strict=True):
            assert expected.shape == actual.shape and np.allclose(expected.numpy(), actual, atol=1e-5), size
