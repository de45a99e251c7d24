"""General mechanisms for failures not seen before (issue 22), written after the thirtieth
first-seen batch (fixtures/corpus/first_seen_2026-12-05u.txt)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.onnxkit.transforms import TransformError, cast_outputs
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def test_cast_outputs_casts_the_output_a_node_writes_and_keeps_its_readers() -> None:
    # y is both an output and read by another node: the reader keeps the computed float32 value.
    graph = helper.make_graph(
        [helper.make_node("CumSum", ["x", "axis"], ["y"]), helper.make_node("Neg", ["y"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])],
        [helper.make_tensor("axis", TensorProto.INT64, [], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fixed = cast_outputs(model, ((0, "float16"),))
    onnx.checker.check_model(fixed, full_check=True)
    y, z = ort.InferenceSession(fixed.SerializeToString()).run(None, {"x": np.array([1, 2, 3.5], np.float32)})
    assert (y.dtype, z.dtype) == (np.float16, np.float32)
    assert y.tolist() == [1, 3, 6.5] and z.tolist() == [-1, -3, -6.5]
    with pytest.raises(TransformError):
        cast_outputs(fixed, ((0, "float16"),))  # already float16


@pytest.mark.slow
def test_an_output_of_another_dtype_names_its_node_and_is_cast_back() -> None:
    # A float16 model's cumsum: the dynamo exporter computes it in float32 and leaves it there.
    path = CORPUS / "cumsum_float16_output_float32_duration_predictor_half_dynamo_pytorch_111454.py"
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op, finding.onnx_op) == ("OD604", "aten::cumsum", "CumSum")
    best = finding.fixes[0]
    assert best.kind == "cast" and best.verified and "float16" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]


@pytest.mark.slow
def test_a_fix_check_takes_the_first_imports_values_of_an_uninitialized_buffer() -> None:
    # fairseq's SinusoidalPositionalEmbedding registers torch.FloatTensor(1), uninitialized memory:
    # each import's value differs, and the fix's fresh worker restores the first import's.
    path = CORPUS / "none_optional_args_scripted_sinusoidal_positional_embedding_fairseq_2468.py"
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD299"
    assert finding.fixes[0].verified, [(f.title, f.check.code if f.check else None) for f in finding.fixes]
