"""The local engine: N runner processes on this machine, one job at a time each.

A runner is a process of its own (not a thread) because a diagnosis owns its process tree: the
supervisor makes its process a subreaper and, after a worker ends, kills every descendant it
started (README, "Processes"); two diagnoses in one process would kill each other's workers.
Runners ignore Ctrl-C: the sweep decides, ends them with SIGTERM, and each then ends its worker's
whole process group on the way out.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from onnxdoctor.sweep.jobs import JobSpec, failed_job, run_job
from onnxdoctor.sweep.record import TIMED_OUT, SweepResult

# A runner that has not answered this long after its job's --timeout is ended (its diagnosis
# keeps a few seconds of --timeout for judging and rendering; this is a backstop, not the limit).
GRACE_S = 30.0


def _serve(conn: Connection) -> None:
    """A runner's loop: receive a JobSpec, send back its SweepResult; None ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGTERM unwinds (finally blocks kill the worker's group) instead of dying on the spot.
    signal.signal(signal.SIGTERM, lambda number, _frame: sys.exit(128 + number))
    _end_with_parent()
    while True:
        try:
            spec = conn.recv()
        except (EOFError, OSError):
            return
        if spec is None:
            return
        conn.send(run_job(spec))


def _end_with_parent() -> None:
    """Linux: a sweep killed outright (SIGKILL) sends its runners SIGTERM, so none diagnoses on."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Runner:
    """One runner process and the job it is on."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self.spec: JobSpec | None = None
        self.started = 0.0
        self.started_at = 0.0
        self._start()

    def _start(self) -> None:
        self.conn, child = self._context.Pipe()
        self.process = self._context.Process(target=_serve, args=(child,), daemon=True,
                                             name="onnxdoctor-sweep-runner")
        self.process.start()
        child.close()

    def give(self, spec: JobSpec) -> None:
        self.spec, self.started, self.started_at = spec, time.monotonic(), time.time()
        self.conn.send(spec)

    def take(self) -> SweepResult:
        """The finished job's result; a runner that died is restarted and its job is an error."""
        spec = self.spec
        assert spec is not None
        self.spec = None
        try:
            result = self.conn.recv()
            if isinstance(result, SweepResult):
                return result
            reason = f"the runner answered {type(result).__name__}"
        except (EOFError, OSError):
            self.process.join(5)
            reason = f"the runner process ended (exit code {self.process.exitcode})"
        self.restart()
        return failed_job(spec, reason, seconds=time.monotonic() - self.started, started_at=self.started_at)

    def overdue(self) -> bool:
        return self.spec is not None and time.monotonic() - self.started > self.spec.options.timeout + GRACE_S

    def abandon(self) -> SweepResult:
        """End a runner that did not answer in time; its job is a timed-out result."""
        spec = self.spec
        assert spec is not None
        self.spec = None
        self.restart()
        return failed_job(spec, f"no answer within --timeout + {GRACE_S:.0f} s; the runner was ended",
                          seconds=time.monotonic() - self.started, started_at=self.started_at,
                          verdict=TIMED_OUT)

    def restart(self) -> None:
        self.stop()
        self._start()

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.spec is None and self.process.is_alive():
                self.conn.send(None)
                self.process.join(2)
        if self.process.is_alive():
            self.process.terminate()  # SIGTERM: the runner kills its worker's group on the way out
            self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        with contextlib.suppress(OSError):
            self.conn.close()


def run_local(specs: Sequence[JobSpec], jobs: int, on_result: Callable[[SweepResult], None]) -> None:
    """Run every job, `jobs` at a time, calling `on_result` in this thread as each one ends.

    On KeyboardInterrupt (or any exception) the runners are ended, their workers with them, and
    the exception goes on; results already handed to `on_result` stay handed.
    """
    if not specs:
        return
    context = multiprocessing.get_context("spawn")  # no fork of a threaded process
    pending = deque(specs)
    runners: list[_Runner] = []
    try:
        runners = [_Runner(context) for _ in range(min(jobs, len(specs)))]
        while pending or any(r.spec is not None for r in runners):
            for runner in runners:
                if runner.spec is None and pending:
                    runner.give(pending.popleft())
            busy = {r.conn: r for r in runners if r.spec is not None}
            for conn in wait(list(busy), timeout=0.5):
                on_result(busy[conn].take())  # type: ignore[index]
            for runner in runners:
                if runner.overdue():
                    on_result(runner.abandon())
    finally:
        for runner in runners:
            runner.stop()
