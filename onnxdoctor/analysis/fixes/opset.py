"""Change the opset: the lowest one where every failing op exports, or one the runtime loads."""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.runtime import REFUSED_TYPE
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import Recipe, UseExporter, UseOpset

CODES = ("OD201", "OD209", "OD404", "OD303", "OD304")

# The formal type of the refused position: a type parameter (T) or a fixed type (tensor(int64)).
_TYPESTR = re.compile(r"typestr: ([\w()]+),")

# classify's OD201 message, from the exporter's "Support for this operator was added in version N".
_STARTS_AT = re.compile(r"support starts at opset (\d+)")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The lowest opset at which every failing op has an export mapping."""
    if ctx.target_kind != "script":
        return []
    if finding.code == "OD201":
        supported = ctx.op_facts.get("torchscript_opsets") or []
        requested = finding.opset or ctx.requested_opset or 0
        # A symbolic serves every opset up to the next registration: when the op's symbolic
        # refused the call, the next candidate is the next registration, not requested + 1.
        registered = [v for v in ctx.op_facts.get("torchscript_registrations") or [] if v > requested]
        candidates = registered or [v for v in supported if v > requested]
        stated = _STARTS_AT.search(finding.message)
        if stated and int(stated.group(1)) > requested:
            # The exporter's own words say where support starts: a registration below it (round's
            # opset-10 entry, which only refuses) is no answer. A symbolic the registry lookup does
            # not see (a custom namespace registered at a later opset) is found this way too.
            candidates = [c for c in candidates if c >= int(stated.group(1))] or [int(stated.group(1))]
        if not candidates:
            return []
        lowest = min(candidates)
        why = f"{ctx.op} exports from opset {lowest} on (the TorchScript exporter's registry)"
        floor = ctx.op_facts.get("graph_opset_floor") or {}
        if isinstance(floor.get("opset"), int) and floor["opset"] > lowest:
            # The exporter stops at the first op it cannot map; the graph's other ops may need more.
            lowest = floor["opset"]
            why = f"{floor.get('op')}, also in the graph, needs opset {lowest} (the TorchScript exporter's registry)"
        return [opset_fix(lowest, "torchscript", why)]
    if finding.code in ("OD303", "OD304"):
        # A type the checker refuses here that a later schema of the op takes.
        refused = REFUSED_TYPE.search(finding.message)
        if refused is None:
            return _later_opsets(finding, ctx)
        wanted = f"tensor({refused.group(1)})"
        formal = _TYPESTR.search(finding.message)
        later = _opset_taking(finding.op or "", wanted, finding.opset or ctx.requested_opset or 0,
                              formal.group(1) if formal else None)
        if later is None or (ctx.exporter == "torchscript" and later > _TORCHSCRIPT_MAX):
            return []
        return [opset_fix(later, ctx.exporter or "dynamo", f"{finding.op}'s schema takes {wanted} from opset {later} on")]
    if finding.code == "OD209":
        return [opset_fix(18, ctx.exporter or "dynamo", "opset 18 is the dynamo exporter's native opset")]
    if finding.code == "OD404":
        return [opset_fix(18, ctx.exporter or "dynamo", "a lower opset that this ONNX Runtime loads")]
    return []


# Opsets tried, lowest first, for a node refused at an old one: where the exporters' symbolics and
# ONNX's schemas changed most (Slice and Squeeze take their axes as inputs from 10 and 13 on).
_LATER = (11, 13, 17)


def _later_opsets(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The next opsets up, for a node the checker refuses at an old opset for another reason than
    its type: the exporter writes it otherwise there (a symbolic of that opset, a later schema)."""
    requested = finding.opset or ctx.requested_opset or 0
    if not requested or ctx.exporter != "torchscript":
        return []
    op = finding.onnx_op or finding.op or "the node"
    return [opset_fix(o, "torchscript", f"the TorchScript exporter writes {op} otherwise at opset {o}, where "
                                         "its schema changed too") for o in _LATER if o > requested]


def notes(finding: Finding, ctx: FixContext) -> list[str]:
    """Advice about opsets that does not apply to this finding."""
    if finding.code != "OD201":
        return []
    return ["Downgrading torch does not add opset support; exporting at a higher opset does."]


def opset_fix(opset: int, exporter: str, why: str) -> Fix:
    """Export at `opset` with `exporter`; `why` says what makes that opset the answer."""
    dynamo = exporter == "dynamo"
    return Fix(
        kind="opset",
        title=f"Export at opset {opset}",
        snippet=f"torch.onnx.export(model, example_inputs, 'model.onnx', dynamo={dynamo}, opset_version={opset})\n",
        applicability=Applicability.SAFE,
        cost=f"the runtime must support opset {opset}; {why}",
        recipe=Recipe("opset", (UseOpset(opset), UseExporter(exporter))),
    )


_TORCHSCRIPT_MAX = 20  # the TorchScript exporter's last opset


def _opset_taking(op: str, type_string: str, requested: int, formal: str | None = None) -> int | None:
    """The lowest opset above `requested` whose schema of `op` (default domain) takes the type
    where it was refused: in the type parameter `formal` names (any parameter when the message
    names none), and not already at the requested opset. None when no later schema does, when
    the refused position has a fixed type (ScatterND's int64 indices), or the op has no schema."""
    if not op or "::" in op or not requested or (formal and formal.startswith("tensor(")):
        return None
    import onnx.defs

    def takes(version: int) -> bool:
        schema = onnx.defs.get_schema(op, version)
        return any(type_string in c.allowed_type_strs for c in schema.type_constraints
                   if formal is None or c.type_param_str == formal)

    try:
        if takes(requested):
            return None  # allowed there already: a later opset is not what is missing
        seen = onnx.defs.get_schema(op, requested).since_version
        for version in range(requested + 1, onnx.defs.onnx_opset_version() + 1):
            since = onnx.defs.get_schema(op, version).since_version
            if since != seen and takes(version):
                return since
            seen = since
    except Exception:  # noqa: BLE001 - onnx's SchemaError: no such op at some version
        return None
    return None
