"""Export failures that name their op in prose: the finding names the op (pure classification).

The messages are the TorchScript exporter's own wording on torch 2.13 (its symbolics raise
"Unsupported: ONNX export of operator X, <reason>" for arguments they refuse).
"""

from __future__ import annotations

import pytest

from onnxdoctor.analysis.classify import classify, extract_op
from onnxdoctor.model import ErrorInfo, Stage, StageOutcome, Status


def _export_failure(message: str, kind: str = "torch.onnx.errors.SymbolicValueError") -> list[StageOutcome]:
    return [
        StageOutcome(Stage.LOAD, Status.PASSED),
        StageOutcome(Stage.EXPORT, Status.FAILED, error=ErrorInfo(type=kind, message=message, chain=(kind,)),
                     facts={"exporter": "torchscript", "requested_opset": 17}),
    ]


@pytest.mark.parametrize(
    ("message", "op"),
    [
        (("Unsupported: ONNX export of operator adaptive_max_pool2d, output size that are not factor of "
          "input size. Please feel free to request support"), "aten::adaptive_max_pool2d"),
        ("Unsupported: ONNX export of operator Unfold, input size not accessible. Please feel free",
         "aten::unfold"),
        ("Unsupported: ONNX export of operator Sort, Out parameter is not supported.", "aten::sort"),
        ("Unsupported: ONNX export of operator linalg.matrix_norm, ord==nuc. Please feel free",
         "aten::linalg_matrix_norm"),
        ("Unsupported: ONNX export of transpose for tensor of unknown rank.", "aten::transpose"),
        ("Exporting the operator 'aten::cumprod' to ONNX opset version 17 is not supported", "aten::cumprod"),
        # An autograd.Function neither inlined nor exported: named by its class.
        ("Couldn't export Python operator MultiScaleDeformableAttnFunction_fp32\n\nDefined at:",
         "MultiScaleDeformableAttnFunction_fp32"),
        # A symbolic whose output count is not the node's (einops#355: a scripted dict.items() loop).
        ("symbolic for __getitem__ produced an incorrect number of outputs (expected 2, but got 1)",
         "aten::__getitem__"),
    ],
)
def test_the_op_in_torchs_unsupported_messages_is_extracted(message: str, op: str) -> None:
    assert extract_op(message) == op


def test_a_symbolic_that_refuses_its_arguments_names_the_op_and_the_reason() -> None:
    [finding] = classify(_export_failure(
        "Unsupported: ONNX export of operator adaptive_avg_pool2d, output size that are not factor of input "
        "size. Please feel free to request support or submit a pull request on PyTorch GitHub: "
        "https://github.com/pytorch/pytorch/issues"
    ))
    assert finding.code == "OD299" and finding.op == "aten::adaptive_avg_pool2d"
    assert "output size that are not factor of input size" in finding.message


def test_unsupported_in_this_opset_with_a_later_one_is_od201() -> None:
    [finding] = classify(_export_failure(
        "Unsupported: ONNX export of cumsum in opset 9. Please try opset version 11.", "builtins.RuntimeError"
    ))
    assert (finding.code, finding.op, finding.opset) == ("OD201", "aten::cumsum", 9)


def test_a_message_without_an_op_still_names_none() -> None:
    [finding] = classify(_export_failure("something else went wrong", "builtins.RuntimeError"))
    assert finding.code == "OD299" and finding.op is None


_GRID_5D = ("Unsupported: ONNX export of operator GridSample with 5D volumetric input. Please feel free to "
            "request support or submit a pull request on PyTorch GitHub: https://github.com/pytorch/pytorch/issues")


def test_a_camelcase_refusal_names_the_aten_op_not_a_lowercased_guess() -> None:
    # Without the worker's registry facts the text's "GridSample" still maps to the real op.
    assert extract_op(_GRID_5D) == "aten::grid_sampler"
    [finding] = classify(_export_failure(_GRID_5D, "torch.onnx.errors.OnnxExporterError"))
    assert finding.code == "OD299" and finding.op == "aten::grid_sampler"
    assert "GridSample with 5D volumetric input" in finding.message


def test_a_refusal_with_a_later_registered_symbolic_is_opset_gated_od201() -> None:
    # The worker found the refusing symbolic in the registry (grid_sampler: opsets 16 and 20).
    outcomes = _export_failure(_GRID_5D, "torch.onnx.errors.OnnxExporterError")
    export = outcomes[1]
    outcomes[1] = StageOutcome(export.stage, export.status, error=export.error, facts={
        **export.facts, "op": "aten::grid_sampler", "symbolic_registrations": [16, 20]})
    [finding] = classify(outcomes)
    assert (finding.code, finding.op) == ("OD201", "aten::grid_sampler")
    assert "opset 20" in finding.message
    # A registration at or below the requested opset is the one that refused: still OD299.
    outcomes[1] = StageOutcome(export.stage, export.status, error=export.error, facts={
        **export.facts, "op": "aten::grid_sampler", "symbolic_registrations": [16]})
    assert classify(outcomes)[0].code == "OD299"


_PACKED = ("AttributeError: __torch__.torch.classes.quantized.Conv2dPackedParamsBase (of Python compilation "
           "unit at: 0) does not have a field with name '__obj_flatten__'")


def test_packed_weights_under_torch_export_are_not_called_control_flow() -> None:
    from onnxdoctor.analysis.fixes import control_flow
    from onnxdoctor.analysis.fixes._context import FixContext

    outcomes = [
        StageOutcome(Stage.LOAD, Status.PASSED),
        StageOutcome(Stage.EXPORT, Status.FAILED, error=ErrorInfo(
            type="torch._dynamo.exc.TorchRuntimeError", message=_PACKED,
            chain=("torch.export.TorchExportError", "torch._dynamo.exc.TorchRuntimeError")),
            facts={"exporter": "dynamo", "requested_opset": 18, "op": "quantized::conv2d"}),
    ]
    [finding] = classify(outcomes)
    assert (finding.code, finding.op) == ("OD204", "quantized::conv2d")
    assert "packed weights" in finding.message and "control flow" not in finding.message
    ctx = FixContext(target_kind="script", target_name="m.py", exporter="dynamo", requested_opset=18,
                     op=finding.op, outcomes=tuple(outcomes))
    assert control_flow.propose(finding, ctx) == []


def test_a_torch_op_without_a_fake_kernel_is_not_called_a_custom_op() -> None:
    text = "aten::int_repr: attempted to run this operator with Meta tensors, but there was no fake impl"
    [finding] = classify(_export_failure(text, "builtins.RuntimeError"))
    assert (finding.code, finding.op) == ("OD212", "aten::int_repr")
    assert "custom op" not in finding.message
    [custom] = classify(_export_failure(text.replace("aten::", "mylib::"), "builtins.RuntimeError"))
    assert "custom op mylib::int_repr" in custom.message


def test_a_custom_op_without_register_fake_is_od212_in_torch_library_s_wording_too() -> None:
    # torch.library.custom_op words it differently from a C++ op without a Meta kernel.
    text = ("There was no fake impl registered for <CustomOpDef(torch_cluster::knn)>. This is necessary "
            "for torch.compile/export/fx tracing to work. Please use `knn.register_fake` to add an fake impl.")
    assert extract_op(text) == "torch_cluster::knn"
    [finding] = classify(_export_failure(text, "builtins.RuntimeError"))
    assert (finding.code, finding.op) == ("OD212", "torch_cluster::knn")
    assert "custom op torch_cluster::knn has no fake" in finding.message


def test_a_python_builtin_or_a_data_dependent_output_the_dynamo_path_stops_at_is_named() -> None:
    from onnxdoctor.analysis.classify import extract_op

    assert extract_op("DispatchError: No ONNX function found for <built-in function round>. Failure "
                      "message: No decompositions registered for the real-valued input") == "builtins::round"
    assert extract_op("<class 'torch._subclasses.fake_tensor.DataDependentOutputException'>: "
                      "aten.equal.default") == "aten::equal"
    assert extract_op("DataDependentOutputException: aten._local_scalar_dense.default") == "aten::_local_scalar_dense"


def test_one_refusal_at_several_nodes_of_an_op_is_one_finding_listing_them() -> None:
    from onnxdoctor.analysis.classify import _dedupe
    from onnxdoctor.analysis.findings import make_finding

    def refused(node: str, op: str = "Split") -> object:
        return make_finding("OD303", Stage.CHECK, f"node '{node}' ({op}) violates its schema: Unrecognized "
                            f"attribute: num_outputs for operator {op}", op=op, node=node)

    found = _dedupe([refused("node_Split_10"), refused("node_Split_34"), refused("node_Split_56"),
                     refused("node_Gather_3", "Gather")])
    assert [f.node for f in found] == ["node_Split_10", "node_Gather_3"]
    assert found[0].message.endswith("(the same at 2 more nodes: node_Split_34, node_Split_56)")
    assert "more node" not in found[1].message


def test_a_refused_constant_chunk_names_the_chunk_the_user_called() -> None:
    """ShuffleNet's `x.chunk(2, dim=1)` (pytorch#81678): the export fuses it into prim::ConstantChunk
    before the quantized Slice symbolic refuses it; the user looks for the chunk they wrote."""
    from onnxdoctor.analysis.findings import make_finding, with_node_facts

    refused = make_finding("OD299", Stage.EXPORT, "ONNX symbolic expected the output of `%361 : Tensor = "
                           "onnx::Slice(...)` to be a quantized tensor", op="prim::ConstantChunk")
    found = with_node_facts([refused], {})
    assert (found[0].op, found[0].torch_op) == ("prim::ConstantChunk", "aten::chunk")
    assert found[0].op_label == "prim::ConstantChunk (from aten::chunk)"
    other = with_node_facts([make_finding("OD299", Stage.EXPORT, "m", op="prim::PythonOp")], {})
    assert other[0].torch_op == "prim::PythonOp"
