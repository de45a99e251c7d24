"""A quantized PyTorch model: export its float model, then quantize the ONNX model with ONNX Runtime.

Neither exporter takes PyTorch's quantized modules (`quantized::linear_dynamic`, packed
parameters torch.export cannot flatten). The verified route is ONNX Runtime's own quantization:
rebuild the float modules from the quantized weights (dequantized: the same numbers the
quantized model starts from), export that float model, quantize the ONNX file with
`onnxruntime.quantization.quantize_dynamic`, and compare it with the quantized PyTorch model at a
tolerance stated for quantization. Dynamically quantized Linear layers only, for now.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import ExportCode, QuantizeOnnx, Recipe

CODES = ("OD202", "OD203", "OD204", "OD211", "OD299")

FLOAT_MODEL = '''import copy

# The float model the quantized one was made from, rebuilt from its dequantized weights.
float_model = copy.deepcopy(model)
for name, module in list(float_model.named_modules()):
    if isinstance(module, torch.ao.nn.quantized.dynamic.Linear):
        bias = module.bias()
        linear = torch.nn.Linear(module.in_features, module.out_features, bias=bias is not None)
        with torch.no_grad():
            linear.weight.copy_(module.weight().dequantize())
            if bias is not None:
                linear.bias.copy_(bias)
        parent, _, child = name.rpartition(".")
        setattr(float_model.get_submodule(parent), child, linear)
float_model.train(model.training)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Export the float model and quantize the ONNX file with ONNX Runtime's dynamic quantization."""
    load = next((o.facts for o in ctx.outcomes if o.stage is Stage.LOAD), {})
    if ctx.target_kind != "script" or not load.get("quantized_modules") or finding.stage is not Stage.EXPORT:
        return []
    if not load.get("quantized_dynamic_linear_only"):
        return []  # static quantization, quantized convolutions: not rebuilt here yet
    step = QuantizeOnnx()
    snippet = (
        FLOAT_MODEL
        + "torch.onnx.export(float_model, example_inputs, 'model-float.onnx')\n\n"
        "from onnxruntime.quantization import QuantType, quantize_dynamic\n\n"
        "# reduce_range: 7-bit weights, as PyTorch's fbgemm backend uses (8-bit ones saturate on\n"
        "# CPUs without VNNI and differ by far more)\n"
        f"quantize_dynamic('model-float.onnx', 'model.onnx', weight_type=QuantType.{step.weight_type}, "
        f"reduce_range={step.reduce_range})\n"
    )
    return [Fix(
        kind="quantized",
        title="Export the float model (rebuilt from the dequantized weights) and quantize the ONNX model "
              "with ONNX Runtime's quantize_dynamic",
        snippet=snippet,
        applicability=Applicability.UNSAFE,
        cost=f"compared with the quantized PyTorch model within {step.tolerance:.0%} of the largest output "
             "(each model quantizes its activations on its own, so results are close, not equal)",
        recipe=Recipe("quantized", (ExportCode(FLOAT_MODEL, program="float_model"), step)),
    )]


def notes(finding: Finding, ctx: FixContext) -> list[str]:
    """Say what the export met: quantized modules, not a branch or an unknown op."""
    load = next((o.facts for o in ctx.outcomes if o.stage is Stage.LOAD), {})
    modules = load.get("quantized_modules") or []
    if ctx.target_kind != "script" or not modules or finding.stage is not Stage.EXPORT:
        return []
    kinds = sorted({str(m.get("class", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)})
    return [(f"The model holds {len(modules)} PyTorch-quantized module(s) ({', '.join(kinds)}); neither "
             "torch exporter takes PyTorch's quantized kernels: export the float model and quantize the "
             "ONNX model instead.")]
