"""General mechanisms for failures not seen before (issue 22), written after the twenty-ninth
first-seen batch (fixtures/corpus/first_seen_2026-12-05t.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_a_kernel_that_refuses_bool_at_run_time_runs_in_int32() -> None:
    # ScatterElements with reduction max refuses bool ("bool data type is not supported with
    # ScatterElements opset 18 when reduction is 'max'"): as 0 and 1, max is or.
    path = CORPUS / "scatter_reduce_amax_bool_session_category_multihot_onnxruntime_14224.py"
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.onnx_op) == ("OD501", "ScatterElements")
    best = finding.fixes[0]
    assert best.kind == "cast" and best.verified and "int32" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]
