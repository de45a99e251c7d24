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

from onnxdoctor.analysis.fixes import chain, chainable, scalar_functions
from onnxdoctor.analysis.judge import (
    attach_fixes,
    fix_check,
    only_warnings,
    outcomes_for_run,
    prepare_findings,
    shapes_outcome,
    to_try,
)
from onnxdoctor.analysis.shapes import size_checks
from onnxdoctor.errors import UsageError
from onnxdoctor.model import (
    PIPELINE_STAGES,
    Applicability,
    DiagnoseOptions,
    Diagnosis,
    Finding,
    Fix,
    FixCheck,
    Severity,
    Stage,
    StageOutcome,
    Status,
)
from onnxdoctor.protocol import WorkerRequest, WorkerResult
from onnxdoctor.recipe import Recipe, RuntimeKernels, UseExporter
from onnxdoctor.supervise import run_worker
from onnxdoctor.target import Target, parse_target

EXPORTERS = ("dynamo", "torchscript", "both")


def diagnose(
    target_text: str,
    options: DiagnoseOptions,
    *,
    progress: Callable[[str], None] | None = None,
    workdir: Path | None = None,
) -> tuple[Diagnosis, ...]:
    """Diagnose a model script or ONNX file; one Diagnosis per exporter run.

    Fix verification runs in fresh workers (see onnxdoctor.analysis.fixes); the returned findings carry
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
    # --timeout bounds the whole command: every worker gets what is left of it, less a reserve
    # for the parent's own work afterwards (judging fixed models, rendering, writing files).
    # The command's clock starts where the CLI started it (options.deadline), else here.
    ends = options.deadline if options.deadline is not None else time.monotonic() + options.timeout
    deadline = ends - render_reserve(options.timeout)
    try:
        return _diagnose(target, options, workdir, progress or (lambda _m: None), deadline)
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


def render_reserve(timeout: float) -> float:
    """Seconds of --timeout kept back from the workers for what follows them: judging fixed
    models, rendering, writing files (a tenth, from two seconds up to five; at most a quarter).

    Two seconds at least: after a killed worker the parent still reaps it and imports the renderer
    (~0.4 s on an idle machine), and on a loaded two-core CI runner one second was not enough."""
    return min(5.0, max(2.0, 0.1 * timeout), timeout / 4)


def _diagnose(
    target: Target, options: DiagnoseOptions, workdir: Path, progress: Callable[[str], None],
    deadline: float,
) -> tuple[Diagnosis, ...]:
    if target.kind == "script":
        early = _precheck_script(target)
        if early is not None:
            return (early,)
    runs: list[tuple[str, Recipe | None]] = [("main", None)]
    if target.kind == "script" and options.exporter == "both":
        runs = [("main", Recipe("exporter", (UseExporter("dynamo"),))),
                ("fix0", Recipe("exporter", (UseExporter("torchscript"),)))]
    request = _request(target, options, workdir, apply_fix=runs[0][1],
                       verify_fixes=tuple(f for _, f in runs[1:] if f is not None))
    # One exporter: the worker also verifies the in-process-safe fixes right away, reusing the
    # model it loaded (no second torch import); it plans them with prepare_findings below.
    request = replace(request, plan_fixes=options.fix and len(runs) == 1,
                      all_fixes=options.all_fixes, stop_on_success=not options.all_fixes)
    result = run_worker(request, timeout=_left(deadline), cwd=_cwd(target), on_event=_progress_sink(progress))
    load = result.records("main").get("load")
    stamp = load.facts.get("fingerprint") if load else None
    fingerprint = stamp.get("hash") if isinstance(stamp, dict) else None
    verifier = _Verifier(target, options, workdir, progress, deadline, fingerprint,
                         budget_ends=time.monotonic() + options.fix_budget, run_cap=options.fix_timeout or fix_run_cap(result))
    diagnoses: list[Diagnosis] = []
    for run_id, _fix in runs:
        if run_id != "main" and not any(e.get("run") == run_id for e in result.events):
            continue  # the main run never got past LOAD: there is no second run to report
        outcomes, tool_findings = outcomes_for_run(result, run_id, target, first_run=run_id == "main")
        exporter = _run_exporter(outcomes, result, run_id)
        shapes = shapes_outcome(result, run_id)
        findings = prepare_findings(outcomes, tool_findings, target, options, exporter, shapes)
        if options.fix:
            planned = verifier.planned(result) if run_id == "main" else None
            findings = verifier.search_chains(verifier.verify(findings, planned), exporter)
        targets: tuple[Any, ...] = ()
        if run_id == "main":
            targets = _timed_out_targets(_targets(options, outcomes, result.events, target), result,
                                         request.targets)
            # Target-driven fixes: rewrites into what a target's table asks for, verified like
            # the others and then judged by every target (docs/targets.md).
            gaps = attach_fixes([*(f for t in targets for f in t.findings), *_target_setting_problems(options, outcomes)],
                                outcomes, target, options, exporter)
            if options.fix and gaps:
                gaps = verifier.verify(gaps, None)
            # Judging fixed models by every target is the parent's own work: within --timeout too.
            findings = ([*findings, *gaps] if time.monotonic() >= deadline
                        else _judge_on_targets([*findings, *gaps], targets, verifier.runs))
        diagnoses.append(
            Diagnosis(
                target=target.display,
                exporter=exporter,
                stages=tuple(outcomes),
                findings=tuple(_rank_fixes(f) for f in findings),
                versions=_versions(),
                facts={"worker_seconds": round(result.seconds, 3),
                       **({"shapes_seconds": shapes.seconds, "shapes_origin": shapes.facts.get("origin")}
                          if shapes is not None else {}),
                       "onnx_path": next((o.facts.get("onnx_path") for o in outcomes
                                          if o.stage is Stage.EXPORT and o.status is Status.PASSED), None)},
                targets=targets,
                shapes=size_checks(shapes),
            )
        )
    return tuple(diagnoses)


def _targets(options: DiagnoseOptions, outcomes: list[StageOutcome], events: list[dict[str, Any]],
             target: Target) -> tuple[Any, ...]:
    """The deployment targets' verdicts on the main run's model (docs/targets.md)."""
    from onnxdoctor.targets.collect import collect, onnx_file, requested_targets

    names, _problems = requested_targets(options.targets, outcomes)
    return collect(names, outcomes, events, onnx_file(outcomes, target.path, target.kind))


def _target_setting_problems(options: DiagnoseOptions, outcomes: list[StageOutcome]) -> list[Finding]:
    """OD799 for each name in the script's `targets` setting that names no target (a finding,
    not a row of the target table: there is no target called "script")."""
    from onnxdoctor.targets.collect import requested_targets

    _names, problems = requested_targets(options.targets, outcomes)
    return [Finding("OD799", Stage.TARGET, Severity.ERROR, p) for p in problems]


def _timed_out_targets(results: tuple[Any, ...], result: WorkerResult, ran: tuple[str, ...]) -> tuple[Any, ...]:
    """A target the worker was still checking when --timeout killed it failed with OD902 (never
    "skipped" and the model healthy): OpenVINO may need minutes to compile a model."""
    ort_load = result.records("main").get("ort_load")
    if not result.timed_out or ort_load is None or ort_load.status == "skipped":
        return results  # alive throughout, or killed before there was a model to check at all
    done = {e.get("target") for e in result.events if e.get("event") == "target" and e.get("run", "main") == "main"}
    late = [name for name in ran if name not in done]
    if not late:
        return results
    from onnxdoctor.targets import TargetResult

    fixed = []
    for item in results:
        if item.target in late:
            message = (f"the {item.target} check was still running after {result.seconds:.0f} s and was killed "
                       "(raise --timeout: compiling a model can take minutes)")
            finding = Finding("OD902", Stage.TARGET, Severity.ERROR, message)
            item = TargetResult(item.target, item.kind, None, "failed", findings=(finding,),
                                note="timed out (--timeout)")
        fixed.append(item)
    return tuple(fixed)


def _judge_on_targets(findings: list[Finding], targets: tuple[Any, ...],
                      runs: dict[str, tuple[WorkerResult, str]]) -> list[Finding]:
    """Each working fix's model judged by every requested target, each model once per target."""
    if not targets:
        return findings
    from onnxdoctor.targets.judge import FixJudge

    return FixJudge(targets, runs).judge(findings)


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
    apply_fix: Recipe | None = None,
    verify_fixes: tuple[Recipe, ...] = (),
    gather_facts: bool = True,
    expected_fingerprint: str | None = None,
    other_inputs: bool = False,
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
        localize_budget=options.localize_budget,
        expected_fingerprint=expected_fingerprint,
        targets=_worker_targets(options.targets),
        max_memory_mb=memory_cap(options),
        source_file=options.source_file,
        check_shapes=options.check_shapes,
        size_sets=tuple(options.size_sets),
        other_inputs=other_inputs,
    )


def memory_cap(options: DiagnoseOptions) -> int:
    """Each worker's memory cap in MB: --max-memory-mb, else the machine's default (0: none)."""
    from onnxdoctor.guarded import default_memory_mb

    return default_memory_mb() if options.max_memory_mb is None else max(0, options.max_memory_mb)


def _worker_targets(names: tuple[str, ...]) -> tuple[str, ...]:
    """The targets the worker runs itself: OpenVINO and the GPU execution providers (the tables
    need no worker)."""
    from onnxdoctor.targets import GPU_PROVIDERS, resolve_targets

    return tuple(t for t in resolve_targets(names) if t == "openvino" or t in GPU_PROVIDERS) if names else ()


# A fix check repeats the diagnosis's own stages with one change, so it gets a multiple of what
# they took, and at least the floor: where the export failed, the main run's stages are a load
# and a failed export, while a working fix also exports with another exporter, checks, runs,
# compares and tries other sizes. A check that spins (torch.export inside a loop it cannot trace)
# then costs that, not the rest of --timeout.
FIX_RUN_FACTOR = 4.0
FIX_RUN_FLOOR = 180.0


def fix_run_cap(result: WorkerResult) -> float:
    """Seconds one fix check may run: FIX_RUN_FACTOR times the main run's stages, at least FIX_RUN_FLOOR."""
    spent = sum(record.seconds for record in result.records("main").values())
    return max(FIX_RUN_FLOOR, FIX_RUN_FACTOR * spent)


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
    "shapes": "checking other input sizes",
}


def _progress_sink(progress: Callable[[str], None]) -> Callable[[dict[str, Any]], None]:
    def sink(event: dict[str, Any]) -> None:
        if event.get("event") == "start":
            run = event.get("run", "main")
            label = _STAGE_LABELS.get(event.get("stage", ""), event.get("stage", ""))
            progress(label if run == "main" else f"fix check {run.removeprefix('fix')}: {label}")

    return sink


# ---- fix verification -------------------------------------------------------------------------


# The longest fix chain tried: three steps cover the failures seen in practice (drop a symbolic,
# rewrite the op its body uses, then switch the mode) without an explosion of runs.
MAX_CHAIN = 3


def _segments(candidates: list[tuple[int, Fix]]) -> list[tuple[bool, list[tuple[int, Fix]]]]:
    """The candidates in rank order as (isolated, fixes) runs: each isolated fix alone, the
    in-process-safe ones between them together (one worker checks them one after another)."""
    segments: list[tuple[bool, list[tuple[int, Fix]]]] = []
    for index, fix in candidates:
        if fix.recipe is None:
            continue
        if fix.recipe.alone or not segments or segments[-1][0]:
            segments.append((fix.recipe.alone, [(index, fix)]))
        else:
            segments[-1][1].append((index, fix))
    return segments


@dataclass(frozen=True)
class _Verifier:
    """Re-runs the pipeline with candidate fixes, within the command's time budget."""

    target: Target
    options: DiagnoseOptions
    workdir: Path
    progress: Callable[[str], None]
    deadline: float
    fingerprint: str | None  # the first load's model: fix workers must rebuild the same one
    # When to stop starting fix checks (--fix-budget); a check already running may go on for
    # run_cap seconds a recipe, within --timeout.
    budget_ends: float = float("inf")
    run_cap: float = float("inf")
    # Every fix run so far, by recipe key: where a chain continues from.
    runs: dict[str, tuple[WorkerResult, str]] = field(default_factory=dict)
    # Checks of recipes at other inputs too (for a finding there), by recipe key: only those
    # answer such a finding; a check at the example alone would call a fix verified that is not.
    wide: dict[str, FixCheck] = field(default_factory=dict)

    def _run(self, **request_args: Any) -> WorkerResult:
        request = _request(self.target, self.options, self.workdir, gather_facts=False,
                           expected_fingerprint=self.fingerprint, **request_args)
        if request_args.get("verify_fixes"):
            request = replace(request, load_only=True, stop_on_success=not self.options.all_fixes)
        # A worker checking several in-process fixes one after another gets the cap for each.
        cap = self.run_cap * max(1, len(request_args.get("verify_fixes") or ()))
        left = _left(self.deadline)
        result = run_worker(request, timeout=min(left, cap), cwd=_cwd(self.target),
                            on_event=_progress_sink(self.progress))
        if result.timed_out and cap < left:
            result.extra["fix_run_cap"] = self.run_cap  # stopped by the cap, not by --timeout: say so
        return result

    def _out_of_time(self) -> bool:
        return time.monotonic() >= min(self.deadline - 1.0, self.budget_ends)

    def planned(self, result: WorkerResult) -> dict[str, FixCheck] | None:
        """Checks of the fixes the main worker already verified, by recipe; None if it planned none."""
        plan = next((e.get("recipes") for e in result.events if e.get("event") == "fix_plan"), None)
        if plan is None:
            return None
        checks: dict[str, FixCheck] = {}
        for position, data in enumerate(plan):
            run_id = f"plan{position}"
            if any(e.get("run") == run_id for e in result.events):
                key = Recipe.from_dict(data).key()
                checks[key] = fix_check(result, run_id, self.target)
                self.runs[key] = (result, run_id)
        return checks

    def verify(self, findings: list[Finding], planned: dict[str, FixCheck] | None) -> list[Finding]:
        """Re-run the pipeline with each candidate fix; in-process-safe ones share one worker.

        With `planned`, the main worker already ran the in-process-safe ones (those missing from
        it were skipped after an earlier fix worked). A recipe proposed by two findings
        (model.eval() answers OD601 and OD206) is run once. Fixes left when the --timeout budget
        runs out stay untried.
        """
        options, target = self.options, self.target
        verified: list[Finding] = []
        # Checks at the example, and (for findings at other inputs) checks there too: a finding
        # takes only the checks that answer it (_recorded).
        done: dict[str, FixCheck] = dict(planned or {})
        done_wide = self.wide
        no_errors = only_warnings(findings)
        for finding in findings:
            wide = about_other_inputs(finding)
            finding = replace(finding, fixes=tuple(
                replace(f, check=_recorded(f, wide, done, done_wide) or f.check) for f in finding.fixes))
            candidates = to_try(finding, options, settled=no_errors)
            if not candidates or self._out_of_time():
                verified.append(finding)
                continue
            checks: dict[int, FixCheck] = {}
            # In rank order: consecutive in-process-safe fixes share one worker, an isolated one
            # gets its own. (Every in-process fix first let two slow exporter switches spend the
            # --fix-budget before the branch read one way, ranked above them, was tried.)
            for isolated, batch in _segments(candidates):
                if not isolated and planned is not None and not wide:
                    continue  # the main worker checked these already (at the example only)
                settled = (done_wide if wide else done).values()
                if not options.all_fixes and any(c.works for c in [*checks.values(), *settled]):
                    break
                if self._out_of_time():
                    break
                if isolated:
                    ((index, fix),) = batch
                    self.progress(f"verifying fix: {fix.title}")
                    result = self._run(apply_fix=fix.recipe, other_inputs=wide)
                    checks[index] = fix_check(result, "main", target)
                    if fix.recipe:
                        self.runs[fix.recipe.key()] = (result, "main")
                    continue
                self.progress(f"verifying {len(batch)} fix(es) for {finding.code}")
                result = self._run(verify_fixes=tuple(f.recipe for _, f in batch if f.recipe), other_inputs=wide)
                for position, (index, fix) in enumerate(batch):
                    run_id = f"fix{position}"
                    if fix.recipe and any(e.get("run") == run_id for e in result.events):
                        checks[index] = fix_check(result, run_id, target)
                        self.runs[fix.recipe.key()] = (result, run_id)
                    # else: the worker stopped after an earlier fix worked; this one stays untried
            fixes = tuple(replace(fix, check=checks.get(i, fix.check)) for i, fix in enumerate(finding.fixes))
            for index, check in checks.items():
                recipe = finding.fixes[index].recipe
                if recipe is not None:
                    (done_wide if wide else done)[recipe.key()] = check
            verified.append(replace(finding, fixes=fixes))
        return [
            replace(f, fixes=tuple(replace(x, check=_recorded(x, about_other_inputs(f), done, done_wide) or x.check)
                                   for x in f.fixes))
            for f in verified
        ]

    def search_chains(self, findings: list[Finding], exporter: str | None = None) -> list[Finding]:
        """Fix chains for the error findings no single fix solved.

        A tried fix that got further but stopped at a new finding is continued with that
        finding's fixes, breadth-first, up to MAX_CHAIN steps, within --fix-budget. Each chain
        runs in a fresh worker (its steps may change process-wide state). A working chain is
        added to the finding as one fix; the first ends the search unless --all-fixes, which
        also reports the chains that failed.
        """
        searched: list[Finding] = []
        for finding in findings:
            if finding.severity is Severity.ERROR and _wants_chain(finding) and not self._out_of_time():
                found = self._chains_for(finding, exporter)
                finding = replace(finding, fixes=(*finding.fixes, *found))
            searched.append(finding)
        return searched

    def _chains_for(self, finding: Finding, exporter: str | None) -> list[Fix]:
        # Each path remembers the problems met along it, with the exporter it met them under: a
        # chain that comes back to one is a loop. (The same op refused by the other exporter is
        # not: a step that got the dynamo exporter past a data-dependent branch makes the op's
        # rewrite, which needs torch.export, possible.) A chain that answers a problem about other
        # inputs along the way (a branch decided for torch.export) is judged at other inputs too.
        frontier = [([fix], {_problem(finding, exporter)}, about_other_inputs(finding)) for fix in finding.fixes
                    if fix.recipe and fix.check and not fix.check.works]
        found: list[Fix] = []
        tried: set[str] = set(self.runs)
        for _length in range(2, MAX_CHAIN + 1):
            deeper: list[tuple[list[Fix], set[tuple[str | None, ...]], bool]] = []
            for steps, met, wide in frontier:
                so_far = steps[0] if len(steps) == 1 else chain(steps)
                left, used = self._left_behind(so_far)
                problem = _problem(left, used) if left else None
                if left is None or problem in met:
                    continue
                wide = wide or about_other_inputs(left)
                for _index, then in to_try(left, self.options):
                    candidate = chain([*steps, then])
                    if not chainable(so_far, then) or candidate.recipe is None or candidate.recipe.key() in tried:
                        continue
                    if self._out_of_time():
                        return found
                    tried.add(candidate.recipe.key())
                    self.progress(f"verifying fix chain: {candidate.title}")
                    result = self._run(apply_fix=candidate.recipe, other_inputs=wide)
                    self.runs[candidate.recipe.key()] = (result, "main")
                    candidate = replace(candidate, check=fix_check(result, "main", self.target))
                    if candidate.verified:
                        found.append(candidate)
                        if not self.options.all_fixes:
                            return found
                    else:
                        deeper.append(([*steps, then], met | {problem}, wide))
                        if self.options.all_fixes:  # every tried chain is reported, failed ones too
                            found.append(candidate)
            frontier = deeper
        return found

    def _left_behind(self, fix: Fix) -> tuple[Finding | None, str | None]:
        """The first error a tried fix's run still had, with its own fixes (None if it crashed),
        and the exporter that run used."""
        run = self.runs.get(fix.recipe.key()) if fix.recipe else None
        if run is None:
            return None, None
        result, run_id = run
        outcomes, tool = outcomes_for_run(result, run_id, self.target, first_run=False)
        if tool:
            return None, None
        exporter = _run_exporter(outcomes, result, run_id)
        findings = prepare_findings(outcomes, tool, self.target, self.options, exporter,
                                    shapes_outcome(result, run_id))
        return next((f for f in findings if f.severity is Severity.ERROR and f.fixes), None), exporter


def _problem(finding: Finding, exporter: str | None) -> tuple[str | None, ...]:
    """What a chain step met, to tell a loop from progress: the code and op under an exporter, and
    for a data-dependent branch the user's line, since a branch at another line is the next
    problem (a second `if` on a tensor torch.export stops at once the first is decided), not the
    one met again."""
    line = finding.source if finding.code in ("OD204", "OD210") else None
    return (finding.code, finding.op, exporter, line)


def _run_exporter(outcomes: list[StageOutcome], result: WorkerResult, run_id: str) -> str | None:
    """The exporter a run used: its EXPORT stage says, else the worker's event for the run."""
    return next((o.facts.get("exporter") for o in outcomes if o.stage is Stage.EXPORT), None) or next(
        (e.get("exporter") for e in result.events if e.get("event") == "exporter" and e.get("run") == run_id), None)


# Findings about other inputs than the example: a fix for one is judged at those inputs too.
# OD208: a dim declared dynamic; a fix that exports past it is judged at other sizes of it.
_OTHER_INPUT_CODES = frozenset({"OD208", "OD210", "OD802", "OD803", "OD804"})


def _recorded(fix: Fix, wide: bool, done: dict[str, FixCheck], done_wide: dict[str, FixCheck]) -> FixCheck | None:
    """The check on record that answers a finding for `fix`: for one at other inputs (`wide`),
    a check made there; else the check at the example, or one at other inputs that passed."""
    if fix.recipe is None:
        return None
    key = fix.recipe.key()
    if wide:
        return done_wide.get(key)
    there = done_wide.get(key)
    return done.get(key) or (there if there is not None and there.works else None)


def about_other_inputs(finding: Finding) -> bool:
    """Whether an error finding is about inputs other than the example (a frozen trace or size),
    or about the symbolic sizes that stand for them (a function of a size with no translation)."""
    return finding.severity is Severity.ERROR and (
        finding.code in _OTHER_INPUT_CODES or finding.op in scalar_functions.HANDLED
        # torch.export stopped at a data-dependent branch: a fix that gets past it decides that
        # branch somehow, which only other inputs can judge.
        or (finding.code == "OD204" and "data-dependent" in finding.message))


def _wants_chain(finding: Finding) -> bool:
    """Whether a finding's fixes are worth continuing as chains: none worked, or only a Python
    kernel did (it needs torch at run time) while a route with no kernel got partway (a
    Function's forward that holds an op only the rewrite library exports)."""
    verified = [f for f in finding.fixes if f.verified]
    if not verified:
        return True
    kernels_only = all(f.recipe and any(isinstance(s, RuntimeKernels) and (s.python or s.extensions)
                                        for s in f.recipe.steps)
                       for f in verified)
    return kernels_only and any(f.check and not f.check.works and f.applicability is Applicability.SAFE
                                for f in finding.fixes)


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
