"""`sweep`'s library call: find the models, keep what the results file already answers, run the
rest on an engine, and append each result to the file the moment it arrives."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from onnxdoctor.errors import UsageError
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.outputs import AppendLog
from onnxdoctor.sweep.discover import discover, options_record, sweep_versions
from onnxdoctor.sweep.jobs import JobSpec
from onnxdoctor.sweep.record import Job, SweepResult
from onnxdoctor.sweep.store import Stored, reusable

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class SweepRequest:
    """A sweep, as the command line asked for it."""

    items: tuple[str, ...]
    options: DiagnoseOptions
    jobs: int = 1
    engine: str = "local"
    ray_address: str | None = None


@dataclass(frozen=True)
class Plan:
    """The sweep's models, and which of them the results file already answers."""

    jobs: tuple[Job, ...]
    kept: dict[str, SweepResult]  # target -> the result a rerun keeps
    versions: dict[str, str]
    options: dict[str, object]

    @property
    def to_run(self) -> tuple[Job, ...]:
        """The jobs without a kept result, in order."""
        return tuple(j for j in self.jobs if j.target not in self.kept)


@dataclass(frozen=True)
class SweepOutcome:
    """The sweep's results, one per model in the plan's order (kept ones included)."""

    results: tuple[SweepResult, ...]
    ran: int
    kept: int
    seconds: float
    interrupted: bool


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """Hold a SIGINT that arrives inside the block and raise it as KeyboardInterrupt after it.

    Only the main thread can install a handler; elsewhere (a Ray callback thread) the block runs
    as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        if callable(previous):
            previous(signal.SIGINT, None)  # the handler that was there decides (default: raise)
        elif previous == signal.SIG_DFL:
            raise KeyboardInterrupt


def plan_sweep(request: SweepRequest, stored: Stored) -> Plan:
    """Discover the models and key them; a model whose (target, key) has a result is kept.

    Raises:
        UsageError: a PATH item names nothing to diagnose.
    """
    versions = sweep_versions()
    record = options_record(request.options)
    jobs = discover(request.items, versions, record)
    known = reusable(stored)
    kept = {j.target: known[(j.target, j.key)] for j in jobs if (j.target, j.key) in known}
    return Plan(jobs, kept, versions, record)


def run_sweep(request: SweepRequest, plan: Plan, log: AppendLog | None,
              on_result: Callable[[SweepResult], None]) -> SweepOutcome:
    """Run the plan's remaining jobs on the requested engine; each result is appended to `log`
    (flushed and fsynced) before `on_result` sees it. Ctrl-C ends the run cleanly: the outcome
    says so and holds what finished."""
    if request.engine not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {request.engine!r}")
    options = request.options
    if options.max_memory_mb is None and not request.ray_address:
        # N diagnoses at once share this machine: each worker gets its share of the default cap.
        from onnxdoctor.guarded import default_memory_mb

        options = replace(options, max_memory_mb=max(256, default_memory_mb() // max(1, request.jobs)))
    specs = [JobSpec(job, options, plan.versions, plan.options, engine=request.engine)
             for job in plan.to_run]
    finished: dict[str, SweepResult] = {}

    def record(result: SweepResult) -> None:
        # A Ctrl-C between writing the line and counting it would make the "not run" message
        # and the results file disagree: it waits until both are done.
        with _interrupt_deferred():
            if log is not None:
                log.append(result.to_line())
            finished[result.target] = result
        on_result(result)

    started = time.monotonic()
    interrupted = False
    try:
        if request.engine == "ray":
            from onnxdoctor.sweep.ray_engine import run_ray

            run_ray(specs, request.jobs, request.ray_address, record)
        else:
            from onnxdoctor.sweep.local import run_local

            run_local(specs, request.jobs, record)
    except KeyboardInterrupt:
        interrupted = True
    results = tuple(plan.kept.get(j.target) or finished[j.target] for j in plan.jobs
                    if j.target in plan.kept or j.target in finished)
    return SweepOutcome(results, ran=len(finished), kept=len(plan.kept),
                        seconds=time.monotonic() - started, interrupted=interrupted)

