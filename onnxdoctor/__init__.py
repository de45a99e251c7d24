"""onnxdoctor: a doctor for PyTorch -> ONNX exports that fail (a command, and a Python API).

`import onnxdoctor` stays light: `diagnose`, `Diagnosis` and `testing` are loaded when first
used, and torch only inside `diagnose` (docs/api.md).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Diagnosis", "__version__", "diagnose", "testing"]


def __getattr__(name: str) -> Any:
    # PEP 562: the API's modules load on first use, so the command line never pays for them.
    if name in ("diagnose", "Diagnosis"):
        from onnxdoctor import api

        return getattr(api, name)
    if name == "testing":
        import importlib

        return importlib.import_module("onnxdoctor.testing")
    raise AttributeError(f"module 'onnxdoctor' has no attribute {name!r}")
