"""Read and compile a model script without running it (no torch): the cheap LOAD checks."""

from __future__ import annotations

from pathlib import Path

from onnxdoctor.errors import CodedError


class ScriptError(CodedError):
    """The script cannot be a model script; `code` is the finding's code (OD101-OD103)."""

    def __init__(self, code: str, message: str, line: int | None = None) -> None:
        super().__init__(code, message)
        self.line = line


def read_script_source(path: Path) -> str:
    """The script as UTF-8 text; binaries, empty files and non-UTF-8 bytes are refused.

    Raises:
        ScriptError: with code OD101 (missing) or OD102 (not a readable Python script).
    """
    if not path.exists():
        raise ScriptError("OD101", f"{path.name}: no such file")
    if path.is_dir():
        raise ScriptError("OD102", f"{path.name} is a directory, not a Python script")
    if not path.is_file():
        raise ScriptError("OD102", f"{path.name} is not a regular file")
    size = path.stat().st_size
    if size > 16 * 1024 * 1024:
        raise ScriptError("OD102", f"{path.name} is {size / 1e6:.0f} MB: too large to be a model script")
    data = path.read_bytes()
    if not data.strip():
        raise ScriptError("OD102", f"{path.name} is empty")
    if b"\x00" in data:
        raise ScriptError("OD102", f"{path.name} is a binary file, not a Python script")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Python itself refuses such a file even when the bytes sit in a comment.
        raise ScriptError(
            "OD102", f"{path.name} is not valid UTF-8 (byte {exc.start}): not a Python script"
        ) from None


def check_script(path: Path) -> str:
    """Read and compile the script; return its source.

    Raises:
        ScriptError: OD101/OD102 as in `read_script_source`, OD103 for a syntax error in a .py
            file (a file of another suffix that does not parse is not a script: OD102).
    """
    source = read_script_source(path)
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        if path.suffix != ".py":
            raise ScriptError("OD102", f"{path.name} is not a Python script (it does not parse)") from None
        message = getattr(exc, "msg", str(exc))
        raise ScriptError("OD103", f"{path.name}:{line}: {message}", line) from None
    return source
