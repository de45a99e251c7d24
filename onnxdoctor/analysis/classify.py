"""Pure classification: stage outcomes -> findings with stable codes.

The worker reports what happened (exception type chain, messages, facts); this module decides
what it means. Order of evidence: an explicit code the worker could determine itself (protocol
violations, parity), then the exception type chain, then the normalized message.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from onnxdoctor.analysis.normalize import first_line, normalize_message
from onnxdoctor.codes import catch_all, get_code
from onnxdoctor.model import (
    DynamicShapesKeys,
    ErrorInfo,
    Finding,
    FindingDetail,
    IrTooNew,
    Severity,
    Stage,
    StageOutcome,
    Status,
)

_DYNAMIC_SHAPES_KEYS = re.compile(
    r"top-level keys must be the arg names (\[[^\]]*\]) of `inputs`, but here they are (\[[^\]]*\])"
)
# torch ends the sentence right after the name ("... namespace ns::op. If you are ..."): a name
# may contain dots (ns::op.overload) but never ends with one.
_UNRECOGNIZED_NS = re.compile(r"unrecognized namespace ([A-Za-z_][\w.]*::[A-Za-z_](?:[\w.]*\w)?)")
_TS_UNSUPPORTED = re.compile(
    r"Exporting the operator '?([\w.]+::[\w.]+)'? to ONNX opset version (\d+) is not supported"
)
_TS_ADDED_IN = re.compile(r"Support for this operator was added in version (\d+)")
_NO_ONNX_FUNCTION = re.compile(r"No ONNX function found for <OpOverload\(op='([\w.]+)', overload='(\w+)'\)>")
_NO_ONNX_FUNCTION_PLAIN = re.compile(r"No ONNX function found for ([\w.]+::[\w.]+|[\w]+\.[\w]+\.[\w]+)")
_NO_OP_REGISTERED = re.compile(r"No Op registered for ([\w.]+) with domain_version of (\d+)")
NOT_REGISTERED_RT = re.compile(r"([\w.]*):([\w.]+)\((-?\d+)\) is not a registered function/op")
NO_IMPLEMENTATION = re.compile(
    r"Could not find an implementation for ([\w.]+)\((\d+)\) node with name '([^']*)'"
)
_IR_VERSION = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")
_OPSET_RT = re.compile(
    r"(?:[Oo]pset (\d+) is under development|ONNX Runtime only \*guarantees\* support for models stamped "
    r"with official released onnx opset versions\. Opset (\d+)|opset (\d+) .*not supported|"
    r"domain_version of (\d+) is not supported)"
)
_OPSET_RANGE = re.compile(r"Unsupported ONNX opset version: (\d+)|Unsupported onnx_opset_version: (\d+)|opset_version.*must be .*between|"
                          r"ONNX opset version (\d+) is not supported|opset version (\d+) is not supported by")
_RUNNING_NODE = re.compile(r"running ([\w.]+) node\. Name:'([^']*)'")
_SOURCE_RANGE = re.compile(r"#\s*([\w.\-/]+\.py):(\d+):\d+")

_CAPTURE_TYPES = (
    "torch._dynamo.exc.UserError",
    "torch._dynamo.exc.Unsupported",
    "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode",
    "torch._dynamo.exc.TorchRuntimeError",
    "torch.export.",
)
_CAPTURE_TEXT = (
    "Could not guard on data-dependent expression",
    "data-dependent",
    "Failed to export the model with torch.export",
    "Dynamic control flow is not supported",
    "Could not extract specialized integer from data-dependent",
)


def extract_op(text: str) -> str | None:
    """The qualified op a failure message names, e.g. "mynamespace::myselu" or "aten::gelu"."""
    for pattern in (_UNRECOGNIZED_NS, _TS_UNSUPPORTED):
        match = pattern.search(text)
        if match:
            return match.group(1)
    match = _NO_ONNX_FUNCTION.search(text)
    if match:
        namespace, _, name = match.group(1).partition(".")
        return f"{namespace}::{name}"
    match = _NO_ONNX_FUNCTION_PLAIN.search(text)
    if match:
        raw = match.group(1)
        if "::" in raw:
            return raw
        namespace, name, _overload = raw.split(".")
        return f"{namespace}::{name}"
    match = _NO_OP_REGISTERED.search(text)
    if match:
        return match.group(1)
    match = NOT_REGISTERED_RT.search(text)
    if match:
        return f"{match.group(1)}::{match.group(2)}" if match.group(1) else match.group(2)
    match = NO_IMPLEMENTATION.search(text)
    if match:
        return match.group(1)
    return None


def classify(stages: Iterable[StageOutcome], *, base_dir: str | None = None) -> list[Finding]:
    """Findings for one pipeline run: the first failure, then warnings that bite later."""
    stages = list(stages)
    findings: list[Finding] = []
    by_stage = {s.stage: s for s in stages}
    for outcome in stages:
        if outcome.status in (Status.PASSED, Status.SKIPPED):
            continue
        if outcome.status in (Status.CRASHED, Status.TIMED_OUT):
            break  # the worker died: the supervisor's tool finding (OD901/OD902/OD903) says how
        findings.extend(_classify_failure(outcome, by_stage, base_dir))
        break
    findings.extend(_warnings(stages, base_dir))
    return _with_node_sources(_dedupe(findings), by_stage)


def _with_node_sources(findings: list[Finding], by_stage: dict[Stage, StageOutcome]) -> list[Finding]:
    """Give a finding about an exported node the user's line that produced it (dynamo records it)."""
    export = by_stage.get(Stage.EXPORT)
    sources = (export.facts.get("node_sources") if export else None) or {}
    return [
        replace(f, source=sources[f.node]) if f.node and not f.source and f.node in sources else f
        for f in findings
    ]


def _classify_failure(
    outcome: StageOutcome, by_stage: dict[Stage, StageOutcome], base_dir: str | None
) -> list[Finding]:
    facts = outcome.facts
    error = outcome.error
    text = error.all_text() if error else ""
    evidence = _evidence(error, base_dir)
    hint = facts.get("code")
    if outcome.stage is Stage.CHECK and facts.get("findings"):
        found = [_from_record(r, base_dir) for r in facts["findings"]]
        return _blame_user_symbolic(found, by_stage) + found
    if hint and outcome.stage is Stage.PARITY:
        return [_parity_finding(str(hint), outcome, by_stage, evidence, base_dir)]
    if hint:
        code = str(hint)
        message = first_line(normalize_message(error.message if error else "", base_dir=base_dir)) or get_code(code).summary
        if code == "OD104" and error and error.chain_messages:
            evidence = _evidence(error, base_dir)
        return [
            _finding(
                code,
                outcome.stage,
                message,
                op=facts.get("op"),
                node=facts.get("node"),
                source=facts.get("source"),
                evidence=evidence,
            )
        ]
    classifier = {
        Stage.EXPORT: _classify_export,
        Stage.ORT_LOAD: _classify_ort_load,
    }.get(outcome.stage)
    if classifier is not None:
        found = classifier(outcome, text, evidence, base_dir, by_stage)
        if found:
            return found
    code = catch_all(outcome.stage)
    op, node = facts.get("op") or (extract_op(text) if text else None), facts.get("node")
    if outcome.stage is Stage.ORT_RUN:
        code = "OD501"
        running = _RUNNING_NODE.search(text)
        if running:
            op, node = running.group(1), running.group(2)
    message = first_line(normalize_message(error.message if error else "failed", base_dir=base_dir))
    return [
        _finding(
            code,
            outcome.stage,
            message,
            op=op,
            node=node,
            source=facts.get("source"),
            evidence=evidence,
        )
    ]


def _classify_export(
    outcome: StageOutcome,
    text: str,
    evidence: tuple[str, ...],
    base_dir: str | None,
    by_stage: dict[Stage, StageOutcome],
) -> list[Finding]:
    facts = outcome.facts
    error = outcome.error
    assert error is not None
    op = facts.get("op") or extract_op(text)
    source = facts.get("source") or _source_from_text(text, base_dir)
    opset = facts.get("requested_opset")
    chain = " ".join(error.chain)

    def make(code: str, message: str, **extra: Any) -> list[Finding]:
        return [
            _finding(code, Stage.EXPORT, message, op=extra.get("op", op), node=None,
                     source=source, opset=extra.get("opset", opset), evidence=evidence,
                     detail=extra.get("detail"))
        ]

    match = _UNRECOGNIZED_NS.search(text)
    if match:
        return make("OD203", f"custom op {match.group(1)} has no ONNX export mapping (TorchScript exporter)")
    match = _TS_UNSUPPORTED.search(text)
    if match:
        op, at = match.group(1), int(match.group(2))
        added = _TS_ADDED_IN.search(text)
        if added:
            return make("OD201", f"{op} is not supported at opset {at}; support starts at opset {added.group(1)}",
                        op=op, opset=at)
        return make("OD202", f"{op} has no ONNX export in the TorchScript exporter at any opset", op=op, opset=at)
    match = _NO_ONNX_FUNCTION.search(text) or _NO_ONNX_FUNCTION_PLAIN.search(text)
    if match and op:
        namespace = op.split("::", 1)[0]
        if namespace not in ("aten", "prims", "quantized", "_operator"):
            return make("OD203", f"custom op {op} has no ONNX export mapping (dynamo exporter)")
        return make("OD202", f"{op} has no ONNX function in the dynamo exporter's registry")
    if _OPSET_RANGE.search(text):
        found = make("OD209", first_line(normalize_message(error.message, base_dir=base_dir)))
        return [replace(found[0], severity=Severity.ERROR)]  # here the export itself failed
    capture = any(t in chain for t in _CAPTURE_TYPES) or any(t in text for t in _CAPTURE_TEXT)
    if capture:
        if ("Constraints violated" in text or "dynamic_shapes" in text) and "data-dependent" not in text:
            keys = _DYNAMIC_SHAPES_KEYS.search(text)
            if keys:
                return make("OD208", f"dynamic_shapes is keyed by {keys.group(2)}, but forward()'s "
                                     f"arguments are {keys.group(1)}", detail=_shape_keys(keys))
            return make("OD208", _capture_message(text, base_dir, "dynamic_shapes do not match the model"))
        detail = _capture_message(text, base_dir, "")
        if "data-dependent" in text:
            message = ("torch.export cannot capture Python control flow or conversions on tensor values "
                       "(if/while on a tensor, .item(), int(tensor))")
        else:
            message = "torch.export could not capture the model"
        return make("OD204", message + (f": {detail}" if detail else ""))
    if facts.get("symbolic_frame") or _bad_symbolic(text, error):
        return make("OD205", first_line(normalize_message(error.message, base_dir=base_dir)))
    return []


def _parity_finding(
    code: str,
    outcome: StageOutcome,
    by_stage: dict[Stage, StageOutcome],
    evidence: tuple[str, ...],
    base_dir: str | None,
) -> Finding:
    """A parity finding located at the first diverging node when that could be found."""
    facts = outcome.facts
    message = outcome.error.message if outcome.error else get_code(code).summary
    rows = [
        f"output {r['index']}: torch {r['torch_dtype']}{r['torch_shape']} vs ort {r['ort_dtype']}{r['ort_shape']}"
        + (f", max abs {r['max_abs_diff']:.3g}, max rel {r['max_rel_diff']:.3g}" if "max_abs_diff" in r else "")
        for r in facts.get("outputs", [])
    ]
    op = node = None
    diverging = facts.get("diverging")
    if diverging:
        op, node = diverging.get("op"), diverging.get("node")
        message += (
            f"; the first value that differs is {diverging['value']!r} (node {node}, {op}): "
            f"max abs {diverging['max_abs_diff']:.3g}, max rel {diverging['max_rel_diff']:.3g}"
        )
    load, export = by_stage.get(Stage.LOAD), by_stage.get(Stage.EXPORT)
    symbolics = (load.facts.get("custom_symbolics") if load else None) or {}
    if not diverging and symbolics and export and export.facts.get("exporter") == "torchscript":
        op = next(iter(symbolics)) if len(symbolics) == 1 else None
        message += f"; the model holds nodes emitted by your own symbolic(s) for {', '.join(symbolics)}: check them first"
    return _finding(code, Stage.PARITY, normalize_message(message, base_dir=base_dir, limit=600), op=op,
                    node=node, evidence=tuple(rows) + evidence[:1])


def _blame_user_symbolic(found: list[Finding], by_stage: dict[Stage, StageOutcome]) -> list[Finding]:
    """A schema error in a TorchScript export whose script registered symbolics: likely theirs."""
    load, export = by_stage.get(Stage.LOAD), by_stage.get(Stage.EXPORT)
    symbolics = load.facts.get("custom_symbolics") if load else None
    if not symbolics or not export or export.facts.get("exporter") != "torchscript":
        return []
    first = next((f for f in found if f.severity is Severity.ERROR and f.code in ("OD303", "OD301", "OD304")), None)
    if first is None:
        return []
    op = next(iter(symbolics)) if len(symbolics) == 1 else None
    names = ", ".join(symbolics)
    return [
        _finding(
            "OD205",
            Stage.EXPORT,
            f"the node {first.node or first.op} breaks its schema ({first.code}); it was emitted by a "
            f"symbolic function registered in your script ({names})",
            op=op,
            node=first.node,
            opset=first.opset,
            evidence=(first.message, *first.evidence),
        )
    ]


def _bad_symbolic(text: str, error: ErrorInfo) -> bool:
    markers = (
        "is not a valid attribute",
        "Invalid attribute specifier",
        "Incompatible attribute kind",
        "_jit_pass_onnx_graph_shape_type_inference",
        "symbolic",
        "g.op(",
        "wrong number of",
        "number of inputs",
        "incompatible function arguments",
    )
    return any(m in text for m in markers) and "torch.onnx" in (error.traceback_tail + " ".join(error.chain))


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
    return replace(_finding("OD208", Stage.EXPORT, message, evidence=evidence), severity=severity)


def _readable_guard(text: str) -> str:
    """torch's guard notation in the user's terms: L['x'].size()[0] is x.shape[0]."""
    text = re.sub(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]", r"\1.shape[\2]", text)
    return re.sub(r" and [\w.\[\]]+ <= IntInfinity\(\)", "", text)


def _capture_message(text: str, base_dir: str | None, default: str) -> str:
    for line in text.splitlines():
        line = re.sub(r"^<class '[\w.]+'>: ", "", line.strip())
        if any(key in line for key in ("Could not guard", "data-dependent", "Constraints violated", "Unsupported")):
            return normalize_message(line, base_dir=base_dir, limit=200)
    return default


def _classify_ort_load(
    outcome: StageOutcome,
    text: str,
    evidence: tuple[str, ...],
    base_dir: str | None,
    by_stage: dict[Stage, StageOutcome],
) -> list[Finding]:
    facts = outcome.facts
    found: list[Finding] = []
    match = NOT_REGISTERED_RT.search(text)
    if match:
        domain, op_type = match.group(1), match.group(2)
        op = f"{domain}::{op_type}" if domain else op_type
        found.append(_finding("OD401", Stage.ORT_LOAD,
                              f"ONNX Runtime has no kernel for {op}: register a custom-op library or kernel",
                              op=op, node=facts.get("node"), evidence=evidence))
    match = NO_IMPLEMENTATION.search(text) if not found else None
    if match:
        op_type, version, node = match.group(1), int(match.group(2)), match.group(3)
        types = facts.get("node_types") or {}
        listed = _kernel_type_summary(facts.get("kernels") or [], version)
        detail = f"; inputs are {', '.join(sorted(set(types.values())))}" if types else ""
        message = f"ONNX Runtime (CPU) has no {op_type}({version}) kernel for these types{detail}"
        if listed:
            message += f"; its kernel table lists {listed}"
        ev = evidence + tuple(f"kernel: {k}" for k in _kernel_lines(facts.get("kernels") or []))
        found.append(_finding("OD402", Stage.ORT_LOAD, message, op=op_type, node=node or None,
                              opset=version, evidence=ev))
    match = _IR_VERSION.search(text) if not found else None
    if match:
        found.append(_finding("OD403", Stage.ORT_LOAD,
                              f"the model's IR version {match.group(1)} is newer than this ONNX Runtime "
                              f"supports (max {match.group(2)})", evidence=evidence,
                              detail=IrTooNew(int(match.group(1)), int(match.group(2)))))
    match = _OPSET_RT.search(text) if not found else None
    if match:
        opset = next((int(g) for g in match.groups() if g), None)
        found.append(_finding("OD404", Stage.ORT_LOAD,
                              f"opset {opset} is newer than this ONNX Runtime supports", opset=opset,
                              evidence=evidence))
    if not found:
        error = outcome.error
        found.append(_finding(catch_all(Stage.ORT_LOAD), Stage.ORT_LOAD,
                              first_line(normalize_message(error.message if error else "failed", base_dir=base_dir)),
                              op=facts.get("op"), node=facts.get("node"), evidence=evidence))
    check = by_stage.get(Stage.CHECK)
    checker_too_old = check is not None and any(
        "higher than the checker's" in r.get("message", "") for r in check.facts.get("findings", [])
    )
    if check is not None and check.status is Status.PASSED and not checker_too_old:
        first = found[0]
        found.append(_finding("OD406", Stage.ORT_LOAD,
                              f"onnx.checker passed this model, but ONNX Runtime refuses it ({first.code})",
                              op=first.op, node=first.node, opset=first.opset))
    return found


def _kernel_type_summary(kernels: list[dict[str, Any]], version: int) -> str:
    for kernel in kernels:
        if kernel.get("since", 0) <= version <= kernel.get("until", 10**6):
            types = kernel.get("types") or {}
            if types:
                first = min(types)
                return f"{first} in {{{', '.join(t.replace('tensor(', '').rstrip(')') for t in types[first])}}}"
    return ""


def _kernel_lines(kernels: list[dict[str, Any]]) -> list[str]:
    lines = []
    for kernel in kernels[:8]:
        types = "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted((kernel.get('types') or {}).items()))
        lines.append(f"{kernel.get('domain')} opset {kernel.get('since')}-{kernel.get('until')}: {types}")
    return lines


def _warnings(stages: list[StageOutcome], base_dir: str | None) -> list[Finding]:
    found: list[Finding] = []
    by_stage = {s.stage: s for s in stages}
    load = by_stage.get(Stage.LOAD)
    export = by_stage.get(Stage.EXPORT)
    if load and load.facts.get("training") and load.facts.get("mode_sensitive_modules"):
        modules = load.facts["mode_sensitive_modules"]
        found.append(
            _finding(
                "OD206",
                Stage.EXPORT,
                f"the model is in training mode and has {len(modules)} mode-sensitive module(s) "
                f"({', '.join(modules[:3])}); the export and the outputs depend on it",
                evidence=tuple(w for w in (export.warnings if export else ()) if "training" in w)[:2],
            )
        )
    if export and export.status is Status.PASSED:
        requested = export.facts.get("requested_opset")
        written = export.facts.get("written_opset")
        exporter = export.facts.get("exporter", "")
        ceiling = export.facts.get("exporter_max_opset")
        if requested and ((ceiling and int(requested) > int(ceiling)) or
                          (written and exporter == "dynamo" and int(requested) > int(written))):
            limit = f"its maximum is {ceiling}" if ceiling else f"it wrote opset {written} instead"
            found.append(
                _finding(
                    "OD209",
                    Stage.EXPORT,
                    f"opset {requested} is beyond what the {exporter} exporter supports ({limit})",
                    opset=int(requested),
                    evidence=tuple(w for w in export.warnings if "opset" in w.lower())[:2],
                )
            )
        elif requested and written and int(requested) != int(written):
            found.append(
                _finding(
                    "OD207",
                    Stage.EXPORT,
                    f"opset {requested} was requested but the {export.facts.get('exporter', '')} exporter "
                    f"wrote opset {written}",
                    opset=int(written),
                )
            )
    frozen = [w for w in (export.warnings if export else ()) if "might cause the trace to be incorrect" in w]
    if export and export.status is Status.PASSED and frozen:
        found.append(
            _finding(
                "OD210",
                Stage.EXPORT,
                "the TorchScript tracer turned a tensor into a Python value (a branch or a number) and "
                "recorded only what the example input did: other inputs can give wrong results "
                "without any error",
                source=_warning_source(frozen[0], base_dir),
                evidence=tuple(normalize_message(w, base_dir=base_dir, limit=500) for w in frozen[:2]),
            )
        )
    if export and export.facts.get("dynamic_shapes_requested") and (
        export.facts.get("symbolic_input_dims") == 0 or export.facts.get("dynamic_shapes_violation")
    ):
        found.append(_dynamic_dims_finding(export, base_dir))
    parity = by_stage.get(Stage.PARITY)
    nones = load.facts.get("none_outputs", 0) if load else 0
    if parity and parity.status is Status.PASSED and nones:
        total = len(load.facts.get("outputs", [])) + nones
        found.append(
            replace(
                _finding(
                    "OD602",
                    Stage.PARITY,
                    f"PyTorch returns {total} outputs, {nones} of them None; the ONNX model has "
                    f"{total - nones}: the exporter drops None outputs, so code that unpacks "
                    f"{total} values from ONNX Runtime breaks",
                ),
                severity=Severity.WARNING,
            )
        )
    run = by_stage.get(Stage.ORT_RUN)
    if run and run.status is Status.PASSED and "model_inputs" in run.facts:
        names, given = run.facts["model_inputs"], run.facts.get("example_tensors", 0)
        if len(names) < given:
            found.append(
                _finding(
                    "OD502",
                    Stage.ORT_RUN,
                    f"the exported model takes {len(names)} input(s) ({', '.join(names)}) but the example "
                    f"inputs hold {given} tensors: the exporter dropped unused input(s), so feeding the "
                    "model by the original input names fails",
                )
            )
    check = by_stage.get(Stage.CHECK)
    if check and check.status is Status.PASSED:
        for record in check.facts.get("findings", []):
            found.append(_from_record(record, base_dir))
    return found


def _warning_source(text: str, base_dir: str | None) -> str | None:
    match = re.search(r"([\w.\-/]+\.py):(\d+)", text)
    if match and "site-packages" not in match.group(1):
        return f"{match.group(1).rsplit('/', 1)[-1]}:{match.group(2)}"
    return None


def _from_record(record: dict[str, Any], base_dir: str | None) -> Finding:
    code = record["code"]
    return Finding(
        code=code,
        stage=get_code(code).stage,
        severity=Severity(record.get("severity") or get_code(code).severity.value),
        message=normalize_message(record.get("message", ""), base_dir=base_dir, limit=500),
        op=record.get("op"),
        node=record.get("node"),
        source=record.get("source"),
        opset=record.get("opset"),
        evidence=tuple(normalize_message(e, base_dir=base_dir, limit=1500) for e in record.get("evidence", ())),
    )


def _shape_keys(match: re.Match[str]) -> DynamicShapesKeys | None:
    """torch's two key lists (`['x', 'y']`), read as data."""
    try:
        wanted, given = ast.literal_eval(match.group(1)), ast.literal_eval(match.group(2))
    except (ValueError, SyntaxError):
        return None
    if not all(isinstance(k, str) for k in (*wanted, *given)):
        return None
    return DynamicShapesKeys(tuple(wanted), tuple(given))


def _finding(
    code: str,
    stage: Stage,
    message: str,
    *,
    op: str | None = None,
    node: str | None = None,
    source: str | None = None,
    opset: int | None = None,
    evidence: tuple[str, ...] = (),
    detail: FindingDetail | None = None,
) -> Finding:
    entry = get_code(code)
    return Finding(
        code=code,
        stage=stage,
        severity=entry.severity,
        message=message,
        op=op,
        node=node,
        source=source,
        opset=int(opset) if opset is not None else None,
        evidence=evidence,
        detail=detail,
    )


def _evidence(error: ErrorInfo | None, base_dir: str | None) -> tuple[str, ...]:
    if error is None:
        return ()
    # The innermost cause names the problem most directly (DispatchError inside ConversionError).
    items: list[str | None] = []
    for kind, message in reversed(list(zip(error.chain[1:], error.chain_messages))):
        items.append(_evidence_line(kind, normalize_message(message, base_dir=base_dir, limit=800)))
    items.append(_evidence_line(error.type, normalize_message(error.message, base_dir=base_dir, limit=1500)))
    return tuple(item for item in items if item is not None)[:4]


def _short_type(qualified: str) -> str:
    module, _, name = qualified.rpartition(".")
    return name if module in ("builtins", "") else qualified


def _evidence_line(kind: str, message: str) -> str | None:
    # The worker's own StageFailed carries onnxdoctor's message, already the finding's: evidence is
    # what the libraries said.
    if kind.startswith("onnxdoctor."):
        return None
    return f"{_short_type(kind)}: {message}"


def _source_from_text(text: str, base_dir: str | None) -> str | None:
    for match in _SOURCE_RANGE.finditer(text):
        path = match.group(1)
        if "site-packages" in path or "/torch/" in path:
            continue
        return f"{path.rsplit('/', 1)[-1]}:{match.group(2)}"
    return None


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str | None, str | None]] = set()
    result: list[Finding] = []
    for finding in findings:
        key = (finding.code, finding.op, finding.node)
        if key in seen:
            continue
        seen.add(key)
        result.append(finding)
    errors = [f for f in result if f.severity is Severity.ERROR]
    others = [f for f in result if f.severity is not Severity.ERROR]
    return errors + others
