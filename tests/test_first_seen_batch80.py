"""General mechanisms for failures not seen before (issue 22), written after the eightieth
first-seen batch (fixtures/corpus/first_seen_2026-12-07t.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"

# microsoft/onnxruntime#18227: half-precision distances plus a half offset, then argmin: the
# runtime's float16 sums round otherwise, and near-ties pick other codes.
ARGMIN = CORPUS / "argmin_fp16_ties_cast_double_vq_code_assignment_onnxruntime_18227.py"


@pytest.mark.slow
def test_a_half_precision_mismatch_is_exported_in_float32_and_verified() -> None:
    finding = diagnose(str(ARGMIN), DiagnoseOptions(fix=True))[0].findings[0]
    assert finding.code == "OD601", finding.message
    best = finding.fixes[0]
    assert best.kind == "float" and best.verified is True, best.check
    assert "float16 arithmetic" in best.title
