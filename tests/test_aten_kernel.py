"""The Python-kernel bridge (analysis/fixes/aten_kernel.py): an aten op no rewrite, opset or
exporter answers is exported as an onnxdoctor:: node that PyTorch's own kernel computes inside
ONNX Runtime. Real exports, real onnxruntime-extensions kernels, real sessions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from onnxdoctor.analysis.fixes import aten_kernel
from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import DiagnoseOptions, Finding, Severity, Stage
from onnxdoctor.pipeline import diagnose
from onnxdoctor.recipe import ExportCode

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _finding(code: str, op: str | None = None, torch_op: str | None = None) -> Finding:
    stage = Stage.EXPORT if code.startswith("OD2") else Stage.PARITY
    return Finding(code, stage, Severity.ERROR, "m", op=op, torch_op=torch_op)


def _context(op: str | None, training: bool = False) -> FixContext:
    return FixContext(target_kind="script", target_name="m.py", exporter="dynamo", requested_opset=None,
                      op=op, training=training)


def test_the_bridged_op_is_the_failing_aten_op_or_the_one_a_node_came_from() -> None:
    assert aten_kernel.bridged_op(_finding("OD202", "aten::kthvalue"), _context("aten::kthvalue")) == "aten::kthvalue"
    # A runtime or parity finding names an ONNX node; the bridge runs the op it was exported from.
    mismatch = _finding("OD601", "TopK", torch_op="aten::topk.default")
    assert aten_kernel.bridged_op(mismatch, _context("TopK")) == "aten::topk"
    assert aten_kernel.bridged_op(_finding("OD601", "Resize"), _context("Resize")) is None  # no torch op known
    # Custom namespaces are custom_op's; plumbing, in-place and mode-dependent ops are not bridged,
    # nor is any op of a model left in train mode (eval_mode answers that mismatch).
    assert aten_kernel.bridged_op(_finding("OD202", "mylib::op"), _context("mylib::op")) is None
    for op in ("aten::view", "aten::add_", "aten::batch_norm"):
        assert aten_kernel.bridged_op(_finding("OD601", "X", torch_op=op), _context("X")) is None, op
    trained = _finding("OD601", "Erf", torch_op="aten::erf")
    assert aten_kernel.bridged_op(trained, _context("Erf", training=True)) is None


def _bridge_code(op: str, kind: str) -> str:
    (fix,) = [f for f in aten_kernel.propose(_finding("OD202", op), _context(op)) if f.kind == kind]
    assert fix.recipe is not None
    step = fix.recipe.first(ExportCode)
    assert step is not None and step.code in fix.snippet  # what is verified is what is shown
    return step.code


def _run_bridged(path: Path, inputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)})


@pytest.mark.slow
def test_the_dynamo_bridge_runs_a_two_output_op_neither_exporter_maps(tmp_path: Path) -> None:
    import onnx

    class Kth(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            values, indices = torch.kthvalue(x * 2.0, 3, dim=-1, keepdim=True)
            return values + 1.0, indices

    model, example_inputs = Kth(), (torch.randn(4, 9, generator=torch.Generator().manual_seed(0)),)
    # A module name for the bridge's functions, as a script has: torch.fx imports them by it.
    scope: dict[str, object] = {"model": model, "example_inputs": example_inputs, "__name__": "bridge"}
    code = _bridge_code("aten::kthvalue", "aten_kernel_dynamo")
    exec(compile(code, "<bridge>", "exec"), scope)  # noqa: S102 - the fix's own code
    path = tmp_path / "kth.onnx"
    torch.onnx.export(scope["program"], example_inputs, str(path), dynamo=True)
    (node,) = [n for n in onnx.load(str(path)).graph.node if n.domain == "onnxdoctor"]
    assert node.op_type.startswith("aten_kthvalue_") and len(node.output) == 2
    # k, dim and keepdim as the call gave them, the tensor input standing as "T".
    attributes = {a.name: a.s.decode() for a in node.attribute}
    assert attributes["call"] == "{'args': ['T', 3, -1, True], 'kwargs': {}}"
    assert attributes["overload"] == "aten::kthvalue.default" and attributes["types"] == "float32->float32,int64"
    values, indices = _run_bridged(path, example_inputs)
    expected_values, expected_indices = model(*example_inputs)
    np.testing.assert_array_equal(values, expected_values.numpy())
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(indices, expected_indices.numpy())
    # A serving process that never exported: the snippet's lines above the export, then the
    # kernels the file's nodes describe (overload, types, arguments).
    _serve(code.split(aten_kernel.SERVING_ENDS)[0], path, example_inputs, tmp_path)


def _serve(serving_code: str, path: Path, inputs: tuple[torch.Tensor, ...], folder: Path) -> None:
    import subprocess
    import sys

    for index, tensor in enumerate(inputs):
        np.save(folder / f"input{index}.npy", tensor.numpy())
    np.save(folder / "expected.npy", np.concatenate([o.ravel() for o in _run_bridged(path, inputs)]))
    script = folder / "serve.py"
    script.write_text(serving_code + f"""

import onnxruntime
from onnxruntime_extensions import get_library_path

register_bridged_kernels({str(path)!r})
options = onnxruntime.SessionOptions()
options.register_custom_ops_library(get_library_path())
session = onnxruntime.InferenceSession({str(path)!r}, options, providers=["CPUExecutionProvider"])
feeds = {{i.name: np.load({str(folder)!r} + f"/input{{n}}.npy") for n, i in enumerate(session.get_inputs())}}
got = np.concatenate([o.ravel() for o in session.run(None, feeds)])
assert np.array_equal(got, np.load({str(folder)!r} + "/expected.npy")), "served outputs differ"
print("served")
""", "utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and "served" in done.stdout, done.stderr[-2000:]


@pytest.mark.slow
def test_the_torchscript_bridge_reads_the_overload_and_constants_the_tracer_kept(tmp_path: Path) -> None:
    from torch.onnx import unregister_custom_op_symbolic

    # F.interpolate calls the .vec overload: a size list, align_corners traced as a 0-d tensor,
    # scale factors None. The TorchScript exporter has no symbolic for it at any opset.
    class Resized(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.interpolate(x, size=(5, 7), mode="bicubic", antialias=True) * 3.0

    model, example_inputs = Resized(), (torch.randn(1, 2, 9, 11, generator=torch.Generator().manual_seed(1)),)
    scope: dict[str, object] = {"model": model, "example_inputs": example_inputs}
    code = _bridge_code("aten::_upsample_bicubic2d_aa", "aten_kernel_torchscript")
    try:
        exec(compile(code, "<bridge>", "exec"), scope)  # noqa: S102 - the fix's own code
        path = tmp_path / "resized.onnx"
        torch.onnx.export(model, example_inputs, str(path), dynamo=False, opset_version=17,
                          custom_opsets={"onnxdoctor": 1})
    finally:
        for opset in range(9, 21):  # the registration is process-wide: leave other tests the exporter's own
            unregister_custom_op_symbolic("aten::_upsample_bicubic2d_aa", opset)
    (out,) = _run_bridged(path, example_inputs)
    np.testing.assert_allclose(out, model(*example_inputs).numpy(), rtol=1e-6, atol=1e-6)
    _serve(code.split(aten_kernel.SERVING_ENDS)[0], path, example_inputs, tmp_path)


@pytest.mark.slow
def test_tied_top_k_is_verified_with_torchs_own_kernel() -> None:
    # ONNX Runtime's TopK breaks ties otherwise than PyTorch; no ONNX graph reproduces PyTorch's
    # order, so the bridge is what reaches parity, and it says what it costs.
    (diagnosis,) = diagnose(str(CORPUS / "topk_tied_distance_knn_graph_onnxruntime_19759.py"),
                            DiagnoseOptions(fix=True, check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD601" and finding.torch_op == "aten::topk"
    best = finding.fixes[0]
    assert best.kind.startswith("aten_kernel_") and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert best.check is not None and best.check.max_abs_diff == 0.0
    assert "needs torch and onnxruntime-extensions" in best.cost


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_call_s_own_dtype_keyword_reaches_the_kernel(exporter: str, tmp_path: Path) -> None:
    from torch.onnx import unregister_custom_op_symbolic

    # cumsum's dtype is keyword-only: the TorchScript trace carries it (None), the dynamo call
    # gives it (float64); neither may be mistaken for the bridge's own dtype values.
    class Sums(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.cumsum(x, 1), torch.cumsum(x * 2.0, 0, dtype=torch.float64)

    model, example_inputs = Sums(), (torch.randn(3, 5, generator=torch.Generator().manual_seed(2)),)
    scope: dict[str, object] = {"model": model, "example_inputs": example_inputs, "__name__": "bridge"}
    path = tmp_path / "sums.onnx"
    try:
        exec(compile(_bridge_code("aten::cumsum", f"aten_kernel_{exporter}"), "<bridge>", "exec"), scope)  # noqa: S102 - the fix's own code
        if exporter == "dynamo":
            torch.onnx.export(scope["program"], example_inputs, str(path), dynamo=True)
        else:
            torch.onnx.export(model, example_inputs, str(path), dynamo=False, opset_version=17,
                              custom_opsets={"onnxdoctor": 1})
    finally:
        for opset in range(9, 21) if exporter == "torchscript" else ():
            unregister_custom_op_symbolic("aten::cumsum", opset)
    got = _run_bridged(path, example_inputs)
    for out, expected in zip(got, model(*example_inputs), strict=True):
        assert out.dtype == expected.numpy().dtype
        np.testing.assert_allclose(out, expected.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_the_torchscript_bridge_gives_a_list_result_its_outputs(tmp_path: Path) -> None:
    from torch.onnx import unregister_custom_op_symbolic

    # The exporter asks a list-returning op's symbolic for `_outputs` values (LSTMCell's gates,
    # unsafe_chunk in SpeechBrain's Tacotron2, pytorch/pytorch#97861).
    class Gates(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            i, f, g = x.unsafe_chunk(3, 1)
            return torch.sigmoid(i) * torch.tanh(g) + f

    model, example_inputs = Gates(), (torch.randn(2, 6, generator=torch.Generator().manual_seed(2)),)
    scope: dict[str, object] = {"model": model, "example_inputs": example_inputs}
    code = _bridge_code("aten::unsafe_chunk", "aten_kernel_torchscript")
    try:
        exec(compile(code, "<bridge>", "exec"), scope)  # noqa: S102 - the fix's own code
        path = tmp_path / "gates.onnx"
        torch.onnx.export(model, example_inputs, str(path), dynamo=False, opset_version=17,
                          custom_opsets={"onnxdoctor": 1})
    finally:
        for opset in range(9, 21):
            unregister_custom_op_symbolic("aten::unsafe_chunk", opset)
    (out,) = _run_bridged(path, example_inputs)
    np.testing.assert_allclose(out, model(*example_inputs).numpy(), rtol=1e-6, atol=1e-6)
    _serve(code.split(aten_kernel.SERVING_ENDS)[0], path, example_inputs, tmp_path)
