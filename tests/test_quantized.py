"""A quantized PyTorch model (issue 22 §4b): export the float model, quantize the ONNX model with
ONNX Runtime, compare with the quantized PyTorch model at quantization's tolerance."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fix_programs import run_fix_program

from onnxdoctor.analysis.fixes.ort_options import has_qdq_pairs
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import QuantizeOnnx, Recipe, SessionConfig

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


# ---- every kind of torch quantization: the float rebuild, and ONNX Runtime's QDQ fusion ----------

CORPUS = FIXTURES / "corpus"


def _static_conv_model() -> tuple[torch.nn.Module, torch.Tensor]:
    """An eager-mode statically quantized conv + fused ReLU + linear (prepare/convert)."""
    torch.manual_seed(0)
    torch.backends.quantized.engine = "qnnpack"
    model = torch.nn.Sequential(torch.ao.quantization.QuantStub(), torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5),
                                torch.ao.quantization.DeQuantStub()).eval()
    torch.ao.quantization.fuse_modules(model, [["1", "2"]], inplace=True)
    model.qconfig = torch.ao.quantization.get_default_qconfig("qnnpack")
    torch.ao.quantization.prepare(model, inplace=True)
    model(torch.rand(4, 3, 8, 8))
    torch.ao.quantization.convert(model, inplace=True)
    return model, torch.rand(2, 3, 8, 8) * 1.5  # beyond the calibrated range: the model clips


def test_the_float_rebuild_of_a_static_model_rounds_like_it() -> None:
    from onnxdoctor.worker.dequantize import float_model_of, is_dynamic, unsupported

    model, x = _static_conv_model()
    assert unsupported(model) == [] and not is_dynamic(model)
    rebuilt = float_model_of(model)
    assert not any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in rebuilt.modules())
    with torch.no_grad():
        # Rounded and clipped to the quantized model's own grids: the same numbers.
        assert torch.equal(rebuilt(x), model(x))


@pytest.mark.slow  # prepare_fx/convert_fx trace the model: seconds, not milliseconds
def test_the_float_rebuild_of_an_fx_model_drops_its_quantize_calls() -> None:
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    from onnxdoctor.worker.dequantize import float_model_of

    torch.manual_seed(0)
    torch.backends.quantized.engine = "qnnpack"
    example = (torch.randn(2, 5, 8),)
    prepared = prepare_fx(torch.nn.Sequential(torch.nn.Linear(8, 8)).eval(), get_default_qconfig_mapping("qnnpack"),
                          example)
    prepared(*example)
    model = convert_fx(prepared)
    rebuilt = float_model_of(model)
    assert "quantize_per_tensor" not in rebuilt.code and "dequantize" not in rebuilt.code
    x = torch.randn(2, 5, 8) * 2
    with torch.no_grad():
        assert torch.equal(rebuilt(x), model(x))


def test_the_float_rebuild_of_a_dynamic_lstm_holds_its_weights() -> None:
    from onnxdoctor.worker.dequantize import float_model_of, is_dynamic

    torch.manual_seed(0)
    model = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.LSTM(4, 6, 2)).eval(),
                                                   {torch.nn.LSTM}, dtype=torch.qint8)
    assert is_dynamic(model)
    rebuilt = float_model_of(model)
    assert isinstance(rebuilt[0], torch.nn.LSTM) and rebuilt[0].num_layers == 2
    x = torch.randn(5, 1, 4)
    with torch.no_grad():
        got, expected = rebuilt(x)[0], model(x)[0]
    # Float activations against dynamically quantized ones: close, not equal.
    assert 0 < float((got - expected).abs().max()) < 0.05 * float(expected.abs().max())


def test_qdq_pairs_are_told_from_integer_nodes() -> None:
    assert has_qdq_pairs(["ai.onnx::QuantizeLinear", "ai.onnx::DequantizeLinear", "ai.onnx::Gemm"])
    assert not has_qdq_pairs(["ai.onnx::QuantizeLinear", "ai.onnx::DequantizeLinear", "ai.onnx::QLinearConv"])
    assert not has_qdq_pairs(["ai.onnx::Gemm"])


def test_the_session_config_step_crosses_the_process_seam() -> None:
    recipe = Recipe("ort_options", (SessionConfig((("session.disable_quant_qdq", "1"),)),
                                    QuantizeOnnx(method="grid", op_types=("LSTM",))))
    assert Recipe.from_dict(recipe.to_dict()) == recipe


@pytest.mark.slow
def test_a_fake_quantized_model_runs_with_ort_qdq_fusion_off(tmp_path: Path) -> None:
    target = CORPUS / "fake_quantize_qdq_fusion_pytorch_77455.py"
    finding = diagnose(str(target), DiagnoseOptions(fix=True))[0].findings[0]
    assert finding.code == "OD601"
    best = next(fix for fix in finding.fixes if fix.verified)
    assert best.kind == "ort_options" and best.check.max_abs_diff < 1e-6  # type: ignore[union-attr]
    run_fix_program(best, target, tmp_path / "fix")  # fix.py sets the same session entry


@pytest.mark.slow
def test_an_fx_quantized_model_is_exported_through_its_float_rebuild() -> None:
    target = CORPUS / "quantized_permute_fx_pytorch_109425.py"
    finding = diagnose(str(target), DiagnoseOptions(fix=True))[0].findings[0]
    assert finding.code == "OD299"
    best = next(fix for fix in finding.fixes if fix.verified)
    # Rounded to the model's own grids and run with the QDQ fusion off: the same numbers.
    assert best.kind == "quantized" and "float_model_of" in best.snippet
    assert best.check.max_abs_diff < 1e-5  # type: ignore[union-attr]


@pytest.mark.slow
def test_small_outputs_are_judged_against_the_float_model() -> None:
    # Two quantized Linear layers with outputs under 0.25: ONNX Runtime's quantized model differs
    # from PyTorch's by more than 5% of the largest output, yet strays from the float model no
    # further than twice PyTorch's own quantization error, which is what the fix then states.
    (diagnosis,) = diagnose(str(CORPUS / "qlinear_dynamic_pytorch_123555.py"), DiagnoseOptions(fix=True))
    [fix] = [f for f in diagnosis.findings[0].fixes if f.kind == "quantized"]
    assert fix.verified is True, fix.check
    assert fix.check is not None and fix.check.max_abs_diff is not None and fix.check.max_abs_diff > 0.012


def test_the_float_anchor_fails_a_model_further_from_the_float_one() -> None:
    from onnxdoctor.worker.fixkit import float_anchored
    from onnxdoctor.worker.loader import LoadedModel

    torch.manual_seed(0)
    model = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(8, 4)).eval(),
                                                   {torch.nn.Linear}, dtype=torch.qint8)
    x = torch.randn(3, 8)
    quantized = model(x)
    floating = model[0].weight().dequantize()
    reference = (x @ floating.T + model[0].bias()).detach()
    error = float((quantized - reference).abs().max())
    assert error > 0
    loaded = LoadedModel(model, (x,), {})
    assert float_anchored(loaded, [quantized], [(reference + 1.5 * error).numpy()])["passed"]  # type: ignore[index]
    assert not float_anchored(loaded, [quantized], [(reference + 4 * error).numpy()])["passed"]  # type: ignore[index]
