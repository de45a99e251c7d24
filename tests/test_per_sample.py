"""A batch the trace froze, kept by exporting one sample and looping over the batch in ONNX
(onnxkit.transforms.per_sample_loop; the `per_sample` fix of OD802-OD804)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.onnxkit.transforms import TransformError, per_sample_loop
from onnxdoctor.pipeline import diagnose


class _PerRow(torch.nn.Module):
    """A Python loop over the batch (the trace holds one copy per example row) with a second,
    per-sample input and a constant output the exporter folds into an initializer."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [self.proj(row).amax(0, keepdim=True) * s.mean() for row, s in zip(x, scale, strict=True)]
        return torch.stack(rows), torch.ones(1, 2)


@pytest.mark.parametrize("dynamo", [False, True])
def test_the_one_sample_graph_in_a_loop_matches_pytorch_at_every_batch(tmp_path: Path, dynamo: bool) -> None:
    model = _PerRow().eval()
    path = tmp_path / "one.onnx"
    torch.onnx.export(model, (torch.randn(1, 5, 4), torch.randn(1, 3)), str(path), dynamo=dynamo)
    looped = per_sample_loop(onnx.load(str(path)), (0, 1))
    onnx.checker.check_model(looped, full_check=True)
    assert [n.op_type for n in looped.graph.node][-1] == "Loop"
    session = ort.InferenceSession(looped.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    for batch in (1, 3, 6):
        x, scale = torch.randn(batch, 5, 4), torch.randn(batch, 3)
        got = session.run(None, dict(zip(names, (x.numpy(), scale.numpy()), strict=True)))
        rows = torch.stack([model(x[i:i + 1], scale[i:i + 1])[0][0] for i in range(batch)])
        assert got[0].shape == (batch, 1, 3)
        np.testing.assert_allclose(got[0], rows.detach().numpy(), atol=1e-5)
        # The folded constant is per sample too: one row of it for each sample.
        np.testing.assert_array_equal(got[1], np.ones((batch, 2), np.float32))


def test_a_missing_input_or_an_output_without_a_sample_dim_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "sum.onnx"
    torch.onnx.export(torch.nn.Sequential(torch.nn.Flatten(0)), (torch.randn(1, 3),), str(path), dynamo=False)
    model = onnx.load(str(path))
    with pytest.raises(TransformError, match="no input at position"):
        per_sample_loop(model, (1,))
    scalar = tmp_path / "scalar.onnx"

    class Total(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum()

    torch.onnx.export(Total(), (torch.randn(1, 3),), str(scalar), dynamo=False)
    with pytest.raises(TransformError, match="no dim 0 of one sample"):
        per_sample_loop(onnx.load(str(scalar)), (0,))


# A per-clip front end walked in Python over the batch, the batch declared dynamic: the
# TorchScript trace splits the batch into the example's count of clips (OD802), and neither
# exporter keeps the loop.
PER_CLIP = '''
import torch
from torch import nn
dynamo = False
input_names = ["clips"]
dynamic_axes = {"clips": {0: "batch"}}

class PerClip(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 4)

    def forward(self, clips):
        feats = []
        for clip in clips:
            frames = clip.unfold(0, 8, 4)
            feats.append(self.proj(frames - frames.mean(0, keepdim=True)))
        return torch.stack(feats)

def get_model():
    torch.manual_seed(0)
    return PerClip().eval(), (torch.randn(2, 40),)

def get_inputs2():
    return (torch.randn(3, 40),)
'''


@pytest.mark.slow
def test_a_python_loop_over_the_batch_gets_the_per_sample_export_verified_at_every_batch(tmp_path: Path) -> None:
    script = tmp_path / "per_clip.py"
    script.write_text(PER_CLIP)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions())
    finding = next(f for f in diagnosis.findings if f.code == "OD802")
    fix = next(f for f in finding.fixes if f.kind == "per_sample")
    assert fix.verified is True, fix.check
    assert fix.check is not None and "clips=5x40" in fix.check.sizes, fix.check.sizes


@pytest.mark.slow
def test_samples_that_interact_are_not_called_verified(tmp_path: Path) -> None:
    # Each clip is centred on the batch's mean: one sample alone is not the batch's computation.
    script = tmp_path / "batch_mean.py"
    script.write_text(PER_CLIP.replace("        feats = []\n",
                                       "        centre = clips.mean(0)\n        feats = []\n")
                      .replace("frames = clip.unfold(0, 8, 4)", "frames = (clip - centre).unfold(0, 8, 4)"))
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(all_fixes=True))
    finding = next(f for f in diagnosis.findings if f.code == "OD802")
    fix = next(f for f in finding.fixes if f.kind == "per_sample")
    assert fix.check is not None and fix.verified is False, fix.check


def test_outputs_that_are_inputs_or_listed_constants_and_taken_names_still_check() -> None:
    from onnx import TensorProto, helper

    # x passed through as an output, a constant output whose initializer is also listed as an
    # input (keep_initializers_as_inputs), and a value already named like the transform's helper.
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["sample_row_index"]), helper.make_node("Neg", ["sample_row_index"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [1, 2])],
        initializer=[helper.make_tensor("c", TensorProto.FLOAT, [1, 2], [1.0, 2.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    looped = per_sample_loop(model, (0,))
    onnx.checker.check_model(looped, full_check=True)
    session = ort.InferenceSession(looped.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    same, y, c = session.run(None, {"x": x})
    np.testing.assert_array_equal(same, x)
    np.testing.assert_array_equal(y, -np.maximum(x, 0))
    np.testing.assert_array_equal(c, np.tile([[1.0, 2.0]], (4, 1)))
    twice = helper.make_graph(graph.node, "g", list(graph.input)[:1], [graph.output[1], graph.output[1]])
    with pytest.raises(TransformError, match="listed twice"):
        per_sample_loop(helper.make_model(twice, opset_imports=[helper.make_opsetid("", 17)]), (0,))
