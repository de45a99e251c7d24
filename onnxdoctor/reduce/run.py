"""Run a reduce worker for a model script or an ONNX file, then write its result for the user."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from onnxdoctor.errors import UsageError
from onnxdoctor.protocol import (
    REDUCED,
    ReduceOutcome,
    ReduceSpec,
    ReproSpec,
    WorkerRequest,
    WorkerResult,
)
from onnxdoctor.target import Target, parse_target

# Seconds beyond --budget the worker gets: the original run before the search, writing, verifying.
SLACK = 120.0
# How many times a search is started again after a candidate crashed its worker.
MAX_RETRIES = 3
# ReduceOutcome.status when the worker itself died or ran out of time.
WORKER_FAILED = "worker_failed"


@dataclass(frozen=True)
class ReduceOptions:
    """What `reduce` should do: the CLI's flags, as the library takes them."""

    budget: float = 300.0
    exporter: str | None = None
    opset: int | None = None
    custom_op_libraries: tuple[str, ...] = ()
    atol: float = 1e-4
    rtol: float = 1e-3
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    max_memory_mb: int | None = None


def output_suffix(target: Target) -> str:
    """The suffix the result must have: `.onnx` for a file, `.py` for a script."""
    return ".onnx" if target.kind == "onnx" else ".py"


def check_reduce_output(target: Target, output: Path, *, force: bool) -> None:
    """Refuse a bad -o before any work (wrong suffix, the model itself, an existing file)."""
    from onnxdoctor.outputs import check_output

    if output.suffix.lower() != output_suffix(target):
        raise UsageError(f"-o {output}: a reduced {'ONNX file' if target.kind == 'onnx' else 'script'} "
                         f"is written as {output_suffix(target)}")
    check_output(output, force=force, what="-o", protected=(target.path,))
    if target.kind == "script":  # the values a repro needs are saved beside it
        check_output(output.with_suffix(".pt"), force=force, what="-o (its values)", protected=(target.path,))


def reduce(
    target_text: str,
    output: Path,
    options: ReduceOptions,
    *,
    force: bool = False,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> ReduceOutcome:
    """Find the smallest model that fails the way the target does and write it to `output`.

    Returns the worker's outcome; its `path` is `output` once written. A worker that dies or runs
    out of time is an outcome too (status `worker_failed`), never an exception.

    Raises:
        UsageError, RefusedWrite: bad target or output path (before any work).
    """
    from onnxdoctor.outputs import write_file
    from onnxdoctor.pipeline import memory_cap
    from onnxdoctor.supervise import make_workdir, run_worker

    target = parse_target(target_text)
    if not target.path.is_file():
        raise UsageError(f"{target.path}: no such file")
    check_reduce_output(target, output, force=force)
    workdir = make_workdir()
    try:
        result_path = workdir / f"reduced{output_suffix(target)}"
        from onnxdoctor.model import DiagnoseOptions

        request = WorkerRequest(
            target=str(target.path), kind=target.kind, workdir=str(workdir),
            events_path=str(workdir / "events.jsonl"), factory=target.factory, exporter=options.exporter,
            opset=options.opset,
            custom_op_libraries=tuple(str(Path(p).absolute()) for p in options.custom_op_libraries),
            atol=options.atol, rtol=options.rtol, input_shapes=dict(options.input_shapes),
            gather_facts=False, localize_budget=0.0,
            max_memory_mb=memory_cap(DiagnoseOptions(max_memory_mb=options.max_memory_mb)),
            reduce=ReduceSpec(output=str(result_path), budget=options.budget),
        )
        parent = target.path.parent
        started = time.monotonic()
        for _attempt in range(MAX_RETRIES + 1):
            left = options.budget - (time.monotonic() - started)
            spec = replace(request.reduce, budget=max(left, 1.0)) if request.reduce else None
            result = run_worker(replace(request, reduce=spec, events_path=str(workdir / f"events-{_attempt}.jsonl")),
                                timeout=max(left, 1.0) + SLACK, cwd=parent if parent.is_dir() else Path.cwd(),
                                on_event=progress)
            outcome = outcome_of(result)
            crashed = crashed_candidate(result, target)
            if outcome.status != WORKER_FAILED or crashed is None or left <= 1.0 or request.reduce is None:
                break
            # A candidate crashed ONNX Runtime (the original did not): search again without it.
            request = replace(request, reduce=replace(request.reduce, crashed=(*request.reduce.crashed, crashed)))
        if outcome.status == REDUCED and target.kind == "script":
            outcome = _write_repro(result, outcome, target, output, options, force=force, workdir=workdir)
        elif outcome.status == REDUCED and Path(outcome.path).is_file():
            write_file(output, Path(outcome.path).read_bytes(), force=force, what="-o", protected=(target.path,))
            outcome = replace(outcome, path=str(output))
        return outcome
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _write_repro(result: WorkerResult, outcome: ReduceOutcome, target: Target, output: Path,
                 options: ReduceOptions, *, force: bool, workdir: Path) -> ReduceOutcome:
    """Write the repro script in a folder of its own, check in a fresh worker that it fails the
    same way (random inputs first, then the captured weights and inputs), then install it."""
    from onnxdoctor.outputs import write_file
    from onnxdoctor.reduce.script import repro_text
    from onnxdoctor.safetext import printable

    event = next((e for e in result.events if e.get("event") == "repro"), None)
    if event is None:
        return replace(outcome, status=WORKER_FAILED, message="the reduce worker gave no repro")
    spec = ReproSpec.from_event(event)
    folder = workdir / "repro"  # not the script's folder: the repro must run without it
    folder.mkdir(exist_ok=True)
    script = folder / output.name
    command = f"onnxdoctor reduce {target.display} -o {printable(output.name, one_line=True)}"
    shown = replace(outcome, message=printable(outcome.message, one_line=True))
    # Smallest first: the custom op alone, then the submodule with random values, then with its
    # captured weights and inputs.
    attempts = [(True, False)] if spec.op and spec.op_args else []
    attempts += [(False, False), (False, True)]
    again, with_values, op_alone = False, False, False
    for op_alone, with_values in attempts:
        said = replace(shown, what_after=f"{shown.what_after}; written as {spec.op} alone") if op_alone else shown
        script.write_text(repro_text(spec, said, command, with_values=with_values, op_alone=op_alone), "utf-8")
        if with_values:
            script.with_suffix(".pt").write_bytes(Path(spec.state_path).read_bytes())
        again = verify(script, outcome, options)
        if again:
            break
    if again and op_alone:
        outcome = replace(outcome, what_after=f"{outcome.what_after}; written as {spec.op} alone", after=0)
    write_file(output, script.read_bytes(), force=force, what="-o", protected=(target.path,))
    extra: tuple[str, ...] = ()
    if with_values:
        beside = output.with_suffix(".pt")
        write_file(beside, script.with_suffix(".pt").read_bytes(), force=force, what="-o (its values)",
                   protected=(target.path,))
        extra = (str(beside),)
    return replace(outcome, path=str(output), extra_files=extra, verified=again)


def verify(script: Path, outcome: ReduceOutcome, options: ReduceOptions) -> bool:
    """Diagnose the repro in a fresh worker (no fixes): does it fail with the same code, stage and
    op (a mismatch: the same code; its first diverging node is the cut's own)?"""
    from onnxdoctor.model import DiagnoseOptions, Severity
    from onnxdoctor.pipeline import diagnose

    diagnosis = diagnose(str(script), DiagnoseOptions(
        exporter=options.exporter, opset=options.opset, custom_op_libraries=options.custom_op_libraries,
        atol=options.atol, rtol=options.rtol, fix=False, localize_budget=0.0, timeout=max(120.0, options.budget / 2),
        max_memory_mb=options.max_memory_mb))[0]
    found = next((f for f in diagnosis.findings if f.severity is Severity.ERROR), None)
    if found is None or (found.code, found.stage.value) != (outcome.code, outcome.stage):
        return False
    return outcome.stage == "parity" or (found.op or "") == outcome.op


def crashed_candidate(result: WorkerResult, target: Target) -> tuple[int, ...] | None:
    """The ONNX candidate a worker died on (killed by a signal mid-candidate), if any."""
    if target.kind != "onnx" or result.signal_name is None or result.timed_out:
        return None
    last = next((e for e in reversed(result.events) if e.get("event") in ("reduce_candidate", "reduce_try")), None)
    if last is None or last.get("event") != "reduce_candidate":
        return None
    nodes = last.get("nodes")
    return tuple(int(i) for i in nodes) if isinstance(nodes, list) else None


def outcome_of(result: WorkerResult) -> ReduceOutcome:
    """The worker's `reduced` event, or why there is none (it died, or ran out of time)."""
    event = next((e for e in reversed(result.events) if e.get("event") == "reduced"), None)
    if event is not None:
        return ReduceOutcome.from_event(event)
    if result.timed_out:
        why = f"the reduce worker was still running after {result.seconds:.0f} s and was killed (raise --budget)"
    elif result.signal_name:
        why = f"the reduce worker died ({result.signal_name}) before it had a result"
    else:
        last = result.stderr_tail.strip().splitlines()[-1:] or ["no output"]
        why = f"the reduce worker ended (exit {result.returncode}) without a result: {last[0]}"
    return ReduceOutcome(WORKER_FAILED, message=why, seconds=round(result.seconds, 3))


def describe(outcome: ReduceOutcome) -> list[str]:
    """The outcome as lines for a terminal (escaped: names come from the user's model)."""
    from onnxdoctor.safetext import printable

    lines: list[str] = []
    failure = f"{outcome.code} at {outcome.stage}" + (f" ({outcome.op})" if outcome.op else "")
    if outcome.status == REDUCED:
        lines.append(f"reduced: {outcome.what_before} -> {outcome.what_after}; fails the same way: {failure}")
        if outcome.frozen:
            lines.append(f"  values from a run of the part before: {', '.join(outcome.frozen)}")
        lines.append(f"  {outcome.tried} candidate(s) tried in {outcome.seconds:.1f} s"
                     + ("; the --budget ran out (the best so far is kept)" if outcome.budget_spent else ""))
        if outcome.path.endswith(".py"):
            lines.append("  checked in a fresh worker: the repro fails the same way" if outcome.verified else
                         "  NOT confirmed: in a fresh worker the repro did not fail the same way")
        lines.append(f"  wrote {outcome.path}" + "".join(f", {p}" for p in outcome.extra_files))
    else:
        lines.append(f"not reduced: {outcome.message}")
    return [printable(line, one_line=True) for line in lines]
