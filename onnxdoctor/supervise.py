"""Run the worker in its own process group with bounded time and bounded captured output."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from onnxdoctor.proctree import become_subreaper, end_descendants, proc_stat
from onnxdoctor.protocol import (
    MEMORY_CAP_ENV,
    PARENT_PID_ENV,
    WorkerRequest,
    WorkerResult,
    memory_limiter,
    read_events,
)

OWNER_FILE = "owner.pid"
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


def default_memory_mb() -> int:
    """The worker's default memory cap: three quarters of this machine's physical memory.

    Measured data segment, OpenVINO included: a tiny BERT's export 0.55 GB, bert-base's (110M
    parameters, 440 MB of fp32 weights) 1.8 GB: about four times the weights plus 0.5 GB. The cap is there to turn a runaway allocation (a 300-byte
    model whose shape inference grows without bound) into a finding before the machine's
    out-of-memory killer picks a victim, so it leaves the rest of the memory to everyone else.
    """
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return 16 * 1024
    return max(1024, int(total * 0.75) // 2**20)


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
    process = subprocess.Popen(
        [sys.executable, "-m", "onnxdoctor.worker", str(request_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(cwd),
        env=env,
        start_new_session=True,
    )
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


def _worker_env(request: WorkerRequest) -> dict[str, str]:
    """The worker's environment: ours, plus what lets it find the package, its parent and its
    private temporary folder."""
    env = dict(os.environ)
    env.setdefault("PYTHONIOENCODING", "utf-8")
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


def _die_with_parent() -> None:
    """Linux: this (forked) process gets SIGKILL when its parent dies, so a killed onnxdoctor
    leaves no check running on."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True)
class Guarded:
    """How a guarded call ended: its value, or why there is none.

    `ended` is "ok" (`value` holds the result), "memory" (over the cap; `value`: the node the
    work named as the likely cause, if any), "signal" (`detail` names it: a native crash),
    "timeout" or "error" (`detail`: the exception, one line).
    """

    ended: str
    value: Any = None
    detail: str = ""


def guarded_call(fn: Callable[..., Any], *args: Any, max_memory_mb: int, timeout: float,
                 **kwargs: Any) -> Guarded:
    """Run `fn(*args, **kwargs)` in a forked child under a memory cap and a deadline; its (picklable)
    result comes back through a pipe.

    For work on a user's file that a native library may do without bound or crash in (onnx's
    checker and shape inference): this process survives either way and can say what happened.
    Where there is no fork (Windows), `fn` runs here.
    """
    import pickle
    import select

    if not hasattr(os, "fork"):
        return Guarded("ok", fn(*args, **kwargs))
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns, never runs the parent's cleanup
        code = 0
        try:
            os.close(read_fd)
            _die_with_parent()
            limiter = memory_limiter(max_memory_mb)
            if limiter is not None:
                limiter()
            try:
                payload: tuple[str, Any] = ("ok", fn(*args, **kwargs))
            except MemoryError as exc:  # with the node it names, where the check found one
                payload = ("memory", (str(exc), getattr(exc, "node", None)))
            except BaseException as exc:  # noqa: BLE001 - reported to the parent as data
                payload = ("error", f"{type(exc).__name__}: {exc}".splitlines()[0])
            try:
                data = pickle.dumps(payload)
            except MemoryError:
                data = pickle.dumps(("memory", "the result did not fit"))
            with os.fdopen(write_fd, "wb") as pipe:
                pipe.write(data)
        except BaseException:  # noqa: BLE001 - nothing may escape a forked child
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks: list[bytes] = []
    ends = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            left = ends - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([read_fd], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(read_fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(read_fd)
        if timed_out:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return Guarded("timeout", detail=f"{timeout:.0f} s")
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name if os.WTERMSIG(status) in signal.valid_signals() else str(os.WTERMSIG(status))
        return Guarded("memory" if name == "SIGKILL" else "signal", detail=name)
    try:
        ended, value = pickle.loads(b"".join(chunks))
    except Exception:  # noqa: BLE001 - a child that died before writing
        return Guarded("error", detail=f"the checking process exited with status {os.WEXITSTATUS(status)}")
    if ended == "memory":
        detail, node = value
        return Guarded("memory", node, str(detail))
    return Guarded(ended, value if ended == "ok" else None, "" if ended == "ok" else str(value))
