"""Nearest-neighbour upsampling as index gathers, with PyTorch's own source indices.

ONNX Runtime's Resize (nearest, asymmetric, floor) derives each source index from a scale it
computes itself, and at ratios such as 26 -> 64 picks the neighbouring element at some positions
(microsoft/onnxruntime#12098). PyTorch's index is floor(dst * scale) in float32, with scale =
in / out (or 1 / scale_factor when one was given), clamped to in - 1: computed here the same way
and applied with index_select along each resized axis, so no Resize is left to round otherwise.
"""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

UPSAMPLE_NEAREST = r'''
def _nearest_source(in_size, out_size, scale):
    """PyTorch's source index of each output position along one axis (aten's nearest_idx)."""
    # torch.full, not torch.tensor: a decomposition may not create constant tensors.
    if scale is not None and scale > 0:
        step = torch.full((), 1.0 / scale, dtype=torch.float32)
    else:
        step = torch.full((), float(in_size), dtype=torch.float32) / out_size
    index = torch.floor(torch.arange(out_size, dtype=torch.float32) * step).to(torch.int64)
    return index.clamp(max=in_size - 1)


def _upsample_nearest(input, output_size, scales):
    """Gather along the last len(output_size) axes."""
    axes = len(output_size)
    out = input
    for k in range(axes):
        dim = input.dim() - axes + k
        out = out.index_select(dim, _nearest_source(input.shape[dim], output_size[k], scales[k]))
    return out


def upsample_nearest1d(input, output_size, scales=None):
    """aten::upsample_nearest1d (F.interpolate(mode="nearest") on NCL)."""
    return _upsample_nearest(input, output_size, [scales])


def upsample_nearest2d(input, output_size, scales_h=None, scales_w=None):
    """aten::upsample_nearest2d (F.interpolate(mode="nearest") on NCHW)."""
    return _upsample_nearest(input, output_size, [scales_h, scales_w])


def upsample_nearest3d(input, output_size, scales_d=None, scales_h=None, scales_w=None):
    """aten::upsample_nearest3d (F.interpolate(mode="nearest") on NCDHW)."""
    return _upsample_nearest(input, output_size, [scales_d, scales_h, scales_w])


def upsample_nearest_vec(input, output_size, scale_factors):
    """The .vec overloads: an output size, or scale factors (size = floor(in * scale))."""
    if output_size is not None:
        return _upsample_nearest(input, output_size, [None] * len(output_size))
    axes = len(scale_factors)
    size = [int(math.floor(input.shape[input.dim() - axes + k] * scale_factors[k])) for k in range(axes)]
    return _upsample_nearest(input, size, list(scale_factors))
'''

_ERROR = "none: the same source element as PyTorch at every position (its float32 index formula)"
_LIMITS = ("sizes fixed at export (the indices are computed from the example's sizes); mode='nearest' "
           "only, not 'nearest-exact'")

REWRITES = tuple(
    Rewrite(
        op=f"aten::upsample_nearest{rank}d",
        family="resize",
        targets=(f"aten.upsample_nearest{rank}d.default", f"aten.upsample_nearest{rank}d.vec"),
        functions=(f"upsample_nearest{rank}d", "upsample_nearest_vec"),
        function=f"upsample_nearest{rank}d",
        source=UPSAMPLE_NEAREST,
        exactness=Exactness.EXACT,
        error=_ERROR,
        limits=_LIMITS,
        mismatch_only=True,
    )
    for rank in (1, 2, 3)
)
