"""Fixes for an existing .onnx file: raise the opset to where a missing op appears, or convert down."""

from __future__ import annotations

from onnxdoctor.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix

CODES = ("OD301", "OD404")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    if ctx.target_kind != "onnx":
        return []
    if finding.code == "OD301" and finding.op:
        since = _since_version(finding.op.split("::")[-1])
        if since is None or (finding.opset is not None and since <= finding.opset):
            return []
        return [
            Fix(
                kind="raise_opset",
                title=f"Raise the model's opset import to {since}, where {finding.op} exists",
                snippet=(
                    "import onnx\n\n"
                    f"model = onnx.load({ctx.target_name!r})\n"
                    "for entry in model.opset_import:\n"
                    "    if entry.domain in ('', 'ai.onnx'):\n"
                    f"        entry.version = {since}  # {finding.op} appears at opset {since}\n"
                    f"onnx.save(model, {_renamed(ctx.target_name, since)!r})\n"
                    "# Safe only because no other op of this model changes definition in between\n"
                    "# (onnxdoctor checked the schemas); otherwise re-export at the higher opset.\n"
                ),
                applicability=Applicability.UNSAFE,
                cost=f"the runtime must support opset {since}",
                recipe={"kind": "raise_opset", "isolated": True, "onnx_transform": {"kind": "set_opset", "opset": since}},
            )
        ]
    if finding.code == "OD404" and finding.opset:
        import onnx.defs

        target = min(finding.opset - 1, onnx.defs.onnx_opset_version())
        return [
            Fix(
                kind="lower_opset",
                title=f"Lower the model's opset import to {target}",
                snippet=(
                    "import onnx\nfrom onnx import version_converter\n\n"
                    f"model = onnx.load({ctx.target_name!r})\n"
                    f"# When no op of the model changes between opset {target} and {finding.opset}, the import\n"
                    "# alone can change (onnxdoctor checked the schemas); otherwise convert:\n"
                    f"# model = version_converter.convert_version(model, {target})\n"
                    "for entry in model.opset_import:\n"
                    "    if entry.domain in ('', 'ai.onnx'):\n"
                    f"        entry.version = {target}\n"
                    f"onnx.save(model, {_renamed(ctx.target_name, target)!r})\n"
                ),
                applicability=Applicability.UNSAFE,
                cost=f"valid only while no op of the model changes between opsets {target} and {finding.opset}",
                recipe={"kind": "lower_opset", "isolated": True,
                        "onnx_transform": {"kind": "set_opset", "opset": target}},
            )
        ]
    return []


def _renamed(name: str, opset: int) -> str:
    stem = name[:-5] if name.endswith(".onnx") else name
    return f"{stem}-opset{opset}.onnx"


def _since_version(op_type: str) -> int | None:
    """The first opset at which the default domain defines `op_type`."""
    import onnx.defs

    versions = [
        s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op_type and s.domain == ""
    ]
    return min(versions) if versions else None
