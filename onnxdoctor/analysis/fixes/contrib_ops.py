"""ONNX Runtime's contrib-op symbolics for the TorchScript exporter (when the target is ORT)."""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import ExportCode, Recipe, UseExporter

CODES = ("OD201", "OD202")
# aten ops that onnxruntime.tools.pytorch_export_contrib_ops.register() maps to contrib ops.
CONTRIB_OPS = ("aten::grid_sampler", "aten::inverse", "aten::linalg_inv", "aten::gelu", "aten::triu", "aten::tril")

SNIPPET = (
    "from onnxruntime.tools import pytorch_export_contrib_ops\n\n"
    "# Maps some aten ops to ONNX Runtime contrib ops (com.microsoft domain), TorchScript exporter only.\n"
    "pytorch_export_contrib_ops.register()\n"
)


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """ONNX Runtime's contrib-op symbolics for aten ops standard ONNX lacks at the opset."""
    if ctx.target_kind != "script" or ctx.op not in CONTRIB_OPS:
        return []
    return [
        Fix(
            kind="contrib_ops",
            title=f"Export {ctx.op} as an ONNX Runtime contrib op (pytorch_export_contrib_ops)",
            snippet=SNIPPET + "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False"
            + (f", opset_version={ctx.requested_opset}" if ctx.requested_opset else "") + ")\n",
            applicability=Applicability.UNSAFE,
            cost="the model then runs in ONNX Runtime only (com.microsoft ops)",
            recipe=Recipe("contrib_ops", (UseExporter("torchscript"), ExportCode(SNIPPET)), isolated=True),
        )
    ]
