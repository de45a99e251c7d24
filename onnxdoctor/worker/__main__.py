"""`python -m onnxdoctor.worker REQUEST.json`."""

from __future__ import annotations

import os
import sys

from onnxdoctor.protocol import MEMORY_CAP_ENV, memory_limiter


def _safe_streams() -> None:
    """Output streams that never raise on encoding (torch prints emoji during the dynamo export)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(encoding="utf-8", errors="backslashreplace")


def entry(argv: list[str]) -> int:
    """The worker's whole life, from a fresh interpreter or from a fork of the fork server
    (onnxdoctor/worker/zygote.py); the caller ends the process with the code returned."""
    _safe_streams()
    # The memory cap first, before torch or the script allocate anything (children inherit it).
    limit = memory_limiter(int(os.environ.pop(MEMORY_CAP_ENV, "0") or 0))
    if limit is not None:
        limit()
    from onnxdoctor.worker.process import main

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    # A script's non-daemon threads or blocking atexit hooks must not keep the worker alive.
    os._exit(entry(sys.argv[1:]))
