"""General mechanisms for failures not seen before (issue 22), written after the thirty-fourth
first-seen batch (fixtures/corpus/first_seen_2026-12-05y.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _diagnosed(name: str, *, fix: bool) -> object:
    (diagnosis,) = diagnose(str(CORPUS / name), DiagnoseOptions(fix=fix, max_fix_checks=1))
    return diagnosis


@pytest.mark.slow
def test_dims_named_by_strings_are_not_called_relaxed() -> None:
    # dynamic_shapes = [{0: "dim_x", 1: "length"}]: torch.onnx makes each name Dim.DYNAMIC; the
    # check of what torch.onnx relaxed must read them the same way, not as torch.export's refusal.
    diagnosis = _diagnosed("healthy_unfold_dynamic_length_spectrogram_frames_dynamo_onnxscript_2407.py", fix=False)
    assert diagnosis.healthy, [(f.code, f.message) for f in diagnosis.findings]


@pytest.mark.slow
def test_an_input_dropped_in_the_middle_is_said_and_the_rest_fed_where_they_fit() -> None:
    # mBART's decoder with past never reads encoder_hidden_states (the second of seven inputs):
    # the six the model keeps get their own tensors, and the dropped input is the finding.
    diagnosis = _diagnosed("unused_input_dropped_encoder_hidden_states_mbart_decoder_with_past_transformers_10955.py",
                           fix=False)
    finding = diagnosis.findings[0]
    assert finding.code == "OD502" and "dropped unused input" in finding.message, finding.message
    assert "input_ids, encoder_attention_mask, pkv_0" in finding.message


@pytest.mark.slow
def test_a_train_mode_mismatch_names_the_node_its_modules_export_to() -> None:
    diagnosis = _diagnosed("batch_norm_train_mode_dropout_unet_generator_pytorch_cyclegan_and_pix2pix_1276.py",
                           fix=False)
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD601", "BatchNormalization"), finding.message


# F.fold as thread code writes it: sizes from the input's shape, a stride that leaves a remainder,
# unequal paddings and dilations (the opset-18 symbolic would also swap the paddings).
FOLD = '''
import torch
import torch.nn.functional as F
dynamo = False
opset_version = 12
class M(torch.nn.Module):
    def forward(self, columns):
        height = (columns.shape[-1] // 5 - 1) * 2 + 1  # 7 rows of blocks: 13 (the stride leaves one)
        return F.fold(columns, (height, 9), kernel_size=(2, 3), stride=(2, 1), padding=(1, 0), dilation=(1, 2))
def get_model():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(2, 18, 35),)
'''


@pytest.mark.slow
def test_fold_below_opset_18_is_a_transposed_convolution_with_a_one_hot_kernel(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    script.write_text(FOLD, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, all_fixes=True, check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD201", "aten::col2im"), finding.message
    # The dynamo exporter maps col2im too (opset 18); the symbolic keeps the TorchScript export.
    (symbolic,) = [f for f in finding.fixes if "ConvTranspose" in f.title]
    assert symbolic.kind == "rewrite" and symbolic.verified, [(f.title, f.verified) for f in finding.fixes]
    assert symbolic.check is not None and symbolic.check.max_abs_diff is not None and symbolic.check.max_abs_diff < 1e-6
