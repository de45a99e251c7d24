"""General mechanisms for failures not seen before (issue 22), written after the thirty-second
first-seen batch (fixtures/corpus/first_seen_2026-12-05w.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _first(name: str, *, checks: int = 1) -> object:
    (diagnosis,) = diagnose(str(CORPUS / name),
                            DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=checks))
    return diagnosis.findings[0]


@pytest.mark.slow
def test_a_node_refused_at_an_old_opset_is_tried_at_the_next_ones() -> None:
    # A no-op squeeze at opset 10 leaves Slice with axes shape inference refuses; opset 11 writes it.
    finding = _first("squeeze_noop_opset10_slice_shape_inference_preemphasis_frontend_pytorch_36796.py")
    assert (finding.code, finding.onnx_op) == ("OD304", "Slice")
    best = finding.fixes[0]
    assert best.kind == "opset" and best.verified and best.title == "Export at opset 11", \
        [(f.title, f.verified) for f in finding.fixes]


@pytest.mark.slow
def test_a_quantized_conv_fused_with_its_residual_add_is_rebuilt_as_float() -> None:
    # FX's onednn backend fuses conv + add + relu into ConvAddReLU2d: forward(input, extra_input).
    finding = _first("conv2d_add_relu_fx_onednn_quantized_resnet_bottleneck_pytorch_106748.py")
    assert (finding.code, finding.op) == ("OD202", "quantized::conv2d_add_relu")
    assert finding.fixes[0].verified and "dequantized weights" in finding.fixes[0].title, \
        [(f.title, f.verified) for f in finding.fixes]


@pytest.mark.slow
def test_transformer_causal_mask_detection_is_left_out_of_the_export() -> None:
    # nn.TransformerDecoder compares tgt_mask with a causal mask: data-dependent for torch.export.
    finding = _first("detect_is_causal_mask_data_dependent_guard_step_decoder_dynamo_pytorch_153955.py", checks=4)
    assert finding.code == "OD204"
    assert finding.fixes[0].kind == "causal_hint" and finding.fixes[0].verified, \
        [(f.title, f.verified) for f in finding.fixes]


@pytest.mark.slow
def test_split_sizes_built_as_a_sequence_are_given_as_a_tensor() -> None:
    # A scripted torch.split(x, [int(s) for s in sizes]): SplitToSequence gets a sequence of sizes.
    finding = _first("split_scripted_int_list_sizes_sequence_splittosequence_pytorch_72498.py")
    assert (finding.code, finding.onnx_op) == ("OD304", "SplitToSequence")
    assert finding.fixes[0].kind == "split_sizes" and finding.fixes[0].verified, \
        [(f.title, f.verified) for f in finding.fixes]


@pytest.mark.slow
def test_a_difference_first_seen_at_a_node_that_only_moves_values_is_named_at_its_input() -> None:
    # adaptive_max_pool2d(x, 1) exports as MaxPool, which ONNX Runtime runs skipping NaN; the trace
    # holds the op's pair of outputs, so the search first compares the Flatten after it.
    finding = _first("global_max_pool_nan_skipped_depth_classifier_onnx_4716.py")
    assert (finding.code, finding.onnx_op, finding.node) == ("OD601", "MaxPool", "/MaxPool"), finding.message
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified, [(f.title, f.verified) for f in finding.fixes]


SEQUENCE_MASK = '''
import torch
dynamo = False
opset_version = 15
input_names = ["lengths"]
dynamic_axes = {"lengths": {0: "batch"}}
def sequence_mask(lengths, max_len=None):
    if max_len is None:
        max_len = int(lengths.max())  # coqui TTS before idiap/coqui-ai-TTS#390
    return torch.arange(max_len, dtype=lengths.dtype).unsqueeze(0) < lengths.unsqueeze(1)
class M(torch.nn.Module):
    def forward(self, lengths):
        return sequence_mask(lengths).float().cumsum(1)
def get_model():
    return M().eval(), (torch.tensor([3, 5]),)
def get_inputs2():
    return (torch.tensor([7, 2, 4]),)
'''


@pytest.mark.slow
def test_int_of_a_length_read_by_arange_is_kept_a_tensor(tmp_path: Path) -> None:
    script = tmp_path / "mask.py"
    script.write_text(SEQUENCE_MASK, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD210", finding.message
    best = finding.fixes[0]
    # Checked at get_inputs2, whose longest length (7) is not the example's (5).
    assert best.kind == "tensor_values" and best.verified and "int()" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]
