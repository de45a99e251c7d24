"""Mechanisms the ninth and tenth first-seen corpus batches showed missing (issue 22): each is
general and is checked on the real failure it came from (fixtures/corpus/first_seen_2026-12-04h.txt
and first_seen_2026-12-04i.txt)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from onnxdoctor.model import DiagnoseOptions, Finding, Fix
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker.failures import function_frame_op

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _first(name: str, *, fix: bool = True, checks: int = 1) -> Finding:
    (diagnosis,) = diagnose(str(CORPUS / name),
                            DiagnoseOptions(fix=fix, check_shapes=False, max_fix_checks=checks))
    return diagnosis.findings[0]


def _best(finding: Finding, kind: str) -> Fix:
    """The finding's first fix, which must be a verified one of `kind`."""
    best = finding.fixes[0]
    assert best.kind == kind and best.verified is True and best.check is not None, [
        (f.kind, f.check) for f in finding.fixes]
    return best


class _NumpyForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(_leave_torch(x))


def _leave_torch(x: torch.Tensor) -> np.ndarray:
    raise RuntimeError(".numpy() is not supported for tensor subclasses.")


def test_a_failure_inside_a_functions_forward_or_apply_names_the_function() -> None:
    # Raised in a helper the forward calls: the Function running it is named.
    with pytest.raises(RuntimeError) as raised:
        _NumpyForward.apply(torch.ones(2))
    assert function_frame_op(raised.value) == "_NumpyForward"
    # Raised before any forward ran, on the line applying it (the tracer refusing the Function).
    from torch.utils.checkpoint import CheckpointFunction

    def applying() -> None:
        CheckpointFunction.apply(None, False, torch.ones(1))  # no function to run: it raises

    with pytest.raises(Exception) as refused:
        applying()
    assert function_frame_op(refused.value) == "CheckpointFunction"
    # Nothing to name where no Function was on the way.
    with pytest.raises(ZeroDivisionError) as plain:
        _ = 1 / 0
    assert function_frame_op(plain.value) is None


@pytest.mark.slow
def test_a_checkpointed_block_the_tracer_fails_on_names_checkpoint_s_function() -> None:
    finding = _first("checkpoint_reentrant_swin_unetr_monai_pytorch_84692.py", fix=False)
    assert finding.code == "OD299" and finding.op == "CheckpointFunction"
    assert finding.source is not None and finding.source.endswith(":58")  # the checkpoint() call


@pytest.mark.slow
def test_a_batch_of_one_the_exporter_pins_is_exported_from_an_example_of_two() -> None:
    # The trace froze the sequence length in nn.MultiheadAttention's view; the dynamo exporter
    # keeps it dynamic but pins the batch (the example's batch is 1, which torch.export
    # specialises). Doubling the example along the batch keeps both dims dynamic, checked at
    # the other sizes and at get_inputs2(). (Strict capture, written later, declares the same dims
    # on the doubled example in one step instead of a chain.)
    (diagnosis,) = diagnose(str(CORPUS / "reshape_frozen_seq_len_mha_g2p_deepphonemizer_41.py"),
                            DiagnoseOptions(fix=True, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD802" and finding.torch_op == "aten::view"
    best = finding.fixes[0]
    assert best.kind in ("strict_capture", "chain") and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert best.check is not None and best.check.sizes and any(not size.startswith("text=1x") for size in best.check.sizes)  # other batches


@pytest.mark.slow
def test_a_function_torch_export_refuses_is_one_node_whose_kernel_calls_it_with_its_constants() -> None:
    # pytorch3d-style ball query: the Function's forward reads its tensors as numpy, which
    # torch.export refuses. Traced instead, it becomes one onnxdoctor:: node carrying the call's
    # constants (K, radius); the kernel calls the Function with them.
    finding = _first("ball_query_extension_function_torch_export_pytorch_133227.py")
    assert finding.code == "OD204" and finding.op == "_ball_query"
    best = _best(finding, "function_kernel")
    assert best.check is not None and best.check.max_abs_diff == 0.0
    assert "call_s=call" in best.snippet and "ast.literal_eval(attrs[\"call\"])" in best.snippet


@pytest.mark.slow
def test_a_sparse_input_is_given_dense_and_its_product_written_densely() -> None:
    # A GCN takes its adjacency as a sparse COO input; ONNX has no sparse tensors, and neither
    # exporter maps torch.sparse.mm. The rewrite densifies the example and the product.
    finding = _first("sparse_mm_gcn_adjacency_pytorch_66537.py")
    assert finding.code == "OD202" and finding.op == "aten::_sparse_mm"
    best = _best(finding, "rewrite")
    assert "sparse input 0 given dense" in best.title and "x.to_dense()" in best.snippet


@pytest.mark.slow
def test_a_branch_written_for_the_export_is_replaced_by_the_eager_one() -> None:
    # forward() multiplies by torch.onnx.is_in_onnx_export(): the TorchScript tracer dies on
    # mul(Tensor, bool), and the dynamo exporter exports the flag's True branch, which eager
    # never takes. The worker saw forward() ask the flag; exporting with it false (dynamo) is
    # what PyTorch computes.
    finding = _first("mul_tensor_bool_is_in_onnx_export_pytorch_132030.py")
    assert finding.code == "OD299" and finding.op == "aten::mul"
    best = _best(finding, "eager_branch")
    assert "dynamo exporter" in best.title and "dynamo=True" in best.snippet


def test_a_crash_dump_names_the_symbolic_that_was_running() -> None:
    from onnxdoctor.analysis.judge import crash_frames

    dump = (
        "Fatal Python error: Floating point exception\n\nCurrent thread 0x7f (most recent call first):\n"
        '  File "/site-packages/torch/onnx/_internal/torchscript_exporter/jit_utils.py", line 310 in _create_node\n'
        '  File "/site-packages/torch/onnx/_internal/torchscript_exporter/symbolic_opset14.py", line 71 in reshape\n'
        '  File "/site-packages/torch/onnx/_internal/torchscript_exporter/symbolic_helper.py", line 281 in wrapper\n'
        '  File "/site-packages/torch/onnx/_internal/torchscript_exporter/symbolic_opset9.py", line 900 in view\n'
    )
    assert crash_frames(dump, None) == ("aten::reshape", None)  # the innermost symbolic
    assert crash_frames("Segmentation fault\n", None) == (None, None)


@pytest.mark.slow
def test_a_native_crash_inside_one_exporter_is_answered_by_the_other() -> None:
    # The TorchScript reshape symbolic divides by an empty past cache's zero size: SIGFPE kills
    # the worker. The crash names the symbolic, and the dynamo exporter is verified.
    finding = _first("reshape_empty_past_cache_sigfpe_pytorch_144144.py")
    assert finding.code == "OD901" and finding.op == "aten::reshape"
    _best(finding, "exporter")


@pytest.mark.slow
def test_invalid_argument_raised_while_a_node_runs_is_that_node_s_failure() -> None:
    # ONNX Runtime's ConvTranspose refuses dilation with output_padding at run time, with
    # INVALID_ARGUMENT: the node failed (OD501, named), the feeds were fine.
    finding = _first("conv_transpose_dilated_output_padding_onnxruntime_14208.py", fix=False)
    assert finding.code == "OD501" and finding.op == "ConvTranspose" and finding.node == "/up/ConvTranspose"


def test_a_kernel_that_fails_to_construct_is_named_by_its_source_file() -> None:
    from onnx import TensorProto, helper

    from onnxdoctor.worker.runtime import initializing_op

    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
             helper.make_node("ConvTranspose", ["y", "w"], ["z"], name="up"),
             helper.make_node("Upsample", ["z", "s"], ["u"], name="scale")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("u", TensorProto.FLOAT, None)])
    model = helper.make_model(graph)
    failed = "Exception during initialization: /src/onnxruntime/core/providers/cpu/nn/conv_transpose.cc:37 bad"
    assert initializing_op(failed, model) == {"op": "ConvTranspose", "node": "up"}  # not Conv: the longest
    upsample = "Exception during initialization: [with KernelInfoType = OpKernelInfo] upsamplebase.h Scale value"
    assert initializing_op(upsample, model) == {"op": "Upsample", "node": "scale"}
    assert initializing_op("Exception during initialization: reduction_ops.cc:9", model) == {}
    assert initializing_op("Load model failed: upsamplebase.h", model) == {}  # not a kernel's constructor


@pytest.mark.slow
def test_a_value_frozen_by_item_is_named_at_the_user_s_line() -> None:
    # PPO's act(): action.item() becomes a constant (the graph keeps no input); the tracer also
    # warns inside torch.distributions' argument check, which is not the user's line.
    finding = _first("item_frozen_action_actor_critic_ppo_pytorch_25.py", fix=False)
    assert finding.code == "OD210" and finding.op == "aten::item"
    assert finding.source == "item_frozen_action_actor_critic_ppo_pytorch_25.py:59"
    assert "Python number" in finding.evidence[0]


@pytest.mark.slow
def test_multinomial_with_a_sample_count_read_from_a_size_is_drawn_from_uniforms() -> None:
    # The sample count is slots.shape[0] under a dynamic dim: ONNX Multinomial wants a constant.
    # The rewrite draws from RandomUniformLike, kept dynamic (the script's dynamic_shapes reach
    # the rewrite's export), and is judged in distribution.
    finding = _first("multinomial_symbolic_num_samples_policy_pytorch_149048.py")
    assert finding.code == "OD299" and finding.op == "aten::multinomial"
    best = _best(finding, "rewrite")
    assert best.check is not None and "in distribution" in best.check.detail


def test_the_cast_target_is_read_from_the_node_whose_input_is_refused() -> None:
    from onnx import TensorProto, helper

    from onnxdoctor.onnxkit.transforms import _exact_target

    # A ReduceMax over floats comes first; the one over a bool mask is what opset 16 refuses.
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["a"], keepdims=0), helper.make_node("ReduceMax", ["m"], ["b"], keepdims=0)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("m", TensorProto.BOOL, [2])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, []), helper.make_tensor_value_info("b", TensorProto.BOOL, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    types = {v.name: v.type for v in graph.input}
    assert _exact_target(model, "ReduceMax", types) == TensorProto.UINT8


@pytest.mark.slow
def test_a_bool_reduction_is_cast_where_every_exporter_refuses_it() -> None:
    # max over a bool mask: ReduceMax (and, at opset 20, ArgMax) refuse bool at every opset the
    # exporters write; the casts chain, and the Python-kernel bridge that also works ranks after.
    finding = _first("reduce_max_bool_coarse_matching_aspanformer_onnx_runtime_cpp_43.py", checks=4)
    assert finding.code == "OD304" and finding.op == "ReduceMax"
    best = _best(finding, "chain")
    assert "in a type its ONNX schema allows" in best.title
    assert any(f.kind == "aten_kernel_dynamo" and f.verified for f in finding.fixes[1:])
