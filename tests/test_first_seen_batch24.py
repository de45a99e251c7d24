"""General mechanisms for failures not seen before (issue 22), written after the twenty-fourth
first-seen batch (fixtures/corpus/first_seen_2026-12-05o.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_a_scripted_model_whose_hooks_the_export_drops_is_exported_eagerly_with_them() -> None:
    # A classifier with its own forward pre-hook and hook, scripted: the scripted module runs
    # them, the TorchScript exporter leaves them out of the graph (pytorch/pytorch#34329).
    (diagnosis,) = diagnose(str(CORPUS / "script_module_top_level_hooks_dropped_input_norm_temperature_pytorch_34329.py"),
                            DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD601"
    best = finding.fixes[0]
    assert best.kind == "scripted_eager" and best.verified, [(f.kind, f.check) for f in finding.fixes]
    assert "forward hooks" in best.title and "register_forward_hook(globals()[hook.name])" in best.snippet
