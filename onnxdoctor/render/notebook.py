"""The Python API's views of a Diagnosis: plain text for repr(), HTML for Jupyter."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from onnxdoctor.model import Diagnosis
from onnxdoctor.render.console import render_diagnoses

# Wide enough that fix snippets are not wrapped (they must paste back as Python).
_WIDTH = 120


def to_text(diagnoses: tuple[Diagnosis, ...]) -> str:
    """The console report, without colour or trailing padding."""
    stream = StringIO()
    render_diagnoses(Console(file=stream, width=_WIDTH, highlight=False, color_system=None), diagnoses)
    return "\n".join(line.rstrip() for line in stream.getvalue().splitlines())


def to_html(diagnoses: tuple[Diagnosis, ...]) -> str:
    """The console report in colour, as an HTML fragment (rich escapes every name and message)."""
    console = Console(file=StringIO(), width=_WIDTH, highlight=False, record=True, force_terminal=True,
                      color_system="truecolor")
    render_diagnoses(console, diagnoses)
    return console.export_html(inline_styles=True, code_format=(
        '<pre style="font-family: monospace; line-height: 1.3; white-space: pre-wrap">{code}</pre>'))
