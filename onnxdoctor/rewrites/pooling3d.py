"""Volumetric adaptive pooling with output sizes that do not divide the input."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

WINDOW = r'''
def _window(i, size, out):
    """torch's adaptive window i of `out` over `size`: floor start, ceil end."""
    return (i * size) // out, -((-(i + 1) * size) // out)
'''

ADAPTIVE_AVG_POOL3D = WINDOW + r'''

def adaptive_avg_pool3d(x, output_size):
    """F.adaptive_avg_pool3d: the mean of each window, taken along W, then H, then D (the window
    is a box, so the mean of the means is the box's mean)."""
    for axis, out in zip((-1, -2, -3), reversed(list(output_size))):
        size = x.shape[axis]
        parts = []
        for i in range(out):
            start, end = _window(i, size, out)
            parts.append(x.narrow(axis, start, end - start).mean(axis, keepdim=True))
        x = torch.cat(parts, axis)
    return x
'''

ADAPTIVE_MAX_POOL3D = WINDOW + r'''

def adaptive_max_pool3d(x, output_size):
    """F.adaptive_max_pool3d(..., return_indices=True): per window the maximum and its flat index
    d * H * W + h * W + w, taken along W, then H, then D, carrying each stage's positions."""
    depth, height, width = x.shape[-3], x.shape[-2], x.shape[-1]
    out_d, out_h, out_w = output_size
    values, flat = x, None
    for axis, out, size, stride in ((-1, out_w, width, 1), (-2, out_h, height, width),
                                    (-3, out_d, depth, height * width)):
        parts, where = [], []
        for i in range(out):
            start, end = _window(i, size, out)
            part = values.narrow(axis, start, end - start)
            best = part.argmax(axis, keepdim=True)  # the first maximum along this axis
            parts.append(part.amax(axis, keepdim=True))
            position = (best + start) * stride
            if flat is not None:
                position = position + torch.gather(flat.narrow(axis, start, end - start), axis, best)
            where.append(position)
        values, flat = torch.cat(parts, axis), torch.cat(where, axis)
    return values, flat
'''

REWRITES = (
    Rewrite(
        op="aten::adaptive_avg_pool3d",
        family="pooling",
        targets=("aten._adaptive_avg_pool3d.default", "aten.adaptive_avg_pool3d.default"),
        function="adaptive_avg_pool3d",
        source=ADAPTIVE_AVG_POOL3D,
        exactness=Exactness.ROUNDING,
        error="the same means, summed axis by axis (rounding only)",
        limits="the graph holds one slice per output position along each axis (fine for output "
        "sizes up to a few dozen)",
        reported_as=("aten::_adaptive_avg_pool3d",),
    ),
    Rewrite(
        op="aten::adaptive_max_pool3d",
        family="pooling",
        targets=("aten.adaptive_max_pool3d.default",),
        function="adaptive_max_pool3d",
        source=ADAPTIVE_MAX_POOL3D,
        exactness=Exactness.EXACT,
        error="same values; with ties the index can name another equal element",
        limits="NaN inside a window is not propagated as torch does (ArgMax/ReduceMax ignore it "
        "differently); one slice per output position along each axis",
    ),
)
