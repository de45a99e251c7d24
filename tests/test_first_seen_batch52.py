"""General mechanisms for failures not seen before (issue 22), written after the fifty-second
first-seen batch (fixtures/corpus/first_seen_2026-12-06l.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose


# pytorch/pytorch#150842: the sequence dim declared Dim.STATIC beside a dynamic batch.
STATIC_SEQUENCE = '''
import torch
dynamo = True
dynamic_shapes = {"x": {0: torch.export.Dim("batch", min=2, max=10), 1: torch.export.Dim.STATIC}}

class Pool(torch.nn.Module):
    def forward(self, x):
        return torch.cat([x, x.flip(1)], dim=1).mean(dim=1)

def get_model():
    return Pool(), (torch.randn(2, 3),)
'''


@pytest.mark.slow
def test_a_dim_declared_static_is_not_checked_as_dynamic(tmp_path: Path) -> None:
    script = tmp_path / "pool.py"
    script.write_text(STATIC_SEQUENCE)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=False))
    assert diagnosis.healthy, [(f.code, f.message) for f in diagnosis.findings]
    checked = [dict(check.inputs)["x"] for check in diagnosis.shapes]
    assert checked and all(shape[1] == 3 for shape in checked) and any(shape[0] != 2 for shape in checked), checked



# onnx/onnx#4855: Monte Carlo dropout, `F.dropout(x, training=True)` kept on in an eval model. The
# export writes Dropout with training_mode true; ONNX Runtime's EliminateDropout removes it.
MC_DROPOUT = '''
import torch
import torch.nn.functional as F
dynamo = False
opset_version = 12

class MCDropout(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(6, 16)
        self.out = torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.out(F.dropout(torch.relu(self.hidden(x)), p=0.3, training=True))

def get_model():
    torch.manual_seed(0)
    return MCDropout().eval(), (torch.randn(4, 6),)
'''


def test_a_training_mode_dropout_is_a_random_op() -> None:
    from onnx import TensorProto, helper

    from onnxdoctor.worker.randomness import random_ops

    def graph(train: bool) -> object:
        flag = helper.make_node("Constant", [], ["train"], value=helper.make_tensor("t", TensorProto.BOOL, [], [train]))
        ratio = helper.make_node("Constant", [], ["ratio"], value=helper.make_tensor("r", TensorProto.FLOAT, [], [0.3]))
        drop = helper.make_node("Dropout", ["x", "ratio", "train"], ["y"])
        return helper.make_model(helper.make_graph(
            [flag, ratio, drop], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]))

    assert random_ops(graph(True)) == ["Dropout"]
    assert random_ops(graph(False)) == []


@pytest.mark.slow
def test_monte_carlo_dropout_is_named_and_kept_drawing_in_the_runtime(tmp_path: Path) -> None:
    script = tmp_path / "mc.py"
    script.write_text(MC_DROPOUT)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD601", "Dropout"), [(f.code, f.op, f.message) for f in diagnosis.findings]
    assert "draws random numbers on every run" in finding.message
    best = finding.fixes[0]
    assert best.kind == "ort_options" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert "EliminateDropout" in best.snippet


# pytorch/pytorch#90169 (CFlow) and ailia-models#676 (RIFE): modules forward() uses that no
# nn.Module registers, so their parameters require grad and are not the model's.
UNREGISTERED = '''
import torch
dynamo = False

class Holder:
    def __init__(self):
        self.net = torch.nn.Linear(4, 4)

class Flow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Linear(4, 4)
        self.decoders = [torch.nn.Linear(4, 4) for _ in range(2)]
        self.holder = Holder()

    def forward(self, x):
        h = self.encoder(x)
        for decoder in self.decoders:
            h = torch.tanh(decoder(h))
        return self.holder.net(h)

def get_model():
    torch.manual_seed(0)
    return Flow().eval(), (torch.randn(3, 4),)
'''


@pytest.mark.slow
def test_weights_outside_registered_modules_are_exported_as_constants(tmp_path: Path) -> None:
    script = tmp_path / "flow.py"
    script.write_text(UNREGISTERED)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=2))
    finding = diagnosis.findings[0]
    assert finding.code == "OD299" and "requires grad as a constant" in finding.message, finding
    frozen = next(f for f in finding.fixes if f.kind == "frozen_weights")
    assert frozen.verified is True, frozen.check
    assert "torch.nn.ModuleList" in frozen.snippet
