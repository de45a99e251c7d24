"""Exceptions for misuse of the tool (a failing user model is a Finding, never an exception)."""

from __future__ import annotations


class OnnxDoctorError(Exception):
    """Base class: a known error the CLI prints as one line."""

    exit_code = 3


class UsageError(OnnxDoctorError):
    """Bad path, bad flag, bad name: the user's invocation is wrong (exit code 2)."""

    exit_code = 2


class RefusedWrite(UsageError):
    """Writing would overwrite a file or leave the paths the user gave."""
