"""The parent's side of the worker fork server (docs/ARCHITECTURE.md, "Fork server").

A fresh worker spends seconds importing torch, onnx, onnxruntime and onnxscript, and its first
dynamo export a second or two more loading the exporter's lazy modules. One command starts several
workers (the main run, then fix runs in fresh processes), and a test session hundreds. The fork
server is a process that has done that work once (onnxdoctor/worker/zygote.py); each worker is a
fork of it that then behaves as `python -m onnxdoctor.worker REQUEST.json` would: its own session
and process group, its own environment, folder, streams and memory cap.

The worker is adopted by this process (the server forks twice and this process is a subreaper), so
it is waited for, timed and killed exactly like a worker started with subprocess. A request in
another environment than the server's gets a new server started in it. Whenever no server can serve
a request the same as a fresh interpreter would (not Linux, a server that fails to start or
refuses), the caller starts a fresh interpreter instead: the fork server only ever saves time.
`ONNXDOCTOR_FORKSERVER=0` turns it off.

Standard library only: the CLI process imports this module and must never import torch.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

# Keys of the worker's environment that differ per run and that the server's imports never read
# (pytest names the running test in PYTEST_CURRENT_TEST); any other difference needs a server
# started in that environment.
PER_RUN_KEYS = frozenset({"ONNXDOCTOR_MAX_MEMORY_MB", "TMPDIR", "PYTEST_CURRENT_TEST"})
SWITCH_ENV = "ONNXDOCTOR_FORKSERVER"
# How long a starting server may take to import torch and the rest before the caller gives up on
# it for this process's lifetime (a request with less time left than that waits only its own time).
START_SECONDS = 120.0
# The file in an `onnxdoctor-*` temporary folder naming the process that owns it: a folder whose
# owner has ended is removed by the next command (supervise.sweep_stale_workdirs).
OWNER_FILE = "owner.pid"
# The server's private temporary folder; the server removes only a folder named so (worker/zygote.py).
TMP_PREFIX = "onnxdoctor-forkserver-"
_HEADER = struct.Struct("!I")
_MAX_MESSAGE = 16 * 2**20


def send_message(sock: socket.socket, payload: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> None:
    """One length-prefixed JSON message, with file descriptors passed alongside (SCM_RIGHTS)."""
    data = json.dumps(payload).encode("utf-8")
    framed = _HEADER.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [framed], list(fds))
        framed = framed[sent:]
    sock.sendall(framed)


def receive_message(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any], list[int]] | None:
    """The next message and the descriptors that came with it; None at the end of the stream."""
    fds: list[int] = []
    if max_fds:
        data, fds, _flags, _addr = socket.recv_fds(sock, 65536, max_fds)
    else:
        data = sock.recv(65536)
    if not data:
        return None
    buffer = bytearray(data)
    while len(buffer) < _HEADER.size:
        more = sock.recv(65536)
        if not more:
            return None
        buffer += more
    (size,) = _HEADER.unpack_from(buffer)
    if size > _MAX_MESSAGE:
        raise ValueError(f"fork server message of {size} bytes")
    while len(buffer) < _HEADER.size + size:
        more = sock.recv(65536)
        if not more:
            return None
        buffer += more
    return json.loads(bytes(buffer[_HEADER.size : _HEADER.size + size])), fds


class Adopted:
    """A worker forked by the server and adopted by this process: the parts of subprocess.Popen
    that run_worker uses (pid, wait, returncode, stdout, stderr)."""

    def __init__(self, pid: int, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code (negative: the signal that ended it) once the worker has ended."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: nothing is known of how it ended
                self.returncode = -9
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the worker's end, like Popen.wait (TimeoutExpired when it outlives timeout)."""
        ends = None if timeout is None else time.monotonic() + timeout
        delay = 0.001
        while self.poll() is None:
            if ends is not None and time.monotonic() >= ends:
                raise subprocess.TimeoutExpired(["onnxdoctor.worker"], timeout or 0.0)
            time.sleep(delay if ends is None else max(0.0, min(delay, ends - time.monotonic())))
            delay = min(delay * 2, 0.02)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        """Both streams read to their end and the exit waited for, like Popen.communicate; at
        `timeout` the worker's group is killed and TimeoutExpired raised."""
        chunks: dict[str, list[bytes]] = {"out": [], "err": []}

        def drain(stream: IO[bytes], into: list[bytes]) -> None:
            into.extend(iter(lambda: stream.read(65536), b""))

        readers = [threading.Thread(target=drain, args=(stream, chunks[name]), daemon=True)
                   for name, stream in (("out", self.stdout), ("err", self.stderr))]
        for reader in readers:
            reader.start()
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self.wait()
            raise
        finally:
            for reader in readers:
                reader.join(5.0)
        return b"".join(chunks["out"]), b"".join(chunks["err"])


class ForkServer:
    """One running server: its process, the socket to it, and the environment it was started in."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        # The server's own temporary files (torch's warm-up export writes some) go into a private
        # folder, removed when the server ends: never into the user's or a run's folder.
        self.tmp = tempfile.mkdtemp(prefix=TMP_PREFIX)
        Path(self.tmp, OWNER_FILE).write_text(str(os.getpid()))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        self.lock = threading.Lock()
        package_root = str(Path(__file__).resolve().parent.parent)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "onnxdoctor.worker.zygote", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=package_root,
                env={**env, "TMPDIR": self.tmp},
                pass_fds=(theirs.fileno(),),
            )
        except OSError:
            ours.close()
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        finally:
            theirs.close()
        self.ready = False
        self.started = time.monotonic()

    def wait_ready(self, seconds: float) -> bool | None:
        """Wait up to `seconds` for the server's imports: True once it is ready, False when it
        failed (or has taken more than START_SECONDS), None while it is still starting."""
        if self.ready:
            return True
        try:
            readable, _, _ = select.select([self.sock], [], [], max(seconds, 0.0))
        except (OSError, ValueError):
            return False
        if not readable:
            return None if time.monotonic() - self.started < START_SECONDS else False
        try:
            message = receive_message(self.sock)
        except (OSError, ValueError):
            message = None
        self.ready = message is not None and message[0].get("ready") is True
        return self.ready

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, script: str | None = None) -> Adopted | None:
        """Fork one worker (or, with `script`, `python SCRIPT ARGV`); None when the server could
        not (the caller starts a fresh interpreter)."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            with self.lock:
                request: dict[str, Any] = {"argv": argv, "env": env, "cwd": cwd}
                if script is not None:
                    request["script"] = script
                send_message(self.sock, request, (out_write, err_write))
                reply = receive_message(self.sock)
        except (OSError, ValueError):
            reply = None
        finally:
            os.close(out_write)
            os.close(err_write)
        pid = reply[0].get("pid") if reply is not None else None
        if not isinstance(pid, int):
            os.close(out_read)
            os.close(err_read)
            return None
        return Adopted(pid, os.fdopen(out_read, "rb", buffering=0), os.fdopen(err_read, "rb", buffering=0))

    def close(self) -> None:
        """End the server now (a server whose parent dies ends when its socket closes)."""
        try:
            self.sock.close()
        except OSError:
            pass
        # Killed rather than waited for: it may be in the middle of its warm-up export, and it holds
        # nothing but its temporary folder, removed here.
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


_server: ForkServer | None = None
_broken = False
_guard = threading.Lock()
# Workers this process has had forked by its servers (bench/forkserver.py and the tests read it).
forked = 0


def enabled() -> bool:
    """Whether workers may come from the fork server here (Linux, not turned off)."""
    return (sys.platform.startswith("linux") and hasattr(socket, "send_fds")
            and os.environ.get(SWITCH_ENV, "1").strip().lower() not in ("0", "false", "no", "off"))


def spawn_worker(argv: list[str], env: dict[str, str], cwd: str, *, seconds: float) -> Adopted | None:
    """A worker forked from this process's server, started on first use; None when a fresh
    interpreter must run it instead (see the module's docstring for when).

    `seconds` bounds the wait for a server that is still importing (it counts against the
    caller's timeout, as a fresh worker's own imports would).
    """
    return _spawn(argv, env, cwd, seconds, None)


def spawn_script(script: str, argv: list[str], env: dict[str, str], cwd: str, *, seconds: float) -> Adopted | None:
    """`python SCRIPT ARGV` in a fork of the server (torch and the export libraries already
    imported), as its own session; None when a fresh interpreter must run it. The caller must be a
    subreaper (proctree.become_subreaper) to wait for it. The test suite runs its raw-library
    driver this way (tests/test_fixtures_raw.py)."""
    return _spawn(argv, env, cwd, seconds, os.path.abspath(script))


def _spawn(argv: list[str], env: dict[str, str], cwd: str, seconds: float, script: str | None) -> Adopted | None:
    global _server, _broken, forked
    if not enabled():
        return None
    key = _comparable(env)
    retired = None
    with _guard:
        if _broken:
            return None
        if _server is not None and (_server.process.poll() is not None or _comparable(_server.env) != key):
            # It died, or this request's environment is not the one its imports ran in (a test
            # that set a variable; a library's setting): a server for this environment replaces it.
            retired, _server = _server, None
        if _server is None:
            try:
                _server = ForkServer(key)
            except OSError:
                _broken = True
                return None
            atexit.register(_server.close)
        server = _server
    if retired is not None:
        retired.close()
    ready = server.wait_ready(min(seconds, START_SECONDS))
    if ready is None:
        # Still importing when this run's own time is up (a short --timeout on a loaded machine):
        # this worker is a fresh interpreter, and the server stays for the next one.
        return None
    if not ready:
        with _guard:
            _broken = True
            if _server is server:
                _server = None
        server.close()
        return None
    adopted = server.spawn(argv, env, cwd, script)
    if adopted is None:  # the server refused or is gone: the next request starts another
        with _guard:
            if _server is server:
                _server = None
        server.close()
        return None
    with _guard:
        forked += 1
    return adopted


def _comparable(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in PER_RUN_KEYS}


def shutdown() -> None:
    """End this process's fork server, if one runs (the next worker starts another)."""
    global _server
    with _guard:
        server, _server = _server, None
    if server is not None:
        server.close()
