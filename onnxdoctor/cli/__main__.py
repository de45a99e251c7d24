"""`python -m onnxdoctor.cli ...`, the same as `onnxdoctor ...`."""

from __future__ import annotations

from onnxdoctor.cli.commands import main

if __name__ == "__main__":
    main()
