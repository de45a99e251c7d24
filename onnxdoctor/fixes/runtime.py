"""Runtime-side fixes: casts to types the kernel table lists, and models too new for the runtime."""

from __future__ import annotations

from onnxdoctor.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage

CODES = ("OD402", "OD403")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    if finding.code == "OD402":
        return [_cast_fix(finding, ctx)]
    if finding.code == "OD403":
        return [
            Fix(
                kind="ir_version",
                title="Write the model with an IR version this ONNX Runtime reads",
                snippet=(
                    "import onnx\n\n"
                    "model = onnx.load('model.onnx')\n"
                    "model.ir_version = 10  # the highest this runtime reads: see `onnxdoctor env`\n"
                    "onnx.save(model, 'model-ir10.onnx')\n"
                    "# Safe only when the model uses no feature newer than that IR version.\n"
                ),
                applicability=Applicability.UNSAFE,
                cost="lowering ir_version is only valid when no newer IR feature is used",
            )
        ]
    return []


def _cast_fix(finding: Finding, ctx: FixContext) -> Fix:
    ort_load = next((o for o in ctx.outcomes if o.stage is Stage.ORT_LOAD), None)
    kernels = (ort_load.facts.get("kernels") if ort_load else None) or []
    listed = sorted({t for k in kernels for types in (k.get("types") or {}).values() for t in types})
    supported = ", ".join(t.replace("tensor(", "").rstrip(")") for t in listed[:8]) or "float"
    target = "float" if "tensor(float)" in listed or not listed else listed[0].replace("tensor(", "").rstrip(")")
    torch_dtype = {"float": "float32", "double": "float64", "int64": "int64", "int32": "int32"}.get(target, "float32")
    return Fix(
        kind="cast",
        title=f"Cast the inputs of {finding.op} to a type ONNX Runtime's CPU kernel has ({supported})",
        snippet=(
            f"# In forward(), around the {finding.op} call:\n"
            f"y = torch_op(x.to(torch.{torch_dtype})).to(x.dtype)\n"
        ),
        applicability=Applicability.UNSAFE,
        cost="precision or speed may change; another execution provider may have the kernel instead",
    )
