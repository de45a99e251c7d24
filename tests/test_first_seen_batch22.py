"""General mechanisms for failures not seen before (issue 22), written after the twenty-second
first-seen batch (fixtures/corpus/first_seen_2026-12-05m.txt)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _first(name: str) -> object:
    (diagnosis,) = diagnose(str(CORPUS / name), DiagnoseOptions(fix=False))
    return diagnosis.findings


def test_a_function_the_exporter_could_not_inline_is_named_with_the_op_inside_it() -> None:
    # TabNet's sparsemax Function (tabnet#277): torch raises about aten::max after it; why the
    # Function could not be inlined (cumsum at opset 9) is printed to stderr only.
    finding = _first("cumsum_opset9_sparsemax_function_masked_aten_max_tabnet_277.py")[0]
    assert finding.code == "OD201" and finding.op == "aten::cumsum"
    assert "inside autograd.Function SparsemaxFunction" in finding.message


def test_numpy_inside_a_functions_forward_names_the_function() -> None:
    # AnyNet's GateRecurrent2dnoind (ailia-models#89): the kernel's numpy stand-in runs in the
    # Function's forward, which the exporter inlined; the frozen value is the Function's doing.
    frozen = next(f for f in _first("gate_recurrent2d_spn_extension_anynet_stereo_ailia_models_89.py")
                  if f.code == "OD210")
    assert frozen.op == "GateRecurrent2dnoindFunction"


def test_a_jit_pass_assertion_names_the_graphs_only_function() -> None:
    # CroCo's cuRoPE2D returns its input rotated in place (NoPoSplat#31): dead-code elimination
    # asserts without naming a node.
    finding = _first("curope2d_inplace_function_croco_encoder_noposplat_31.py")[0]
    assert finding.code == "OD299" and finding.op == "cuRoPE2D_func"


def test_stderr_is_read_and_passed_on(capfd: pytest.CaptureFixture[str]) -> None:
    from onnxdoctor.worker.tracebacks import capturing_stderr, not_inlined

    with capturing_stderr() as captured:
        os.write(2, b"Warning: Unable to inline PythonOp: Spin due to the following exception\n"
                    b"SymbolicValueError: Unsupported: ONNX export of cumsum in opset 9.  [Caused by x]\n")
    assert not_inlined(captured.text) == [{"function": "Spin", "reason": "Unsupported: ONNX export of cumsum in opset 9."}]
    assert "Unable to inline PythonOp: Spin" in capfd.readouterr().err  # nothing lost


def test_a_check_inside_a_torch_module_names_the_modules_op() -> None:
    # DPT's reassemble builds nn.Unflatten from x.shape under the tracer (Live2Diff#4): the
    # sizes are tensors there, and nn.Unflatten's own check raises without naming an op.
    finding = _first("unflatten_traced_size_dpt_reassemble_midas_live2diff_4.py")[0]
    assert finding.code == "OD299" and finding.op == "aten::unflatten"


def test_a_mismatch_whose_inputs_agree_names_the_function_that_wrote_them_in_place() -> None:
    # The Slice reading the Function's output agrees on its recorded inputs and computes as ONNX's
    # reference does: the numpy kernel filled the output after the trace recorded it.
    finding = _first("gate_recurrent2d_spn_extension_anynet_stereo_ailia_models_89.py")[0]
    assert finding.code == "OD601" and finding.op == "GateRecurrent2dnoindFunction"
    assert "the value it reads was changed after PyTorch computed it" in finding.message
    assert "means something other than what PyTorch computes" not in finding.message
