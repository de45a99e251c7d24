"""Turn a diagnose run into one TargetResult per requested deployment target (docs/targets.md)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from onnxdoctor.codes import get_code
from onnxdoctor.model import Finding, Stage, StageOutcome, Status, TargetGap
from onnxdoctor.targets import (
    DEFAULT_TARGET,
    GPU_PROVIDERS,
    OPENVINO_INSTALL,
    UnknownTargetError,
    get_target,
    resolve_targets,
)
from onnxdoctor.targets.tables import nodes_list, nodes_summary
from onnxdoctor.targets.verdict import NodeStatus, NodeVerdict, TargetResult

_ORT_STEPS = {Stage.CHECK: "check", Stage.ORT_LOAD: "load", Stage.ORT_RUN: "run", Stage.PARITY: "parity"}


def requested_targets(cli_targets: Sequence[str], outcomes: Sequence[StageOutcome]) -> tuple[tuple[str, ...], list[str]]:
    """--target's names, else the script's module-level `targets`; unknown script names are reported.

    Raises:
        UnknownTargetError: a --target name is unknown (a usage error: the CLI checks first).
    """
    if cli_targets:
        return resolve_targets(tuple(cli_targets)), []
    load = next((o for o in outcomes if o.stage is Stage.LOAD), None)
    wanted = ((load.facts.get("settings") or {}).get("targets") if load else None) or ()
    if isinstance(wanted, str):
        wanted = [wanted]
    if not isinstance(wanted, (list, tuple)):
        return (DEFAULT_TARGET,), [f"the script's `targets` is {type(wanted).__name__}, not a list of names"]
    good, bad = [], []
    for name in wanted:
        try:
            good += list(resolve_targets([str(name)]))
        except UnknownTargetError as exc:
            bad.append(f"the script's `targets`: {exc}")
    return tuple(dict.fromkeys([DEFAULT_TARGET, *good])), bad


def collect(
    names: Sequence[str],
    outcomes: Sequence[StageOutcome],
    events: Sequence[dict[str, Any]],
    onnx_path: str | None,
) -> tuple[TargetResult, ...]:
    """One result per target, in the order asked; nothing when only the default target is asked."""
    if tuple(names) == (DEFAULT_TARGET,):
        return ()
    sources: dict[str, str] = {}
    for o in outcomes:
        sources.update(o.facts.get("node_sources") or {})
    model = None
    results = []
    for name in names:
        kind = get_target(name).kind
        if kind == "pipeline":
            results.append(_ort_cpu(outcomes))
        elif name == "openvino":
            results.append(_openvino(events, onnx_path, sources))
        else:
            static = None
            if kind == "table":
                if model is None and onnx_path:
                    model = _read(onnx_path)
                static = _table(name, model, sources)
            results.append(_gpu_run(name, events, sources, static) if name in GPU_PROVIDERS else static)
    return tuple(results)


def _gpu_run(name: str, events: Sequence[dict[str, Any]], sources: dict[str, str],
             static: TargetResult | None) -> TargetResult:
    """A GPU execution provider's real run (onnxdoctor.worker.ep_target), or the static verdict
    with the line that says why there was no run."""
    record = _record(events, name)
    if record is None or record.get("status") == "skipped":
        why = str(record.get("error") or "") if record else "no ONNX model to run (an earlier stage failed)"
        if static is not None:
            return replace(static, note=f"{static.note}; {why}" if record else static.note)
        findings = (_finding("OD707", name, why),) if record else ()
        return TargetResult(name, "runtime", None, "skipped", note=why, findings=findings)
    version = record.get("version", "")
    findings: list[Finding] = []
    for op, items in _by_op(record.get("on_cpu") or []).items():
        nodes = [str(i.get("node") or "") for i in items if i.get("node")]
        findings.append(_finding("OD706", name, f"{op}{_named(nodes)} ran on the CPU provider in a real "
                                 f"run: {GPU_PROVIDERS[name]} did not take it", op, nodes[0] if nodes else None,
                                 sources.get(nodes[0]) if nodes else None, _all_nodes(nodes, sources)))
    if record.get("status") != "passed":
        step = str(record.get("step") or "run")
        code = {"load": "OD702", "run": "OD703", "parity": "OD704"}.get(step, "OD799")
        error = str(record.get("error") or f"failed at {step}")
        findings.append(_finding(code, name, f"ONNX Runtime {version} with {GPU_PROVIDERS[name]}: "
                                 f"{error.splitlines()[-1] if error else step}", evidence=(error,)))
    on_cpu = len(record.get("on_cpu") or [])
    return TargetResult(
        name, "runtime", record.get("reached"), str(record.get("status")),
        {"fallback": on_cpu} if on_cpu else {}, tuple(findings),
        verdicts=static.verdicts if static else (),
        note=f"ONNX Runtime {version}, providers {', '.join(record.get('providers') or [])}: a real run",
        seconds=float(record.get("seconds") or 0.0), max_abs_diff=record.get("max_abs_diff"),
    )


def _record(events: Sequence[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The worker's event for `name` in the main run, if it wrote one."""
    return next((e for e in events if e.get("event") == "target" and e.get("target") == name
                 and e.get("run", "main") == "main"), None)


def _read(path: str) -> Any:
    from onnxdoctor.onnxkit.files import OnnxFileError, read_onnx

    try:
        return read_onnx(path, load_external_data=False)
    except OnnxFileError:
        return None


def _ort_cpu(outcomes: Sequence[StageOutcome]) -> TargetResult:
    steps = [o for o in outcomes if o.stage in _ORT_STEPS]
    passed = [o for o in steps if o.status is Status.PASSED]
    failed = next((o for o in steps if o.status not in (Status.PASSED, Status.SKIPPED)), None)
    reached = _ORT_STEPS[passed[-1].stage] if passed else None
    status = "failed" if failed else ("passed" if passed else "skipped")
    unsupported = 1 if failed is not None and failed.stage is Stage.ORT_LOAD else 0
    return TargetResult("ort-cpu", "runtime", reached, status, {"unsupported": unsupported} if unsupported else {},
                        note="ONNX Runtime CPU: the pipeline's own stages above")


def _finding(code: str, target: str, message: str, op: str | None = None, node: str | None = None,
             source: str | None = None, evidence: tuple[str, ...] = (), detail: TargetGap | None = None) -> Finding:
    return Finding(code=code, stage=Stage.TARGET, severity=get_code(code).severity,
                   message=f"[{target}] {message}", op=op, node=node or None, source=source, evidence=evidence,
                   detail=detail)


def _openvino(events: Sequence[dict[str, Any]], onnx_path: str | None, sources: dict[str, str]) -> TargetResult:
    record = _record(events, "openvino")
    if importlib.util.find_spec("openvino") is None or (record and record.get("status") == "skipped"
                                                         and "not importable" in str(record.get("error"))):
        line = f"OpenVINO is not installed here: {OPENVINO_INSTALL}"
        return TargetResult("openvino", "runtime", None, "skipped", note=line,
                            findings=(_finding("OD707", "openvino", line),))
    if record is None:
        return TargetResult("openvino", "runtime", None, "skipped", note="no ONNX model to check (an earlier stage failed)")
    if record.get("status") == "skipped":
        return TargetResult("openvino", "runtime", None, "skipped", note=str(record.get("error", "")))
    version = str(record.get("version", "")).split("-")[0]
    findings: list[Finding] = []
    error = str(record.get("error") or "")
    unconverted = record.get("unconverted") or []
    # OpenVINO's summary line ("No conversion rule found for operations: ...") is the evidence.
    summary = tuple(ln.strip().lstrip("- ").strip() for ln in error.splitlines() if "conversion rule" in ln.lower())
    verdicts: list[NodeVerdict] = []
    # One finding per op, as for the tables: OpenVINO lists every unconverted node at once.
    for op, items in _by_op(unconverted).items():
        nodes = [str(i.get("node") or "") for i in items if i.get("node")]
        findings.append(_finding("OD701", "openvino", f"OpenVINO {version} cannot convert {op}" + _named(nodes),
                                 op, nodes[0] if nodes else None, sources.get(nodes[0]) if nodes else None,
                                 (*(summary or ((error,) if error else ())), *_all_nodes(nodes, sources)),
                                 TargetGap("openvino", "op")))
        verdicts += [NodeVerdict(n, op, NodeStatus.UNSUPPORTED, f"OpenVINO {version} cannot convert {op}",
                                 sources.get(n)) for n in nodes]
    failed = record.get("failed") or []
    for op, items in _by_op(failed).items():
        nodes = [str(i.get("node") or "") for i in items if i.get("node")]
        reason = next((str(i["reason"]) for i in items if i.get("reason")), "")
        findings.append(_finding("OD702", "openvino", f"OpenVINO {version} cannot convert {op}" + _named(nodes)
                                 + (f": {reason}" if reason else ""),
                                 op, nodes[0] if nodes else None, sources.get(nodes[0]) if nodes else None,
                                 (*((error,) if error else ()), *_all_nodes(nodes, sources))))
        verdicts += [NodeVerdict(n, op, NodeStatus.UNSUPPORTED, str(i.get("reason") or f"OpenVINO cannot convert {op}"),
                                 sources.get(n)) for n, i in zip(nodes, [i for i in items if i.get("node")])]
    step = record.get("step")
    if not unconverted and not failed and record.get("status") != "passed":
        code = {"read": "OD702", "compile": "OD702", "run": "OD703", "parity": "OD704"}.get(str(step), "OD799")
        first = error.splitlines()[-1] if error else f"failed at {step}"
        named = record.get("error_node") or {}
        node = named.get("node") or None
        findings.append(_finding(code, "openvino", f"OpenVINO {version}: {first}", named.get("op"), node,
                                 sources.get(node or ""), evidence=(error,) if error else ()))
        if node:
            verdicts.append(NodeVerdict(node, str(named.get("op") or ""), NodeStatus.UNSUPPORTED, first,
                                        sources.get(node)))
    not_placed = record.get("not_placed") or []
    note = f"OpenVINO {version}, CPU plugin (f32 precision): a real run"
    if not_placed:
        note += f"; {len(not_placed)} nodes not placed on CPU by query_model"
    return TargetResult(
        "openvino", "runtime", record.get("reached"), str(record.get("status")),
        {"unsupported": len(unconverted) + len(failed)} if unconverted or failed else {},
        tuple(findings), verdicts=tuple(verdicts), note=note, seconds=float(record.get("seconds") or 0.0),
        max_abs_diff=record.get("max_abs_diff"), added_seconds=record.get("added_seconds"),
    )


def _by_op(items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        groups.setdefault(str(item.get("op")), []).append(item)
    return groups


def _named(nodes: list[str]) -> str:
    if not nodes:
        return ""
    return f" (node {nodes[0]})" if len(nodes) == 1 else f" ({nodes_summary(nodes)})"


def _all_nodes(nodes: list[str], sources: dict[str, str]) -> tuple[str, ...]:
    return (nodes_list(nodes, [sources.get(n) for n in nodes]),) if len(nodes) > 1 else ()


def _table(name: str, model: Any, sources: dict[str, str]) -> TargetResult:
    from onnxdoctor.targets.tables import check_model

    if model is None:
        return TargetResult(name, "table", None, "skipped", note="no ONNX model to check (an earlier stage failed)")
    try:
        return check_model(name, model, sources)
    except (OSError, ValueError) as exc:
        return TargetResult(name, "table", None, "skipped", note=f"capability table unreadable: {exc}",
                            findings=(_finding("OD799", name, f"capability table unreadable: {exc}"),))


def onnx_file(outcomes: Sequence[StageOutcome], target_path: Path, kind: str) -> str | None:
    """The ONNX model the targets judge: the export (scripts) or the file itself."""
    for o in outcomes:
        if o.stage is Stage.EXPORT and o.status is Status.PASSED and o.facts.get("onnx_path"):
            return str(o.facts["onnx_path"])
    if kind == "onnx" and any(o.stage is Stage.LOAD and o.status is Status.PASSED for o in outcomes):
        return str(target_path)
    return None
