"""The worker names the op of export failures whose text names none (real torch 2.13 exports).

Each case is the shape of a corpus file (fixtures/corpus/): a uint8 `x & 15` (bitshift_uint8),
a user symbolic writing a complex value (dft_custom_symbolic_complex), a dynamically quantized
LSTM's packed weights (quantized_lstm_dynamic), an autograd Function in the traced graph
(dcnv2_function_list_attrs).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")


def _export_error(model: Any, args: tuple[Any, ...], path: Path, opset: int) -> BaseException:
    try:
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset)
    except Exception as exc:  # noqa: BLE001 - torch raises several types; the worker reads the message
        return exc
    raise AssertionError("the export was expected to fail")


@pytest.mark.slow
def test_the_converting_node_names_the_op_or_the_input_it_blames(tmp_path: Path) -> None:
    from onnxdoctor.worker.registry import converting_node_op

    class Unpack(torch.nn.Module):
        def forward(self, packed: torch.Tensor) -> torch.Tensor:
            return (packed & 15).float()

    exc = _export_error(Unpack(), (torch.randint(0, 255, (2, 4), dtype=torch.uint8),), tmp_path / "a.onnx", 11)
    assert "bitwise AND for non-boolean" in str(exc)
    assert converting_node_op(exc, str(exc)) == "aten::bitwise_and"  # traced as aten::__and__

    class Spectrum(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.fft.fft(x).abs()

    def _fft(g: Any, self: Any, n: Any, dim: Any, norm: Any) -> Any:
        return g.op("com.microsoft.experimental::DFT", self)

    torch.onnx.register_custom_op_symbolic("::fft_fft", _fft, 1)
    try:
        exc = _export_error(Spectrum(), (torch.randn(1, 8),), tmp_path / "b.onnx", 17)
    finally:
        torch.onnx.unregister_custom_op_symbolic("::fft_fft", 1)
    assert "ComplexFloat is an unexpected tensor scalar type" in str(exc)
    # Raised while converting abs; the complex value came from fft_fft, the op to act on.
    assert converting_node_op(exc, str(exc)) == "aten::fft_fft"


def test_packed_weights_are_named_by_the_quantized_module() -> None:
    from onnxdoctor.worker.registry import quantized_module_op

    lstm = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.LSTM(4, 8)), {torch.nn.LSTM})
    text = "received an input of unsupported type: torch._C.ScriptObject"
    assert quantized_module_op(lstm, text) == "aten::quantized_lstm"
    assert quantized_module_op(torch.nn.Sequential(torch.nn.LSTM(4, 8)), text) is None


def test_the_traced_graphs_autograd_functions_are_listed() -> None:
    from onnxdoctor.worker.registry import traced_python_ops

    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return Twice.apply(x) + 1

    loaded = SimpleNamespace(model=Model(), args=(torch.randn(2),), kwargs=None)
    assert traced_python_ops(loaded) == ["Twice"]


def test_a_dynamo_nodes_metadata_names_the_torch_op_it_came_from() -> None:
    import onnx
    from onnx import helper

    from onnxdoctor.worker.tracebacks import node_torch_op

    node = helper.make_node("Concat", ["a", "b"], ["c"], name="node_cat_3", axis=0)
    entry = node.metadata_props.add()
    entry.key = "pkg.torch.onnx.fx_node"  # as torch 2.13's dynamo exporter writes it
    entry.value = "%lstm : [num_users=3] = call_function[target=torch.ops.aten.lstm.input](args = (%x, ...))"
    bare = helper.make_node("Relu", ["c"], ["d"], name="node_relu")
    graph = helper.make_graph([node, bare], "g", [], [])
    model = helper.make_model(graph)
    assert isinstance(model, onnx.ModelProto)
    assert node_torch_op(model, "node_cat_3") == "aten::lstm"
    assert node_torch_op(model, "node_relu") is None and node_torch_op(model, "absent") is None


@pytest.mark.slow
def test_a_symbolic_body_shared_by_several_ops_is_named_by_the_node_being_converted(tmp_path: Path) -> None:
    """torch builds its adaptive pooling symbolics from one factory: every one of them has the same
    code object, so the frames alone would name whichever op the registry lists first."""
    from onnxdoctor.worker.registry import refusing_symbolic

    class Pool(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.adaptive_avg_pool2d(x, (3, 3))  # 8 is no multiple of 3

    exc = _export_error(Pool(), (torch.randn(1, 2, 8, 8),), tmp_path / "pool.onnx", 11)
    assert "adaptive_avg_pool2d" in str(exc)
    assert refusing_symbolic(exc) in ("aten::adaptive_avg_pool2d", None)


@pytest.mark.slow
def test_a_trace_stopped_inside_a_functional_names_the_functionals_op(tmp_path: Path) -> None:
    # corpus max_unpool2d_enet_pytorch_25088: F.max_unpool2d's output-size check runs on traced
    # values and raises from its private helpers; the public functional names the op.
    from onnxdoctor.worker.failures import functional_frame_op

    class Unpool(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pool = torch.nn.MaxPool2d(2, return_indices=True)
            self.unpool = torch.nn.MaxUnpool2d(2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y, indices = self.pool(x)
            return self.unpool(y, indices, output_size=x.size())

    exc = _export_error(Unpool().eval(), (torch.randn(1, 2, 8, 8),), tmp_path / "u.onnx", 17)
    assert functional_frame_op(exc) == "aten::max_unpool2d", exc
    # Raised outside any functional: nothing is named.
    try:
        torch.zeros(2) + torch.zeros(3)
    except RuntimeError as other:
        assert functional_frame_op(other) is None
