"""General mechanisms for failures not seen before (issue 22), written after the thirty-fourth
first-seen batch (fixtures/corpus/first_seen_2026-12-05y.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _diagnosed(name: str, *, fix: bool) -> object:
    (diagnosis,) = diagnose(str(CORPUS / name), DiagnoseOptions(fix=fix))
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
