"""`model.eval()` for models exported or compared in training mode (dropout, batch norm)."""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EvalMode, Recipe

CODES = ("OD206", "OD601", "OD501", "OD108")

# forward() refusing the example only because batch norm is in training mode: batch statistics of
# one sample (pytorch#109577's MC-dropout classifier left in train()). GroupNorm says the same in
# either mode, so a batch norm layer in training mode must be there for eval() to help.
_TRAINING_ONLY = re.compile(r"Expected more than 1 value per channel when training")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """`model.eval()` when the model was exported in training mode and has mode-sensitive layers."""
    if not ctx.training or not ctx.mode_sensitive:
        return []
    if finding.code == "OD108" and not (_TRAINING_ONLY.search(f"{finding.message} {' '.join(finding.evidence)}")
                                        and any("BatchNorm" in m for m in ctx.mode_sensitive)):
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
            cost=f"none for inference; affects {modules}" + (
                "; dropout kept on at inference (Monte Carlo sampling) is off too: ONNX exports of "
                "inference graphs leave it out" if finding.code == "OD108" and any("Dropout" in m for m in ctx.mode_sensitive)
                else ""),
            recipe=Recipe("eval_mode", (EvalMode(),), isolated=True),
        )
    ]
