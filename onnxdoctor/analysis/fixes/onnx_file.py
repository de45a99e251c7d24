"""Fixes for an existing .onnx file: expand a missing op into its function body, raise the opset to
where it appears, or lower a model too new for the runtime."""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import ExpandFunction, Recipe, Reference, RewriteOnnx, SetOpset

CODES = ("OD301", "OD404")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Rewrites of a .onnx file whose op is missing from its opset, or whose opset is too new."""
    if ctx.target_kind != "onnx":
        return []
    if finding.code == "OD301" and finding.op:
        from onnxdoctor.onnxkit.transforms import first_opset, has_function_body

        op_type = finding.op.split("::")[-1]
        since = first_opset(op_type)
        if since is None or (finding.opset is not None and since <= finding.opset):
            return []
        fixes = [_expand(finding, ctx, op_type, since)] if has_function_body(op_type) else []
        return [
            *fixes,
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
                recipe=Recipe("raise_opset", (RewriteOnnx(SetOpset(since)),), isolated=True),
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
                recipe=Recipe("lower_opset", (RewriteOnnx(SetOpset(target)),), isolated=True),
            )
        ]
    return []


def _expand(finding: Finding, ctx: FixContext, op_type: str, since: int) -> Fix:
    at = f"opset {finding.opset}" if finding.opset else "the model's opset"
    stem = ctx.target_name.removesuffix(".onnx")
    return Fix(
        kind="expand_function",
        title=f"Expand {finding.op} into its ONNX function body, keeping {at}",
        snippet=(
            "import onnx\n"
            "from onnxdoctor.onnxkit.transforms import expand_function\n\n"
            f"model = onnx.load({ctx.target_name!r})\n"
            f"# Every {op_type} node becomes the standard ops that define it (from onnx's schema).\n"
            f"onnx.save(expand_function(model, {op_type!r}), {stem + '-expanded.onnx'!r})\n"
        ),
        applicability=Applicability.SAFE,
        cost=f"more nodes per {op_type}; no opset or runtime change (compared with {op_type} at opset {since})",
        recipe=Recipe("expand_function", (RewriteOnnx(ExpandFunction(op_type), Reference(opset=since)),),
                      isolated=True),
    )


def _renamed(name: str, opset: int) -> str:
    stem = name.removesuffix(".onnx")
    return f"{stem}-opset{opset}.onnx"
