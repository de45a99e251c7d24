"""onnxdoctor: a command-line doctor for PyTorch -> ONNX exports that fail."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
