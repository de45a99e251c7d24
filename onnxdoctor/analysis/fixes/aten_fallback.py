"""ATen fallback: only a fix where the target runtime executes ATen nodes (not ONNX Runtime CPU)."""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import OperatorExportType, Recipe, UseExporter

CODES = ("OD202", "OD203")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """ONNX_ATEN_FALLBACK for ops the TorchScript exporter cannot map (tried, rarely a fix)."""
    if ctx.target_kind != "script":
        return []
    return [
        Fix(
            kind="aten_fallback",
            title="ATen fallback (TorchScript exporter): only for runtimes that execute ATen nodes",
            snippet=(
                "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False,\n"
                "                  operator_export_type=torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK)\n"
                "# The op becomes an org.pytorch.aten::ATen node; ONNX Runtime CPU has no kernel for it.\n"
            ),
            applicability=Applicability.DISPLAY_ONLY,
            cost="ONNX Runtime registers no ATen kernel: the model will not load there",
            recipe=Recipe("aten_fallback", (UseExporter("torchscript"), OperatorExportType("ONNX_ATEN_FALLBACK")),
                          isolated=True),
        )
    ]


def notes(finding: Finding, ctx: FixContext) -> list[str]:
    """Why ATen fallback does not help a model meant for ONNX Runtime."""
    return [
        (
            "ATen fallback (operator_export_type=ONNX_ATEN_FALLBACK) writes ATen nodes that ONNX Runtime "
            "CPU cannot run; it is not a fix for ONNX Runtime."
        )
    ]
