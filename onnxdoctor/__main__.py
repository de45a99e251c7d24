"""`python -m onnxdoctor ...` runs the same command line as the `onnxdoctor` executable."""

from __future__ import annotations

from onnxdoctor.entry import main

if __name__ == "__main__":
    main()
