"""An average pool whose window is computed from the input's size, refused by the TorchScript
exporter (OD299).

Adaptive pooling written with avg_pool2d "for export" (`stride = H // out`, `kernel = H - (out - 1)
* stride`, ultralytics#16391 and many detector necks) exports while the sizes are fixed; once they
are declared dynamic the tracer records the kernel as arithmetic on sizes, and AveragePool's
kernel is an attribute: "Failed to export a node ... because it is not constant". torch.export is
no way out: it bakes the example's kernel into aten.avg_pool2d (its schema takes ints), so the
dynamo export runs at every size and computes the example's windows. The route computes each
window's sum as the difference of two running sums (CumSum, Gather), which takes the kernel and
stride as values: the TorchScript export keeps the sizes dynamic and every window right.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.shapes import pool_kernel_refused
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import LoadCode, Recipe, UseExporter

CODES = ("OD299",)

WINDOWS = '''import torch
import torch.nn.functional as F

_avg_pool2d = F.avg_pool2d


def _pair(value):
    if isinstance(value, (list, tuple)):
        return (value[0], value[0]) if len(value) == 1 else (value[0], value[1])
    return value, value


def _window_sums(x, dim, kernel, step):
    # Each window's sum as the difference of two running sums: kernel and step may be sizes the
    # tracer records as values, which AveragePool's attributes cannot hold.
    count = (x.shape[dim] - kernel) // step + 1
    running = torch.cat([torch.zeros_like(x.narrow(dim, 0, 1)), x.cumsum(dim)], dim)
    starts = torch.arange(count, device=x.device) * step
    return running.index_select(dim, starts + kernel) - running.index_select(dim, starts)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    kh, kw = _pair(kernel_size)
    sh, sw = (kh, kw) if stride is None or (isinstance(stride, (list, tuple)) and not stride) else _pair(stride)
    sized = any(torch.is_tensor(v) for v in (kh, kw, sh, sw))
    if sized and not ceil_mode and divisor_override is None and _pair(padding) == (0, 0):
        return _window_sums(_window_sums(x, -1, kw, sw), -2, kh, sh) / (kh * kw)
    return _avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


# Calls of F.avg_pool2d (nn.AvgPool2d's too) whose window is read from the input's size.
F.avg_pool2d = avg_pool2d
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """avg_pool2d with a size-derived window computed from running sums, where the TorchScript
    exporter refused the window as not constant."""
    if (ctx.target_kind != "script" or ctx.op != "aten::avg_pool2d" or ctx.exporter != "torchscript"
            or not pool_kernel_refused(finding, ctx)):
        return []
    return [Fix(
        kind="sized_pooling",
        title="avg_pool2d's window is computed from the input's size, which AveragePool cannot take: compute "
              "each window's sum from running sums (CumSum and Gather take it as a value), keeping the sizes dynamic",
        snippet=WINDOWS + "\ntorch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False, "
                          "input_names=input_names, dynamic_axes=dynamic_axes)\n",
        applicability=Applicability.SAFE,
        cost="each window's mean is a difference of running sums: float rounding that grows with a row's length "
             "(about 1e-6 of the row's sum for a few hundred values); calls with padding, ceil_mode or a divisor "
             "are left as they were",
        recipe=Recipe("sized_pooling", (LoadCode(WINDOWS), UseExporter("torchscript")), isolated=True),
    )]
