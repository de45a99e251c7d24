"""diagnose(target, options): run the worker, classify, propose fixes, verify them.

The parent process never imports torch or onnxruntime: all of that happens in the worker.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from onnxdoctor.classify import classify
from onnxdoctor.errors import UsageError
from onnxdoctor.model import (
    ONNX_FILE_STAGES,
    PIPELINE_STAGES,
    Applicability,
    Diagnosis,
    ErrorInfo,
    Finding,
    Fix,
    FixCheck,
    Severity,
    Stage,
    StageOutcome,
    Status,
)
from onnxdoctor.normalize import first_line, normalize_message, printable
from onnxdoctor.supervise import WorkerResult, run_worker
from onnxdoctor.worker.protocol import WorkerRequest

FLOOD_BYTES = 1024 * 1024
EXPORTERS = ("dynamo", "torchscript", "both")


@dataclass(frozen=True)
class DiagnoseOptions:
    """What `diagnose` should do; mirrors the CLI flags."""

    exporter: str | None = None  # dynamo | torchscript | both | None (script's setting, else torch's)
    opset: int | None = None
    custom_op_libraries: tuple[str, ...] = ()
    atol: float = 1e-4
    rtol: float = 1e-3
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    max_input_bytes: int = 256 * 1024 * 1024  # generated inputs of a .onnx target, all together
    timeout: float = 600.0
    fix: bool = True
    all_fixes: bool = False
    max_fix_checks: int = 4
    skip_check: bool = False  # go from LOAD straight to ORT_LOAD (the caller checked already)


@dataclass(frozen=True)
class Target:
    """A parsed `model.py[:factory]` or `model.onnx` argument."""

    path: Path
    factory: str | None
    kind: str  # "script" | "onnx"

    @property
    def display(self) -> str:
        """The file name (and factory) to show in messages, control characters escaped."""
        return printable(self.path.name + (f":{self.factory}" if self.factory else ""), one_line=True)


ONNX_SUFFIXES = (".onnx", ".pb", ".ort")


def parse_target(text: str) -> Target:
    """Split `model.py:factory`; decide script vs ONNX by suffix.

    Raises:
        UsageError: empty argument, a malformed factory name, or a file that is neither a Python
            script (.py, or no suffix) nor an ONNX file (.onnx, .pb, .ort).
    """
    if not text.strip():
        raise UsageError("no target given: pass model.py[:factory] or model.onnx")
    factory = None
    path_text = text
    head, sep, tail = text.rpartition(":")
    if sep and head and tail and not Path(text).exists():
        if not tail.isidentifier():
            raise UsageError(f"{tail!r} is not a valid factory name (after ':' in {text!r})")
        path_text, factory = head, tail
    path = Path(path_text).expanduser()
    suffix = path.suffix.lower()
    if suffix not in ("", ".py", ".pyw", *ONNX_SUFFIXES):
        # Running notes.txt as Python would only produce a confusing NameError.
        raise UsageError(f"{path.name} is not a model script (.py) or an ONNX file (.onnx) (OD102)")
    kind = "onnx" if suffix in ONNX_SUFFIXES else "script"
    if kind == "onnx" and factory:
        raise UsageError(f"{path.name} is an ONNX file: a ':factory' applies to Python scripts only")
    return Target(path=path.absolute(), factory=factory, kind=kind)


class Progress:
    """Receives stage starts for the spinner; the default does nothing."""

    def __call__(self, message: str) -> None:  # pragma: no cover - trivial
        pass


def diagnose(
    target_text: str,
    options: DiagnoseOptions,
    *,
    progress: Callable[[str], None] | None = None,
    workdir: Path | None = None,
) -> tuple[Diagnosis, ...]:
    """Diagnose a model script or ONNX file; one Diagnosis per exporter run.

    Fix verification runs in fresh workers (see onnxdoctor.fixes); the returned findings carry
    their fixes with `check` filled in when verified.
    """
    target = parse_target(target_text)
    if options.exporter not in (None, *EXPORTERS):
        raise UsageError(f"--exporter must be one of {', '.join(EXPORTERS)}, not {options.exporter!r}")
    for library in options.custom_op_libraries:
        if not Path(library).exists():
            raise UsageError(f"--custom-op-library {library}: no such file")
    owned = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="onnxdoctor-")) if workdir is None else workdir
    # --timeout bounds the whole command: every worker gets what is left of it.
    deadline = time.monotonic() + options.timeout
    try:
        return _diagnose(target, options, workdir, progress or (lambda _m: None), deadline)
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


def _diagnose(
    target: Target, options: DiagnoseOptions, workdir: Path, progress: Callable[[str], None],
    deadline: float,
) -> tuple[Diagnosis, ...]:
    if target.kind == "script":
        early = _precheck_script(target)
        if early is not None:
            return (early,)
    runs: list[tuple[str, dict[str, Any] | None]] = [("main", None)]
    if target.kind == "script" and options.exporter == "both":
        runs = [("main", {"kind": "exporter", "exporter": "dynamo"}), ("fix0", {"kind": "exporter", "exporter": "torchscript"})]
    request = _request(target, options, workdir, apply_fix=runs[0][1],
                       verify_fixes=tuple(f for _, f in runs[1:] if f is not None))
    # One exporter: the worker also verifies the in-process-safe fixes right away, reusing the
    # model it loaded (no second torch import); it plans them with prepare_findings below.
    request = replace(request, plan_fixes=options.fix and len(runs) == 1,
                      all_fixes=options.all_fixes, stop_on_success=not options.all_fixes)
    result = run_worker(request, timeout=_left(deadline), cwd=_cwd(target), on_event=_progress_sink(progress))
    fingerprint = next((e.get("facts", {}).get("fingerprint", {}).get("hash") for e in result.events
                        if e.get("event") == "stage" and e.get("stage") == "load"
                        and e.get("run") == "main" and isinstance(e.get("facts"), dict)
                        and isinstance(e["facts"].get("fingerprint"), dict)), None)
    verifier = _Verifier(target, options, workdir, progress, deadline, fingerprint)
    diagnoses: list[Diagnosis] = []
    for run_id, _fix in runs:
        if run_id != "main" and not any(e.get("run") == run_id for e in result.events):
            continue  # the main run never got past LOAD: there is no second run to report
        outcomes, tool_findings = outcomes_for_run(result, run_id, target, first_run=run_id == "main")
        exporter = next((o.facts.get("exporter") for o in outcomes if o.stage is Stage.EXPORT), None)
        findings = prepare_findings(outcomes, tool_findings, target, options, exporter)
        if options.fix:
            planned = _planned_checks(result, target) if run_id == "main" else None
            findings = verifier.verify(findings, planned)
        diagnoses.append(
            Diagnosis(
                target=target.display,
                exporter=exporter,
                stages=tuple(outcomes),
                findings=tuple(_rank_fixes(f) for f in findings),
                versions=_versions(),
                facts={"worker_seconds": round(result.seconds, 3),
                       "onnx_path": next((o.facts.get("onnx_path") for o in outcomes
                                          if o.stage is Stage.EXPORT and o.status is Status.PASSED), None)},
            )
        )
    return tuple(diagnoses)


def _precheck_script(target: Target) -> Diagnosis | None:
    """Refuse unreadable or unparsable scripts here: no worker, no torch import needed."""
    from onnxdoctor.scriptfile import ScriptError, check_script

    try:
        check_script(target.path)
    except ScriptError as exc:
        source = f"{target.path.name}:{exc.line}" if exc.line else None
        finding = Finding(exc.code, Stage.LOAD, Severity.ERROR, str(exc), source=source)
        stages = tuple(
            StageOutcome(stage, Status.FAILED if stage is Stage.LOAD else Status.SKIPPED)
            for stage in PIPELINE_STAGES
        )
        return Diagnosis(target=target.display, exporter=None, stages=stages, findings=(finding,),
                         versions=_versions())
    return None


def _request(
    target: Target,
    options: DiagnoseOptions,
    workdir: Path,
    *,
    apply_fix: dict[str, Any] | None = None,
    verify_fixes: tuple[dict[str, Any], ...] = (),
    gather_facts: bool = True,
    expected_fingerprint: str | None = None,
) -> WorkerRequest:
    events = workdir / f"events-{time.monotonic_ns()}.jsonl"
    return WorkerRequest(
        target=str(target.path),
        kind=target.kind,
        workdir=str(workdir),
        events_path=str(events),
        factory=target.factory,
        exporter=None if options.exporter == "both" else options.exporter,
        opset=options.opset,
        custom_op_libraries=tuple(str(Path(p).absolute()) for p in options.custom_op_libraries),
        atol=options.atol,
        rtol=options.rtol,
        input_shapes=dict(options.input_shapes),
        max_input_bytes=options.max_input_bytes,
        apply_fix=apply_fix,
        verify_fixes=verify_fixes,
        gather_facts=gather_facts,
        skip_check=options.skip_check,
        expected_fingerprint=expected_fingerprint,
    )


def _left(deadline: float) -> float:
    """Seconds left of the command's --timeout budget (never below a token amount)."""
    return max(deadline - time.monotonic(), 0.5)


def _cwd(target: Target) -> Path:
    parent = target.path.parent
    return parent if parent.is_dir() else Path.cwd()


_STAGE_LABELS = {
    "load": "loading the model",
    "export": "exporting",
    "check": "checking the ONNX graph",
    "ort_load": "loading in ONNX Runtime",
    "ort_run": "running in ONNX Runtime",
    "parity": "comparing with PyTorch",
}


def _progress_sink(progress: Callable[[str], None]) -> Callable[[dict[str, Any]], None]:
    def sink(event: dict[str, Any]) -> None:
        if event.get("event") == "start":
            run = event.get("run", "main")
            label = _STAGE_LABELS.get(event.get("stage", ""), event.get("stage", ""))
            progress(label if run == "main" else f"fix check {run.removeprefix('fix')}: {label}")

    return sink


def outcomes_for_run(
    result: WorkerResult, run_id: str, target: Target, *, first_run: bool = True
) -> tuple[list[StageOutcome], list[Finding]]:
    """The stage ladder of one run from the worker's events, and tool findings (crash, timeout...)."""
    stages = PIPELINE_STAGES if target.kind == "script" else ONNX_FILE_STAGES
    records = {e["stage"]: e for e in result.events if e.get("event") == "stage" and e.get("run") == run_id}
    if "check" not in records and not any(e.get("stage") == "check" for e in result.events) and any(
        e.get("stage") == "ort_load" and e.get("run") == run_id for e in result.events
    ):
        stages = tuple(s for s in stages if s is not Stage.CHECK)  # the caller skipped CHECK
    started = [e["stage"] for e in result.events if e.get("event") == "start" and e.get("run") == run_id]
    run_done = any(e.get("event") == "run_done" and e.get("run") == run_id for e in result.events)
    outcomes: list[StageOutcome] = []
    tool: list[Finding] = []
    interrupted = None if run_done else next((s for s in reversed(started) if s not in records), None)
    failed_before = False
    for stage in stages:
        record = records.get(stage.value)
        if record is not None:
            outcome = StageOutcome(
                stage=stage,
                status=Status(record.get("status", "failed")),
                seconds=float(record.get("seconds", 0.0)),
                error=ErrorInfo.from_dict(record.get("error")),
                facts=record.get("facts") or {},
                warnings=tuple(record.get("warnings") or ()),
            )
            failed_before = failed_before or outcome.status is not Status.PASSED
        elif stage.value == interrupted and not failed_before:
            status = Status.TIMED_OUT if result.timed_out else Status.CRASHED
            began = next((e.get("time") for e in reversed(result.events)
                          if e.get("event") == "start" and e.get("stage") == stage.value and e.get("run") == run_id), None)
            seconds = max(0.0, result.ended_at - began) if isinstance(began, (int, float)) else 0.0
            outcome = StageOutcome(stage=stage, status=status, seconds=round(seconds, 3))
            failed_before = True
        else:
            outcome = StageOutcome(stage=stage, status=Status.SKIPPED)
            if not run_done and not failed_before and first_run and interrupted is None:
                # The worker died before it even started this stage.
                outcome = replace(outcome, status=Status.CRASHED if not result.timed_out else Status.TIMED_OUT)
                failed_before = True
                interrupted = stage.value
        outcomes.append(outcome)
    if not run_done:
        tool.append(_tool_finding(result, interrupted))
    if first_run and result.output_bytes > FLOOD_BYTES:
        tool.append(
            Finding(
                code="OD904",
                stage=Stage.TOOL,
                severity=Severity.WARNING,
                message=f"the model script printed {result.output_bytes / 1e6:.1f} MB; "
                "onnxdoctor kept the first 8 KB and the last 32 KB",
            )
        )
    return outcomes, tool


def _tool_finding(result: WorkerResult, stage: str | None) -> Finding:
    where = f" during {stage}" if stage else ""
    evidence = tuple(line for line in [_stderr_excerpt(result.stderr_tail)] if line)
    if result.timed_out:
        return Finding("OD902", Stage.TOOL, Severity.ERROR,
                       f"the worker was still running after {result.seconds:.0f} s{where} and was killed "
                       "(raise --timeout if the model is just slow)", evidence=evidence)
    if result.signal_name:
        return Finding("OD901", Stage.TOOL, Severity.ERROR,
                       f"the worker died from {result.signal_name}{where}", evidence=evidence)
    tail = result.stderr_tail
    if result.returncode not in (0, None) and "Traceback" in tail and "onnxdoctor" in tail:
        return Finding("OD999", Stage.TOOL, Severity.ERROR,
                       f"onnxdoctor's worker failed{where}: {first_line(tail.strip().splitlines()[-1])}",
                       evidence=evidence)
    return Finding("OD903", Stage.TOOL, Severity.ERROR,
                   f"the worker exited with status {result.returncode}{where} without reporting a result "
                   "(os._exit() in the model code?)", evidence=evidence)


def _stderr_excerpt(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()][-12:]
    return normalize_message("\n".join(lines)[-4000:], limit=2000)


# ---- fix verification -------------------------------------------------------------------------


def prepare_findings(
    outcomes: list[StageOutcome],
    tool_findings: list[Finding],
    target: Target,
    options: DiagnoseOptions,
    exporter: str | None,
) -> list[Finding]:
    """Classify a run and attach its fixes; the worker calls this too, to plan fix checks."""
    from onnxdoctor.fixes import with_fixes

    findings = classify(outcomes, base_dir=str(target.path.parent)) + tool_findings
    context = {"target": target, "outcomes": outcomes, "exporter": exporter, "options": options}
    findings = [with_fixes(f, context) for f in findings]
    if exporter is None:
        return findings
    # Fixes that do not choose an exporter are checked with the run's own exporter.
    return [
        replace(finding, fixes=tuple(
            replace(f, recipe={**f.recipe, "exporter": exporter})
            if f.recipe and "exporter" not in f.recipe else f
            for f in finding.fixes))
        for finding in findings
    ]


def _candidates(finding: Finding, options: DiagnoseOptions) -> list[tuple[int, Fix]]:
    """The fixes of an error finding that will be tried, best first."""
    if finding.severity is not Severity.ERROR:
        return []
    candidates = [(i, fix) for i, fix in enumerate(finding.fixes) if fix.recipe and fix.check is None]
    return candidates if options.all_fixes else candidates[: options.max_fix_checks]


def shared_fix_plan(findings: list[Finding], options: DiagnoseOptions) -> list[dict[str, Any]]:
    """The in-process-safe recipes, deduplicated, in the order they are tried."""
    plan: list[dict[str, Any]] = []
    seen: set[str] = set()
    for finding in findings:
        for _index, fix in _candidates(finding, options):
            key = _recipe_key(fix.recipe)
            if not fix.recipe.get("isolated") and key not in seen:
                seen.add(key)
                plan.append(fix.recipe)
    return plan


def _planned_checks(result: WorkerResult, target: Target) -> dict[str, FixCheck] | None:
    """Checks of the fixes the main worker already verified, by recipe; None if it planned none."""
    plan = next((e.get("recipes") for e in result.events if e.get("event") == "fix_plan"), None)
    if plan is None:
        return None
    checks: dict[str, FixCheck] = {}
    for position, recipe in enumerate(plan):
        run_id = f"plan{position}"
        if any(e.get("run") == run_id for e in result.events):
            checks[_recipe_key(recipe)] = fix_check(result, run_id, target)
    return checks


@dataclass(frozen=True)
class _Verifier:
    """Re-runs the pipeline with candidate fixes, within the command's time budget."""

    target: Target
    options: DiagnoseOptions
    workdir: Path
    progress: Callable[[str], None]
    deadline: float
    fingerprint: str | None  # the first load's model: fix workers must rebuild the same one

    def _run(self, **request_args: Any) -> WorkerResult:
        request = _request(self.target, self.options, self.workdir, gather_facts=False,
                           expected_fingerprint=self.fingerprint, **request_args)
        if request_args.get("verify_fixes"):
            request = replace(request, load_only=True, stop_on_success=not self.options.all_fixes)
        return run_worker(request, timeout=_left(self.deadline), cwd=_cwd(self.target),
                          on_event=_progress_sink(self.progress))

    def _out_of_time(self) -> bool:
        return time.monotonic() >= self.deadline - 1.0

    def verify(self, findings: list[Finding], planned: dict[str, FixCheck] | None) -> list[Finding]:
        """Re-run the pipeline with each candidate fix; in-process-safe ones share one worker.

        With `planned`, the main worker already ran the in-process-safe ones (those missing from
        it were skipped after an earlier fix worked). A recipe proposed by two findings
        (model.eval() answers OD601 and OD206) is run once. Fixes left when the --timeout budget
        runs out stay untried.
        """
        options, target = self.options, self.target
        verified: list[Finding] = []
        done: dict[str, FixCheck] = dict(planned or {})
        for finding in findings:
            if done:
                finding = replace(finding, fixes=tuple(
                    replace(f, check=done.get(_recipe_key(f.recipe), f.check)) if f.recipe else f
                    for f in finding.fixes))
            candidates = _candidates(finding, options)
            if not candidates or self._out_of_time():
                verified.append(finding)
                continue
            checks: dict[int, FixCheck] = {}
            shared = [(i, f) for i, f in candidates if not f.recipe.get("isolated")]
            isolated = [(i, f) for i, f in candidates if f.recipe.get("isolated")]
            if planned is not None:
                shared = []
            if shared:
                self.progress(f"verifying {len(shared)} fix(es) for {finding.code}")
                result = self._run(verify_fixes=tuple(f.recipe for _, f in shared))
                for position, (index, _fix) in enumerate(shared):
                    run_id = f"fix{position}"
                    if any(e.get("run") == run_id for e in result.events):
                        checks[index] = fix_check(result, run_id, target)
                    # else: the worker stopped after an earlier fix worked; this one stays untried
            for index, fix in isolated:
                if not options.all_fixes and any(c.works for c in [*checks.values(), *done.values()]):
                    break
                if self._out_of_time():
                    break
                self.progress(f"verifying fix: {fix.title}")
                checks[index] = fix_check(self._run(apply_fix=fix.recipe), "main", target)
            fixes = tuple(replace(fix, check=checks.get(i, fix.check)) for i, fix in enumerate(finding.fixes))
            for index, check in checks.items():
                done[_recipe_key(finding.fixes[index].recipe)] = check
            verified.append(replace(finding, fixes=fixes))
        return [
            replace(f, fixes=tuple(replace(x, check=done.get(_recipe_key(x.recipe), x.check)) if x.recipe else x
                                   for x in f.fixes))
            for f in verified
        ]


def _recipe_key(recipe: dict[str, Any]) -> str:
    import json

    return json.dumps(recipe, sort_keys=True, default=str)


def fix_check(result: WorkerResult, run_id: str, target: Target) -> FixCheck:
    """Judge one fix run of a worker: the stage it reached, its numbers, and whether it works.

    A run works when it passes every stage of its target and leaves no error finding behind (a
    frozen trace, dims that went static, a rewrite that differs from its reference).
    """
    outcomes, tool = outcomes_for_run(result, run_id, target, first_run=False)
    ran = [o for o in outcomes if o.status is not Status.SKIPPED]
    passed = [o for o in ran if o.status is Status.PASSED]
    reached = passed[-1].stage if passed else None
    failed = next((o for o in ran if o.status is not Status.PASSED), None)
    # A script's numbers come from PARITY (against PyTorch); a file's from ORT_RUN, when the fix
    # carried a reference to compare with (the original op at the opset that defines it).
    final = Stage.PARITY if target.kind == "script" else Stage.ORT_RUN
    numbers = next((o for o in outcomes if o.stage is final and o.status is not Status.SKIPPED), None)
    producer = next((o for o in outcomes if o.stage in (Stage.EXPORT, Stage.LOAD) and o.facts.get("onnx_path")
                     and o.status is Status.PASSED), None)
    findings = classify(outcomes, base_dir=str(target.path.parent)) + tool
    if failed is None and not tool and reached is final:
        problem = _still_wrong(findings, numbers.facts if numbers else {})
        status, detail = (Status.FAILED, problem) if problem else (Status.PASSED, _passed_detail(final, numbers))
    else:
        first = next((f for f in findings if f.severity is Severity.ERROR), None)
        status = failed.status if failed else Status.FAILED
        detail = f"{first.code}: {first.message}" if first else "did not complete"
    return FixCheck(
        reached=reached,
        status=status,
        max_abs_diff=numbers.facts.get("max_abs_diff") if numbers else None,
        max_rel_diff=numbers.facts.get("max_rel_diff") if numbers else None,
        seconds=round(sum(o.seconds for o in ran), 3),
        detail=detail[:500],
        artifact=producer.facts.get("onnx_path") if producer else None,
        failed_at=failed.stage if failed else None,
    )


def _still_wrong(findings: list[Finding], numbers: dict[str, Any]) -> str | None:
    """Why a fixed run that passed every stage still does not count as a fix (None: it does)."""
    if any(f.code == "OD210" for f in findings):
        return ("OD210: matches PyTorch on the example input only: the tracer froze a data-dependent "
                "branch or value (rewrite it with torch.where or torch.cond)")
    if numbers.get("reference_required") and str(numbers.get("reference", "")).startswith("not compared"):
        # A precision-changing rewrite is not a fix until its numbers have been seen.
        return f"numbers not checked: {numbers['reference']}"
    if numbers.get("reference_mismatch"):
        return f"OD601: against {numbers.get('reference')}: {numbers['reference_mismatch']}"
    error = next((f for f in findings if f.severity is Severity.ERROR), None)
    return f"{error.code}: {error.message}" if error else None  # e.g. dims that went static (OD208)


def _passed_detail(final: Stage, outcome: StageOutcome | None) -> str:
    if final is Stage.PARITY:
        return "exports, loads, runs and matches PyTorch"
    detail = "passes the checker, loads and runs in ONNX Runtime"
    numbers = outcome.facts if outcome else {}
    if numbers.get("reference"):
        detail += "; " + (
            numbers["reference"] if numbers["reference"].startswith("not compared")
            else f"matches {numbers['reference']}"
        )
    return detail


def _rank_fixes(finding: Finding) -> Finding:
    """Verified and exact first, then verified with error, then unverified, then failed."""

    cost = {Applicability.SAFE: 0, Applicability.UNSAFE: 1, Applicability.DISPLAY_ONLY: 2}

    def key(item: tuple[int, Fix]) -> tuple[int, int, float, int]:
        index, fix = item
        check = fix.check
        if check is None:
            return (2, cost[fix.applicability], 0.0, index)
        if check.works:
            # Among working fixes the cheaper one wins (no kernel to ship beats a custom domain).
            return (0, cost[fix.applicability], check.max_abs_diff or 0.0, index)
        return (3, cost[fix.applicability], 0.0, index)

    ordered = tuple(fix for _, fix in sorted(enumerate(finding.fixes), key=key))
    return replace(finding, fixes=ordered)


def _versions() -> dict[str, str]:
    try:
        from onnxdoctor.envinfo import package_versions

        return package_versions()
    except ImportError:  # pragma: no cover - envinfo ships with the package
        return {}
