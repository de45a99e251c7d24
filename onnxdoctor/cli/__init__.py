"""The command line: one module per command (options -> request -> library -> render -> exit code)."""

from __future__ import annotations

from onnxdoctor.cli.commands import app, main

__all__ = ["app", "main"]
