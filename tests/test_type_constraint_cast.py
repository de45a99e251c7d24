"""A node whose input type its ONNX schema refuses (OD303/OD304 at the check stage) is run in a type
the schema allows that holds the values exactly, verified against PyTorch."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_an_int32_maxpool_refused_by_shape_inference_is_cast_to_double_and_verified() -> None:
    (diagnosis,) = diagnose(str(CORPUS / "maxpool_int32_onnx_2528.py"), DiagnoseOptions(fix=True))
    [finding] = [f for f in diagnosis.findings if f.code in ("OD303", "OD304")]
    assert finding.op == "MaxPool" and "tensor(int32)" in finding.message
    [cast] = [f for f in finding.fixes if f.kind == "cast"]
    assert cast.verified is True and cast.check is not None and cast.check.max_abs_diff == 0.0, cast.check
    assert "cast_around(model, 'MaxPool', to='exact')" in cast.snippet
