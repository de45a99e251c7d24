"""Transposed convolutions given an `output_size`, exported as the full convolution cropped.

`ConvTranspose2d(x, output_size=skip.shape[-2:])` turns the wanted size into an `output_padding`,
a Python number the TorchScript tracer fixes at the example's sizes (the decoder's Concat with its
skip connection then fails at other sizes) and the dynamo exporter cannot write as an attribute
("Unsupported attribute type: list"). The recipe computes the full transposed convolution
(padding and output_padding 0), pads it by what output_padding may add (less than the stride or
the dilation), and crops `padding` off the start and the wanted size from there: the same sums,
with the crop following the sizes at run time. Outside an export every call is PyTorch's.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

# OD802/OD803/OD210: the tracer's fixed output_padding; OD299/OD204: the dynamo exporter's refusal.
CODES = ("OD204", "OD210", "OD299", "OD802", "OD803", "OD804")

CROPPED = '''import torch
import torch.nn.functional as F

_TRANSPOSED = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _cropped(forward):
    # With output_size: the full transposed convolution cropped to it while exporting, so the
    # crop follows the sizes at run time where output_padding would be the example's number.
    def cropped_forward(self, input, output_size=None):
        exporting = torch.jit.is_tracing() or torch.compiler.is_compiling()
        if output_size is None or not exporting or self.padding_mode != "zeros":
            return forward(self, input, output_size)
        k = len(self.kernel_size)
        sizes = list(output_size)[-k:]
        full = _TRANSPOSED[k](input, self.weight, None, self.stride, 0, 0, self.groups, self.dilation)
        # output_padding is less than the stride or the dilation: rows past the full output hold
        # only the bias, as PyTorch's do.
        spare = [max(s, d) - 1 for s, d in zip(self.stride, self.dilation)]
        full = F.pad(full, [p for extra in reversed(spare) for p in (0, extra)])
        for d in range(k):
            full = full.narrow(2 + d, self.padding[d], sizes[d])
        return full if self.bias is None else full + self.bias.reshape(1, -1, *[1] * k)

    cropped_forward.__wrapped__ = forward
    return cropped_forward


for layer in (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d):
    if not hasattr(layer.forward, "__wrapped__"):
        layer.forward = _cropped(layer.forward)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The cropped full transposed convolution, for a model that passes output_size."""
    convs = ctx.facts_of(Stage.LOAD).get("sized_transposed_convs") or []
    if ctx.target_kind != "script" or not convs:
        return []
    shown = ", ".join(convs[:3]) + (" ..." if len(convs) > 3 else "")
    return [Fix(
        kind="cropped_conv_transpose",
        title=f"Export the transposed convolutions given output_size ({shown}) as the full convolution "
              "cropped to that size at run time",
        snippet=CROPPED + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.SAFE,
        cost="a ConvTranspose over the full output, a Pad and a Slice per spatial dim: the full output is "
             "at most a kernel's width larger than the cropped one",
        recipe=Recipe("cropped_conv_transpose", (LoadCode(CROPPED),), isolated=True),
    )]
