"""A model script written to a temporary folder and diagnosed, as a user runs `onnxdoctor diagnose`."""

from __future__ import annotations

from pathlib import Path

from onnxdoctor.model import DiagnoseOptions, Diagnosis, Finding
from onnxdoctor.pipeline import diagnose


def diagnosed(folder: Path, source: str, *, fix: bool = True) -> Diagnosis:
    """The diagnosis of `source`, written as model.py in `folder` (with its fixes tried by default)."""
    script = folder / "model.py"
    script.write_text(source, "utf-8")
    return diagnose(str(script), DiagnoseOptions(fix=fix))[0]


def first_finding(folder: Path, source: str, code: str, *, fix: bool = True) -> Finding:
    """The first finding of `source`'s diagnosis, which must have `code`."""
    finding = diagnosed(folder, source, fix=fix).findings[0]
    assert finding.code == code, (finding.code, finding.message)
    return finding
