"""Layout moves that change no value (issue 22 §4b): exported through a wrapper that skips them."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.slow
def test_to_mkldnn_round_trips_are_dropped_and_the_numbers_match() -> None:
    diagnosis = diagnose(str(FIXTURES / "export/od212_to_mkldnn_layout_moves.py"), DiagnoseOptions(fix=True))[0]
    finding = diagnosis.findings[0]
    assert finding.code == "OD212" and finding.op == "aten::to_mkldnn"
    assert finding.message.startswith("torch's op aten::to_mkldnn")  # an aten op, not a custom one
    best = finding.fixes[0]
    assert best.kind == "inference_noops" and best.verified is True, best.check
    assert best.check.max_abs_diff < 1e-5  # type: ignore[union-attr]
