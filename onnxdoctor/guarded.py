"""Work on a user's file that a native library may do without bound or crash in, run in a forked
child under a memory cap and a deadline (README, "Robustness"): the caller survives and says what
happened. Shared by the worker's supervisor and `graph`'s checks, so it depends on neither."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from onnxdoctor.protocol import memory_limiter


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
