"""A convolution whose group count is a symbolic size (StyleGAN2's modulated convolution folds the
batch into the channels: groups=batch, rosinality/stylegan2-pytorch#322). ONNX's Conv takes
`group` as a fixed attribute, so the dynamo exporter stops at "Unsupported attribute type:
SymbolicTensor" once the batch is declared dynamic (the TorchScript exporter: "convolution for
kernel of unknown shape"). Computed as unfold (fold for the transposed one) and a grouped einsum
under the dynamo exporter, the groups are a tensor dim (recipe.EagerExport.unfolded_convs).
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe, UseExporter

CODES = ("OD299",)

_SYMBOLIC_ATTRIBUTE = re.compile(r"Unsupported attribute type: .*SymbolicTensor")
_CONVOLUTIONS = ("aten::conv2d", "aten::conv_transpose2d", "aten::convolution", "aten::_convolution")

SNIPPET = """\
import torch
import torch.nn.functional as F


# ONNX's Conv takes its group count as a fixed number; with groups=batch and a dynamic batch,
# compute the grouped convolution with the groups as a tensor dim instead (the same sums):
def grouped_conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    n, _, h, w = x.shape
    out_channels, per_group, kh, kw = weight.shape
    columns = F.unfold(x, (kh, kw), dilation=dilation, padding=padding, stride=stride)
    columns = columns.view(n, groups, per_group * kh * kw, -1)
    out = torch.einsum("ngkl,gok->ngol", columns, weight.reshape(groups, out_channels // groups, -1))
    height = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    width = (w + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    out = out.reshape(n, out_channels, height, width)
    return out if bias is None else out + bias.view(1, -1, 1, 1)

# F.conv_transpose2d(x, weight, stride=2, groups=batch): the einsum first, then F.fold.
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The dynamo export with symbolic-group convolutions unfolded."""
    if ctx.target_kind != "script" or (ctx.op or "").split(".")[0] not in _CONVOLUTIONS:
        return []
    text = f"{finding.message} {ctx.export_error}"
    # The TorchScript exporter's form of the same limit: a kernel computed per sample (a dynamic
    # convolution's mixed weights, KernelWarehouse#1) with the batch declared dynamic.
    unknown_kernel = ctx.exporter == "torchscript" and "convolution for kernel of unknown shape" in text
    if not _SYMBOLIC_ATTRIBUTE.search(text) and not unknown_kernel:
        return []
    return [Fix(
        kind="rewrite",
        title="Compute the convolutions whose group count is a symbolic size as unfold/fold and a grouped einsum "
              "(ONNX's Conv takes a fixed group count)",
        snippet=SNIPPET,
        applicability=Applicability.SAFE,
        cost="the same sums in another order (rounding); unfold materializes every patch: memory grows with the "
             "kernel size times the input",
        recipe=Recipe("unfolded_convs", (EagerExport(unfolded_convs=True), UseExporter("dynamo")), isolated=True),
    )]
