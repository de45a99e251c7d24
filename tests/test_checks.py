"""check_model turns the onnx checker's and shape inference's verdicts into located findings."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxdoctor.onnxkit.checks import check_model, check_model_located
from onnxdoctor.model import Severity, Stage

vi = helper.make_tensor_value_info


def _model(
    nodes: Sequence[onnx.NodeProto],
    opsets: Sequence[tuple[str, int]] = (("", 11),),
    inputs: Sequence[onnx.ValueInfoProto] | None = None,
    outputs: Sequence[onnx.ValueInfoProto] | None = None,
    initializers: Sequence[onnx.TensorProto] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "g",
        list(inputs or [vi("x", TensorProto.FLOAT, [2, 3])]),
        list(outputs or [vi("y", TensorProto.FLOAT, [2, 3])]),
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _codes(model: onnx.ModelProto) -> list[tuple[str, str | None]]:
    return [(f.code, f.node) for f in check_model(model)]


def test_valid_model_has_no_findings() -> None:
    assert check_model(_model([helper.make_node("Relu", ["x"], ["y"], name="r")])) == []


def test_op_not_in_opset_is_OD301_with_since_version() -> None:
    [finding] = check_model(_model([helper.make_node("Gelu", ["x"], ["y"], name="gelu_node")]))
    assert (finding.code, finding.node, finding.op, finding.opset) == (
        "OD301",
        "gelu_node",
        "Gelu",
        11,
    )
    assert finding.stage is Stage.CHECK and finding.severity is Severity.ERROR
    assert "exists from opset 20" in finding.message
    assert finding.evidence == ("No Op registered for Gelu with domain_version of 11",)


def test_op_not_in_opset_names_the_first_opset_not_the_latest() -> None:
    # HardSwish appeared at opset 14 and was revised at 22: the user needs 14.
    [finding] = check_model(_model([helper.make_node("HardSwish", ["x"], ["y"], name="hs")]))
    assert "exists from opset 14" in finding.message


def test_every_failing_node_is_found_not_just_the_first() -> None:
    nodes = [
        helper.make_node("Gelu", ["x"], ["a"], name="g1"),
        helper.make_node("Relu", ["a"], ["b"], name="ok"),
        helper.make_node("Gelu", ["b"], ["y"], name="g2"),
    ]
    assert _codes(_model(nodes)) == [("OD301", "g1"), ("OD301", "g2")]


def test_max_per_kind_counts_the_rest() -> None:
    nodes = [helper.make_node("Gelu", [f"t{i}"], [f"t{i + 1}"], name=f"g{i}") for i in range(4)]
    model = _model(
        nodes,
        inputs=[vi("t0", TensorProto.FLOAT, [2, 3])],
        outputs=[vi("t4", TensorProto.FLOAT, [2, 3])],
    )
    findings = check_model(model, max_per_kind=2)
    assert [f.node for f in findings] == ["g0", "g1"]
    assert findings[-1].evidence[-1] == "and 2 more nodes with the same problem"
    assert len(check_model(model, max_per_kind=None)) == 4


def test_custom_domain_without_import_is_OD302() -> None:
    node = helper.make_node("MYSELU", ["x"], ["y"], name="n1", domain="mynamespace")
    [finding] = check_model(_model([node]))
    assert (finding.code, finding.node, finding.op) == ("OD302", "n1", "mynamespace::MYSELU")
    assert "'mynamespace'" in finding.message


def test_custom_domain_with_import_passes_the_checker() -> None:
    # The checker does not know custom ops; only a runtime load can refuse them (DESIGN §2).
    node = helper.make_node("MYSELU", ["x"], ["y"], name="n1", domain="mynamespace")
    assert check_model(_model([node], opsets=(("", 17), ("mynamespace", 1)))) == []


@pytest.mark.parametrize(
    "node, needle",
    [
        (
            helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1.5),
            "Mismatched attribute type",
        ),
        (helper.make_node("Add", ["x"], ["y"], name="add1"), "input size 1 not in range"),
        (helper.make_node("Relu", ["x"], ["y"], name="r3", foo=1), "Unrecognized attribute: foo"),
        (helper.make_node("Concat", ["x", "x"], ["y"], name="cc"), "Required attribute 'axis'"),
    ],
    ids=["attribute-type", "arity", "unknown-attribute", "missing-attribute"],
)
def test_schema_violations_are_OD303(node: onnx.NodeProto, needle: str) -> None:
    [finding] = check_model(_model([node]))
    assert (finding.code, finding.node) == ("OD303", node.name)
    assert needle in finding.message


def test_shape_inference_errors_are_OD304_on_every_node() -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "x"], ["a"], name="mm1"),
        helper.make_node("MatMul", ["x", "x"], ["y"], name="mm2"),
    ]
    findings = check_model(_model(nodes, opsets=(("", 17),)))
    assert [(f.code, f.node) for f in findings] == [("OD304", "mm1"), ("OD304", "mm2")]
    assert "Incompatible dimensions" in findings[0].message


def test_aten_node_is_an_OD305_warning() -> None:
    node = helper.make_node(
        "ATen", ["x"], ["y"], name="a1", domain="org.pytorch.aten", operator="myselu"
    )
    [finding] = check_model(_model([node], opsets=(("", 17), ("org.pytorch.aten", 1))))
    assert (finding.code, finding.severity, finding.op) == (
        "OD305",
        Severity.WARNING,
        "org.pytorch.aten::ATen",
    )
    assert "aten::myselu" in finding.message


def test_duplicate_output_names_are_OD306() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="a"),
        helper.make_node("Relu", ["x"], ["y"], name="b"),
    ]
    [finding] = check_model(_model(nodes))
    assert (finding.code, finding.node) == ("OD306", "b")
    assert "produced twice" in finding.message


def test_cycle_is_OD306_naming_its_nodes() -> None:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="A"),
        helper.make_node("Relu", ["a"], ["b"], name="B"),
        helper.make_node("Relu", ["a"], ["y"], name="C"),
    ]
    [finding] = check_model(_model(nodes))
    assert finding.code == "OD306" and "cycle" in finding.message
    assert "'A'" in finding.message and "'B'" in finding.message and "'C'" not in finding.message


def test_unsorted_graph_is_OD306_but_not_a_cycle() -> None:
    nodes = [
        helper.make_node("Relu", ["a"], ["y"], name="C"),
        helper.make_node("Relu", ["x"], ["a"], name="A"),
    ]
    [finding] = check_model(_model(nodes))
    assert (finding.code, finding.node) == ("OD306", "C")
    assert "topologically sorted" in finding.message


def test_undefined_input_is_OD306() -> None:
    [finding] = check_model(_model([helper.make_node("Relu", ["zz"], ["y"], name="r4")]))
    assert (finding.code, finding.node) == ("OD306", "r4")
    assert "'zz'" in finding.message


def test_no_opset_import_at_all_is_one_OD399() -> None:
    model = _model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])], opsets=()
    )
    [finding] = check_model(model)
    assert finding.code == "OD399" and "no opset_import" in finding.message
    assert finding.evidence == ("model with IR version >= 3 must specify opset_import for ONNX",)


def test_default_domain_missing_beside_another_import_is_OD302() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="r")], opsets=(("custom", 1),))
    [finding] = check_model(model)
    assert (finding.code, finding.node) == ("OD302", "r")
    assert "default ONNX domain" in finding.message


def test_unnamed_node_is_located_by_path() -> None:
    [located] = check_model_located(_model([helper.make_node("Gelu", ["x"], ["y"])]))
    assert located.finding.node is None and located.path == (0,)


def test_failing_node_inside_an_if_body_is_located_there() -> None:
    # The checker names only the outer If; the per-node check must find the body's node.
    then = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["t"], name="inner_gelu")],
        "then",
        [],
        [vi("t", TensorProto.FLOAT, [2, 3])],
    )
    other = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["e"], name="inner_relu")],
        "else",
        [],
        [vi("e", TensorProto.FLOAT, [2, 3])],
    )
    node = helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=then, else_branch=other)
    model = _model(
        [node], inputs=[vi("x", TensorProto.FLOAT, [2, 3]), vi("c", TensorProto.BOOL, [])]
    )
    [located] = check_model_located(model)
    assert located.finding.code == "OD301"
    assert located.finding.node == "inner_gelu"
    assert located.path == (0, "then_branch", 0)


def test_external_data_is_not_resolved_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a ModelProto, onnx's checker looks for external data relative to the current
    # directory: a correct model would fail. Our check must not depend on where it runs.
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3])
    weight.data_location = TensorProto.EXTERNAL
    entry = weight.external_data.add()
    entry.key, entry.value = "location", "w.bin"
    (tmp_path / "w.bin").write_bytes(bytes(24))
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], initializers=[weight])
    monkeypatch.chdir("/")
    assert check_model(model, model_dir=str(tmp_path)) == []


def test_opset_newer_than_onnx_knows_is_a_warning() -> None:
    [finding] = check_model(_model([helper.make_node("Relu", ["x"], ["y"])], opsets=(("", 99),)))
    assert (finding.code, finding.severity) == ("OD399", Severity.WARNING)


def test_ir_version_newer_than_the_checker_is_a_warning() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], opsets=(("", 17),))
    model.ir_version = onnx.IR_VERSION + 1
    [finding] = check_model(model)
    assert (finding.code, finding.severity) == ("OD399", Severity.WARNING)
    assert "is higher than the checker's" in finding.evidence[0]


def test_values_kept_in_an_external_file_are_not_a_shape_error(tmp_path: Path) -> None:
    # The dynamo exporter writes big constants beside the model; data propagation asks for the
    # values of one feeding a Reshape's shape, which the check does not read from the file.
    from onnx import numpy_helper

    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["shape"], ["cast"], to=TensorProto.INT64),
         helper.make_node("Reshape", ["x", "cast"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [shape])
    path = tmp_path / "m.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path),
                    save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    assert check_model(model, model_dir=str(tmp_path)) == []
    # A real inference error in the same model is still one (the output declared int32).
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
    assert [f.code for f in check_model(model, model_dir=str(tmp_path))] == ["OD304"]
