"""Target-driven fixes: rewrite the model into what a deployment target's table asks for.

A target finding (OD701 from a real OpenVINO run, OD705/OD706 from a static table) carries a
`TargetGap`: what the node lacks for that target. Each gap with a mechanical answer gets a fix,
verified like any other (the fixed model still matches PyTorch, or the original file, in ONNX
Runtime) and then judged again by every requested target (docs/targets.md):

- an op the target lacks that has an ONNX function body: write it as the body's standard ops;
- a node type the table does not list: compute the node in a listed type of the same family
  (int64 -> int32 where the table asks for it and the example values fit, which parity checks);
- an input the table needs constant: fold what the graph computes from constants alone;
- an op the table lists from a later opset: export (or convert) at that opset.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, TargetGap
from onnxdoctor.recipe import (
    CastAround,
    ConvertOpset,
    ExpandFunction,
    FoldConstants,
    Recipe,
    Reference,
    RewriteOnnx,
    Transform,
)

CODES = ("OD701", "OD705", "OD706")

# Casts keep a value's family (cast_around never turns integers into floats): the widest listed
# type first within each.
_INTEGER = ("INT32", "INT64", "INT16", "INT8", "UINT32", "UINT16", "UINT8")
_FLOATING = ("FLOAT", "DOUBLE", "FLOAT16")
_CAST_NAMES = {"INT32": "int32", "INT64": "int64", "INT16": "int16", "INT8": "int8", "UINT32": "uint32",
               "UINT16": "uint16", "UINT8": "uint8", "FLOAT": "float", "DOUBLE": "double", "FLOAT16": "float16"}


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The rewrite that answers the node's gap on its target, when one is mechanical."""
    gap = finding.detail
    if not isinstance(gap, TargetGap):
        return []
    if gap.need == "opset" and gap.opset:
        return [_opset_fix(ctx, gap, finding.op)]
    if not finding.op or "::" in finding.op:
        return []  # custom and contrib domains have no standard rewrite
    op = finding.op
    if gap.need == "op":
        from onnxdoctor.onnxkit.transforms import has_function_body

        if not has_function_body(op):
            return []
        if gap.target == "openvino":  # no table: the rewritten model's real run says the rest
            return [_rewrite(ctx, gap, ExpandFunction(op), "expand",
                             f"Write {op} as the standard ops of its ONNX function body ({gap.target} lacks {op})",
                             f"expand_function(model, {op!r})",
                             "more nodes; the body's ops must be ones the target has (the matrix says)")]
        return [_rewrite(ctx, gap, ExpandFunction(op, gap.target), "expand",
                         f"Write {op} as the standard ops of its ONNX function body, and so on for any "
                         f"function op in it that {gap.target} lacks", f"expand_for_target(model, {op!r}, "
                         f"{gap.target!r})", "more nodes; the body's ops must be ones the target has "
                         "(the matrix says)")]
    if gap.need == "types":
        to = _cast_type(gap.allowed, gap.have)
        if to is None:
            return []
        have = ", ".join(gap.have) or "its type"
        return [_rewrite(ctx, gap, CastAround(op, to), "cast",
                         f"Run {op} in {to} on {gap.target} (its table lists {', '.join(gap.allowed[:6])}, not {have})",
                         f"cast_around(model, {op!r}, to={to!r})",
                         f"{op} computes in {to}: values must fit (checked at the example inputs only)")]
    if gap.need == "constant":
        return [_rewrite(ctx, gap, FoldConstants(), "fold_constants",
                         "Fold what the graph computes from constants and static shapes into initializers "
                         f"(the {op} node on {gap.target})", "fold_constants(model)",
                         "none when the folded values depend only on constants and static shapes")]
    return []


def _opset_fix(ctx: FixContext, gap: TargetGap, op: str | None) -> Fix:
    assert gap.opset is not None
    why = (f"{gap.target} lists {op} from opset {gap.opset} on" if op
           else f"{gap.target}'s table goes up to opset {gap.opset}")
    if ctx.target_kind == "script":
        from onnxdoctor.analysis.fixes.opset import opset_fix

        return opset_fix(gap.opset, ctx.exporter or "dynamo", why)
    return _rewrite(ctx, gap, ConvertOpset(gap.opset), "opset", f"Convert the model to opset {gap.opset} ({why})",
                    f"convert_opset(model, {gap.opset})",
                    "onnx's version converter: checked against the original by running both")


def _cast_type(allowed: tuple[str, ...], have: tuple[str, ...]) -> str | None:
    integer = bool(have) and all(t in _INTEGER or t == "BOOL" for t in have)
    for candidate in _INTEGER if integer else _FLOATING:
        if candidate in allowed and candidate not in have:
            return _CAST_NAMES[candidate]
    return None


def _rewrite(ctx: FixContext, gap: TargetGap, transform: Transform, kind: str, title: str, call: str,
             cost: str) -> Fix:
    # A file has no PyTorch to compare with: the original, run by ONNX Runtime, is the reference.
    reference = Reference(opset=gap.model_opset, required=True) if ctx.target_kind == "onnx" else None
    name = ctx.target_name if ctx.target_kind == "onnx" else "model.onnx"
    function = call.split("(", 1)[0]
    snippet = (
        "import onnx\n"
        f"from onnxdoctor.onnxkit.transforms import {function}\n\n"
        + ("" if ctx.target_kind == "onnx" else "# after torch.onnx.export(..., 'model.onnx'):\n")
        + f"model = onnx.load({name!r})\n"
        f"onnx.save({call}, {name.removesuffix('.onnx') + f'-{gap.target}.onnx'!r})\n"
    )
    return Fix(kind=kind, title=title, snippet=snippet, applicability=Applicability.UNSAFE, cost=cost,
               recipe=Recipe(kind, (RewriteOnnx(transform, reference),)))
