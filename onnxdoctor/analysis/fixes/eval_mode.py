"""`model.eval()` for models exported or compared in training mode (dropout, batch norm)."""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EvalMode, Recipe

CODES = ("OD206", "OD601", "OD501")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """`model.eval()` when the model was exported in training mode and has mode-sensitive layers."""
    if not ctx.training or not ctx.mode_sensitive:
        return []
    modules = ", ".join(ctx.mode_sensitive[:3])
    return [
        Fix(
            kind="eval_mode",
            title="Call model.eval() before exporting",
            snippet=(
                ctx.build_lines
                + "model.eval()  # dropout off, batch norm uses its running statistics\n"
                + ("torch.onnx.export(model, example_inputs, 'model.onnx', kwargs=example_kwargs)\n"
                   if ctx.factory_form == "triple" else "torch.onnx.export(model, example_inputs, 'model.onnx')\n")
            ),
            applicability=Applicability.SAFE,
            cost=f"none for inference; affects {modules}",
            recipe=Recipe("eval_mode", (EvalMode(),), isolated=True),
        )
    ]
