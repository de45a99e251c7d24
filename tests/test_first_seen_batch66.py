"""General mechanisms for failures not seen before (issue 22), written after the sixty-sixth
first-seen batch (fixtures/corpus/first_seen_2026-12-07f.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# open-mmlab/mmdeploy#505: mmaction2's test forward returns `output.data.cpu().numpy()`, and the
# export wrapper makes it a tensor again with torch.from_numpy: the graph is one Constant.
NUMPY_ROUND_TRIP = '''
import torch
from torch import nn
dynamo = False

class Recognizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(6, 3)

    def forward_test(self, x):
        return self.head(x).softmax(-1).data.cpu().numpy()

class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.recognizer = Recognizer()

    def forward(self, x):
        return torch.from_numpy(self.recognizer.forward_test(x))

def get_model():
    torch.manual_seed(0)
    return Wrapper().eval(), (torch.randn(2, 6),)
'''


@pytest.mark.slow
def test_results_converted_to_numpy_and_back_are_kept_tensors_and_verified(tmp_path: Path) -> None:
    script = tmp_path / "round_trip.py"
    script.write_text(NUMPY_ROUND_TRIP)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = next(f for f in diagnosis.findings if f.code == "OD210")
    fix = next(f for f in finding.fixes if f.kind == "numpy_outputs")
    assert fix.verified is True, fix.check
