"""Rewrites of existing .onnx files, checked by the real onnx checker and run in ONNX Runtime.

An op that a model uses below the opset that defines it is expanded into its schema's function body;
the expanded model must pass the checker at the model's own opset and compute what the op computes
(ONNX Runtime running the original at the op's own opset is the reference).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxdoctor.onnxkit.transforms import (
    TransformError,
    cast_around,
    expand_function,
    first_opset,
    set_ir_version,
    set_opset,
    to_float32,
)

SHAPE = [2, 4, 3]


def _model(op: str, opset: int, extra_nodes: tuple[onnx.NodeProto, ...] = (), **attrs: Any) -> onnx.ModelProto:
    inputs = ["x"] + (["scale", "bias"] if op == "LayerNormalization" else [])
    weights = [numpy_helper.from_array(np.linspace(0.5, 2.0, SHAPE[-1]).astype(np.float32), n) for n in inputs[1:]]
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], name="n0", **attrs), *extra_nodes],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE) for n in ["y", *(n.output[0] for n in extra_nodes)]],
        initializer=weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, {"x": x}))


@pytest.mark.parametrize(
    ("op", "opset", "attrs"),
    [
        ("HardSwish", 11, {}),
        ("Mish", 13, {}),
        ("Celu", 11, {"alpha": 2.0}),
        ("Gelu", 11, {}),
        ("Gelu", 13, {"approximate": "tanh"}),
        ("LayerNormalization", 11, {"epsilon": 1e-3}),
    ],
    ids=lambda v: str(v),
)
def test_expanded_op_is_valid_at_the_model_opset_and_computes_the_op(op: str, opset: int, attrs: dict[str, Any]) -> None:
    model = _model(op, opset, **attrs)
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)  # the fixture's defect: the op is not in its opset
    expanded = expand_function(model, op)
    onnx.checker.check_model(expanded, full_check=True)
    assert [i.version for i in expanded.opset_import] == [opset]
    assert op not in {n.op_type for n in expanded.graph.node}
    assert "CastLike" not in {n.op_type for n in expanded.graph.node} or opset >= 15
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32) * 3
    reference = set_opset(model, max(first_opset(op) or 0, 18))
    np.testing.assert_allclose(_run(expanded, x)[0], _run(reference, x)[0], rtol=1e-5, atol=1e-6)


def test_attributes_reach_the_body() -> None:
    # Celu's alpha and Gelu's approximate change the numbers: a body built with defaults would not match.
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(SHAPE)
    default = _run(expand_function(_model("Celu", 11), "Celu"), x)[0]
    scaled = _run(expand_function(_model("Celu", 11, alpha=2.0), "Celu"), x)[0]
    assert np.abs(default - scaled).max() > 0.1
    exact = _run(expand_function(_model("Gelu", 11), "Gelu"), x)[0]
    tanh = _run(expand_function(_model("Gelu", 13, approximate="tanh"), "Gelu"), x)[0]
    assert 1e-5 < np.abs(exact - tanh).max() < 1e-2


def test_body_values_never_collide_with_the_model_names() -> None:
    # The model already owns a value named like the body's first internal one.
    clash = helper.make_node("Relu", ["x"], ["n0/HalfCast"], name="n0/Relu_0")
    model = _model("Gelu", 11, extra_nodes=(clash,))
    expanded = expand_function(model, "Gelu")
    onnx.checker.check_model(expanded, full_check=True)  # SSA: every value is written once
    outputs = [o for n in expanded.graph.node for o in n.output]
    assert len(outputs) == len(set(outputs))
    assert [o.name for o in expanded.graph.output] == ["y", "n0/HalfCast"]


def test_refuses_when_no_body_fits_the_model_opset() -> None:
    # At opset 9 every LayerNormalization body needs a Slice with inputs (opset 10).
    with pytest.raises(TransformError, match="not valid at opset 9"):
        expand_function(_model("LayerNormalization", 9), "LayerNormalization")


def test_refuses_an_op_without_a_function_body() -> None:
    with pytest.raises(TransformError, match="no function body"):
        expand_function(_model("Sqrt", 11), "Sqrt")
    with pytest.raises(TransformError, match="no Gelu node"):
        expand_function(_model("Sqrt", 11), "Gelu")


def _det_model(dtype: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"], name="det_0")],
        "g",
        [helper.make_tensor_value_info("x", dtype, [2, 3, 3])],
        [helper.make_tensor_value_info("y", dtype, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def test_cast_around_runs_the_op_in_a_type_the_runtime_has() -> None:
    model = _det_model(TensorProto.DOUBLE)
    with pytest.raises(Exception, match="Could not find an implementation for Det"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fixed = cast_around(model, "Det", "float")
    onnx.checker.check_model(fixed, full_check=True)
    assert [n.op_type for n in fixed.graph.node] == ["Cast", "Det", "Cast"]
    assert fixed.graph.output[0].type.tensor_type.elem_type == TensorProto.DOUBLE  # the interface is kept
    x = np.random.default_rng(1).standard_normal((2, 3, 3))
    (y,) = _run(fixed, x)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, np.linalg.det(x), rtol=1e-5)


def test_cast_around_refuses_when_nothing_needs_a_cast() -> None:
    with pytest.raises(TransformError, match="no Det node has an input .or a dtype. to cast"):
        cast_around(_det_model(TensorProto.FLOAT), "Det", "float")
    with pytest.raises(TransformError, match="not a tensor element type"):
        cast_around(_det_model(TensorProto.DOUBLE), "Det", "complex-ish")


def test_cast_around_draws_a_generator_in_the_type_the_runtime_has() -> None:
    """onnxruntime#19252: `torch.rand(..., dtype=float16)` is a RandomUniform with dtype float16,
    which has no CPU kernel; it has no input to cast, its dtype attribute is what to change."""
    graph = helper.make_graph(
        [helper.make_node("RandomUniform", [], ["u"], name="draw", dtype=TensorProto.FLOAT16, shape=[3, 4]),
         helper.make_node("Mul", ["u", "x"], ["y"], name="scale")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(Exception, match="Could not find an implementation for RandomUniform"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fixed = cast_around(model, "RandomUniform", "float")
    onnx.checker.check_model(fixed, full_check=True)
    assert [n.op_type for n in fixed.graph.node] == ["RandomUniform", "Cast", "Mul"]
    (y,) = _run(fixed, np.full((3, 4), 2.0, np.float16))
    assert y.dtype == np.float16 and (y >= 0).all() and (y < 2).all() and len(np.unique(y)) > 1


def _maxpool_model(elem: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])], "g",
        [helper.make_tensor_value_info("x", elem, (1, 1, 4, 4))], [helper.make_tensor_value_info("y", elem, (1, 1, 2, 2))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_cast_around_exact_crosses_to_a_type_that_holds_every_value() -> None:
    # MaxPool takes no int32 (the checker refuses it); double holds every int32 value exactly.
    model = _maxpool_model(TensorProto.INT32)
    with pytest.raises(Exception, match="unsupported type: tensor\\(int32\\)"):
        onnx.checker.check_model(model, full_check=True)
    fixed = cast_around(model, "MaxPool", "exact")
    onnx.checker.check_model(fixed, full_check=True)
    assert [n.op_type for n in fixed.graph.node] == ["Cast", "MaxPool", "Cast"]
    assert fixed.graph.node[0].attribute[0].i == TensorProto.DOUBLE
    x = np.array([[[[2**31 - 1, -(2**31), 7, 8], [1, 2, 3, 4], [5, 6, 2**30 + 1, 9], [0, 0, 0, 0]]]], dtype=np.int32)
    (y,) = _run(fixed, x)
    assert y.dtype == np.int32 and y.reshape(-1).tolist() == [2**31 - 1, 8, 6, 2**30 + 1]
    with pytest.raises(TransformError, match="already has a type its schema allows"):
        cast_around(_maxpool_model(TensorProto.FLOAT), "MaxPool", "exact")


def test_ir_version_is_lowered_only_as_far_as_the_opsets_allow() -> None:
    model = _det_model(TensorProto.FLOAT)
    model.ir_version = 15
    assert set_ir_version(model, 10).ir_version == 10
    with pytest.raises(TransformError, match="need IR version 6"):
        set_ir_version(model, 5)  # opset 11 came with IR version 6


def _gelu_chain(opset: int, names: tuple[str, str]) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Gelu", ["x"], ["a"], name=names[0]),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Gelu", ["b"], ["y"], name=names[1], approximate="tanh"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("names", [("g1", "g2"), ("g", "g")], ids=["distinct", "duplicate-names"])
def test_every_instance_is_expanded_even_behind_another(names: tuple[str, str]) -> None:
    # Shape inference at the model's opset stops at the first Gelu; the second needs a type anyway.
    model = _gelu_chain(17, names)
    expanded = expand_function(model, "Gelu")
    onnx.checker.check_model(expanded, full_check=True)
    assert "Gelu" not in {n.op_type for n in expanded.graph.node}
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    reference = set_opset(_gelu_chain(17, ("g1", "g2")), 20)  # ORT refuses duplicate node names
    np.testing.assert_allclose(_run(expanded, x)[0], _run(reference, x)[0], rtol=1e-5, atol=1e-6)


def test_to_float32_computes_in_float_and_keeps_a_float64_interface() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a"], name="mul"),
        helper.make_node("Erf", ["a"], ["b"], name="erf"),
        helper.make_node("HardSigmoid", ["b"], ["c"], name="hs"),
        helper.make_node("Cast", ["c"], ["y"], name="cast", to=TensorProto.DOUBLE),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [3])],
        initializer=[numpy_helper.from_array(np.array([0.5, 1.0, 2.0]), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(Exception, match="Could not find an implementation"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fixed = to_float32(model)
    onnx.checker.check_model(fixed, full_check=True)
    x = np.array([-1.0, 0.25, 3.0])
    (y,) = _run(fixed, x)
    assert y.dtype == np.float64
    from math import erf

    expected = np.clip(0.2 * np.array([erf(v) for v in x * [0.5, 1.0, 2.0]]) + 0.5, 0, 1)
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    with pytest.raises(TransformError, match="nothing in float64"):
        to_float32(_det_model(TensorProto.FLOAT))


def test_to_float32_keeps_outputs_that_other_nodes_read_and_initializers_that_are_inputs() -> None:
    double = TensorProto.DOUBLE
    graph = helper.make_graph(
        [
            helper.make_node("HardSigmoid", ["x"], ["h"], name="hs"),
            helper.make_node("Mul", ["h", "w"], ["m"], name="mul"),
            helper.make_node("Erf", ["m"], ["y"], name="erf"),
        ],
        "g",
        # `w` is an initializer listed as an input too (keep_initializers_as_inputs exports).
        [helper.make_tensor_value_info("x", double, [3]), helper.make_tensor_value_info("w", double, [3])],
        # `h` is an output that Mul also reads.
        [helper.make_tensor_value_info("h", double, [3]), helper.make_tensor_value_info("y", double, [3])],
        initializer=[numpy_helper.from_array(np.array([1.0, 2.0, 3.0]), "w")],
    )
    fixed = to_float32(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    onnx.checker.check_model(fixed, full_check=True)
    x = np.array([0.1, 0.5, -1.0])
    session = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"])
    h, y = session.run(None, {"x": x})
    expected_h = np.clip(0.2 * x + 0.5, 0, 1)
    from math import erf

    np.testing.assert_allclose(h, expected_h, rtol=1e-6)
    np.testing.assert_allclose(y, [erf(v) for v in expected_h * [1.0, 2.0, 3.0]], rtol=1e-6)
    assert h.dtype == y.dtype == np.float64


def test_expand_for_target_expands_until_the_target_lacks_no_function_op() -> None:
    from onnxdoctor.onnxkit.transforms import expand_for_target, expand_function

    node = onnx.helper.make_node("Mish", ["x"], ["y"], name="mish")
    graph = onnx.helper.make_graph([node], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 22)])
    model.ir_version = 10
    once = {n.op_type for n in expand_function(model, "Mish").graph.node}
    assert "Softplus" in once
    # CoreML's table has Softplus: one expansion. WebGPU's list lacks it: expanded too.
    assert {n.op_type for n in expand_for_target(model, "Mish", "coreml").graph.node} == once
    web = expand_for_target(model, "Mish", "ort-web")
    assert "Softplus" not in {n.op_type for n in web.graph.node}
    onnx.checker.check_model(web, full_check=True)
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    x = np.linspace(-4, 4, 4).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = ReferenceEvaluator(web).run(None, {"x": x})
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_fold_constants_stores_a_shape_computed_slice_bound_as_an_initializer() -> None:
    from onnxdoctor.onnxkit.transforms import TransformError, fold_constants

    path = Path(__file__).resolve().parent.parent / "fixtures" / "targets" / "slice_bounds_from_shape.onnx"
    model = onnx.load(path)
    folded = fold_constants(model)
    assert [n.op_type for n in folded.graph.node] == ["Slice", "Relu"]
    assert {"half"} <= {t.name for t in folded.graph.initializer}
    with pytest.raises(TransformError):
        fold_constants(folded)  # nothing left to fold
