"""Mechanisms the sixth first-seen corpus batch showed missing (issue 22): each is general (a
type a kernel refuses at run time, a runtime node that departs from ONNX's reference, a
fake-quantize range QDQ cannot hold, ...) and is checked on the real failure it came from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from onnxdoctor.analysis.classify import extract_op
from onnxdoctor.model import DiagnoseOptions, Finding
from onnxdoctor.onnxkit.transforms import cast_around
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker.parity import compare_outputs

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def test_the_jit_words_for_a_call_no_schema_takes_name_the_op() -> None:
    text = ("RuntimeError: 0 INTERNAL ASSERT FAILED at \"../torch/csrc/jit/ir/alias_analysis.cpp\":623, please "
            "report a bug to PyTorch. We don't have an op for aten::mul but it isn't a special case.  "
            "Argument types: Tensor, bool,")
    assert extract_op(text) == "aten::mul"


def test_a_torch_function_refusing_an_argument_type_is_the_op() -> None:
    text = "TypeError: scaled_dot_product_attention(): argument 'is_causal' must be bool, not Tensor"
    assert extract_op(text) == "aten::scaled_dot_product_attention"


def test_a_later_opset_is_offered_only_where_the_refused_position_takes_the_type() -> None:
    from onnxdoctor.analysis.fixes.opset import _opset_taking

    assert _opset_taking("CumSum", "tensor(float16)", 11, "T") == 14
    assert _opset_taking("Cast", "tensor(float8e4m3fn)", 18, None) == 19
    # ScatterND's indices are int64 at every opset; Gather's Tind never takes int16.
    assert _opset_taking("ScatterND", "tensor(int32)", 13, "tensor(int64)") is None
    assert _opset_taking("Gather", "tensor(int16)", 11, "Tind") is None


def test_half_precision_outputs_are_compared_at_their_own_resolution() -> None:
    expected = torch.linspace(-8.0, 8.0, 64, dtype=torch.float16)
    one_step = expected.to(torch.float32).numpy() + np.float32(2.0**-7)  # a step at magnitude 8
    assert compare_outputs([expected], [one_step.astype(np.float16)], 1e-4, 1e-3)["code"] is None
    wrong = (expected.to(torch.float32).numpy() * 1.1).astype(np.float16)
    assert compare_outputs([expected], [wrong], 1e-4, 1e-3)["code"] == "OD601"
    # One large element loosens nothing for the small ones beside it.
    large = torch.tensor([1000.0, 0.1, 0.2, -0.3], dtype=torch.float16)
    flipped = np.array([1000.0, -0.1, -0.2, 0.3], np.float16)
    assert compare_outputs([large], [flipped], 1e-4, 1e-3)["code"] == "OD601"
    # The same step on a float32 output is a mismatch at the float32 defaults.
    single = expected.to(torch.float32)
    report = compare_outputs([single], [single.numpy() + np.float32(2.0**-7)], 1e-4, 1e-3)
    assert report["code"] == "OD601" and "float16" not in report["message"]


def _scatter_nd_int32_indices() -> onnx.ModelProto:
    node = helper.make_node("ScatterND", ["data", "indices", "updates"], ["out"], name="scatter")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [6]),
         helper.make_tensor_value_info("indices", TensorProto.INT32, [2, 1]),
         helper.make_tensor_value_info("updates", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [6])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_an_exact_cast_moves_only_the_input_the_schema_refuses() -> None:
    import onnxruntime as ort

    fixed = cast_around(_scatter_nd_int32_indices(), "ScatterND", to="exact")
    casts = [n for n in fixed.graph.node if n.op_type == "Cast"]
    # The int32 indices become int64; the float data, the updates and the output keep their type.
    assert [(list(c.input), c.attribute[0].i) for c in casts] == [(["indices"], TensorProto.INT64)]
    onnx.checker.check_model(fixed, full_check=True)
    session = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"])
    data = np.arange(6, dtype=np.float32)
    (out,) = session.run(None, {"data": data, "indices": np.array([[1], [4]], np.int32),
                                "updates": np.array([10.0, 20.0], np.float32)})
    np.testing.assert_array_equal(out, [0.0, 10.0, 2.0, 3.0, 20.0, 5.0])


def _first(name: str, *, fix: bool = True) -> Finding:
    (diagnosis,) = diagnose(str(CORPUS / name), DiagnoseOptions(fix=fix, check_shapes=False, max_fix_checks=1))
    return diagnosis.findings[0]


def _verified(finding: Finding, kind: str) -> None:
    best = finding.fixes[0]
    assert best.kind == kind and best.verified is True, [(f.kind, f.title, f.check) for f in finding.fixes]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "op"), [
    ("lstm_double_forecaster_onnxruntime_28339.py", "LSTM"),  # "does not support double yet"
    ("scatter_add_float16_point_gnn_onnxruntime_32025.py", "ScatterElements"),  # MLFloat16, reduction add
])
def test_a_type_a_kernel_refuses_at_run_time_is_cast_around(name: str, op: str) -> None:
    finding = _first(name)
    assert finding.code == "OD501" and finding.op == op
    _verified(finding, "cast")


@pytest.mark.slow
def test_int32_indices_the_schema_refuses_are_cast_without_touching_the_data() -> None:
    finding = _first("istft_scatternd_int32_dynamo_pytorch_135014.py")
    assert finding.code == "OD304" and finding.op == "ScatterND"
    assert "exported from aten::_unsafe_index_put" in finding.message
    _verified(finding, "cast")


@pytest.mark.slow
def test_a_runtime_node_that_departs_from_the_reference_is_named_and_computed_in_double() -> None:
    # ONNX Runtime's float32 STFT loses digits on weak bins (onnxruntime#16163): the dynamo
    # search's group for aten::stft is run in onnx's reference evaluator, which agrees with PyTorch.
    finding = _first("stft_float32_precision_spectrogram_pytorch_112844.py")
    assert finding.code == "OD601" and finding.op == "STFT" and finding.node == "node_STFT_37"
    assert "the runtime, not the export" in finding.message
    _verified(finding, "cast")


@pytest.mark.slow
def test_a_fake_quantize_range_qdq_cannot_hold_exports_as_its_arithmetic() -> None:
    finding = _first("fake_quantize_int4_range_qat_sparseml_1670.py")
    assert finding.op == "aten::fake_quantize_per_channel_affine"
    _verified(finding, "rewrite")
    assert finding.fixes[0].check is not None and finding.fixes[0].check.max_abs_diff == 0.0


@pytest.mark.slow
def test_the_opset_the_exporter_names_is_tried_when_its_registry_has_none() -> None:
    finding = _first("deform_conv2d_opset19_symbolic_dekr_53.py")
    assert finding.code == "OD201"
    _verified(finding, "opset")
    assert "opset 19" in finding.fixes[0].title


@pytest.mark.slow
def test_an_int_argument_made_a_graph_input_is_answered_by_the_other_exporter() -> None:
    finding = _first("int_arg_num_logits_to_keep_llama_pytorch_148655.py")
    assert finding.code == "OD502"
    _verified(finding, "exporter")


@pytest.mark.slow
def test_ops_are_named_where_the_batch_found_none() -> None:
    frozen = _first("topk_frozen_k_ssdlite_postprocess_pytorch_71695.py", fix=False)
    assert frozen.code == "OD210" and frozen.op == "aten::topk" and frozen.node == "/TopK"
    # Every compared value agreed: the output's own node is where the difference arises.
    output = _first("index_negative_last_token_seq_cls_transformers_28144.py", fix=False)
    assert output.code == "OD601" and output.op == "aten::index"
    contrib = _first("rfft_contrib_cuda_only_fno_physicsnemo_42.py", fix=False)
    assert contrib.code == "OD402" and contrib.op == "com.microsoft::Rfft" and "for any type" in contrib.message


@pytest.mark.slow
def test_a_type_the_schema_takes_from_a_later_opset_is_answered_by_that_opset() -> None:
    # CumSum takes float16 from opset 14 on; the model asked for 11 (onnxruntime#4147).
    finding = _first("cumsum_float16_opset11_top_p_sampling_onnxruntime_4147.py")
    assert finding.code == "OD304" and finding.op == "CumSum"
    _verified(finding, "opset")
    assert finding.fixes[0].title == "Export at opset 14"


@pytest.mark.slow
def test_a_bfloat16_model_the_cpu_kernels_do_not_cover_is_exported_in_float32() -> None:
    finding = _first("sdpa_scale_bfloat16_roberta_pytorch_143643.py")
    assert finding.code == "OD299"
    _verified(finding, "float")


@pytest.mark.slow
def test_a_finding_gives_its_op_under_both_names() -> None:
    # A mismatch is about the torch op (what the user's line calls); the node is a TopK. A type
    # gap is about the ONNX node; the user wrote masked_fill. Each finding carries both names.
    mismatch = _first("topk_tied_distance_knn_graph_onnxruntime_19759.py", fix=False)
    assert (mismatch.op, mismatch.onnx_op, mismatch.torch_op) == ("aten::topk", "TopK", "aten::topk")
    assert mismatch.op_label == "aten::topk (ONNX TopK)"
    gap = _first("where_bfloat16_causal_mask_llama_optimum_1720.py", fix=False)
    assert (gap.op, gap.onnx_op, gap.torch_op) == ("Where", "Where", "aten::masked_fill")
    assert gap.op_label == "Where (from aten::masked_fill)"


def test_written_nodes_find_their_emissions_past_a_folded_constant() -> None:
    from onnxdoctor.worker.provenance import _common_order, _greedy_order

    # The first Constant the graph holds was made by constant folding: no g.op wrote it. A
    # greedy walk hands it the next emitted Constant, far ahead, and the Conv after it finds
    # nothing; the common order keeps every node after it on its own emission.
    emitted = ["Conv", "Relu", "Shape", "Gather", "Constant", "Upsample", "Conv", "Add", "Conv"]
    written = ["Conv", "Relu", "Constant", "Upsample", "Conv", "Add", "Conv"]
    pairs = dict(_common_order(written, emitted) or [])
    assert [emitted[pairs[i]] for i in (3, 4, 5, 6)] == ["Upsample", "Conv", "Add", "Conv"]
    assert pairs[4] == 6 and pairs[6] == 8
    greedy = dict(_greedy_order(["Conv", "Constant", "Conv"], ["Conv", "Conv", "Constant"]))
    assert 2 not in greedy  # the failure the common order avoids


@pytest.mark.slow
def test_a_torchscript_mismatch_past_folded_constants_names_its_own_node() -> None:
    # Opset 9's Upsample samples at asymmetric coordinates (onnx#2535); before the common-order
    # alignment, its nodes had no emitter and the search blamed the Conv after it.
    finding = _first("upsample_bilinear_opset9_decoder_onnx_2535.py", fix=False)
    assert (finding.op, finding.onnx_op, finding.node) == ("aten::upsample_bilinear2d", "Upsample", "/Upsample")


@pytest.mark.slow
def test_a_type_the_file_writer_refuses_is_named_by_the_node_holding_it() -> None:
    # "ScalarType ComplexDouble is an unexpected tensor scalar type" names no node: constant
    # folding made a complex Constant inside the attention's nodes, and the line holding it is
    # the scaled_dot_product_attention call.
    finding = _first("sdpa_scale_bfloat16_roberta_pytorch_143643.py", fix=False)
    assert finding.code == "OD299" and finding.op == "aten::scaled_dot_product_attention"
    assert finding.source is not None and finding.source.endswith(":44")


def test_a_dynamo_translation_that_raised_names_its_aten_op() -> None:
    text = ("GraphConstructionError: Error when calling function 'TracedOnnxFunction(<function aten_roll at "
            "0x7f3c>)' with args '[SymbolicTensor(name='permute_4', ...")
    assert extract_op(text) == "aten::roll"
    overload = "Error when calling function 'TracedOnnxFunction(<function aten_upsample_bilinear2d_vec at 0x1>)'"
    assert extract_op(overload) == "aten::upsample_bilinear2d"


def test_integer_data_cast_around_is_rounded_back_not_truncated() -> None:
    import onnxruntime as ort

    from onnxdoctor.analysis.fixes.runtime import _MANGLED_TYPES, _MISMATCHED_TENSOR

    message = ("Non-zero status code returned while running Resize node. Name:'/Resize' Status Message: tensor.h "
               "T* onnxruntime::Tensor::MutableData() [with T = float] utils::IsPrimitiveDataType<T>(dtype_) was "
               "false. Tensor type mismatch. T !=N11onnxruntime17PrimitiveDataTypeIhEE")
    match = _MISMATCHED_TENSOR.search(message)
    assert match is not None and (match.group(1), _MANGLED_TYPES[match.group(2)]) == ("float", "uint8")
    # uint8 data run in float: 7/2 = 3.5 and 5/2 = 2.5 round half to even (4, 2) where a Cast
    # would truncate (3, 2); 100*3 = 300 clips to 255 where a Cast would wrap.
    for op, k, x, expected in (("Div", [2, 2, 1], [7, 5, 255], [4, 2, 255]), ("Mul", [3, 1, 0], [100, 9, 4], [255, 9, 0])):
        graph = helper.make_graph([helper.make_node(op, ["x", "k"], ["y"], name="op")], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.UINT8, [3])],
                                  [helper.make_tensor_value_info("y", TensorProto.UINT8, [3])],
                                  [helper.make_tensor("k", TensorProto.UINT8, [3], k)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        fixed = cast_around(model, op, "float", integers=True)
        onnx.checker.check_model(fixed, full_check=True)
        assert [n.op_type for n in fixed.graph.node].count("Round") == 1
        session = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"])
        (out,) = session.run(None, {"x": np.array(x, np.uint8)})
        np.testing.assert_array_equal(out, expected)
    with pytest.raises(Exception, match="no Mul node has an input"):
        cast_around(model, "Mul", "float")  # without integers=True, integer data is left alone


@pytest.mark.slow
def test_a_rewrite_reaches_an_op_that_only_a_composite_op_calls(tmp_path: Path) -> None:
    import onnxruntime as ort

    from onnxdoctor.rewrites import find_rewrites

    # linalg.matrix_norm(ord="nuc") stays one op in the exported program; the ONNX exporter
    # decomposes it into the SVD it has no function for. The rewrite's table alone never sees
    # the SVD; laid over torch's default decompositions, it replaces it.
    class Nuclear(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.linalg.matrix_norm(torch.softmax(x, -1), ord="nuc")

    model, example_inputs = Nuclear(), (torch.randn(8, 5, generator=torch.Generator().manual_seed(0)),)
    (rewrite,) = find_rewrites("aten::_linalg_svd")
    scope: dict[str, object] = {"model": model, "example_inputs": example_inputs}
    exec(compile(rewrite.program_code(), "<rewrite>", "exec"), scope)  # noqa: S102 - the library's own code
    path = tmp_path / "nuclear.onnx"
    torch.onnx.export(scope["program"], example_inputs, str(path), dynamo=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {session.get_inputs()[0].name: example_inputs[0].numpy()})
    np.testing.assert_allclose(out, model(*example_inputs).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_function_whose_forward_leaves_torch_gets_a_node_and_a_kernel_that_calls_it() -> None:
    # VMamba's selective scan fills a buffer from outside the dispatcher (a compiled extension;
    # numpy here): the tracer keeps only the empty_like. The Function is named, and exported as
    # one onnxdoctor:: node whose onnxruntime-extensions kernel calls the Function.
    finding = _first("selective_scan_extension_frozen_vmamba_65.py")
    assert finding.code == "OD601" and finding.op == "SelectiveScanFn"
    assert "no symbolic" in finding.message
    assert finding.source is not None and finding.source.endswith(":70")  # the line applying it
    _verified(finding, "function_kernel")
    assert "SelectiveScanFn.symbolic = staticmethod(" in finding.fixes[0].snippet


def test_a_folded_constant_is_named_by_the_op_that_computes_its_numbers() -> None:
    from onnxdoctor.worker.parity import _folded

    class Folded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(1, 2, 4, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            grown = torch.nn.functional.interpolate(self.table, size=(6, 6), mode="bilinear", antialias=True)
            return x + torch.cat([grown.permute(0, 2, 3, 1).reshape(1, 36, 2), self.table.new_zeros(1, 1, 2)], 1)

    program = torch.onnx.export(Folded(), (torch.randn(1, 37, 2),), dynamo=True, verbose=False)
    cat = next(n.name for n in program.exported_program.graph.nodes if "cat" in str(n.target))
    found = _folded({"onnx_program": program}, cat)
    assert found["torch_op"] == "aten::_upsample_bilinear2d_aa"
    assert "aten::cat" in found["folded"] and "aten::permute" in found["folded"]


def test_a_constant_paired_with_a_call_is_not_one_of_its_results() -> None:
    from onnxdoctor.worker.parity import call_outputs

    # The kind pairing gave aten::linear's call the Constant that holds the next fake-quantize's
    # scale: its output is read by another call's node, and is no result of the linear.
    gemm = helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="/fc/Gemm")
    scale = helper.make_node("Constant", [], ["s"], name="/Constant_2", value_float=0.05)
    assert call_outputs([gemm, scale]) == ["y"]
    assert call_outputs([scale]) == ["s"]  # a call that wrote only a Constant gives that


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialiased_interpolation_by_scale_exports_as_a_resize_given_the_scales(mode: str, tmp_path: Path) -> None:
    import onnxruntime as ort

    from onnxdoctor.analysis.fixes.translation import _TRANSLATION

    class Resized(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.interpolate(x, scale_factor=0.6, mode=mode, antialias=True)

    model, x = Resized(), torch.randn(1, 3, 7, 9, generator=torch.Generator().manual_seed(0))
    scope: dict[str, object] = {}
    exec(compile("import torch\n" + _TRANSLATION, "<translation>", "exec"), scope)  # noqa: S102 - the fix's own code
    outputs = {}
    for label, table in (("plain", None), ("translated", scope["custom_translation_table"])):
        path = tmp_path / f"{label}.onnx"
        torch.onnx.export(model, (x,), str(path), dynamo=True, custom_translation_table=table)
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (outputs[label],) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    expected = model(x).numpy()
    assert np.abs(outputs["plain"] - expected).max() > 0.1  # the exporter's own translation (sizes)
    np.testing.assert_allclose(outputs["translated"], expected, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
def test_dinov2s_position_embedding_resize_is_translated_with_its_scales() -> None:
    finding = _first("resize_antialias_scale_factor_dinov2_pos_embed_pytorch_157220.py")
    assert finding.code == "OD601" and finding.op == "aten::_upsample_bicubic2d_aa"
    _verified(finding, "translation")


def test_outputs_no_input_reaches_are_told_apart_from_computed_ones() -> None:
    from onnxdoctor.worker.parity import input_free_outputs

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    outs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]) for name in ("y", "tags", "picked")]
    const = helper.make_tensor("c", TensorProto.FLOAT, [2], [1.0, 2.0])
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]),
         helper.make_node("Constant", [], ["k"], value=const),
         helper.make_node("Add", ["k", "c"], ["tags"]),
         # Reads x only inside its branches: a subgraph can use any outer value.
         helper.make_node("If", ["c_flag"], ["picked"], then_branch=branch, else_branch=branch),
         helper.make_node("Constant", [], ["c_flag"], value=helper.make_tensor("f", TensorProto.BOOL, [], [True]))],
        "g", [x, flag], outs, initializer=[const])
    assert input_free_outputs(graph, [0, 1, 2]) == [1]
    assert input_free_outputs(graph, [0, 2]) == []
