"""`python -m onnxdoctor.worker REQUEST.json`."""

from __future__ import annotations

import os
import sys

from onnxdoctor.worker.process import main

if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # A script's non-daemon threads or blocking atexit hooks must not keep the worker alive.
    os._exit(code)
