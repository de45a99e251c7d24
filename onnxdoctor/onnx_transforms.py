"""Model-level fixes for existing .onnx files (onnx only: runs in the worker or anywhere).

`onnx.version_converter` refuses a model that is invalid at its own opset ("No Adapter ... for
Gelu"), so for an op that does not exist at the model's opset we raise the opset import to where
the op appears, but only when no other op of the model changes meaning between the two versions.
"""

from __future__ import annotations

from typing import Any

import onnx
import onnx.defs


class TransformError(Exception):
    """The transform does not apply to this model; the message says why."""


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    raise TransformError("the model imports no default-domain opset")


def changed_ops_between(model: onnx.ModelProto, old: int, new: int) -> list[str]:
    """Default-domain ops whose definition differs between opsets `old` and `new` (empty: safe)."""
    changed = []
    for op_type in sorted({n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}):
        try:
            before = onnx.defs.get_schema(op_type, old).since_version
        except onnx.defs.SchemaError:
            continue  # the op does not exist at `old`: it is the one being fixed
        try:
            after = onnx.defs.get_schema(op_type, new).since_version
        except onnx.defs.SchemaError:
            changed.append(op_type)
            continue
        if before != after:
            changed.append(op_type)
    return changed


def set_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """The model with its default-domain opset import set to `target` (up or down).

    Raises:
        TransformError: an op of the model changes definition between the two opsets.
    """
    current = _default_opset(model)
    if target == current:
        raise TransformError(f"the model is already at opset {current}")
    changed = changed_ops_between(model, min(current, target), max(current, target))
    if changed:
        raise TransformError(
            f"{', '.join(changed)} change(s) definition between opsets {current} and {target}; "
            "re-export the model at the higher opset instead"
        )
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for entry in fixed.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = target
    return fixed


def convert_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """`onnx.version_converter` to `target`; its refusals become a TransformError."""
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, target)
    except Exception as exc:  # the converter raises RuntimeError and others from C++
        raise TransformError(f"onnx.version_converter cannot convert to opset {target}: {exc}") from None


def apply_transform(model: onnx.ModelProto, recipe: dict[str, Any]) -> onnx.ModelProto:
    """Apply a fix recipe's `onnx_transform` ({"kind": "set_opset"|"convert_opset", "opset": N})."""
    kind, target = recipe.get("kind"), int(recipe["opset"])
    if kind == "set_opset":
        return set_opset(model, target)
    if kind == "convert_opset":
        return convert_opset(model, target)
    raise TransformError(f"unknown transform {kind!r}")
