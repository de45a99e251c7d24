"""General mechanisms for failures not seen before (issue 22), written after the sixty-ninth and
seventieth first-seen batches (fixtures/corpus/first_seen_2026-12-07i.txt, first_seen_2026-12-07j.txt)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnxruntime as ort
import pytest
import torch

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import EagerExport
from onnxdoctor.worker.facts import sparse_tensors
from onnxdoctor.worker.fixkit import eager_export
from onnxdoctor.worker.loader import LoadedModel

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"


def _patched(model: torch.nn.Module, **step: Any) -> Any:
    """The fix's patches (recipe.EagerExport) around an export of `model`, as the worker applies them."""
    return eager_export(LoadedModel(model=model, args=(), kwargs={}), EagerExport(**step))


def _session(path: Path) -> Any:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


# pytorch/pytorch#71786 in DCRNN's shape: the diffusion convolution's supports are sparse
# matrices held in a plain list attribute.
DCRNN = CORPUS / "sparse_mm_diffusion_conv_dcgru_dcrnn_pytorch_71786.py"


class _Supports(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        eye = torch.eye(3)
        self.supports = [eye.to_sparse(), eye]
        self.by_name = {"walk": eye.to_sparse_csr()}
        self.register_buffer("plain", eye)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(self.supports[0], x)


def test_sparse_tensors_in_lists_and_dicts_of_a_module_are_named() -> None:
    assert sparse_tensors(_Supports()) == ["supports[0]", "by_name['walk']"]


@pytest.mark.slow
def test_sparse_supports_held_in_a_list_are_exported_dense() -> None:
    (diagnosis,) = diagnose(str(DCRNN), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    best = finding.fixes[0]
    assert best.kind == "dense_sparse" and best.verified is True, [(f.kind, f.verified) for f in finding.fixes]


# open-mmlab/mmagic#1004: mmcv's extra symbolic for aten::grid_sampler writes mmcv::grid_sampler.
MMCV_GRID_SAMPLER = CORPUS / "mmcv_grid_sampler_symbolic_flow_warp_basicvsr_pp_propagation_mmagic_1004.py"


def _node_domains(model: torch.nn.Module, path: Path) -> set[str]:
    import onnx

    torch.onnx.export(model, (torch.randn(2, 3),), str(path), dynamo=False, opset_version=13)
    return {node.domain for node in onnx.load(str(path)).graph.node}


def test_a_symbolic_registered_for_a_torch_op_is_set_aside_for_the_export_only(tmp_path: Path) -> None:

    def custom_selu(g: object, x: object) -> object:
        return g.op("acme::Selu", x)  # type: ignore[attr-defined]

    model = torch.nn.SELU()
    torch.onnx.register_custom_op_symbolic("::selu", custom_selu, 11)
    try:
        assert _node_domains(model, tmp_path / "registered.onnx") == {"acme"}
        with _patched(model, torch_symbolics=("aten::selu",)):
            assert _node_domains(model, tmp_path / "aside.onnx") == {""}  # torch's own Selu
        assert _node_domains(model, tmp_path / "again.onnx") == {"acme"}  # the user's registration is back
    finally:
        torch.onnx.unregister_custom_op_symbolic("::selu", 11)


@pytest.mark.slow
def test_a_torch_op_written_in_a_custom_domain_is_exported_with_torchs_own_symbolic() -> None:
    (diagnosis,) = diagnose(str(MMCV_GRID_SAMPLER), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD401", "mmcv::grid_sampler")
    best = finding.fixes[0]
    # Opset 11 has no GridSample: the fix exports at 16, the first opset torch's symbolic has.
    assert best.kind == "torch_symbolic" and best.verified is True, [(f.kind, f.verified) for f in finding.fixes]
    # The registration's own opset is what unregister_custom_op_symbolic takes.
    assert "opset 16" in best.title and "unregister_custom_op_symbolic('::grid_sampler', 11)" in best.snippet


# yangxy/GPEN#66: FusedLeakyReLUFunction calls a compiled extension; the modulated convolution
# after it is where the TorchScript exporter stops ("convolution for kernel of unknown shape").
GPEN = CORPUS / "python_op_fused_leaky_relu_function_gpen_full_generator_gpen_66.py"


def test_a_function_that_leaves_a_shapeless_node_is_named_where_a_later_symbolic_refuses() -> None:
    (diagnosis,) = diagnose(str(GPEN), DiagnoseOptions(fix=False, check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op, finding.torch_op) == (
        "OD299", "FusedLeakyReLUFunction", "gpen_fused::fused_bias_act"), finding.message
    assert "convolution for kernel of unknown shape" in finding.message


# vitoplantamura/OnnxStream#59: fairseq's encoder layer calls the fast-path kernel itself, and only
# when `encoder_padding_mask.any()` (a data-dependent branch torch.export stops at).
FAIRSEQ_FAST_PATH = CORPUS / "transformer_encoder_layer_fwd_bt_fastpath_fairseq_encoder_onnxstream_59.py"


@pytest.mark.slow
def test_a_chain_goes_on_where_the_other_exporter_meets_the_same_op_and_is_judged_at_other_inputs() -> None:
    # TorchScript refuses the kernel; the dynamo exporter stops at the branch; with the branch
    # decided it refuses the same kernel, which is no loop: the rewrite then exports it. The
    # decided branch makes the chain a claim about other inputs, so it is checked there too.
    (diagnosis,) = diagnose(str(FAIRSEQ_FAST_PATH), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::_transformer_encoder_layer_fwd")
    best = finding.fixes[0]
    assert best.kind == "chain" and best.verified is True, [(f.kind, f.verified) for f in finding.fixes]
    assert best.steps == ("forced_branch", "rewrite"), best.steps
    assert best.check is not None and "input sets" in best.check.detail, best.check.detail


class _ColumnPool(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # mmocr's SAR encoder: each column pooled whole, the kernel read from the traced size
        return torch.nn.functional.max_pool2d(x, kernel_size=(x.size(2), 1), stride=1, padding=0)


def test_a_pool_over_one_whole_dim_is_a_reduction_that_follows_the_size(tmp_path: Path) -> None:

    model, path = _ColumnPool(), tmp_path / "pool.onnx"
    with pytest.raises(Exception, match="not constant"):  # the exporter refuses the traced kernel
        torch.onnx.export(model, (torch.randn(1, 2, 4, 6),), str(tmp_path / "refused.onnx"), dynamo=False,
                          opset_version=11, input_names=["x"], dynamic_axes={"x": {2: "h", 3: "w"}})
    with _patched(model, global_pools=True):
        torch.onnx.export(model, (torch.randn(1, 2, 4, 6),), str(path), dynamo=False, opset_version=11,
                          input_names=["x"], dynamic_axes={"x": {2: "h", 3: "w"}})
    session = _session(path)
    x = torch.randn(1, 2, 7, 5)
    (got,) = session.run(None, {"x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), model(x))  # another height and width
    assert got.shape == (1, 2, 1, 5)


# open-mmlab/mmocr#317: SAR's encoder pools with kernel (feat.size(2), 1) under dynamic axes.
SAR = CORPUS / "max_pool2d_shape_kernel_sar_parallel_decoder_mmocr_317.py"


@pytest.mark.slow
def test_a_pool_kernel_the_exporter_refuses_as_not_constant_is_exported_as_a_reduction() -> None:
    (diagnosis,) = diagnose(str(SAR), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "aten::max_pool2d")
    best = finding.fixes[0]
    assert best.kind == "global_pool" and best.verified is True, [(f.kind, f.verified) for f in finding.fixes]


def test_one_element_integer_inputs_are_moved_by_one_in_a_fourth_input_set() -> None:
    from onnxdoctor.worker.parity import MOVED_SCALARS, derived_input_sets

    image, index, first, ids = torch.rand(1, 3, 4, 4), torch.tensor(2), torch.tensor([0]), torch.tensor([3, 1])
    sets = derived_input_sets((image, index), {"style": first, "ids": ids, "flag": torch.tensor(True)})
    assert [name for name, _a, _k in sets][3:] == [MOVED_SCALARS]
    _name, (same_image, lower), kwargs = sets[3]
    assert torch.equal(same_image, image) and int(lower) == 1  # one lower; 0 goes one up
    assert kwargs["style"].tolist() == [1] and torch.equal(kwargs["ids"], ids) and bool(kwargs["flag"])
    assert len(derived_input_sets((image, ids), {})) == 3  # no scalar: no fourth set


# ailia-ai/ailia-models#1126: Bark's codebook index, a 0-d tensor the tracer turned into an int.
BARK = CORPUS / "frozen_pred_idx_tensor_index_bark_fine_gpt_ailia_models_1126.py"


def test_an_index_input_the_trace_froze_is_found_at_the_index_moved_by_one() -> None:
    (diagnosis,) = diagnose(str(BARK), DiagnoseOptions(fix=False, check_shapes=False))
    (frozen,) = [f for f in diagnosis.findings if f.code == "OD210"]
    assert frozen.severity.value == "error" and not diagnosis.healthy, frozen.message
    assert "integer scalars moved by one" in frozen.message


# microsoft/onnxruntime#20582: dilated Conv1d with padding='same' fails in the kernel ONNX
# Runtime fused with the ReLU after it.
FUSED_CONV = CORPUS / "conv1d_dilation_same_padding_autopad_raw_audio_kws_onnxruntime_20582.py"


def test_a_runtime_failure_in_a_fused_kernel_names_the_node_s_own_op() -> None:
    (diagnosis,) = diagnose(str(FUSED_CONV), DiagnoseOptions(fix=False, check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD501" and finding.op == "FusedConv", finding
    assert (finding.onnx_op, finding.torch_op) == ("Conv", "aten::_convolution_mode")


class _Styled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norms = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x: torch.Tensor, style: torch.Tensor) -> torch.Tensor:
        return self.norms[style](x) * 2


def test_a_module_list_indexed_by_a_tensor_runs_every_module_and_selects_while_traced(tmp_path: Path) -> None:

    torch.manual_seed(0)
    model, x, path = _Styled().eval(), torch.randn(2, 4), tmp_path / "styled.onnx"
    own = torch.nn.ModuleList.__getitem__
    with _patched(model, selected_modules=True):
        assert model.norms[0] is model.norms[torch.tensor(0)]  # outside a trace: the list's own
        torch.onnx.export(model, (x, torch.tensor(1)), str(path), dynamo=False, input_names=["x", "style"])
    assert torch.nn.ModuleList.__getitem__ is own
    session = _session(path)
    for style in (0, 2, -1):
        (got,) = session.run(None, {"x": x.numpy(), "style": torch.tensor(style).numpy()})
        torch.testing.assert_close(torch.from_numpy(got), model(x, torch.tensor(style)))


class _AddsInPlace(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.add_(10)


class _Picked(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.branches = torch.nn.ModuleList([_AddsInPlace(), torch.nn.Identity()])

    def forward(self, x: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
        return self.branches[which](x * 1)


def test_each_module_of_a_selection_gets_its_own_copy_of_the_inputs(tmp_path: Path) -> None:

    model, x, path = _Picked(), torch.zeros(2), tmp_path / "picked.onnx"
    with _patched(model, selected_modules=True):
        torch.onnx.export(model, (x, torch.tensor(1)), str(path), dynamo=False, input_names=["x", "which"])
    session = _session(path)
    for which in (0, 1):  # the in-place add must not reach the Identity's input
        (got,) = session.run(None, {"x": x.numpy(), "which": torch.tensor(which).numpy()})
        assert got.tolist() == model(x, torch.tensor(which)).tolist() == ([10.0, 10.0] if which == 0 else [0.0, 0.0])


# kewellcjj/pytorch-multiple-style-transfer#5: the style's InstanceNorm picked by a tensor input.
STYLES = CORPUS / ("modulelist_index_frozen_style_id_conditional_instance_norm_multi_style_transfer_"
                   "pytorch_multiple_style_transfer_5.py")


@pytest.mark.slow
def test_a_module_picked_by_a_frozen_index_is_exported_as_a_selection() -> None:
    (diagnosis,) = diagnose(str(STYLES), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD210" and finding.severity.value == "error"
    best = finding.fixes[0]
    assert best.kind == "selected_modules" and best.verified is True, [(f.kind, f.verified) for f in finding.fixes]
    assert best.check is not None and "integer scalars moved by one" in best.check.detail


# pytorch/pytorch#170054: the dynamo exporter writes FEDformer's complex zeros as a complex64
# initializer that a Concat mixes with the float pairs of the other complex values.
FEDFORMER = CORPUS / "complex64_initializer_zeros_fourier_block_fedformer_dynamo_pytorch_170054.py"


@pytest.mark.slow
def test_complex_values_the_checker_refuses_are_rewritten_as_real_pairs() -> None:
    (diagnosis,) = diagnose(str(FEDFORMER), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    # Inference names no node for the type it cannot reconcile; the Concat mixing them is found.
    assert (finding.code, finding.node, finding.torch_op) == ("OD304", "node_cat", "aten::cat"), finding
    assert "float and complex64" in finding.message
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified is True, [(f.kind, f.verified) for f in finding.fixes]


class _WholePool(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.avg_pool2d(x, x.size()[2:])  # GeM-style: the whole map


@pytest.mark.parametrize("example", [(1, 2, 1, 5), (1, 2, 1, 1)])
def test_a_pool_over_the_whole_input_stays_a_reduction_when_a_dim_is_1(example: tuple[int, ...], tmp_path: Path) -> None:

    model, path = _WholePool(), tmp_path / "whole.onnx"
    with _patched(model, global_pools=True):
        torch.onnx.export(model, (torch.randn(*example),), str(path), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {2: "h", 3: "w"}})
    x = torch.randn(1, 2, 7, 3)
    (got,) = _session(path).run(None, {"x": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(got), model(x))  # (1, 2, 1, 1) at another size


def test_promotion_casts_each_type_parameter_on_its_own_and_every_node_like_it() -> None:
    from onnx import TensorProto, helper

    from onnxdoctor.onnxkit.checks import check_model
    from onnxdoctor.onnxkit.transforms import TransformError, promote_inputs

    # Qwen2-VL's int32 cu_seqlens as Slice bounds beside int64 axes, in two Slices
    # (transformers#34852): promoting the data with the bounds would make it float64.
    bounds = [helper.make_tensor_value_info(n, TensorProto.INT32, [1]) for n in ("start", "end")]
    nodes = [helper.make_node("Constant", [], ["axes"], value=helper.make_tensor("a", TensorProto.INT64, [1], [0])),
             helper.make_node("Slice", ["x", "start", "end", "axes"], ["s0"], name="slice0"),
             helper.make_node("Slice", ["s0", "start", "end", "axes"], ["y"], name="slice1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8]), *bounds],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert any(f.code == "OD304" for f in check_model(model))
    one = promote_inputs(model, "slice0")
    assert [f.node for f in check_model(one) if f.code == "OD304"] == ["slice1"]  # the next one fails
    every = promote_inputs(model, "slice0", every=True)
    assert not [f for f in check_model(every) if f.severity.value == "error"]
    casts = [n for n in every.graph.node if n.op_type == "Cast"]
    assert {a.i for n in casts for a in n.attribute} == {TensorProto.INT64} and len(casts) == 4  # data untouched
    with pytest.raises(TransformError, match="no node's inputs"):
        promote_inputs(every, "slice0", every=True)


def test_only_inputs_that_must_share_a_type_are_promoted_together() -> None:
    import onnx.defs

    from onnxdoctor.onnxkit.transforms import promotable

    loop = onnx.defs.get_schema("Loop", 17, "").inputs
    assert not promotable(loop[2])  # v_initial: carried values of any types each
    slice_ = onnx.defs.get_schema("Slice", 17, "").inputs
    assert promotable(slice_[0]) and promotable(slice_[1])  # T (data), Tind (bounds)
    concat = onnx.defs.get_schema("Concat", 17, "").inputs
    assert promotable(concat[0])  # one T for every input
    assert not promotable(onnx.defs.get_schema("Reshape", 17, "").inputs[1])  # tensor(int64)
