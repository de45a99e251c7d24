"""Custom-domain nodes and symbolic failures, from records alone (no export): the provenance row
says which code wrote a node, and the fixes, OD401's message and OD205's headline follow from it."""

from __future__ import annotations

from typing import Any

from onnxdoctor.analysis.classify import classify
from onnxdoctor.analysis.fixes import propose_fixes
from onnxdoctor.model import ErrorInfo, Stage, StageOutcome, Status
from onnxdoctor.protocol import NodeArgument, NodeProvenance, provenance_table
from onnxdoctor.recipe import EagerExport

_NOT_REGISTERED = "Fatal error: acme:AcmeMinMaxScaler(-1) is not a registered function/op"


def _ort_load_failure(row: NodeProvenance, **facts: Any) -> list[StageOutcome]:
    error = ErrorInfo(type="onnxruntime.Fail", message=_NOT_REGISTERED, chain=("onnxruntime.Fail",))
    return [
        StageOutcome(Stage.LOAD, Status.PASSED),
        StageOutcome(Stage.EXPORT, Status.PASSED, facts={"exporter": "torchscript",
                                                          "provenance": [row.to_dict()]}),
        StageOutcome(Stage.CHECK, Status.PASSED),
        StageOutcome(Stage.ORT_LOAD, Status.FAILED, error=error,
                     facts={"op": row.op, "node": row.node, "provenance": row.to_dict(), **facts}),
    ]


_RENAMED = NodeProvenance(
    node="/AcmeMinMaxScaler", op="acme::AcmeMinMaxScaler", emitter="registered_symbolic",
    torch_op="acme::minmax_scale", function="model.py:32 _minmax_scale_symbolic", source="model.py:48",
    arguments=(NodeArgument("x", input=0), NodeArgument("eps", attribute="epsilon", value=0.001)),
    input_types=("float32",), output_types=("float32", "float32"),
)


def test_provenance_rows_round_trip_and_malformed_rows_are_dropped() -> None:
    table = provenance_table({"provenance": [_RENAMED.to_dict(), {"op": "no node"}, "junk"]})
    assert table == {"/AcmeMinMaxScaler": _RENAMED}


def test_od401_says_the_checker_passed_instead_of_a_separate_od406() -> None:
    findings = classify(_ort_load_failure(_RENAMED))
    assert [f.code for f in findings] == ["OD401"]
    assert "onnx.checker passes it" in findings[0].message


def test_the_kernel_reads_each_attribute_into_the_parameter_it_came_from() -> None:
    outcomes = _ort_load_failure(_RENAMED, elementwise=False)
    finding = classify(outcomes)[0]
    fixes = {f.kind: f for f in propose_fixes(finding, {"outcomes": outcomes})}
    kernel = fixes["runtime_kernel_python"].snippet
    assert "op_type='acme::AcmeMinMaxScaler'" in kernel and "attrs={'epsilon': PyCustomOpDef.dt_float}" in kernel
    assert "eps = float(attrs['epsilon'])" in kernel
    assert "torch.ops.acme.minmax_scale(torch.from_numpy(np.asarray(x)), eps)" in kernel
    assert "outputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_float]" in kernel
    native = fixes["runtime_kernel"]
    # A script's user has no model.onnx; the math has two outputs: no scaffold --expr promise.
    assert "diagnose model.onnx" not in native.snippet and "custom_op_libraries = [" in native.snippet
    assert "must be written by hand" in native.snippet and "--expr" not in native.snippet


def test_a_function_symbolic_is_exported_through_its_forward() -> None:
    row = NodeProvenance(node="/MMCVMish", op="mmcv::MMCVMish", emitter="function_symbolic",
                         torch_op="prim::PythonOp", function="model.py:23 symbolic",
                         function_class="mmcv.ops.mish:MishFunction", arguments=(NodeArgument("x", input=0),),
                         input_types=("float32",), output_types=("float32",))
    outcomes = _ort_load_failure(row, elementwise=True)
    fixes = {f.kind: f for f in propose_fixes(classify(outcomes)[0], {"outcomes": outcomes})}
    assert "from mmcv.ops.mish import MishFunction" in fixes["function_forward"].snippet
    assert "del MishFunction.symbolic" in fixes["function_forward"].snippet
    recipe = fixes["function_forward"].recipe
    # Undone when the export returns: verified beside the other fixes, no worker of its own.
    assert recipe is not None and not recipe.isolated
    assert recipe.first(EagerExport) == EagerExport(functions=("mmcv.ops.mish:MishFunction",))
    assert "MishFunction.apply(torch.from_numpy(np.asarray(x)))" in fixes["runtime_kernel_python"].snippet
    assert "--expr" in fixes["runtime_kernel"].snippet  # elementwise: scaffold writes it from one expression


def test_od205_names_the_argument_and_the_parse_args_fix() -> None:
    bad = {"keyword": "alpha_f", "attribute": "alpha", "suffix": "f", "wants": "a float",
           "given": "a graph value (torch._C.Value)", "value": None, "parameter": "eps", "node_op": "Elu",
           "function": "model.py:27 _soft_elu_symbolic", "parse_args": ["v", "f"]}
    message = "f_(): incompatible function arguments. The following argument types are supported:"
    outcomes = [
        StageOutcome(Stage.LOAD, Status.PASSED),
        StageOutcome(Stage.EXPORT, Status.FAILED,
                     error=ErrorInfo(type="TypeError", message=message, chain=("builtins.TypeError",)),
                     facts={"exporter": "torchscript", "op": "acme::soft_elu", "symbolic_attribute": bad,
                            "symbolic_frame": {"function": "_soft_elu_symbolic"}}),
    ]
    (finding,) = classify(outcomes)
    assert finding.code == "OD205" and finding.op == "acme::soft_elu"
    assert "`eps`" in finding.message and '@parse_args("v", "f")' in finding.message
    assert "incompatible function arguments" not in finding.message
