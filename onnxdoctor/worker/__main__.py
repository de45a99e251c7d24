"""`python -m onnxdoctor.worker REQUEST.json`."""

from __future__ import annotations

import sys

from onnxdoctor.worker.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
