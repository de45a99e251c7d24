"""Judging a worker's records: stage ladders, findings with their fixes, and fix verdicts.

Pure functions of plain data (the worker's events, the code table, the fix families): the parent
uses them to build a diagnosis, and the worker uses the same verdicts to decide when to stop
verifying fixes, so both processes judge a run the same way.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from onnxdoctor.analysis.classify import classify
from onnxdoctor.analysis.normalize import first_line, normalize_message
from onnxdoctor.analysis.shapes import classify_shapes, size_checks, size_label
from onnxdoctor.model import (
    ONNX_FILE_STAGES,
    PIPELINE_STAGES,
    DiagnoseOptions,
    ErrorInfo,
    Finding,
    Fix,
    FixCheck,
    SecondInputs,
    Severity,
    Stage,
    StageOutcome,
    Status,
    drawn_in_distribution,
)
from onnxdoctor.protocol import NOT_REQUESTED, WorkerResult, out_of_memory_message
from onnxdoctor.recipe import Recipe, UseExporter
from onnxdoctor.target import Target

FLOOD_BYTES = 1024 * 1024
# What a process that failed to allocate prints on its way out (Python, C++, glibc, CUDA).
_MEMORY_WORDS = re.compile(r"\bMemoryError\b|std::bad_alloc|[Oo]ut of memory|Cannot allocate memory")


def outcomes_for_run(
    result: WorkerResult, run_id: str, target: Target, *, first_run: bool = True
) -> tuple[list[StageOutcome], list[Finding]]:
    """The stage ladder of one run from the worker's events, and tool findings (crash, timeout...)."""
    records = result.records(run_id)
    # A stage the request left out (--skip-check, a LOAD-only run) is not part of the ladder.
    stages = [s for s in (PIPELINE_STAGES if target.kind == "script" else ONNX_FILE_STAGES)
              if s.value not in records or records[s.value].reason != NOT_REQUESTED]
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
                status=Status(record.status),
                seconds=record.seconds,
                error=ErrorInfo.from_dict(record.error),
                facts=record.facts,
                warnings=record.warnings,
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
        load = next((o for o in outcomes if o.stage is Stage.LOAD), None)
        symbolics = (load.facts.get("custom_symbolics") if load else None) or {}
        tool.append(_tool_finding(result, interrupted, target, symbolics))
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


def _tool_finding(result: WorkerResult, stage: str | None, target: Target | None = None,
                  symbolics: dict[str, str] | None = None) -> Finding:
    # The step the stage had reached (the worker says before each native step), if it said.
    step = next((e.get("step") for e in reversed(result.events)
                 if e.get("event") == "step" and e.get("stage") == stage and isinstance(e.get("step"), str)), None)
    if stage and step:
        stage = f"{stage}, in {step}"
    where = f" during {stage}" if stage else ""
    evidence = tuple(line for line in [_stderr_excerpt(result.stderr_tail)] if line)
    if result.timed_out:
        cap = result.extra.get("fix_run_cap")
        why = ("(raise --timeout if the model is just slow)" if cap is None else
               f"(a fix check may run {cap:g} s; --fix-timeout sets it)")
        return Finding("OD902", Stage.TOOL, Severity.ERROR,
                       f"the worker was still running after {result.seconds:.0f} s{where} and was killed {why}",
                       evidence=evidence)
    cap = int(result.extra.get("max_memory_mb") or 0)
    if result.signal_name == "SIGKILL" or (result.returncode not in (0, None) and _MEMORY_WORDS.search(result.stderr_tail)):
        # Nobody here sent SIGKILL (a timeout is said above): the kernel's out-of-memory killer
        # did; a native library that met a failed allocation aborts or crashes with these words.
        return Finding("OD905", Stage.TOOL, Severity.ERROR,
                       out_of_memory_message(stage, "" if result.signal_name != "SIGKILL"
                                             else "killed by the system (SIGKILL)", cap),
                       evidence=evidence)
    if result.signal_name:
        op, source = crash_frames(result.stderr_tail, target)
        function = user_function(result.stderr_tail, target)
        owned = [name for name, fn in (symbolics or {}).items() if fn and fn == function]
        if stage and stage.startswith("export") and len(owned) == 1:
            # The node builder died on what the script's own symbolic handed it (a stride or kernel
            # of 0 divides by zero in torch's shape code): the symbolic is the thing to mend.
            why = (" (a division by zero: an attribute such as a stride or kernel size of 0)"
                   if result.signal_name == "SIGFPE" else "")
            return Finding("OD205", Stage.EXPORT, Severity.ERROR,
                           f"the export crashed ({result.signal_name}) inside {function}, the symbolic your "
                           f"script registers for {owned[0]}: torch died building the node it asked for{why}",
                           op=owned[0], source=source, evidence=(_dump_to_user_frame(result.stderr_tail, source),))
        return Finding("OD901", Stage.TOOL, Severity.ERROR,
                       f"the worker died from {result.signal_name}{where}"
                       + (f", in the TorchScript symbolic of {op}" if op else ""),
                       op=op, source=source, evidence=evidence)
    tail = result.stderr_tail
    if result.returncode not in (0, None) and "Traceback" in tail and "onnxdoctor" in tail:
        return Finding("OD999", Stage.TOOL, Severity.ERROR,
                       f"onnxdoctor's worker failed{where}: {first_line(tail.strip().splitlines()[-1])}",
                       evidence=evidence)
    return Finding("OD903", Stage.TOOL, Severity.ERROR,
                   f"the worker exited with status {result.returncode}{where} without reporting a result "
                   "(os._exit() in the model code?)", evidence=evidence)


# faulthandler's dump of a crashed worker, most recent call first: a TorchScript symbolic
# (named after its aten op), and any frame of the user's own files.
_SYMBOLIC_FRAME = re.compile(r'File "[^"]*symbolic_opset\d+\.py", line \d+ in ([a-z]\w*)')
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


def crash_frames(stderr: str, target: Target | None) -> tuple[str | None, str | None]:
    """The aten op whose TorchScript symbolic was running when the worker crashed, and the user's
    innermost line, from the dump faulthandler writes (None where it names none)."""
    symbolic = _SYMBOLIC_FRAME.search(stderr)
    frame = _user_frame(stderr, target)
    source = f"{frame[0]}:{frame[1]}" if frame else None
    return (f"aten::{symbolic.group(1)}" if symbolic else None), source


def _dump_to_user_frame(stderr: str, source: str | None) -> str:
    """faulthandler's dump from its first line to the user's frame: torch's frames above it say
    where the crash was, the worker's own below it say nothing to the user."""
    lines = stderr.splitlines()
    start = next((i for i, text in enumerate(lines) if text.startswith("Fatal Python error")), 0)
    file, _, number = (source or "").rpartition(":")
    end = next((i for i in range(start, len(lines)) if file and f'{file}", line {number} in' in lines[i]), len(lines) - 1)
    return normalize_message("\n".join(text for text in lines[start:end + 1] if text.strip()), limit=2000)


def user_function(stderr: str, target: Target | None) -> str | None:
    """The function of the user's innermost frame in a crashed worker's faulthandler dump."""
    frame = _user_frame(stderr, target)
    return frame[2] if frame else None


def _user_frame(stderr: str, target: Target | None) -> tuple[str, str, str] | None:
    if target is None:
        return None
    folder = str(target.path.parent.resolve())
    for path, line, function in _FRAME.findall(stderr):
        if path.startswith(folder + "/") and "site-packages" not in path:
            return path[len(folder) + 1:], line, function
    return None


def _stderr_excerpt(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()][-12:]
    return normalize_message("\n".join(lines)[-4000:], limit=2000)


def shapes_outcome(result: WorkerResult, run_id: str) -> StageOutcome | None:
    """The SHAPES stage of one run (after PARITY, outside the ladder); None when it did not run.

    A worker that died during it leaves a start and no record: that is the tool finding's to say
    (the ladder itself passed), so no outcome here.
    """
    record = result.records(run_id).get(Stage.SHAPES.value)
    if record is None or record.status == "skipped":
        return None
    return StageOutcome(stage=Stage.SHAPES, status=Status(record.status), seconds=record.seconds,
                        error=ErrorInfo.from_dict(record.error), facts=record.facts, warnings=record.warnings)


def prepare_findings(
    outcomes: list[StageOutcome],
    tool_findings: list[Finding],
    target: Target,
    options: DiagnoseOptions,
    exporter: str | None,
    shapes: StageOutcome | None = None,
) -> list[Finding]:
    """Classify a run (its SHAPES stage too, when given) and attach its fixes; the worker calls
    this too, to plan fix checks."""
    sized = classify_shapes(shapes, outcomes, str(target.path.parent))
    findings = classify(outcomes, base_dir=str(target.path.parent))
    if any(f.code in FROZEN_SIZE_CODES for f in sized):
        # OD210 says the tracer's frozen value matched at other inputs of the same size; a size
        # the SHAPES stage found frozen says it mattered: that finding is the one to act on.
        findings = [f for f in findings if f.code != "OD210"]
    return attach_fixes(findings + sized + tool_findings, outcomes, target, options, exporter)


# SHAPES findings that name a size the export holds as a constant.
FROZEN_SIZE_CODES = ("OD802", "OD804")


def attach_fixes(
    findings: list[Finding],
    outcomes: list[StageOutcome],
    target: Target,
    options: DiagnoseOptions,
    exporter: str | None,
) -> list[Finding]:
    """The findings with their proposed fixes (deployment targets' findings come in here too)."""
    from onnxdoctor.analysis.fixes import with_fixes

    context = {"target": target, "outcomes": outcomes, "exporter": exporter, "options": options}
    findings = [with_fixes(f, context) for f in findings]
    if exporter is None:
        return findings
    # Fixes that do not choose an exporter are checked with the run's own exporter.
    return [
        replace(finding, fixes=tuple(
            replace(f, recipe=f.recipe.with_default(UseExporter(exporter))) if f.recipe else f
            for f in finding.fixes))
        for finding in findings
    ]


def only_warnings(findings: list[Finding]) -> bool:
    """No error finding: warnings are all the run has left to fix (to_try's `settled`)."""
    return not any(f.severity is Severity.ERROR for f in findings)


def to_try(finding: Finding, options: DiagnoseOptions, *, settled: bool = False) -> list[tuple[int, Fix]]:
    """The fixes of an error finding that will be tried, best first; `settled`: the run has no
    error finding, so a fixed-size export's warning is the one thing left to fix."""
    # A target's warning (a node ONNX Runtime's CUDA provider leaves to the CPU) is worth a fix too.
    # A fixed-size export's (OD801: ONNX Runtime refuses sizes PyTorch runs) when asked, or when
    # nothing else is wrong: it costs an export, and while an error stands the size may be meant
    # and the export is better spent on the error.
    # An opset asked for and not written (OD207) likewise: the other exporter may write it.
    wanted = finding.stage is Stage.TARGET or ((finding.stage is Stage.SHAPES or finding.code == "OD207")
                                               and (options.all_fixes or settled))
    if finding.severity is not Severity.ERROR and not wanted:
        return []
    candidates = [(i, fix) for i, fix in enumerate(finding.fixes) if fix.recipe and fix.check is None]
    return candidates if options.all_fixes else candidates[: options.max_fix_checks]


def shared_fix_plan(findings: list[Finding], options: DiagnoseOptions) -> list[Recipe]:
    """The in-process-safe recipes, deduplicated, in the order they are tried."""
    plan: list[Recipe] = []
    seen: set[str] = set()
    quiet = only_warnings(findings)
    for finding in findings:
        for _index, fix in to_try(finding, options, settled=quiet):
            if fix.recipe is not None and not fix.recipe.alone and fix.recipe.key() not in seen:
                seen.add(fix.recipe.key())
                plan.append(fix.recipe)
    return plan


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
    shapes = shapes_outcome(result, run_id)
    findings = classify(outcomes, base_dir=str(target.path.parent)) + classify_shapes(shapes, outcomes, str(target.path.parent)) + tool
    numbers_checked = True
    if failed is None and not tool and reached is final:
        problem, text = _still_wrong(findings, numbers.facts if numbers else {})
        numbers_checked = problem != _UNCHECKED
        status, detail = (Status.FAILED, text) if text else (Status.PASSED, _passed_detail(final, numbers))
        passed_sizes = [size_label(c.inputs) for c in size_checks(shapes) if c.status == "passed"]
        if status is Status.PASSED and passed_sizes:
            detail += f"; and at {', '.join(passed_sizes)}"
        frozen = next((f.detail for f in findings if f.code == "OD210" and isinstance(f.detail, SecondInputs)), None)
        if status is Status.PASSED and frozen is not None:
            # Verified for these inputs only: the trace froze a value, which other inputs may need.
            detail += f"; the tracer froze a value, and it matches at {frozen.source} too"
            load = next((o for o in outcomes if o.stage is Stage.LOAD), None)
            integers = [i for i, x in enumerate((load.facts.get("inputs") if load else None) or ())
                        if isinstance(x, dict) and str(x.get("dtype", "")).startswith(("int", "uint", "bool"))]
            if integers and "get_inputs2" not in str(frozen.source):
                # The derived sets vary floating-point inputs only: sizes or indices the trace read
                # from an integer input (an image grid, token ids) were never varied.
                several = len(integers) > 1
                detail += (f"; integer input{'s' if several else ''} {', '.join(str(i) for i in integers)} kept "
                           f"the example's values, so what the trace read from {'them' if several else 'it'} holds "
                           "for those values only (give get_inputs2() to check others)")
        second = (numbers.facts.get("second_inputs") if numbers else None) or {}
        if status is Status.PASSED and frozen is None and isinstance(second, dict) and second.get("matched"):
            detail += f"; and at {second.get('source')}"  # other inputs the check held it to
        problem = problem if numbers_checked else None
    else:
        first = next((f for f in findings if f.severity is Severity.ERROR), None)
        status = failed.status if failed else Status.FAILED
        detail = f"{first.code}: {first.message}" if first else "did not complete"
        problem = first.code if first else None
    return FixCheck(
        reached=reached,
        status=status,
        max_abs_diff=numbers.facts.get("max_abs_diff") if numbers else None,
        max_rel_diff=numbers.facts.get("max_rel_diff") if numbers else None,
        seconds=round(sum(o.seconds for o in ran), 3),
        detail=detail[:500],
        artifact=producer.facts.get("onnx_path") if producer else None,
        failed_at=failed.stage if failed else None,
        problem=problem,
        numbers_checked=numbers_checked,
        sizes=tuple(size_label(c.inputs) for c in size_checks(shapes) if c.status == "passed"),
    )


_UNCHECKED = "unchecked"  # _still_wrong's code for a rewrite whose numbers were not compared


def _still_wrong(findings: list[Finding], numbers: dict[str, Any]) -> tuple[str | None, str | None]:
    """Why a fixed run that passed every stage still does not count as a fix: (code, text), or
    (None, None) when it does."""
    frozen = next((f for f in findings if f.code == "OD210"), None)
    if frozen is not None and isinstance(frozen.detail, SecondInputs) and frozen.detail.frozen_cause is False:
        # Wrong at other inputs, but not because of the frozen branch: say so, and still no verdict
        # of "verified" while any input set differs.
        where = f", first at {frozen.detail.where}" if frozen.detail.where else ""
        return "OD210", (f"OD210: differs from PyTorch at other inputs ({frozen.detail.source}{where}); "
                         "traced again at those inputs it differs too, so not because the tracer froze "
                         "a branch")
    if frozen is not None and not (isinstance(frozen.detail, SecondInputs) and frozen.detail.matched):
        second = frozen.detail if isinstance(frozen.detail, SecondInputs) else None
        if second is None:
            said = ", so it matches PyTorch on the example input only"
        else:
            said = (f": at other inputs ({second.source}) it differs"
                    + (f", first at {second.where}" if second.where else "")
                    + (", and traced at those inputs it matches: the recorded branch is the cause"
                       if second.frozen_cause else ""))
        return "OD210", (f"OD210: the tracer froze a data-dependent branch or value{said} "
                         "(rewrite it with torch.where or torch.cond)")
    if numbers.get("reference_required") and str(numbers.get("reference", "")).startswith("not compared"):
        # A precision-changing rewrite is not a fix until its numbers have been seen.
        return _UNCHECKED, f"numbers not checked: {numbers['reference']}"
    if numbers.get("reference_mismatch"):
        return "OD601", f"OD601: against {numbers.get('reference')}: {numbers['reference_mismatch']}"
    error = next((f for f in findings if f.severity is Severity.ERROR), None)
    if error is None:
        return None, None
    return error.code, f"{error.code}: {error.message}"  # e.g. dims that went static (OD208)


def _passed_detail(final: Stage, outcome: StageOutcome | None) -> str:
    if final is Stage.PARITY:
        decode = (outcome.facts if outcome else {}).get("decode")
        if isinstance(decode, dict) and decode.get("tokens_equal"):
            lengths = " and ".join(str(n) for n in decode.get("prompt_lengths", ()))
            cache = ("the exported caches (and the exported encoder's cross-attention cache)" if decode.get("encoder_decoder")
                     else "the exported cache")
            return (f"exports, loads, runs and matches PyTorch; greedy decoding with {cache} in "
                    f"ONNX Runtime gives eager PyTorch's tokens (prompts of {lengths} tokens, a prefill and "
                    f"{decode.get('steps')} decode steps each, max abs diff of logits "
                    f"{float(decode.get('max_abs_diff', 0.0)):.3g})")
        carried = (outcome.facts if outcome else {}).get("state_calls")
        if isinstance(carried, dict) and carried.get("calls"):
            return (f"exports, loads, runs and matches PyTorch; {carried['calls']} calls in a row in ONNX Runtime, "
                    f"each fed the state the last returned ({', '.join(map(str, carried.get('state') or ()))}), "
                    f"give the outputs of PyTorch's calls in a row at {carried.get('inputs', 'the example')} "
                    f"(max abs diff {float(carried.get('max_abs_diff') or 0.0):.3g})")
        drawn = drawn_in_distribution((outcome,) if outcome else ())
        prefix = (outcome.facts if outcome else {}).get("prefix")
        if prefix:
            # A loop run to its end (recipe.PrefixParity): PyTorch's steps are what matched.
            return ("exports, loads, runs and matches PyTorch on PyTorch's steps of the longer outputs ("
                    + "; ".join(map(str, prefix)) + "): the rest are the steps PyTorch's loop skipped")
        tolerance = (outcome.facts if outcome else {}).get("tolerance")
        if isinstance(tolerance, str) and tolerance.startswith("PyTorch's own"):
            # Matched only against PyTorch's float64 run: say so, with both errors.
            return f"exports, loads, runs and matches PyTorch within {tolerance}"
        return "exports, loads, runs and matches PyTorch" + (f" in distribution; {drawn}" if drawn else "")
    detail = "passes the checker, loads and runs in ONNX Runtime"
    numbers = outcome.facts if outcome else {}
    if numbers.get("reference"):
        detail += "; " + (
            numbers["reference"] if numbers["reference"].startswith("not compared")
            else f"matches {numbers['reference']}"
        )
    return detail

