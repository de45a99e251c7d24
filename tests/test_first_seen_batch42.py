"""General mechanisms for failures not seen before (issue 22), written after the forty-second
first-seen batch (fixtures/corpus/first_seen_2026-12-06b.txt)."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose


def _squeeze_inside_if() -> onnx.ModelProto:
    """An If whose taken branch squeezes a dim that is 1 only at the size it was traced at."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["axes_c"], value=axes, name="/pool/Const"),
         helper.make_node("Squeeze", ["x", "axes_c"], ["y"], name="/pool/Squeeze")],
        "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    other = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["z"], axes=[0], keepdims=0, name="/pool/Max")],
        "else", [], [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n"])])
    nodes = [
        helper.make_node("Size", ["x"], ["n_x"], name="/size"),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z0", TensorProto.INT64, [], [0])),
        helper.make_node("Greater", ["n_x", "zero"], ["c"], name="/c"),
        helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other, name="/pool/If"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_node_failing_inside_an_if_is_named_not_the_if(tmp_path: Path) -> None:
    # torchvision's MViT pool_skip (pytorch/pytorch#90046): ONNX Runtime's error names the If
    # first and the Squeeze inside it that failed after it.
    path = tmp_path / "m.onnx"
    onnx.save(_squeeze_inside_if(), str(path))
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=False, input_shapes={"x": [2, 3]}))
    finding = diagnosis.findings[0]
    assert finding.code == "OD501" and (finding.op, finding.node) == ("Squeeze", "/pool/Squeeze"), finding
