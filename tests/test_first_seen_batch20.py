"""General mechanisms for failures not seen before (issue 22), written after the twentieth
first-seen batch (fixtures/corpus/first_seen_2026-12-05j.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_a_frozen_trace_verified_with_floats_varied_says_its_integer_inputs_were_not() -> None:
    # Qwen3-VL's position grid is read from grid_thw's values: the derived input sets vary the
    # pixels only, so the TorchScript export is right for this grid and says so.
    (diagnosis,) = diagnose(str(CORPUS / "linspace_grid_thw_pos_embed_interpolate_qwen3_vl_rknn_llm_452.py"),
                            DiagnoseOptions(fix=True))
    best = diagnosis.findings[0].fixes[0]
    assert best.verified is True and "torchscript" in best.title
    assert "integer input 1 kept the example's values" in best.check.detail
