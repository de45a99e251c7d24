"""Run the worker in its own process group with bounded time and bounded captured output."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from onnxdoctor.forkserver import OWNER_FILE, Adopted, spawn_worker
from onnxdoctor.guarded import Guarded, default_memory_mb, guarded_call  # noqa: F401 - re-exported
from onnxdoctor.proctree import become_subreaper, end_descendants, proc_stat
from onnxdoctor.protocol import (
    MEMORY_CAP_ENV,
    PARENT_PID_ENV,
    WorkerRequest,
    WorkerResult,
    read_events,
)

HEAD_BYTES = 8 * 1024
TAIL_BYTES = 32 * 1024


class _Capture:
    """Reads a pipe to its end, keeping the head, the tail and the total size (never all of it)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[bytes]) -> None:
        try:
            while True:
                chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
                if not chunk:
                    break
                self.total += len(chunk)
                if len(self.head) < HEAD_BYTES:
                    self.head += chunk[: HEAD_BYTES - len(self.head)]
                self.tail += chunk
                if len(self.tail) > TAIL_BYTES:
                    del self.tail[: len(self.tail) - TAIL_BYTES]
        except (OSError, ValueError):
            pass

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def text(self) -> str:
        if self.total <= TAIL_BYTES:
            data = bytes(self.tail)
        else:
            tail_start = self.total - len(self.tail)  # offset of the tail in the whole stream
            if tail_start <= len(self.head):
                data = bytes(self.head) + bytes(self.tail[len(self.head) - tail_start :])
            else:
                cut = tail_start - len(self.head)
                data = bytes(self.head) + f"\n…[{cut} bytes cut]…\n".encode() + bytes(self.tail)
        return data.decode("utf-8", errors="replace")

    def tail_text(self) -> str:
        """The captured end of the stream, decoded."""
        return bytes(self.tail).decode("utf-8", errors="replace")


def run_worker(
    request: WorkerRequest,
    *,
    timeout: float,
    cwd: Path,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> WorkerResult:
    """Start `python -m onnxdoctor.worker`, watch it, and kill its whole group when done or late.

    The worker's memory is capped at `request.max_memory_mb` (0: no cap), children included.
    """
    request_path = Path(request.workdir) / f"request-{time.monotonic_ns()}.json"
    request_path.write_text(request.to_json(), "utf-8")
    env = _worker_env(request)
    become_subreaper()
    started = time.monotonic()
    process = _start(request, request_path, env, cwd, timeout)
    assert process.stdout is not None and process.stderr is not None
    stat = proc_stat(process.pid)
    born = stat[1] if stat else None
    out, err = _Capture(process.stdout), _Capture(process.stderr)
    timed_out = False
    seen = 0
    try:
        while True:
            try:
                process.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            if on_event is not None:
                events = list(read_events(request.events_path))
                for event in events[seen:]:
                    on_event(event)
                seen = len(events)
            if time.monotonic() - started > timeout:
                timed_out = True
                _kill_group(process.pid)
                process.wait()
                break
    except KeyboardInterrupt:
        _kill_group(process.pid)
        process.wait()
        raise
    finally:
        # Grandchildren the script started live in the same group: end them too, and then every
        # descendant that left the group (setsid + fork daemons reparent to us, the subreaper).
        _kill_group(process.pid)
        if born is not None:  # scanned until none is left: a daemon may keep forking
            end_descendants(os.getpid(), born=born, spare=process.pid)
        ended_at = time.time()
    out.join(2.0)
    err.join(2.0)
    events = list(read_events(request.events_path))
    if on_event is not None:
        for event in events[seen:]:
            on_event(event)
    return WorkerResult(
        events=events,
        returncode=process.returncode,
        ended_at=ended_at,
        timed_out=timed_out,
        seconds=time.monotonic() - started,
        stdout=out.text(),
        stderr_tail=err.tail_text(),
        output_bytes=out.total + err.total,
        extra={"max_memory_mb": request.max_memory_mb},
    )


def _start(request: WorkerRequest, request_path: Path, env: dict[str, str], cwd: Path,
           timeout: float) -> subprocess.Popen[bytes] | Adopted:
    """The worker: forked from the fork server for a model script (torch is imported there once
    for every worker, onnxdoctor/forkserver.py), else a fresh interpreter. An ONNX file's worker
    never waits for the server's torch import."""
    if request.kind == "script":
        adopted = spawn_worker([str(request_path)], env, str(cwd), seconds=timeout)
        if adopted is not None:
            return adopted
    return subprocess.Popen(
        [sys.executable, "-m", "onnxdoctor.worker", str(request_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(cwd),
        env=env,
        start_new_session=True,
    )


def _worker_env(request: WorkerRequest) -> dict[str, str]:
    """The worker's environment: ours, plus what lets it find the package, its parent and its
    private temporary folder."""
    env = dict(os.environ)
    # The parent decodes the worker's output as UTF-8; whatever the locale or the user's own
    # PYTHONIOENCODING (even set empty, which means the locale's ASCII), the worker writes UTF-8 and
    # escapes what cannot be encoded instead of raising in the middle of torch's export.
    env["PYTHONIOENCODING"] = "utf-8:backslashreplace"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # The worker watches this pid and ends itself (and its group) when the parent is gone.
    env[PARENT_PID_ENV] = str(os.getpid())
    # The worker caps its own memory first thing (a preexec function is unsafe beside our threads).
    env[MEMORY_CAP_ENV] = str(max(0, request.max_memory_mb))
    # Libraries' own temporary files (torchinductor_*, ...) go into the run's folder, removed with it.
    private_tmp = Path(request.workdir) / "tmp"
    private_tmp.mkdir(exist_ok=True)
    env["TMPDIR"] = str(private_tmp)
    # The package must be importable from the worker even when run from a source checkout.
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def make_workdir() -> Path:
    """A private folder for one command's workers, marked with this process's pid.

    Folders left by a command that was killed outright (SIGKILL, the OOM killer) are removed here
    when their owner is gone; the worker itself removes the folder when it sees its parent die.
    """
    sweep_stale_workdirs()
    folder = Path(tempfile.mkdtemp(prefix="onnxdoctor-"))
    (folder / OWNER_FILE).write_text(str(os.getpid()))
    return folder


def sweep_stale_workdirs() -> None:
    """Remove `onnxdoctor-*` folders in the temp folder whose owner process has ended."""
    try:
        candidates = list(Path(tempfile.gettempdir()).glob("onnxdoctor-*"))
    except OSError:
        return
    for folder in candidates:
        try:
            owner = int((folder / OWNER_FILE).read_text())
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError):
            continue  # not ours, still being created, or owned by another user
