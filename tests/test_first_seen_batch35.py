"""General mechanisms for failures not seen before (issue 22), written after the thirty-fifth
first-seen batch (fixtures/corpus/first_seen_2026-12-05z.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

# torch-dftd's shape (pfnet-research/torch-dftd#18): a group count read out of one input (which the
# exporter then drops) and an index input of the same type after it; the pair is unpacked first.
DROPPED_AND_UNPACKED = '''
import torch
dynamo = False
opset_version = 17
input_names = ["pair", "batch", "index", "values"]
class M(torch.nn.Module):
    def forward(self, pair, batch, index, values):
        first, second = pair
        groups = int(batch[-1]) + 1
        return values.new_zeros((groups,)).scatter_add(0, index, values * first + second)
def get_model():
    return M().eval(), (torch.rand(2, 5), torch.tensor([0, 0, 1, 1, 1]), torch.tensor([1, 1, 0, 0, 0]), torch.rand(5))
'''


def _findings(tmp_path: Path, source: str, *, fix: bool = False, checks: int = 4) -> list:
    script = tmp_path / "model.py"
    script.write_text(source, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=fix, check_shapes=False, max_fix_checks=checks))
    return list(diagnosis.findings)


@pytest.mark.slow
def test_inputs_left_after_a_dropped_one_are_fed_by_their_names(tmp_path: Path) -> None:
    findings = _findings(tmp_path, DROPPED_AND_UNPACKED)
    codes = {f.code: f for f in findings}
    # Fed by type alone, `batch` went where `index` is: a mismatch the model does not have.
    assert "OD601" not in codes, codes["OD601"].message
    assert "dropped unused input(s) (batch)" in codes["OD502"].message
    # The frozen value is int(batch[-1]), not the unpacking of `pair` a line before it.
    assert codes["OD210"].source == "model.py:9", codes["OD210"].source


# onnx/onnx#6340's shape: the dynamo exporter writes opset 18 and converts down to the requested
# 12, keeping Softmax's axis=1, which before opset 13 normalizes over every dim from it on.
SOFTMAX_CONVERTED = '''
import torch
dynamo = True
opset_version = 12
output_names = ["probs"]
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Conv2d(3, 4, 1)
    def forward(self, image):
        return torch.softmax(self.head(image), dim=1)
def get_model():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(1, 3, 6, 6),)
'''


@pytest.mark.slow
def test_a_mismatch_the_version_converter_wrote_is_named_and_exported_at_18(tmp_path: Path) -> None:
    (finding, *_) = _findings(tmp_path, SOFTMAX_CONVERTED, fix=True)
    # Every intermediate value agrees; the graph output (named "probs") is the Softmax's own.
    assert (finding.code, finding.onnx_op) == ("OD601", "Softmax"), finding.message
    best = finding.fixes[0]
    # Softmax is defined as at 18 from opset 13 on: the lowest opset without a conversion for it.
    assert (best.kind, best.title, best.verified) == ("opset", "Export at opset 13", True), \
        [(f.title, f.verified) for f in finding.fixes]


# DavideCatto/XFeat-ONNX#2's top-k count: min(#cells, top_k) through NumPy, frozen at the example's
# 30 cells; at 12 cells ONNX Runtime's TopK refuses k = 20.
NUMPY_SIZES = '''
import numpy as np
import torch
dynamo = False
opset_version = 17
input_names = ["heat"]
dynamic_axes = {"heat": {0: "h", 1: "w"}}
class M(torch.nn.Module):
    def forward(self, heat):
        cells = heat.flatten()
        scores, index = torch.topk(cells, torch.min(torch.from_numpy(np.array([cells.shape[0], 20]))), dim=-1)
        return scores, index
def get_model():
    torch.manual_seed(0)
    return M().eval(), (torch.rand(5, 6),)
def get_inputs2():
    return (torch.rand(3, 4),)
'''


@pytest.mark.slow
def test_a_numpy_round_trip_of_sizes_is_traced_as_torch(tmp_path: Path) -> None:
    (finding, *_) = _findings(tmp_path, NUMPY_SIZES, fix=True, checks=1)
    assert finding.code == "OD210", finding.message
    best = finding.fixes[0]
    assert best.kind == "tensor_values" and best.verified and "NumPy" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]


# pytorch/pytorch#150371's shape: keyword-only inputs and one more through **kwargs, with
# dynamic_shapes keyed by all three names; torch.export wants them keyed by forward()'s own.
KEYWORDS_THROUGH_KWARGS = '''
import torch
dynamo = True
batch = torch.export.Dim("batch")
dynamic_shapes = {"x": {0: batch}, "y": {0: batch}, "z": {0: batch}}
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
    def forward(self, *, x, y, **kwargs):
        return self.proj(x) + y * kwargs["z"]
def get_model():
    torch.manual_seed(0)
    return M().eval(), (), {"x": torch.randn(3, 4), "y": torch.randn(3, 4), "z": torch.randn(3, 4)}
'''


@pytest.mark.slow
def test_a_forward_taking_kwargs_is_exported_through_a_wrapper_naming_each_input(tmp_path: Path) -> None:
    (finding, *_) = _findings(tmp_path, KEYWORDS_THROUGH_KWARGS, fix=True)
    assert finding.code == "OD208", finding.message
    best = finding.fixes[0]
    assert best.kind == "named_inputs" and best.verified, [(f.title, f.verified) for f in finding.fixes]
    assert "def forward(self, x, y, z):" in best.snippet and "self.model(x=x, y=y, z=z)" in best.snippet
