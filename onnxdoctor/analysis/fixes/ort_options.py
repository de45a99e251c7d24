"""A QDQ model whose numbers ONNX Runtime's QDQ fusion changes: run the pairs as written.

ONNX Runtime's graph optimizer fuses DequantizeLinear -> op -> QuantizeLinear into an integer
kernel (QGemm, QLinearMatMul, ...). Those kernels round differently, and on x86 CPUs without VNNI
uint8 x int8 products can saturate, so a fake-quantized model (QAT `fake_quantize_*`, or a float
model rounding to fixed grids) that matches PyTorch with the optimizer off can differ by several
quantization steps with it on. The session configuration entry `session.disable_quant_qdq` turns
off only that fusion: every other optimization stays, the Q/DQ pairs run as the ONNX model writes
them (in float), and the model file is unchanged. Verified like any fix: the same export, run
with that entry, compared with PyTorch.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import Recipe, SessionConfig

CODES = ("OD601", "OD603")

DISABLE_QDQ_FUSION = (("session.disable_quant_qdq", "1"),)

SNIPPET = '''import onnxruntime

options = onnxruntime.SessionOptions()
# Run QuantizeLinear/DequantizeLinear as written: ONNX Runtime's QDQ fusion into integer kernels
# rounds differently from the model (and from PyTorch). Other optimizations stay on.
options.add_session_config_entry("session.disable_quant_qdq", "1")
session = onnxruntime.InferenceSession("model.onnx", options, providers=["CPUExecutionProvider"])
'''


def has_qdq_pairs(op_types: list[str] | tuple[str, ...]) -> bool:
    """Whether a graph (its `ai.onnx::Op` list) holds Q/DQ pairs ONNX Runtime would fuse, and no
    integer QLinear* nodes (those the entry does not change)."""
    names = {str(t).rsplit("::", 1)[-1] for t in op_types}
    return {"QuantizeLinear", "DequantizeLinear"} <= names and not any(n.startswith("QLinear") for n in names)


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Disable ONNX Runtime's QDQ fusion for a mismatching model holding Q/DQ pairs."""
    export = next((o.facts for o in ctx.outcomes if o.stage is Stage.EXPORT), {})
    if finding.stage is not Stage.PARITY or not has_qdq_pairs(export.get("op_types") or ()):
        return []
    return [Fix(
        kind="ort_options",
        title="Run the model with ONNX Runtime's QDQ fusion off (session.disable_quant_qdq = 1)",
        snippet=SNIPPET,
        applicability=Applicability.SAFE,
        cost=("the Q/DQ pairs run in float as written instead of ONNX Runtime's fused integer kernels: "
              "slower where those kernels would have been used; the model file is unchanged, every "
              "session that runs it must set the entry"),
        recipe=Recipe("ort_options", (SessionConfig(DISABLE_QDQ_FUSION),)),
    )]
