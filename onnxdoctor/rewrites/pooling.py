"""Pooling: adaptive_max_pool1d/2d with output sizes that do not divide the input."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

ADAPTIVE_MAX_POOL2D = r'''
def adaptive_max_pool2d(x, output_size):
    """F.adaptive_max_pool2d for any sizes: a max over columns, then over rows, per window."""
    height, width = x.shape[-2], x.shape[-1]
    out_h, out_w = output_size
    def window(i, size, out):
        return (i * size) // out, -((-(i + 1) * size) // out)  # floor start, ceil end
    column_values, column_index = [], []
    for j in range(out_w):
        start, end = window(j, width, out_w)
        part = x[..., :, start:end]
        column_values.append(part.amax(-1))
        column_index.append(part.argmax(-1) + start)
    columns = torch.stack(column_values, -1)  # [..., H, out_w]
    columns_at = torch.stack(column_index, -1)
    values, indices = [], []
    for i in range(out_h):
        start, end = window(i, height, out_h)
        part = columns[..., start:end, :]
        row = part.argmax(-2, keepdim=True)  # the first row holding the window's maximum
        values.append(part.amax(-2))
        column = torch.gather(columns_at[..., start:end, :], -2, row).squeeze(-2)
        indices.append((row.squeeze(-2) + start) * width + column)
    return torch.stack(values, -2), torch.stack(indices, -2)


def adaptive_max_pool1d(x, output_size):
    """F.adaptive_max_pool1d: the 2-d version on a height of 1 (its flat indices are columns)."""
    values, indices = adaptive_max_pool2d(x.unsqueeze(-2), (1, output_size[0]))
    return values.squeeze(-2), indices.squeeze(-2)
'''

REWRITES = (
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
        limits="static input height and width; the graph grows as out_h + out_w slices; NaN "
        "inside a window is not propagated the way torch does",
    ),
)
