"""Rewrite Python control flow on tensor values so that both exporters can capture it."""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix

CODES = ("OD204", "OD210")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """torch.cond or torch.where in place of a Python branch on a tensor value."""
    where = f" at {finding.source}" if finding.source else ""
    return [
        Fix(
            kind="control_flow",
            title=f"Express the data-dependent branch{where} with tensor ops (torch.where / torch.cond)",
            snippet=(
                "# before:  if x.sum() > 0: return x * 2\n"
                "#          return x - 1\n"
                "return torch.where(x.sum() > 0, x * 2, x - 1)          # both sides are computed\n"
                "# or, when the branches are expensive or differ in shape-free ways:\n"
                "return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))  # ONNX If\n"
            ),
            applicability=Applicability.DISPLAY_ONLY,
            cost="an edit to forward(); onnxdoctor cannot rewrite your code, so this is not verified",
        )
    ]
