"""A quantized PyTorch model: export its float rebuild, quantized the way the PyTorch model is.

Neither exporter takes PyTorch's quantized modules (`quantized::linear_dynamic`, packed
parameters torch.export cannot flatten, quantized tensors a symbolic refuses), and where the
TorchScript exporter does write QLinear* nodes, ONNX Runtime's integer kernels round differently
(OD601). The route is the same for every kind of torch quantization (eager `prepare`/`convert`,
FX `convert_fx`, `quantize_dynamic`): rebuild the float modules from the dequantized weights
(`onnxdoctor.worker.dequantize.float_model_of`), then

- a dynamically quantized model: export the float rebuild and quantize the ONNX file with
  `onnxruntime.quantization.quantize_dynamic` (activations quantized at run time, as PyTorch does);
- a statically quantized one: the rebuild rounds each activation to the PyTorch model's own
  (scale, zero point) grid with fake quantization, which exports as QuantizeLinear /
  DequantizeLinear: no recalibration, the same clipping as the PyTorch model.

Either is compared with the quantized PyTorch model at a tolerance stated for quantization.
Parts the rebuild does not know (a quantized module class or FX op outside its table) get no fix.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.ort_options import DISABLE_QDQ_FUSION
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import ExportCode, QuantizeOnnx, Recipe, SessionConfig

CODES = ("OD202", "OD203", "OD204", "OD211", "OD299", "OD601", "OD603")

FLOAT_MODEL = '''from onnxdoctor.worker.fixkit import float_model_of

# The float model the quantized one was made from, rebuilt from its dequantized weights (and, for
# static quantization, rounding each activation to the quantized model's own scale and zero point).
float_model = float_model_of(model)
'''


# The ONNX ops a dynamically quantized module class exports as (what quantize_dynamic may touch:
# not an Embedding's Gather the PyTorch model left float).
_DYNAMIC_OPS = {"Linear": ("MatMul", "Gemm"), "LSTM": ("LSTM",), "GRU": ("GRU",)}


def _load_facts(ctx: FixContext) -> dict:
    return next((o.facts for o in ctx.outcomes if o.stage is Stage.LOAD), {})


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Export the float rebuild; quantize it (dynamic) or keep the PyTorch model's grids (static)."""
    load = _load_facts(ctx)
    if ctx.target_kind != "script" or not load.get("quantized_modules"):
        return []
    if finding.stage not in (Stage.EXPORT, Stage.PARITY) or load.get("quantized_unsupported"):
        return []
    dynamic = bool(load.get("quantized_dynamic"))
    classes = {str(m.get("class", "")).rsplit(".", 1)[-1] for m in load["quantized_modules"] if isinstance(m, dict)}
    op_types = tuple(sorted({op for c in classes for op in _DYNAMIC_OPS.get(c, ())})) if dynamic else ()
    step = QuantizeOnnx(method="dynamic" if dynamic else "grid", op_types=op_types)
    snippet = FLOAT_MODEL + "torch.onnx.export(float_model, example_inputs, 'model-float.onnx')\n"
    steps: tuple = (ExportCode(FLOAT_MODEL, program="float_model"), step)
    if dynamic:
        title = ("Export the float model (rebuilt from the dequantized weights) and quantize the ONNX model "
                 "with ONNX Runtime's quantize_dynamic")
        snippet += (
            "\nfrom onnxruntime.quantization import QuantType, quantize_dynamic\n\n"
            "# reduce_range: 7-bit weights, as PyTorch's fbgemm backend uses (8-bit ones saturate on\n"
            "# CPUs without VNNI and differ by far more)\n"
            f"quantize_dynamic('model-float.onnx', 'model.onnx', weight_type=QuantType.{step.weight_type}, "
            f"reduce_range={step.reduce_range}, op_types_to_quantize={list(step.op_types) or None!r})\n"
        )
        cost = (f"compared with the quantized PyTorch model within {step.tolerance:.0%} of the largest output, "
                "or, where outputs are small, no further from the float model than twice the quantized PyTorch "
                "model's own error (each model quantizes its activations on its own, so results are close, "
                "not equal)")
    else:
        title = ("Export the float model (rebuilt from the dequantized weights), rounding each activation to "
                 "the quantized model's own scale and zero point (QuantizeLinear/DequantizeLinear); run it "
                 "with ONNX Runtime's QDQ fusion off")
        snippet = snippet.replace("'model-float.onnx'", "'model.onnx'") + (
            "\n# ONNX Runtime's QDQ fusion would run these pairs as integer kernels that round (and, without\n"
            "# VNNI, saturate) differently: every session runs them as written.\n"
            "options = onnxruntime.SessionOptions()\n"
            "options.add_session_config_entry('session.disable_quant_qdq', '1')\n"
        )
        steps = (*steps, SessionConfig(DISABLE_QDQ_FUSION))
        cost = (f"compared with the quantized PyTorch model within {step.tolerance:.0%} of the largest output: "
                "activations are rounded and clipped exactly as PyTorch's are, but the weights stay float "
                "(their dequantized values) and ONNX Runtime computes in float, not int8 kernels (slower); "
                "every session must set session.disable_quant_qdq")
    return [Fix(
        kind="quantized",
        title=title,
        snippet=snippet,
        applicability=Applicability.UNSAFE,
        cost=cost,
        recipe=Recipe("quantized", steps),
    )]


def notes(finding: Finding, ctx: FixContext) -> list[str]:
    """Say what the export met: quantized modules, not a branch or an unknown op."""
    load = _load_facts(ctx)
    modules = load.get("quantized_modules") or []
    if ctx.target_kind != "script" or not modules or finding.stage is not Stage.EXPORT:
        return []
    kinds = sorted({str(m.get("class", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)})
    missing = load.get("quantized_unsupported") or []
    tail = (f" onnxdoctor cannot rebuild {', '.join(missing[:3])} as float: rebuild it by hand." if missing else "")
    return [(f"The model holds {len(modules)} PyTorch-quantized module(s) ({', '.join(kinds)}); neither "
             "torch exporter takes PyTorch's quantized kernels: export the float model and quantize the "
             "ONNX model instead." + tail)]
