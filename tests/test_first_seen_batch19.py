"""General mechanisms for failures not seen before (issue 22), written after the nineteenth
first-seen batch (fixtures/corpus/first_seen_2026-12-05i.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


@pytest.mark.slow
@pytest.mark.parametrize(("script", "op", "node"), [
    # "Node (/encoder/Where) Op (Where) [ShapeInferenceError] Incompatible dimensions"
    ("where_bool_mask_index_put_wav2vec2_encoder_transformers_16004.py", "Where", "/encoder/Where"),
    # "MatMulNBits PrePack: zero_points initializer shape {512,1} does not match ..."
    ("zero_points_unpacked_shape_matmul_nbits_gptq_quark_20.py", "MatMulNBits", None),
])
def test_a_load_error_names_the_op_and_node_onnx_runtime_names(script: str, op: str, node: str | None) -> None:
    (diagnosis,) = diagnose(str(CORPUS / script), DiagnoseOptions(fix=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD499", op)
    if node is not None:
        assert finding.node == node


@pytest.mark.slow
def test_a_size_frozen_by_a_branch_on_sizes_is_fixed_by_reading_it_one_way() -> None:
    # icefall#857: `if seq_len != d_seq_len * ds:` pads; an even example takes the other side and
    # the graph has no pad, so an odd length is refused at the Reshape.
    (diagnosis,) = diagnose(str(CORPUS / "reshape_frozen_pad_branch_zipformer_downsample_icefall_857.py"),
                            DiagnoseOptions(fix=True))
    finding = next(f for f in diagnosis.findings if f.code == "OD802")
    best = finding.fixes[0]
    assert best.kind == "forced_branch" and best.verified is True, [(f.title, f.check) for f in finding.fixes]
    assert "as True" in best.title
    # Checked at sizes the example does not have, odd lengths among them.
    assert best.check.detail and "101" in best.check.detail
