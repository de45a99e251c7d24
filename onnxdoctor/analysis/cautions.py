"""Findings about runs that passed: mode, opset substitution, frozen traces, dims that went static."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from onnxdoctor.analysis.findings import finding_from_record, make_finding
from onnxdoctor.analysis.normalize import normalize_message, running_node
from onnxdoctor.analysis.sources import innermost_function, parsed_source, source_text
from onnxdoctor.model import (
    Finding,
    FrozenSize,
    SecondInputs,
    Severity,
    Stage,
    StageOutcome,
    Status,
)
from onnxdoctor.protocol import provenance_table


def caution_findings(stages: list[StageOutcome], base_dir: str | None) -> list[Finding]:
    """Findings that bite later, each from the facts of the stages that passed."""
    by_stage = {s.stage: s for s in stages}
    found: list[Finding] = []
    for caution in (_training_mode, _opset_cautions, _frozen_trace, _other_inputs, _static_dims,
                    _none_outputs, _dropped_inputs, _checker_warnings):
        found += caution(by_stage, base_dir)
    return found


_ByStage = dict[Stage, StageOutcome]


def _training_mode(by_stage: _ByStage, base_dir: str | None) -> list[Finding]:
    load, export = by_stage.get(Stage.LOAD), by_stage.get(Stage.EXPORT)
    if not (load and load.facts.get("training") and load.facts.get("mode_sensitive_modules")):
        return []
    modules = load.facts["mode_sensitive_modules"]
    return [make_finding(
        "OD206",
        Stage.EXPORT,
        f"the model is in training mode, and {len(modules)} mode-sensitive module(s) are too "
        f"({', '.join(modules[:3])}{', ...' if len(modules) > 3 else ''}); the export and the "
        "outputs depend on it",
        evidence=tuple(w for w in (export.warnings if export else ()) if "training" in w)[:2],
    )]


def _opset_cautions(by_stage: _ByStage, base_dir: str | None) -> list[Finding]:
    export = by_stage.get(Stage.EXPORT)
    if not (export and export.status is Status.PASSED):
        return []
    requested = export.facts.get("requested_opset")
    written = export.facts.get("written_opset")
    exporter = export.facts.get("exporter", "")
    ceiling = export.facts.get("exporter_max_opset")
    if requested and ((ceiling and int(requested) > int(ceiling)) or
                      (written and exporter == "dynamo" and int(requested) > int(written))):
        limit = f"its maximum is {ceiling}" if ceiling else f"it wrote opset {written} instead"
        return [make_finding(
            "OD209",
            Stage.EXPORT,
            f"opset {requested} is beyond what the {exporter} exporter supports ({limit})",
            opset=int(requested),
            evidence=tuple(w for w in export.warnings if "opset" in w.lower())[:2],
        )]
    if requested and written and int(requested) != int(written):
        refusal = export.facts.get("conversion_error")
        op = export.facts.get("conversion_op")
        return [make_finding(
            "OD207",
            Stage.EXPORT,
            f"opset {requested} was requested but the {exporter} exporter wrote opset {written}"
            + (f": ONNX's version converter has no way down for {op} ({refusal})" if op else
               f": ONNX's version converter refuses the model ({refusal})" if refusal else ""),
            op=op,
            opset=int(written),
        )]
    return []


def _frozen_trace(by_stage: _ByStage, base_dir: str | None) -> list[Finding]:
    export = by_stage.get(Stage.EXPORT)
    frozen = [w for w in (export.warnings if export else ()) if "might cause the trace to be incorrect" in w]
    # A module picked from an nn.ModuleList with a tensor: frozen as the example's, unwarned.
    indexed = bool(export.facts.get("module_indices")) if export else False
    if not (export and export.status is Status.PASSED and (frozen or indexed)):
        return []
    parity = by_stage.get(Stage.PARITY)
    second = (parity.facts.get("second_inputs") if parity else None) or {}
    refused = _refused_dims(second, export, _declared_dims(by_stage))
    if refused:
        return refused
    message = ("the TorchScript tracer turned a tensor into a Python value (a branch or a number) and "
               "recorded only what the example input did")
    detail, severity = None, Severity.WARNING
    if isinstance(second, dict) and "matched" in second and not second.get("unchecked"):
        detail = SecondInputs(str(second.get("source")), bool(second["matched"]), second.get("max_abs_diff"),
                              _first_difference(second.get("diverging"), second.get("diverging_call")),
                              second.get("frozen_cause"))
        where = f"; the difference first arises at {detail.where}" if detail.where else ""
        agreed = second.get("matched_at") or []
        if agreed and not detail.matched:
            where = f"; it matched at {', '.join(agreed)}" + where
        if detail.matched:
            message += (f"; at other inputs ({detail.source}; derived ones stay in the example's range) it matches PyTorch "
                        "too, so the frozen values did not matter there: check the inputs you deploy with")
        elif detail.frozen_cause is False:
            message += (f"; at other inputs ({detail.source}) the export differs ({second.get('message')})"
                        f"{where}, but exported again traced at those inputs it differs the same way: "
                        "the frozen values are not the cause (ties or near-equal values there, as in topk or "
                        "NMS, can order differently)")
        else:
            message += (f"; at other inputs ({detail.source}) it gives wrong results without any "
                        f"error: {second.get('message')}{where}"
                        + ("; exported again traced at those inputs it matches, so the branch the "
                           "tracer recorded is the cause" if detail.frozen_cause else ""))
            severity = Severity.ERROR
    else:
        message += ": other inputs can give wrong results without any error"
    # The first conversion on a line of the user's own (a library's checks convert too). Of
    # several: the first inside the module where the difference at other inputs first arises,
    # and a branch on a comparison of sizes (`if x.shape[0] > limit:`, recorded apart) after the
    # values taken out of tensors, since it holds at the other inputs unless their sizes cross it.
    # An unpacking (`idx_i, idx_j = edge_index`) iterates over a tensor too, but a tensor of
    # another length fails in PyTorch as well: it freezes nothing an input could change, so
    # it comes last. A tensor built from Python values ("torch.tensor results are registered as
    # constants") freezes what those values were; where a conversion out of a tensor was warned
    # about too, that conversion is where an input's value was lost (SAM's
    # `masks[..., :int(prepadded_size[0])]` behind a constant score table).
    sizes = set(export.facts.get("size_branches") or ())
    converted = any(_CONVERTING.search(w) for w in frozen)
    mine = sorted((w for w in frozen if _warning_source(w, base_dir)),
                  key=lambda w: ("Iterating over a tensor" in w and _unpacks(_warning_source(w, base_dir), base_dir),
                                 converted and bool(_REGISTERED.search(w)),
                                 _warning_source(w, base_dir) in sizes))
    diverging = second.get("diverging") if isinstance(second, dict) else None
    inside = [w for w in mine if _in_class(_warning_source(w, base_dir), (diverging or {}).get("module_class"), base_dir)]
    warned = (inside or mine or frozen or [""])[0]
    # Unwarned (a module picked by a tensor): the line that indexed the list.
    source = _warning_source(warned, base_dir) if warned else str((export.facts.get("module_indices") or [""])[0]) or None
    if any("NumPy array" in w for w in frozen) and isinstance(second, dict):
        # A value computed outside torch: the code that computed it is named below, not the first
        # call its constant reaches.
        second = {k: v for k, v in second.items() if k != "diverging_call"}
    op, node = _frozen_op(export, second, source)
    conversion = _CONVERTING.search(warned)
    call = second.get("diverging_call") if isinstance(second, dict) else None
    if (conversion and conversion.group(1) in _NUMBERS and isinstance(call, dict) and source
            and str(call.get("source") or "").rsplit("/", 1)[-1] == source):
        # The value differs first in the call on the very line that took the number out of a
        # tensor (`torch.div(f, f_mean.item())`): the conversion is what froze it; the node
        # stays the one where it shows.
        op = _CONVERSIONS[conversion.group(1)]
    baked = _constant_maker(frozen, second, base_dir)
    if baked is not None:
        # The differing output is a constant in the file: the call that made the constant tensor
        # (`torch.as_tensor(tags)`) is the torch op it was exported from, beside the conversion
        # that took the values out of the trace (the finding's op and line).
        outputs = ", ".join(str(i) for i in second["constant_outputs"])
        message += (f"; output {outputs} {'is a constant' if ',' not in outputs else 'are constants'} in the file "
                    f"(no input reaches it): {baked[1]} at {_warning_source(baked[0], base_dir)} made it from "
                    "the example's Python values")
    read = (export.facts.get("branch_values") or {}).get(source or "")
    if read and "Python boolean" in warned and not str(read).startswith("prim::"):
        # A branch: the value it reads (`mask.any()`), not where its missing side first shows.
        op, node = str(read), None
    consumer = _numpy_consumer(source, base_dir) if "NumPy array" in warned else None
    if not consumer and op in (None, "aten::numpy"):
        # The conversion is on another warned line, or hands the array to no call there (`boxes =
        # boxes.cpu().numpy()` at the top of a post-processing function): the call on the line,
        # else the function doing the conversion, is what runs outside torch.
        converting = next((w for w in frozen if "NumPy array" in w and _warning_source(w, base_dir)), None)
        where = _warning_source(converting, base_dir) if converting else None
        consumer = _numpy_consumer(where, base_dir) or _enclosing_function(where, base_dir)
    if consumer and op in (None, "aten::numpy"):
        # The array went to code outside torch (scipy's linear_sum_assignment): what it computed
        # there is the graph's constant.
        op, node = consumer, None
    if op is None:
        # Nothing exported from the line (the value became a constant): the conversion itself.
        op = next((_CONVERSIONS[m.group(1)] for m in map(_CONVERTING.search, [warned, *frozen]) if m), None)
    found = make_finding(
        "OD210",
        Stage.EXPORT,
        message,
        op=op,
        node=node,
        source=source,
        evidence=tuple(normalize_message(w, base_dir=base_dir, limit=500)
                       for w in [warned, *(w for w in frozen if w is not warned)][:2] if w),
        detail=detail,
    )
    found = replace(found, severity=severity)
    return [replace(found, torch_op=baked[1]) if baked is not None else found]


def _other_inputs(by_stage: _ByStage, base_dir: str | None) -> list[Finding]:
    """A fix checked at other inputs (it answers a finding there) that differs there, with no
    frozen trace to blame: the fix holds at the example only, so it is no fix."""
    export = by_stage.get(Stage.EXPORT)
    parity = by_stage.get(Stage.PARITY)
    second = (parity.facts.get("second_inputs") if parity else None) or {}
    second = second if isinstance(second, dict) else {}
    if parity is not None and parity.status is Status.PASSED and parity.facts.get("other_inputs_required") and (
            "matched" not in second or second.get("unchecked")):
        # The check at other inputs did not run, or PyTorch refused every set: not verified there.
        why = second.get("message") or "the check at other inputs could not run"
        return [make_finding("OD803", Stage.SHAPES, f"not checked at other inputs ({why}), where the "
                             "finding this fix answers is")]
    if export is not None and (any("might cause the trace to be incorrect" in w for w in export.warnings)
                               or export.facts.get("module_indices")):
        return []  # _frozen_trace reports it, with the frozen value as the cause
    if second.get("matched") is not False or second.get("unchecked"):
        return []
    refused = _refused_dims(second, export, _declared_dims(by_stage))
    if refused is None:
        return []  # declared dynamic and specialised by the exporter: the SHAPES stage's OD804
    if refused:
        return refused
    op, node = _frozen_op(export, second, None) if export is not None else (None, None)
    where = _first_difference(second.get("diverging"), second.get("diverging_call"))
    return [make_finding(
        "OD803",
        Stage.SHAPES,
        f"at other inputs ({second.get('source')}) the export differs from PyTorch: {second.get('message')}"
        + (f"; the difference first arises at {where}" if where else ""),
        op=op,
        node=node,
    )]


# ONNX Runtime refusing an input whose dims the graph fixed: "Got invalid dimensions for input: x
# for the following indices\n index: 1 Got: 16 Expected: 1".
_REFUSED_INPUT = re.compile(r"Got invalid dimensions for input: (\S+) for the following indices")


def _declared_dims(by_stage: _ByStage) -> set[tuple[str, int]]:
    """The (input, dim) pairs the script (or a fix) declared dynamic, as the SHAPES stage read them."""
    shapes = by_stage.get(Stage.SHAPES)
    rows = (shapes.facts.get("declared") if shapes else None) or ()
    return {(str(r.get("input")), int(r.get("dim"))) for r in rows if isinstance(r, dict) and
            isinstance(r.get("dim"), int)}


def _refused_dims(second: Any, export: StageOutcome | None, declared: set[tuple[str, int]]) -> list[Finding] | None:
    """At other inputs ONNX Runtime refused a size in a dim the export fixed, because nothing
    declared it dynamic: the script's own other inputs vary it, so declaring it is the fix (not a
    frozen value: traced at those inputs, the export would match only there). None when every
    such dim was declared: the exporter specialised it, which the SHAPES stage reports."""
    if not isinstance(second, dict) or second.get("matched") is not False:
        return []
    named = _REFUSED_INPUT.search(str(second.get("message") or ""))
    shapes = second.get("shapes") if isinstance(second.get("shapes"), dict) else {}
    if named is None or named.group(1) not in shapes:
        return []
    # Every input's fixed dims that differ there: the worker compared the set's shapes with the
    # graph's input shapes (ONNX Runtime's message names only the first input it refuses).
    rows = [(str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in second.get("fixed") or () if len(r) == 4]
    if not rows:
        return []
    if all((name, dim) in declared for name, dim, _got, _want in rows):
        return None
    exporter = str((export.facts if export else {}).get("exporter") or "")
    detail = FrozenSize(
        dims=tuple((name, dim, f"{name}_{dim}", None, None) for name, dim, _got, _want in rows),
        sizes=(tuple((n, tuple(int(d) for d in shape)) for n, shape in shapes.items()),),
        inputs=tuple(shapes),
        exporter=exporter,
        undeclared=True,
    )
    dims = "; ".join(f"{name!r} dim {dim} (fixed to {want}, {got} there)" for name, dim, got, want in rows)
    return [make_finding(
        "OD802",
        Stage.SHAPES,
        f"the export fixed {dims}: nothing declared {'them' if len(rows) > 1 else 'it'} dynamic, and at other "
        f"inputs ({second.get('source')}) ONNX Runtime refuses the size; declare "
        f"{'them' if len(rows) > 1 else 'it'} dynamic (dynamic_axes / dynamic_shapes)",
        detail=detail,
    )]


# The tracer's words for the conversion that froze a value, and the op doing it.
_CONVERTING = re.compile(r"Converting a tensor to a (Python number|Python integer|Python float|Python boolean|"
                         r"Python list|NumPy array)")
_CONVERSIONS = {"Python number": "aten::item", "Python integer": "aten::Int", "Python float": "aten::Float",
                "Python boolean": "aten::Bool", "Python list": "aten::tolist", "NumPy array": "aten::numpy"}


# Conversions to a Python number, whose value the graph then holds as a constant.
_NUMBERS = ("Python number", "Python integer", "Python float")
# Where a TracerWarning was raised, as tracebacks.warning_texts appends it (`[path/model.py:14]`).
_WARNED_AT = re.compile(r"\[(.+?):(\d+)\]$")


def number_reads(warnings: tuple[str, ...], base_dir: str | None) -> list[tuple[str, str]]:
    """(line, op) for each line of the script's folder (`model.py:14`) where the tracer warned of
    a tensor read into a Python number (`aten::item`, `aten::Int`, `aten::Float`), in the order
    warned."""
    sites: list[tuple[str, str]] = []
    for warning in warnings:
        conversion, where = _CONVERTING.search(warning), _WARNED_AT.search(warning)
        if not (conversion and conversion.group(1) in _NUMBERS and where and base_dir):
            continue
        if Path(where.group(1)).resolve().parent == Path(base_dir).resolve():
            site = (f"{Path(where.group(1)).name}:{where.group(2)}", _CONVERSIONS[conversion.group(1)])
            if site not in sites:
                sites.append(site)
    return sites


# The tracer's warning for a tensor made from Python values ("torch.as_tensor results are
# registered as constants in the trace").
_REGISTERED = re.compile(r"torch\.(\w+) results are registered as constants in the trace")


def _constant_maker(frozen: list[str], second: Any, base_dir: str | None) -> tuple[str, str] | None:
    """(warning, op) of the user's call that made a constant tensor, where an output differing at
    other inputs is a constant of the file (no input reaches it)."""
    if not (isinstance(second, dict) and second.get("constant_outputs")):
        return None
    for warning in frozen:
        made = _REGISTERED.search(warning)
        if made and _warning_source(warning, base_dir):
            return warning, f"aten::{made.group(1)}"
    return None


def _frozen_op(export: StageOutcome, second: dict[str, Any], source: str | None) -> tuple[str | None, str | None]:
    """The op a frozen value hurts, and its node: where other inputs first differ (or the node
    ONNX Runtime failed in there), else the op the warned line exported; the torch op the node
    was exported from where provenance knows it."""
    table = provenance_table(export.facts)
    call = second.get("diverging_call") if isinstance(second.get("diverging_call"), dict) else {}
    if call.get("node") and call.get("torch_op"):
        # Compared call by call with a trace taken at those inputs: the first whose result differs
        # is where the frozen value first shows (the topk whose k, the one_hot whose depth it is).
        consumer = call.get("consumer") if isinstance(call.get("consumer"), dict) else {}
        return str(call["torch_op"]), str(consumer.get("node") or call["node"])
    diverging = second.get("diverging") if isinstance(second.get("diverging"), dict) else {}
    on_line = [r for r in table.values() if source and r.source.endswith(source) and r.torch_op
               and not r.torch_op.startswith("prim::")]
    if on_line and diverging.get("module"):
        # The difference was located at a submodule's output, downstream of the frozen value;
        # the op the warned line exported inside it is the one holding the constant.
        return on_line[0].torch_op, on_line[0].node
    node = diverging.get("node")
    failed = running_node(str(second.get("message") or ""))
    if node is None and failed:
        node = failed.group(2) or None
    row = table.get(str(node)) if node else None
    if row is not None and row.torch_op and not row.torch_op.startswith("prim::"):
        return row.torch_op, node
    if node:
        return diverging.get("op") or (failed.group(1) if failed else None), node
    # No difference located: the first op exported from the line the tracer warned about.
    return (on_line[0].torch_op, on_line[0].node) if on_line else (None, None)


def _numpy_consumer(source: str | None, base_dir: str | None) -> str | None:
    """The function the warned line hands a `.numpy()` array to (`linear_sum_assignment` in
    `rows, cols = linear_sum_assignment(sim.cpu().numpy())`), by the line's own text; None when
    the line is not one whole statement or passes the array to no call."""
    found = source_text(source, base_dir)
    if found is None:
        return None
    text, line = found
    try:
        tree = ast.parse(text.splitlines()[line - 1].strip())
    except (IndexError, SyntaxError, ValueError):
        return None
    receivers = [call for call in ast.walk(tree) if isinstance(call, ast.Call) and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "numpy"
        for arg in [*call.args, *(k.value for k in call.keywords)] for n in ast.walk(arg))]
    # The innermost (ast.walk goes breadth first): `torch.from_numpy(np.argsort(x.numpy()))` hands
    # the array to np.argsort, and torch.from_numpy only takes its result back.
    return ast.unparse(receivers[-1].func) if receivers else None


def _unpacks(source: str | None, base_dir: str | None) -> bool:
    """Whether the statement at `file.py:line` assigns to a fixed number of names (`a, b = t`)."""
    parsed = parsed_source(source, base_dir)
    if parsed is None:
        return False
    tree, line = parsed
    return any(isinstance(node, ast.Assign) and node.lineno <= line <= (node.end_lineno or node.lineno)
               and any(isinstance(t, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in t.elts)
                       for t in node.targets)
               for node in ast.walk(tree))


def _enclosing_function(source: str | None, base_dir: str | None) -> str | None:
    """The name of the innermost function holding `file.py:line`, unless it is a module's forward()
    (the model's own code, not a helper it calls); the forward of an autograd.Function is named
    by its class (its ops run as one unit: AnyNet's GateRecurrent2dnoindFunction)."""
    found = innermost_function(source, base_dir)
    if found is None:
        return None
    tree, innermost = found
    if innermost.name not in ("forward", "__call__"):
        return innermost.name
    owner = max((c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and innermost in c.body),
                key=lambda c: c.lineno, default=None)
    functions = [b for b in (owner.bases if owner is not None else ()) if ast.unparse(b).split(".")[-1] == "Function"]
    return owner.name if owner is not None and functions else None


def _first_difference(found: object, call: object = None) -> str | None:
    """'module `roi_heads` (RoIHeads), node /roi_heads/TopK (TopK)' from the localisation's facts;
    with the call search's result (`call`), its node, op and line."""
    if isinstance(call, dict) and call.get("node"):
        shapes = call.get("shapes")
        how = (f"shape {tuple(shapes[1])} where PyTorch has {tuple(shapes[0])}" if isinstance(shapes, list) and len(shapes) == 2
               else "other values")
        line = f" at {call['source']}" if call.get("source") else ""
        return f"node {call['node']} ({call.get('op')}, from {call.get('torch_op')}{line}): {how}"
    if not isinstance(found, dict) or not found.get("module"):
        return None
    text = f"module `{found['module']}` ({found.get('module_class')})"
    if found.get("node"):
        text += f", node {found['node']} ({found.get('op')})"
    return text


def _static_dims(by_stage: _ByStage, base_dir: str | None) -> list[Finding]:
    export = by_stage.get(Stage.EXPORT)
    if export and export.facts.get("dynamic_shapes_requested") and (
        export.facts.get("symbolic_input_dims") == 0 or export.facts.get("dynamic_shapes_violation")
    ):
        return [_dynamic_dims_finding(export, base_dir)]
    return []


def _none_outputs(by_stage: _ByStage, base_dir: str | None) -> list[Finding]:
    load, parity = by_stage.get(Stage.LOAD), by_stage.get(Stage.PARITY)
    nones = load.facts.get("none_outputs", 0) if load else 0
    if not (load and parity and parity.status is Status.PASSED and nones):
        return []
    total = len(load.facts.get("outputs", [])) + nones
    finding = make_finding(
        "OD602",
        Stage.PARITY,
        f"PyTorch returns {total} outputs, {nones} of them None; the ONNX model has "
        f"{total - nones}: the exporter drops None outputs, so code that unpacks "
        f"{total} values from ONNX Runtime breaks",
    )
    return [replace(finding, severity=Severity.WARNING)]


def _dropped_inputs(by_stage: _ByStage, base_dir: str | None) -> list[Finding]:
    run = by_stage.get(Stage.ORT_RUN)
    if not (run and run.status is Status.PASSED and "model_inputs" in run.facts):
        return []
    names, given = run.facts["model_inputs"], run.facts.get("example_tensors", 0)
    if len(names) >= given:
        return []
    load = by_stage.get(Stage.LOAD)
    declared = ((load.facts.get("settings") or {}) if load else {}).get("input_names") or []
    dropped = [str(n) for n in declared if n not in names] if len(declared) == given else []
    which = f" ({', '.join(dropped)})" if dropped else ""
    if not names:
        # Nothing the graph computes reads an input: its outputs are constants of the example's,
        # and a mismatch at parity is this, not a node that computes otherwise.
        return [make_finding(
            "OD502",
            Stage.ORT_RUN,
            f"the exported model takes no inputs: the exporter dropped every input{which}, so its outputs "
            "are constants computed from the example (the data flow from the inputs was cut: an in-place "
            "write into a new tensor, a value taken out of a tensor into Python)",
        )]
    return [make_finding(
        "OD502",
        Stage.ORT_RUN,
        f"the exported model takes {len(names)} input(s) ({', '.join(names)}) but the example "
        f"inputs hold {given} tensors: the exporter dropped unused input(s){which}, so feeding the "
        "model by the original input names fails",
    )]


def _checker_warnings(by_stage: _ByStage, base_dir: str | None) -> list[Finding]:
    check = by_stage.get(Stage.CHECK)
    if not (check and check.status is Status.PASSED):
        return []
    return [finding_from_record(record, base_dir) for record in check.facts.get("findings", [])]


def _in_class(source: str | None, name: object, base_dir: str | None) -> bool:
    """Whether `file.py:line` lies in the body of a class of that name in that file."""
    parsed = parsed_source(source, base_dir) if isinstance(name, str) and name else None
    if parsed is None:
        return False
    tree, line = parsed
    return any(isinstance(node, ast.ClassDef) and node.name == name and node.lineno <= line <= (node.end_lineno or 0)
               for node in ast.walk(tree))


def _warning_source(text: str, base_dir: str | None) -> str | None:
    match = re.search(r"([\w.\-/]+\.py):(\d+)", text)
    if match and "site-packages" not in match.group(1):
        return f"{match.group(1).rsplit('/', 1)[-1]}:{match.group(2)}"
    return None


def _dynamic_dims_finding(export: StageOutcome, base_dir: str | None) -> Finding:
    """OD208 for an export that succeeded although torch.export rejects the user's Dims."""
    violation = str(export.facts.get("dynamic_shapes_violation") or "")
    reason = next(
        (ln.strip(" -") for ln in violation.splitlines() if "specialized" in ln or "Not all values" in ln
         or "must always be" in ln), ""
    )
    suggested = [str(x) for x in export.facts.get("dynamic_shapes_suggested") or ()]
    equalities = bool(suggested) and all(re.fullmatch(r"\w+ = [A-Za-z_]\w*", x) for x in suggested)
    severity = Severity.ERROR
    if export.facts.get("symbolic_input_dims") == 0:
        message = (
            "dynamic_shapes were requested but every input dimension of the exported model is static "
            "(the model only accepts the example shapes)"
        )
    elif equalities:
        # torch.onnx merged Dims the model needs equal: the model is right, the declaration was not.
        severity = Severity.WARNING
        message = f"torch.onnx merged dims the model needs equal ({'; '.join(suggested)}) without saying so"
    else:
        message = (
            "torch.onnx relaxed the Dims without saying so"
            + (f" (to {'; '.join(suggested)})" if suggested else "")
            + ": the ONNX model cannot check that condition, so other sizes give wrong answers without "
            "an error"
        )
    if reason:
        # torch's first sentence names the dim; the rest is advice about mark_dynamic and Dim.DYNAMIC.
        message += ": torch.export says " + normalize_message(_readable_guard(reason.split(". ")[0]),
                                                             base_dir=base_dir, limit=240)
    evidence = tuple(normalize_message(ln, base_dir=base_dir, limit=300) for ln in violation.splitlines()[:6])
    if not evidence:
        evidence = tuple(w for w in export.warnings if "dynamic" in w.lower() or "special" in w.lower())[:2]
    return replace(make_finding("OD208", Stage.EXPORT, message, evidence=evidence), severity=severity)


def _readable_guard(text: str) -> str:
    """torch's guard notation in the user's terms: L['x'].size()[0] is x.shape[0]."""
    text = re.sub(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]", r"\1.shape[\2]", text)
    return re.sub(r" and [\w.\[\]]+ <= IntInfinity\(\)", "", text)
