"""General mechanisms for failures not seen before (issue 22), written after the twenty-third
first-seen batch (fixtures/corpus/first_seen_2026-12-05n.txt)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxdoctor.model import DiagnoseOptions, Finding
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _diagnosed(path: Path, *, fix: bool = True, checks: int = 1) -> Finding:
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=fix, check_shapes=False, max_fix_checks=checks))
    return diagnosis.findings[0]


@pytest.mark.slow
def test_a_crash_inside_the_scripts_own_symbolic_names_the_op_it_was_registered_for() -> None:
    # mmcv's adaptive_avg_pool2d symbolic (under @parse_args, which hides the user's function
    # behind torch's wrapper) asks for stride 0: torch's node builder dies of SIGFPE.
    finding = _diagnosed(CORPUS / "adaptive_avg_pool2d_stride0_user_symbolic_fast_scnn_mmsegmentation_1253.py", fix=False)
    assert (finding.code, finding.op) == ("OD205", "aten::adaptive_avg_pool2d"), finding.message
    assert "SIGFPE" in finding.message and "_adaptive_avg_pool2d" in finding.message
    assert finding.source and finding.source.endswith(":43")  # the g.op line in the symbolic


@pytest.mark.slow
def test_a_torch_onnx_ops_node_the_runtime_computes_otherwise_is_exported_as_pytorchs_reference() -> None:
    # torch.onnx.ops.attention with a past cache and is_causal: eager PyTorch lays the causal mask
    # from the top left, ONNX Runtime offsets it by the past's length (as the ONNX spec says).
    finding = _diagnosed(CORPUS / "attention_is_causal_past_key_offset_kv_cache_decode_onnx_7297.py")
    assert finding.code == "OD601" and finding.op == "onnx::Attention"
    best = finding.fixes[0]
    assert best.kind == "decompose" and best.verified, [(f.kind, f.check) for f in finding.fixes]
    assert "aten_decompositions()" in best.snippet


FLEX = '''
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

dynamo = True
opset_version = 18


def causal(b, h, q, kv):
    return q >= kv


def relative_bias(score, b, h, q, kv):
    return score + (q - kv).to(score.dtype) * 0.05


class Block(torch.nn.Module):
    """Grouped-query attention (4 query heads, 2 kv heads) with a causal block mask built in forward."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(32, 32)
        self.kv = torch.nn.Linear(32, 32)

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, 4, 8).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, 2, 8).permute(2, 0, 3, 1, 4)
        mask = create_block_mask(causal, None, None, n, n, device="cpu")
        out = flex_attention(q, k, v, score_mod=relative_bias, block_mask=mask, enable_gqa=True)
        return out.transpose(1, 2).reshape(b, n, 32)


def get_model():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(2, 12, 32),)
'''


@pytest.mark.slow
def test_flex_attention_is_exported_as_dense_attention_with_its_mask_and_score_mod(tmp_path: Path) -> None:
    script = tmp_path / "flex.py"
    script.write_text(textwrap.dedent(FLEX), "utf-8")
    finding = _diagnosed(script)
    assert finding.stage.value == "export"
    best = finding.fixes[0]
    assert best.recipe is not None and best.recipe.kind == "dense_attention"
    # Verified against flex_attention itself: the mask, the score_mod and the kv heads all count.
    assert best.verified and best.check is not None and best.check.max_abs_diff < 1e-5, best.check


@pytest.mark.slow
def test_a_grouped_matmul_in_bfloat16_is_rewritten_and_computed_in_float32() -> None:
    # torch._grouped_mm (MoE experts) has no ONNX translation, and its CPU kernel takes bfloat16
    # only, which ONNX Runtime's CPU kernels lack: the rewrite, then the graph in float32.
    finding = _diagnosed(CORPUS / "grouped_mm_offsets_moe_experts_bfloat16_transformers_42697.py", checks=4)
    assert finding.op == "aten::_grouped_mm"  # the node's target, not the translation's name
    best = finding.fixes[0]
    assert best.verified and best.recipe is not None, [(f.title, f.check) for f in finding.fixes]
    assert "aten::_grouped_mm" in best.title and "float32" in best.title
    assert "Python" not in best.title  # not the Python-kernel bridge


def _bfloat16_gemm() -> onnx.ModelProto:
    weight = helper.make_tensor("w", TensorProto.BFLOAT16, [3, 4], (np.arange(12) / 8).tolist())  # exact
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"]), helper.make_node("Cast", ["y"], ["z"], to=TensorProto.BFLOAT16)],
        "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.BFLOAT16, [2, 4])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_bfloat16_graph_computes_in_float32_with_a_float32_interface() -> None:
    import onnxruntime as ort

    from onnxdoctor.onnxkit.transforms import TransformError, to_float32

    model = _bfloat16_gemm()
    with pytest.raises(Exception, match="Gemm"):  # ONNX Runtime's CPU Gemm has no bfloat16 kernel
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    fixed = to_float32(model, "bfloat16")
    onnx.checker.check_model(fixed, full_check=True)
    session = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.array([[1.0, 2.0, 0.5], [-1.0, 0.25, 4.0]], np.float32)  # exact in bfloat16
    (y,) = session.run(None, {"x": x})
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, x @ (np.arange(12, dtype=np.float32).reshape(3, 4) / 8), rtol=0, atol=0)
    with pytest.raises(TransformError, match="bfloat16"):
        to_float32(fixed, "bfloat16")  # nothing left in bfloat16


@pytest.mark.slow
def test_a_frozen_size_is_named_by_the_first_call_that_differs_from_a_trace_taken_at_the_other_inputs() -> None:
    # DeepSpeed's expert capacity: math.ceil of int(gates.shape[0]), frozen at 16 tokens, is the k
    # of a topk and the depth of a one_hot. At 32 tokens the topk is the first call whose result
    # differs (in shape) from the same call of a trace taken at 32 tokens.
    (diagnosis,) = diagnose(str(CORPUS / "math_ceil_capacity_top1gating_deepspeed_1578.py"), DiagnoseOptions(fix=True))
    finding, sizes = diagnosis.findings[:2]
    assert finding.code == "OD210"
    assert (finding.op, finding.onnx_op, finding.node) == ("aten::topk", "TopK", "/TopK"), finding.message
    assert "shape (8, 4) where PyTorch has (16, 4)" in finding.message
    assert finding.source and finding.source.endswith(":43")  # the line that froze it, int(gates.shape[0])
    # Strict capture keeps the capacity symbolic. At the constant input set every token ties in
    # its topk, and which expert wins there is arbitrary: that set is set aside, not held against it.
    strict = next(f for f in sizes.fixes if f.verified)
    assert "strict capture" in strict.title, [(f.title, f.verified) for f in sizes.fixes]
    assert "not judged: constant, where PyTorch's own output turns on ties" in strict.check.detail


def test_strict_capture_keeps_a_size_computed_through_floats_and_a_one_hot_of_it_symbolic() -> None:
    import importlib.util
    import sys

    import torch
    from torch.export import Dim

    from onnxdoctor.worker.facts import strict_capture

    path = CORPUS / "math_ceil_capacity_top1gating_deepspeed_1578.py"
    spec = importlib.util.spec_from_file_location("deepspeed_gate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["deepspeed_gate"] = module
    try:
        spec.loader.exec_module(module)
        model, args = module.get_model()
        # capacity = math.ceil(tokens / experts * 2.0): a topk's k and a one_hot's class count.
        program = strict_capture(model, args, None, {"tokens": {0: Dim("tokens", min=1, max=512)}})
        tokens = torch.randn(32, 32)
        shapes = [tuple(t.shape) for t in program.module()(tokens)]
        assert shapes == [tuple(t.shape) for t in model(tokens)] == [(), (32, 4, 16), (32, 4, 16), (4,)]
    finally:
        sys.modules.pop("deepspeed_gate", None)
