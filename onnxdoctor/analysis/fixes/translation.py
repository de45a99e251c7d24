"""Translations of aten ops that the dynamo exporter maps to ONNX with other numbers (OD601), and
that the TorchScript exporter does not map at all (OD202), given to the export as its
`custom_translation_table`.

Antialiased interpolation (`F.interpolate(..., antialias=True)`, `_upsample_bilinear2d_aa` and
`_upsample_bicubic2d_aa`) called with `scale_factor`: PyTorch maps output coordinates to input ones
by that scale, and widens the antialiasing filter by it. The exporter's translation passes only the
output size to Resize, whose ratio to the input size is another scale whenever size * scale is not
a whole number (pytorch#157220, DINOv2's position-embedding interpolation): ONNX Runtime then
samples elsewhere. Given the scales instead, ONNX Runtime's antialiased Resize computes PyTorch's
numbers (measured within 2e-6 for scales 0.6 to 2 in bilinear and bicubic).
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import ExportCode, Recipe, UseExporter

CODES = ("OD601", "OD202", "OD299")

ANTIALIASED = ("aten::_upsample_bilinear2d_aa", "aten::_upsample_bicubic2d_aa")

_TRANSLATION = '''\
from onnxscript import opset18 as op


# Antialiased interpolation by scale_factor maps coordinates by that scale, as PyTorch does; the
# exporter's own translation passes only the output size, whose ratio is another scale when
# size * scale is not a whole number (pytorch#157220).
def _antialiased_resize(mode):
    def translate(self, output_size, align_corners, scales_h=None, scales_w=None):
        transform = "align_corners" if align_corners else "pytorch_half_pixel"
        if scales_h is None or scales_w is None:  # called with size=: the size is the scale
            sizes = op.Concat(op.Shape(self, end=2), op.Constant(value_ints=list(output_size)), axis=0)
            return op.Resize(self, None, None, sizes, mode=mode, antialias=1, cubic_coeff_a=-0.5,
                             coordinate_transformation_mode=transform, exclude_outside=1)
        scales = op.Constant(value_floats=[1.0, 1.0, float(scales_h), float(scales_w)])
        return op.Resize(self, None, scales, mode=mode, antialias=1, cubic_coeff_a=-0.5,
                         coordinate_transformation_mode=transform, exclude_outside=1)
    return translate


custom_translation_table = {
    torch.ops.aten._upsample_bilinear2d_aa.default: _antialiased_resize("linear"),
    torch.ops.aten._upsample_bicubic2d_aa.default: _antialiased_resize("cubic"),
}
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The antialiased Resize given PyTorch's scales, for a mismatch or a missing mapping there."""
    if ctx.target_kind != "script" or _antialiased_op(finding, ctx) is None:
        return []
    snippet = ("import torch\n" + _TRANSLATION + "\n"
               "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True,\n"
               "                  custom_translation_table=custom_translation_table)\n")
    return [Fix(
        kind="translation",
        title="Export antialiased interpolation as a Resize given PyTorch's scales (dynamo exporter, "
              "custom_translation_table)",
        snippet=snippet,
        applicability=Applicability.SAFE,
        cost="none at run time: one Resize node as before, with scales instead of sizes; the dynamo exporter",
        recipe=Recipe("translation", (UseExporter("dynamo"),
                                      ExportCode("import torch\n" + _TRANSLATION,
                                                 translation_table="custom_translation_table"))),
    )]


def _antialiased_op(finding: Finding, ctx: FixContext) -> str | None:
    """The antialiased upsampling op the finding is about, by its name or the mismatch's search."""
    names = [finding.op or "", finding.torch_op or "", str(ctx.diverging.get("torch_op") or "")]
    return next((n.split(".")[0] for n in names if n.split(".")[0] in ANTIALIASED), None)
