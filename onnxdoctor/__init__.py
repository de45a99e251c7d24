"""onnxdoctor: a doctor for PyTorch -> ONNX exports that fail (a command, and a Python API).

`import onnxdoctor` stays light: `diagnose`, `Diagnosis` and `testing` are loaded when first
used, and torch only inside `diagnose` (docs/api.md).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Diagnosis", "__version__", "diagnose", "testing"]


def __getattr__(name: str) -> Any:
    # PEP 562: the API's modules load on first use, so the command line never pays for them. By
    # then this package is initialised: the modules below may import `__version__` from it
    # without forming an import-time circle, which is why they are named, not imported, here.
    import importlib

    if name in ("diagnose", "Diagnosis"):
        return getattr(importlib.import_module("onnxdoctor.api"), name)
    if name == "testing":
        return importlib.import_module("onnxdoctor.testing")
    raise AttributeError(f"module 'onnxdoctor' has no attribute {name!r}")
