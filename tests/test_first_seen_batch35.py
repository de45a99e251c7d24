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


def _findings(tmp_path: Path, source: str, *, fix: bool = False) -> list:
    script = tmp_path / "model.py"
    script.write_text(source, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=fix, check_shapes=False))
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
