"""Switch exporter: when one torch exporter fails, the other may succeed."""

from __future__ import annotations

from onnxdoctor.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix

CODES = ("OD201", "OD202", "OD204", "OD205", "OD208", "OD299", "OD301", "OD303", "OD304", "OD399",
         "OD402", "OD499", "OD501", "OD599", "OD601", "OD603", "OD604")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    if ctx.target_kind != "script" or ctx.exporter is None:
        return []
    other = ctx.other_exporter()
    dynamo = other == "dynamo"
    cost = "the TorchScript exporter is deprecated (opsets 7-20)" if not dynamo else (
        "the dynamo exporter writes opset 18 or newer and needs torch.export to capture the model")
    return [
        Fix(
            kind="exporter",
            title=f"Use the {other} exporter (dynamo={dynamo})",
            snippet=f"torch.onnx.export(model, example_inputs, 'model.onnx', dynamo={dynamo})\n",
            applicability=Applicability.SAFE,
            cost=cost,
            recipe={"kind": "exporter", "exporter": other},
        )
    ]
