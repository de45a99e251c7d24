"""The thing `diagnose` is pointed at: a model script (`model.py[:factory]`) or an ONNX file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from onnxdoctor.errors import UsageError
from onnxdoctor.safetext import printable


@dataclass(frozen=True)
class Target:
    """A parsed `model.py[:factory]` or `model.onnx` argument."""

    path: Path
    factory: str | None
    kind: str  # "script" | "onnx"

    @property
    def display(self) -> str:
        """The file name (and factory) to show in messages, control characters escaped."""
        return printable(self.path.name + (f":{self.factory}" if self.factory else ""), one_line=True)


ONNX_SUFFIXES = (".onnx", ".pb", ".ort")


def parse_target(text: str) -> Target:
    """Split `model.py:factory`; decide script vs ONNX by suffix.

    Raises:
        UsageError: empty argument, a malformed factory name, or a file that is neither a Python
            script (.py, or no suffix) nor an ONNX file (.onnx, .pb, .ort).
    """
    if not text.strip():
        raise UsageError("no target given: pass model.py[:factory] or model.onnx")
    factory = None
    path_text = text
    head, sep, tail = text.rpartition(":")
    if sep and head and tail and not Path(text).exists():
        if not tail.isidentifier():
            raise UsageError(f"{tail!r} is not a valid factory name (after ':' in {text!r})")
        path_text, factory = head, tail
    path = Path(path_text).expanduser()
    suffix = path.suffix.lower()
    if suffix not in ("", ".py", ".pyw", *ONNX_SUFFIXES):
        # Running notes.txt as Python would only produce a confusing NameError.
        raise UsageError(f"{path.name} is not a model script (.py) or an ONNX file (.onnx) (OD102)")
    kind = "onnx" if suffix in ONNX_SUFFIXES else "script"
    if kind == "onnx" and factory:
        raise UsageError(f"{path.name} is an ONNX file: a ':factory' applies to Python scripts only")
    return Target(path=path.absolute(), factory=factory, kind=kind)
