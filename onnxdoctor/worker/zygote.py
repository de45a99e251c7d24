"""The worker fork server: `python -m onnxdoctor.worker.zygote FD` (docs/ARCHITECTURE.md, "Fork
server"; the parent's side is onnxdoctor/forkserver.py).

It imports what a worker has loaded when it runs the user's script (torch, the worker's modules),
says it is ready, and then forks one worker per request. Before the second fork it imports onnx,
onnxruntime and onnxscript and warms the dynamo exporter with a tiny export, so that the second
and later workers start with all of that loaded. Each worker is forked twice (the middle process
exits at once) so that it is adopted by the parent, which waits for it and kills it as it would a
worker it had started itself. The server never runs a parallel region or an ONNX Runtime session,
so no thread pool exists to be lost in the fork: each worker builds its own, as a fresh one would.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

from onnxdoctor.forkserver import TMP_PREFIX, receive_message, send_message


class _Preloaded:
    """What the server loaded and what each worker must get back as a fresh interpreter has it."""

    def __init__(self) -> None:
        # What a fresh worker has loaded when it runs the user's script: torch and the worker's
        # own modules. The rest (onnx, onnxruntime, onnxscript, torch.onnx) is loaded by warm(),
        # before the second fork, so that the first worker starts the script no later than a
        # fresh interpreter would.
        import torch

        import onnxdoctor.worker.process
        import onnxdoctor.worker.run  # noqa: F401

        self.torch = torch
        self.threads = torch.get_num_threads()
        # torch's default generator starts from a fixed seed: a worker must draw the same example
        # inputs as a fresh interpreter would, whatever the warm-up drew.
        self.rng = torch.get_rng_state()

    def warm(self) -> None:
        """The export's libraries, and one tiny dynamo export (single-threaded, no progress
        thread) so that its lazy imports are kept too."""
        torch = self.torch
        try:
            import onnx
            import onnxruntime  # noqa: F401
            import onnxscript  # noqa: F401
            import torch.onnx
        except ImportError:  # a worker that needs them reports it as a fresh one would
            return
        try:
            import tqdm

            tqdm.tqdm.monitor_interval = 0  # tqdm's monitor thread would not survive a fork
        except ImportError:
            pass
        torch.set_num_threads(1)
        try:
            from onnxdoctor.worker.facts import quiet_torch_logs

            model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LayerNorm(144),
                                        torch.nn.GELU(), torch.nn.Linear(144, 2), torch.nn.Softmax(-1))
            with quiet_torch_logs(), _silenced():
                program = torch.onnx.export(model.eval(), (torch.zeros(1, 3, 8, 8),), dynamo=True,
                                            verbose=False)
                proto = program.model_proto
                onnx.checker.check_model(proto)
                onnx.shape_inference.infer_shapes(proto)
        except Exception:  # a warm-up that fails only leaves the modules unloaded
            pass
        finally:
            torch.set_num_threads(self.threads)
            torch.set_rng_state(self.rng)
            torch._dynamo.reset()

    def restore(self) -> None:
        """In the forked worker: the generator and thread count a fresh interpreter starts with."""
        self.torch.set_rng_state(self.rng)
        self.torch.set_num_threads(self.threads)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed()  # a fresh interpreter seeds numpy's global generator from the OS


class _silenced:
    """fd 1 and 2 point at /dev/null already; Python-level prints are dropped too."""

    def __enter__(self) -> None:
        self.saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = io.StringIO()

    def __exit__(self, *_exc: object) -> None:
        sys.stdout, sys.stderr = self.saved


def _become_worker(request: dict[str, Any], fds: list[int], sock: socket.socket, preloaded: _Preloaded,
                   middle: int) -> None:
    """In the forked worker: become what `python -m onnxdoctor.worker` would be, run, and exit."""
    code = 1
    try:
        sock.close()
        # The parent adopts this process once the middle one has exited (it is a subreaper).
        while os.getppid() == middle:
            time.sleep(0.0005)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (devnull, *fds):
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        import tempfile

        tempfile.tempdir = None  # TMPDIR is the run's private folder now
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8",
                                      errors="backslashreplace")
        sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # `python -m` puts the working folder first on the path.
        sys.path[0] = os.getcwd()
        argv = list(request["argv"])
        preloaded.restore()
        if request.get("script"):
            code = _run_script(request["script"], argv)
        else:
            import onnxdoctor.worker.__main__ as worker_main

            sys.argv = [worker_main.__file__, *argv]
            code = worker_main.entry(argv)
    except BaseException:  # nothing may return into the server's loop
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
    finally:
        os._exit(code)


def _run_script(script: str, argv: list[str]) -> int:
    """`python SCRIPT ARGV`: the script as __main__, its folder first on the path, its exit code
    (an uncaught exception prints its traceback and gives 1, as the interpreter does)."""
    import runpy

    sys.argv = [script, *argv]
    sys.path[0] = os.path.dirname(script)
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _fork_worker(request: dict[str, Any], fds: list[int], sock: socket.socket, preloaded: _Preloaded) -> int:
    """Fork twice; the worker's pid once it leads its own session and its middle parent is gone."""
    report_read, report_write = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            # Taken before the second fork: once the middle process is gone, the worker's
            # getppid() is already the adopting parent.
            middle_pid = os.getpid()
            worker = os.fork()
            if worker == 0:
                os.close(report_read)
                os.setsid()  # its own session and group: the parent kills the group at the deadline
                os.write(report_write, str(os.getpid()).encode())
                os.close(report_write)
                _become_worker(request, fds, sock, preloaded, middle_pid)
        finally:
            os._exit(0)
    os.close(report_write)
    try:
        data = b""
        while True:
            chunk = os.read(report_read, 64)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(report_read)
        os.waitpid(middle, 0)
    return int(data) if data else -1


def _remove_own_tmp() -> None:
    """The private temporary folder the parent made for this server (onnxdoctor/forkserver.py);
    anything else TMPDIR might name is left alone."""
    import shutil

    folder = os.environ.get("TMPDIR", "")
    if os.path.basename(folder).startswith(TMP_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)


def _end_with_parent(parent: int) -> None:
    """End the server soon after its parent is gone, even in the middle of the warm-up export
    (the main loop would only see the closed socket after it)."""
    while os.getppid() == parent:
        time.sleep(0.2)
    _remove_own_tmp()
    os._exit(0)


def main(argv: list[str]) -> int:
    """Serve fork requests on the socket given by descriptor until the parent closes it."""
    # The parent's Ctrl-C is for the parent: the server ends when its socket does.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[0]))
    threading.Thread(target=_end_with_parent, args=(os.getppid(),), daemon=True).start()
    preloaded = _Preloaded()
    send_message(sock, {"ready": True})
    # The exporter's libraries and warm-up wait for the second request: the first worker reaches
    # the user's script as soon as a fresh interpreter would (a short --timeout must still see it
    # run), a command that starts one worker pays nothing for them, and the second worker waits
    # about as long as it would have spent loading them itself.
    served = 0
    while True:
        try:
            message = receive_message(sock, max_fds=2)
        except (OSError, ValueError):
            message = None
        if message is None:  # the parent closed the socket or died: remove our temporary folder
            _remove_own_tmp()
            return 0
        request, fds = message
        if served == 1:
            preloaded.warm()
        served += 1
        try:
            pid = _fork_worker(request, fds, sock, preloaded) if len(fds) == 2 else -1
        except OSError as exc:
            send_message(sock, {"error": str(exc)})
            pid = None
        finally:
            for fd in fds:
                os.close(fd)
        if pid is not None:
            send_message(sock, {"pid": pid} if pid > 0 else {"error": "the worker did not start"})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
