"""A quantized PyTorch model (issue 22 §4b): export the float model, quantize the ONNX model with
ONNX Runtime, compare with the quantized PyTorch model at quantization's tolerance."""

from __future__ import annotations

from pathlib import Path

import pytest
from fix_programs import run_fix_program

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import QuantizeOnnx, Recipe

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
QUANTIZED = FIXTURES / "export/od204_dynamic_quantized_linear.py"


def test_the_quantize_step_crosses_the_process_seam() -> None:
    recipe = Recipe("quantized", (QuantizeOnnx(tolerance=0.02),))
    assert Recipe.from_dict(recipe.to_dict()) == recipe


@pytest.mark.slow
def test_a_dynamically_quantized_model_is_exported_float_and_quantized_by_onnx_runtime(tmp_path: Path) -> None:
    diagnosis = diagnose(str(QUANTIZED), DiagnoseOptions(fix=True))[0]
    finding = diagnosis.findings[0]
    assert finding.code == "OD204" and any("PyTorch-quantized" in note for note in finding.notes)
    assert all(fix.kind != "control_flow" for fix in finding.fixes)  # no branch to rewrite here
    best = finding.fixes[0]
    assert best.kind == "quantized" and best.verified is True, best.check
    # Against the quantized PyTorch model: close (quantization), but not float-exact.
    assert 1e-5 < best.check.max_abs_diff < 0.05  # type: ignore[union-attr]
    run_fix_program(best, QUANTIZED, tmp_path / "fix")  # --write-fix's fix.py runs as written
