"""Example inputs that are objects holding tensors (loader.tensor_holder, analysis/fixes/object_inputs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

# A graph batch in the manner of PyTorch Geometric's Data: its tensors in a dict one level down,
# beside a plain number; the dense features come first. torch.export takes neither.
GRAPH_BATCH = '''
import torch
from torch import nn

dynamo = True
input_names = ["scale", "graph"]


class Store:
    def __init__(self, **tensors):
        self._mapping = dict(tensors)


class GraphBatch:
    def __init__(self, x, edge_index):
        self._store = Store(x=x, edge_index=edge_index)
        self.num_graphs = 1

    @property
    def x(self):
        return self._store._mapping["x"]

    @property
    def edge_index(self):
        return self._store._mapping["edge_index"]


class MeanConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, scale, data):
        src, dst = data.edge_index
        messages = torch.zeros_like(data.x).index_add(0, dst, data.x[src])
        return self.lin(messages * scale) / data.num_graphs


def get_model():
    torch.manual_seed(0)
    graph = GraphBatch(torch.randn(5, 4), torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]]))
    return MeanConv().eval(), (torch.tensor(2.0), graph)
'''


@pytest.mark.slow
def test_an_object_input_is_passed_as_its_tensors(tmp_path: Path) -> None:
    script = tmp_path / "graph.py"
    script.write_text(GRAPH_BATCH, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.stage.value == "export", [(f.code, f.message) for f in diagnosis.findings]
    fix = next(f for f in finding.fixes if f.kind == "object_inputs")
    assert fix.verified and "GraphBatch (input 1)" in fix.title, fix.verification


@pytest.mark.slow
def test_a_keyed_jagged_tensor_input_is_named_and_passed_as_its_tensors() -> None:
    path = CORPUS / "keyed_jagged_tensor_input_ebc_ranking_torchrec_1550.py"
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=True, check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD299" and "KeyedJaggedTensor object" in finding.message
    assert finding.fixes[0].kind == "object_inputs" and finding.fixes[0].verified, \
        [(f.kind, f.verified) for f in finding.fixes]


# A detector's list of per-image objects: the list itself is an input TorchScript takes, the
# objects inside it are not.
IMAGE_LIST = '''
import torch

dynamo = False


class Instances:
    def __init__(self, image, boxes):
        self.image = image
        self.boxes = boxes


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, batch):
        return torch.cat([self.conv(item.image[None]).mean((2, 3)) + item.boxes.sum() for item in batch])


def get_model():
    torch.manual_seed(0)
    batch = [Instances(torch.rand(3, 8, 8), torch.rand(2, 4)), Instances(torch.rand(3, 8, 8), torch.rand(3, 4))]
    return Head().eval(), (batch,)
'''


@pytest.mark.slow
def test_objects_inside_an_input_list_are_inputs_and_passed_as_their_tensors(tmp_path: Path) -> None:
    script = tmp_path / "detector.py"
    script.write_text(IMAGE_LIST, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False))
    finding = diagnosis.findings[0]
    # torch says "input" for outputs too: here the example holds the object, so it is an input.
    assert finding.code == "OD299" and finding.message.startswith("an example input is or holds an Instances object")
    fix = next(f for f in finding.fixes if f.kind == "object_inputs")
    assert fix.verified and "Instances (input 0)" in fix.title, fix.verification
