"""Pooling: adaptive_max_pool1d/2d with output sizes that do not divide the input; adaptive
average pooling whose input sizes are dynamic (the exporters fix the windows at the example's
sizes, or refuse); avg_pool2d's divisor_override, which both exporters drop."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

ADAPTIVE_MAX_POOL2D = r'''
def adaptive_max_pool2d(x, output_size):
    """F.adaptive_max_pool2d for any sizes: a max over columns, then over rows, per window."""
    height, width = x.shape[-2], x.shape[-1]
    out_h, out_w = output_size
    def window(i, size, out):
        return (i * size) // out, ((i + 1) * size + out - 1) // out  # floor start, ceil end
    def nan_max(part, dim):
        # torch's max is NaN where the window holds one; ONNX Runtime's ReduceMax skips NaN.
        return torch.where(part.isnan().any(dim), torch.full_like(part.amax(dim), float("nan")), part.amax(dim))

    def nan_argmax(part, dim, keepdim=False):
        # torch points at the window's (first) NaN: NaN ranked above every number.
        return torch.where(part.isnan(), torch.full_like(part, float("inf")), part).argmax(dim, keepdim=keepdim)
    column_values, column_index = [], []
    for j in range(out_w):
        start, end = window(j, width, out_w)
        part = x[..., :, start:end]
        column_values.append(nan_max(part, -1))
        column_index.append(nan_argmax(part, -1) + start)
    columns = torch.stack(column_values, -1)  # [..., H, out_w]
    columns_at = torch.stack(column_index, -1)
    values, indices = [], []
    for i in range(out_h):
        start, end = window(i, height, out_h)
        part = columns[..., start:end, :]
        row = nan_argmax(part, -2, keepdim=True)  # the first row holding the window's maximum
        values.append(nan_max(part, -2))
        column = torch.gather(columns_at[..., start:end, :], -2, row).squeeze(-2)
        indices.append((row.squeeze(-2) + start) * width + column)
    return torch.stack(values, -2), torch.stack(indices, -2)


def adaptive_max_pool1d(x, output_size):
    """F.adaptive_max_pool1d: the 2-d version on a height of 1 (its flat indices are columns)."""
    values, indices = adaptive_max_pool2d(x.unsqueeze(-2), (1, output_size[0]))
    return values.squeeze(-2), indices.squeeze(-2)
'''

ADAPTIVE_AVG_POOL2D = r'''
def adaptive_avg_pool2d(x, output_size):
    """F.adaptive_avg_pool2d for input sizes known only at run time: torch's windows (floor start,
    ceil end) computed from the input's size, averaged over columns, then over rows."""
    def pooled(x, dim, out):
        size = x.shape[dim]
        if not isinstance(out, int):
            # (None, 1) keeps a dim: its output size is the input's own (symbolic) size.
            return x if out == size else NotImplemented
        parts = []
        for i in range(out):
            # ceil without a negative floor division: ONNX's integer Div truncates toward zero.
            start, end = (i * size) // out, ((i + 1) * size + out - 1) // out
            parts.append(x.narrow(dim, start, end - start).mean(dim, keepdim=True))
        return parts[0] if out == 1 else torch.cat(parts, dim)
    columns = pooled(x, -1, output_size[1])
    if columns is NotImplemented:
        return NotImplemented
    return pooled(columns, -2, output_size[0])
'''

AVG_POOL2D_DIVISOR = r'''
def _pair(value, default=None):
    """An int or a list of one or two ints as (height, width); an empty list is `default`."""
    if isinstance(value, int):
        return value, value
    if len(value) == 0:
        return default
    return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])


def _pooled_size(size, kernel, stride, pad, ceil_mode):
    """torch's pooling output size: the last window starts inside the input or its left padding."""
    out = (size + 2 * pad - kernel + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def avg_pool2d_divisor(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                       divisor_override=None):
    """F.avg_pool2d(..., divisor_override=d): each window's sum (zero padding counts as zeros) over
    d. The exporters write an AveragePool without it; without an override the op is left alone."""
    if divisor_override is None:
        return NotImplemented
    (kh, kw), (ph, pw) = _pair(kernel_size), _pair(padding)
    sh, sw = _pair(stride, (kh, kw))
    height, width = x.shape[-2], x.shape[-1]
    out_h = _pooled_size(height, kh, sh, ph, ceil_mode)
    out_w = _pooled_size(width, kw, sw, pw, ceil_mode)
    # Zero padding on the left as torch pads, and on the right as far as the last window reaches
    # (ceil_mode's last window may pass the padding: torch sums what is there, zeros add nothing).
    need_h, need_w = (out_h - 1) * sh + kh, (out_w - 1) * sw + kw
    padded = torch.nn.functional.pad(x, (pw, max(0, need_w - width - pw), ph, max(0, need_h - height - ph)))
    padded = padded[..., :need_h, :need_w]
    sums = torch.nn.functional.avg_pool2d(padded, (kh, kw), (sh, sw)) * (kh * kw)
    return sums / divisor_override
'''

REWRITES = (
    Rewrite(
        op="aten::adaptive_avg_pool2d",
        family="pooling",
        targets=("aten.adaptive_avg_pool2d.default", "aten._adaptive_avg_pool2d.default"),
        function="adaptive_avg_pool2d",
        source=ADAPTIVE_AVG_POOL2D,
        exactness=Exactness.ROUNDING,
        error="each window's mean: float rounding of its sum, in another order than torch's kernel",
        limits="output sizes fixed (or None, keeping the input's); the graph grows as out_h + out_w slices",
    ),
    Rewrite(
        op="aten::avg_pool2d",
        family="pooling",
        targets=("aten.avg_pool2d.default",),
        function="avg_pool2d_divisor",
        source=AVG_POOL2D_DIVISOR,
        exactness=Exactness.ROUNDING,
        error="each window's mean times its area, then over the divisor: float rounding of the sum",
        limits="static input height and width; only calls with divisor_override (the others export "
        "as they are)",
        mismatch_only=True,
    ),
    Rewrite(
        op="aten::adaptive_max_pool2d",
        family="pooling",
        targets=("aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool1d.default"),
        functions=("adaptive_max_pool2d", "adaptive_max_pool1d"),
        function="adaptive_max_pool2d",
        source=ADAPTIVE_MAX_POOL2D,
        exactness=Exactness.EXACT,
        error="same values; indices name the first maximum in row-major order, as torch's CPU "
        "kernel does",
        limits="static input height and width; the graph grows as out_h + out_w slices; a window "
        "holding NaN gives NaN and the first NaN's index, as torch's does (a +inf before it in "
        "the same window takes the index instead)",
    ),
)
