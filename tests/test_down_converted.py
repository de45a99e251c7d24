"""A node the dynamo exporter's down-conversion from opset 18 left invalid (issue 22 §4b): export at 18."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.analysis.fixes.down_converted import lowest_valid_opset
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_the_lowest_opset_is_where_the_op_s_opset_18_definition_begins() -> None:
    assert lowest_valid_opset("Split", 17) == 18  # num_outputs is new in 18
    assert lowest_valid_opset("Relu", 11) == 14  # Relu's definition at 18 dates from 14
    assert lowest_valid_opset("Relu", 15) == 16  # never at or below what was asked for
    assert lowest_valid_opset("NotAnOnnxOp", 11) == 18


@pytest.mark.slow
def test_split_left_in_its_opset_18_form_is_fixed_by_exporting_at_18() -> None:
    diagnosis = diagnose(str(FIXTURES / "check/od303_dynamo_down_converted_split.py"), DiagnoseOptions(fix=True))[0]
    finding = diagnosis.findings[0]
    assert finding.code == "OD303" and finding.op == "Split"
    assert any("converts it down to opset 17" in note for note in finding.notes)
    best = finding.fixes[0]
    assert best.kind == "opset" and best.title == "Export at opset 18"
    assert best.verified is True, best.check
