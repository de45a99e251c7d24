"""`python -m onnxdoctor.worker REQUEST.json`."""

from __future__ import annotations

import os
import sys

from onnxdoctor.worker.process import main


def _safe_streams() -> None:
    """Output streams that never raise on encoding (torch prints emoji during the dynamo export)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(encoding="utf-8", errors="backslashreplace")


if __name__ == "__main__":
    _safe_streams()
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # A script's non-daemon threads or blocking atexit hooks must not keep the worker alive.
    os._exit(code)
