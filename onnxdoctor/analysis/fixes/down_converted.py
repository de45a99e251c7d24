"""A node the dynamo exporter's down-conversion left invalid: export at the opset it was built at.

The dynamo exporter builds every model at opset 18 and converts it to a lower `opset_version`
with onnx's version converter, which can leave an op's opset-18 form behind (Split's
`num_outputs`, a Reduce op's `noop_with_empty_axes`): the checker then refuses a node the user
never wrote, or keeps an attribute whose meaning changed (Softmax's axis, which before opset 13
normalizes over every dim from it on: onnx/onnx#6340), so ONNX Runtime refuses the node or computes
other numbers. The op needs no later opset of its own; the conversion does. The fix is the lowest
opset at which the op's opset-18 definition already holds (nothing to convert for it), else 18.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.opset import opset_fix
from onnxdoctor.model import Finding, Fix, Stage

CODES = ("OD301", "OD303", "OD304", "OD399", "OD402", "OD499", "OD501", "OD601", "OD603")

# The stages a converted node can fail at: the checker, ONNX Runtime's load and run, the numbers.
_AFTER_EXPORT = frozenset({Stage.CHECK, Stage.ORT_LOAD, Stage.ORT_RUN, Stage.PARITY})

# The opset the dynamo exporter builds at before converting (docs/ARCHITECTURE.md; README).
NATIVE_OPSET = 18


def _written_below_native(finding: Finding, ctx: FixContext) -> int | None:
    """The opset the model was converted down to, when this finding is the conversion's doing."""
    if ctx.target_kind != "script" or ctx.exporter != "dynamo" or finding.stage not in _AFTER_EXPORT:
        return None
    written = finding.opset or ctx.export_facts.get("written_opset") or ctx.requested_opset
    requested = ctx.requested_opset
    if not isinstance(requested, int) or requested >= NATIVE_OPSET:
        return None
    return int(written) if isinstance(written, int) and written < NATIVE_OPSET else requested


def lowest_valid_opset(op_type: str, below: int) -> int:
    """The lowest opset above `below` whose definition of `op_type` is the one it has at opset 18
    (so the converter has nothing to change for it); 18 when the op changed after `below`."""
    import onnx.defs

    try:
        since = onnx.defs.get_schema(op_type, NATIVE_OPSET, "").since_version
    except onnx.defs.SchemaError:  # not a standard op
        return NATIVE_OPSET
    return max(since, below + 1)


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Export at the lowest opset the op's converted form needs, and at 18 if that is higher."""
    written = _written_below_native(finding, ctx)
    op = finding.onnx_op or (finding.op or "").split("::")[-1]  # a mismatch names the aten op too
    if written is None or not op:
        return []
    why = (f"the dynamo exporter builds at opset {NATIVE_OPSET}; converting it down to {written} "
           f"left {op}'s opset-{NATIVE_OPSET} form behind")
    lowest = lowest_valid_opset(op, written)
    fixes = []
    if lowest < NATIVE_OPSET:
        fixes.append(opset_fix(lowest, "dynamo", why + f"; {op} is defined the same way from opset {lowest} on"))
    fixes.append(opset_fix(NATIVE_OPSET, "dynamo", why + "; at 18 nothing is converted"))
    return fixes


def notes(finding: Finding, ctx: FixContext) -> list[str]:
    """Why a node the user never wrote is invalid."""
    written = _written_below_native(finding, ctx)
    if written is None:
        return []
    return [(f"The dynamo exporter builds the model at opset {NATIVE_OPSET} and converts it down to opset "
             f"{written}; onnx's version converter left this node in its opset-{NATIVE_OPSET} form. No op "
             "of yours needs a later opset: the conversion does.")]
