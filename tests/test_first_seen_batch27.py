"""General mechanisms for failures not seen before (issue 22), written after the twenty-seventh
first-seen batch (fixtures/corpus/first_seen_2026-12-05r.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, Finding
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _diagnosed(path: Path, *, fix: bool = True) -> Finding:
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=fix, check_shapes=False, max_fix_checks=1))
    return diagnosis.findings[0]


@pytest.mark.slow
def test_a_node_whose_inputs_mix_float_types_is_computed_wide_and_keeps_its_output_type() -> None:
    # layer_norm under CPU autocast: float16 data, float32 weight and bias. PyTorch returns float16;
    # promoting the node's inputs would make its output float32 against the graph's float16.
    finding = _diagnosed(CORPUS / "layer_norm_autocast_fp16_mixed_scale_conformer_onnxruntime_13556.py")
    assert finding.code == "OD304" and finding.onnx_op == "LayerNormalization"
    best = finding.fixes[0]
    assert best.kind == "cast" and best.verified and "mix float types" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]


@pytest.mark.slow
def test_an_einsum_whose_ellipses_cover_different_ranks_is_rewritten_with_size_one_dims() -> None:
    # torch broadcasts "...nd,...d->...n" over (B, N, D) and (D,); ONNX's Einsum shape inference
    # wants both ellipses to cover as many dims.
    finding = _diagnosed(CORPUS / "einsum_ellipsis_rank_attention_pool_query_dynamo_onnx_5739.py")
    assert finding.code == "OD304" and finding.op == "aten::einsum"
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified and "aten::einsum" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]


def test_a_symbolic_that_hands_the_node_to_another_names_the_node_the_user_called() -> None:
    # F.pad traces as aten::pad, whose opset-9 symbolic calls constant_pad_nd's, which refuses
    # computed pads: the user called pad.
    finding = _diagnosed(CORPUS / "pad_computed_pads_opset10_tf_same_conv_dynamic_hw_pytorch_28259.py", fix=False)
    assert (finding.code, finding.op) == ("OD201", "aten::pad"), finding.message
    assert finding.source and finding.source.endswith(":47")  # the F.pad line
