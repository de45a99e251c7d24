"""General mechanisms for failures not seen before (issue 22), written after the nineteenth
first-seen batch (fixtures/corpus/first_seen_2026-12-05i.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_first_seen_batch14 import _diagnosed

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
                            DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = next(f for f in diagnosis.findings if f.code == "OD802")
    best = finding.fixes[0]
    assert best.kind == "forced_branch" and best.verified is True, [(f.title, f.check) for f in finding.fixes]
    assert "as True" in best.title
    # Checked at sizes the example does not have, odd lengths among them.
    assert best.check.detail and "101" in best.check.detail


# torch.stack of float16 and float32: the dynamo exporter writes one Concat over both as they are.
MIXED_STACK = '''
import torch

dynamo = True
opset_version = 18


class Mixed(torch.nn.Module):
    def forward(self, a, b):
        return torch.stack([a.to(torch.float16), b], dim=1) * 2


def get_model():
    torch.manual_seed(0)
    return Mixed().eval(), (torch.randn(3, 4), torch.randn(3, 4))
'''


@pytest.mark.slow
def test_a_concat_of_mixed_types_is_fixed_by_promoting_its_inputs(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, MIXED_STACK, fix=True, all_fixes=True)
    finding = diagnosis.findings[0]
    assert (finding.code, finding.node) == ("OD304", "node_stack")
    promote = next(f for f in finding.fixes if f.kind == "promote_inputs")
    assert promote.verified is True and promote.check.max_abs_diff == 0


def test_promote_inputs_casts_only_the_inputs_of_another_type() -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from onnxdoctor.onnxkit.transforms import TransformError, promote_inputs

    graph = helper.make_graph(
        [helper.make_node("Concat", ["a", "b"], ["c"], axis=0, name="cat")], "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [2]),
         helper.make_tensor_value_info("b", TensorProto.INT8, [2])],
        [helper.make_tensor_value_info("c", TensorProto.INT16, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    fixed = promote_inputs(model, "cat")
    onnx.checker.check_model(fixed, full_check=True)
    casts = [n for n in fixed.graph.node if n.op_type == "Cast"]
    assert [helper.get_attribute_value(c.attribute[0]) for c in casts] == [TensorProto.INT16] * 2
    from onnx.reference import ReferenceEvaluator

    (got,) = ReferenceEvaluator(fixed).run(None, {"a": np.array([200, 1], np.uint8), "b": np.array([-3, 4], np.int8)})
    assert got.tolist() == [200, 1, -3, 4]
    with pytest.raises(TransformError):
        promote_inputs(model, "missing")
