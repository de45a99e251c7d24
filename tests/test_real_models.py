"""Real library models built from small configs (random weights, no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.slow
def test_a_decoder_returning_its_cache_is_OD211_fixed_by_its_own_switch() -> None:
    pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
    options = DiagnoseOptions(all_fixes=True, timeout=600)
    (diagnosis,) = diagnose(str(FIXTURES / "export/od211_transformers_cache.py"), options)
    (finding,) = [f for f in diagnosis.findings if f.code == "OD211"]
    assert "DynamicCache" in finding.message and finding.source is None  # not "<string>:1"
    assert not any(f.code == "OD204" for f in diagnosis.findings)  # not data-dependent control flow
    checks = {fix.kind: fix.check for fix in finding.fixes}
    assert checks["use_cache_off"] is not None and checks["use_cache_off"].works
    assert checks["use_cache_off"].max_abs_diff is not None and checks["use_cache_off"].max_abs_diff < 1e-4
    assert checks["tensor_outputs"] is not None and checks["tensor_outputs"].works
    assert finding.fixes[0].kind == "use_cache_off"  # the model's own switch ranks first
