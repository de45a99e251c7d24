"""Tensors quantized inside forward() (`torch.quantize_per_tensor`), then indexed or reshaped.

Neither exporter follows a quantized tensor through ordinary ops: the TorchScript exporter has no
quantized Gather ("expected the output of onnx::Gather to be a quantized tensor", pytorch#126065:
product-quantization codebooks looked up by code) and the dynamo exporter has no quantized dtype
("KeyError: torch.qint8"). Indexing, slicing and concatenation move values without changing them,
so on the float values the quantization gives (fake quantization: QuantizeLinear then
DequantizeLinear) they give exactly what dequantizing the quantized result gives
(recipe.EagerExport.fake_quantized). Quantized modules are fixes/quantized.py's.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.dynamic_shapes import torchscript_steps
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import EagerExport, Recipe

CODES = ("OD201", "OD202", "OD299")

_QUANTIZED = re.compile(r"to be a quantized tensor|\bq(?:u?int8|int32)\b|\bQU?Int(?:8|32)\b|quantize_per_(?:tensor|channel)")

_SNIPPET = """\
# A quantized tensor is refused by the exporters as soon as forward() indexes or reshapes it.
# Quantize to the same grid in float (fake quantization), and drop the dequantize after it:
q = torch.fake_quantize_per_tensor_affine(x, scale, zero_point, -128, 127)  # was quantize_per_tensor(..., torch.qint8)
rows = q[codes]                                                             # was dequantize(q_x[codes])
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The TorchScript export with forward()'s quantization done in float on the same grid."""
    if ctx.target_kind != "script" or not _QUANTIZED.search(f"{ctx.export_error} {finding.message}"):
        return []
    if ctx.facts_of(Stage.LOAD).get("quantized_modules"):
        return []  # quantized modules: their float rebuild (fixes/quantized.py)
    return [Fix(
        kind="fake_quantized",
        title="Quantize in float on the same grid (fake quantization) where forward() calls quantize_per_tensor",
        snippet=_SNIPPET,
        applicability=Applicability.SAFE,
        cost=("the same values: QuantizeLinear/DequantizeLinear round and clip as PyTorch does; the ops between "
              "run in float instead of on int8 storage"),
        recipe=Recipe("fake_quantized", torchscript_steps(ctx, EagerExport(fake_quantized=True)), isolated=True),
    )]
