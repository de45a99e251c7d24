"""The one exception family: misuse of the tool, refused writes, and coded problems.

A failing user model is a Finding, never an exception; a CodedError is turned into one.
"""

from __future__ import annotations


class OnnxDoctorError(Exception):
    """Base class: a known error the CLI prints as one line."""

    exit_code = 3


class UsageError(OnnxDoctorError):
    """Bad path, bad flag, bad name: the user's invocation is wrong (exit code 2)."""

    exit_code = 2


class RefusedWrite(UsageError):
    """Writing would overwrite a file or leave the paths the user gave."""


class CodedError(OnnxDoctorError):
    """A problem with a stable code (`OD110`) and a one-line message, e.g. an unusable input file.

    Where one escapes to the command line it is printed as one line; the pipeline turns the ones
    about the user's model into findings instead.
    """

    def __init__(self, code: str | None, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
