"""General mechanisms for failures not seen before (issue 22), written after the forty-eighth
first-seen batch (fixtures/corpus/first_seen_2026-12-06h.txt)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.onnxkit.transforms import non_negative_perms
from onnxdoctor.pipeline import diagnose


def _negative_perm() -> onnx.ModelProto:
    """`s.permute(1, -1, 0)` as the TorchScript exporter writes it (hexgrad/kokoro#87)."""
    inner = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[1, -1, 0], name="/enc/Transpose_7"),
         helper.make_node("Relu", ["t"], ["y"], name="/enc/Relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 2])])
    return helper.make_model(inner, opset_imports=[helper.make_opsetid("", 17)])


def test_a_negative_perm_is_written_as_the_axis_it_counts_from_the_end(tmp_path: Path) -> None:
    fixed = non_negative_perms(_negative_perm())
    (perm,) = [list(a.ints) for a in fixed.graph.node[0].attribute if a.name == "perm"]
    assert perm == [1, 2, 0]
    onnx.checker.check_model(fixed, full_check=True)
    x = np.random.default_rng(0).standard_normal((2, 3, 4), dtype=np.float32)
    (y,) = ort.InferenceSession(fixed.SerializeToString()).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x.transpose(1, 2, 0), 0))
    # Diagnosed as a file: the checker names the Transpose, and the rewrite is verified.
    path = tmp_path / "m.onnx"
    onnx.save(_negative_perm(), str(path))
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD304" and finding.op == "Transpose", finding
    best = finding.fixes[0]
    assert best.kind == "non_negative_perm" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]


# pytorch-quantization's TensorQuantizer with no calibrated amax (NVIDIA/TensorRT#2352): the scale
# comes from the input through `.item()` and reaches the number overload of fake quantization.
ITEM_SCALE = '''
import torch
dynamo = False
opset_version = 13

class Quantized(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 4)

    def forward(self, x):
        scale = x.abs().amax().item() / 127
        return self.linear(torch.fake_quantize_per_tensor_affine(x, scale, 0, -128, 127))

def get_model():
    torch.manual_seed(0)
    return Quantized().eval(), (torch.randn(3, 6),)

def get_inputs2():
    torch.manual_seed(3)
    return (torch.randn(3, 6) * 4,)
'''


@pytest.mark.slow
def test_a_quantization_scale_taken_out_with_item_stays_a_tensor(tmp_path: Path) -> None:
    script = tmp_path / "quantized.py"
    script.write_text(ITEM_SCALE)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD210", [(f.code, f.message) for f in diagnosis.findings]
    best = finding.fixes[0]
    assert best.kind == "tensor_values" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]


CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
def test_a_norm_without_weight_whose_channels_the_trace_lost_is_given_them() -> None:
    # StyleTTS2/Kokoro's AdaIN1d (hexgrad/kokoro#104): an InstanceNorm1d(affine=False) on an LSTM's
    # output whose frame count comes from predicted durations; the trace loses the channel count.
    script = CORPUS / "instance_norm_unknown_channels_adain_lstm_output_f0n_predictor_kokoro_104.py"
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "aten::instance_norm"), finding
    best = finding.fixes[0]
    assert best.kind == "affine_norm" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
