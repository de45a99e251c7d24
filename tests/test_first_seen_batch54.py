"""General mechanisms for failures not seen before (issue 22), written after the fifty-fourth
first-seen batch (fixtures/corpus/first_seen_2026-12-06n.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# MouseLand/cellpose#821: a network converted with torch.utils.mkldnn.to_mkldnn for CPU inference
# (its Conv, BatchNorm, Linear and PReLU layers become oneDNN ScriptModules the tracer refuses).
MKLDNN_LAYERS = '''
import torch
from torch.utils import mkldnn as mkldnn_utils
dynamo = False

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1, groups=1)
        self.norm = torch.nn.BatchNorm2d(4)
        self.act = torch.nn.PReLU(4)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        y = self.conv(x).to_mkldnn()
        y = self.norm(y).to_dense()
        y = self.act(y.to_mkldnn()).to_dense()
        return self.head(y.mean(dim=(2, 3)))

def get_model():
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        net.norm.running_mean.uniform_(-1, 1)
        net.norm.running_var.uniform_(0.5, 2)
    return mkldnn_utils.to_mkldnn(net), (torch.randn(2, 3, 8, 8),)
'''


@pytest.mark.slow
def test_a_model_converted_to_mkldnn_layers_is_exported_with_dense_ones(tmp_path: Path) -> None:
    script = tmp_path / "net.py"
    script.write_text(MKLDNN_LAYERS)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD299" and "torch.utils.mkldnn" in finding.message, finding
    best = finding.fixes[0]
    assert best.kind == "inference_noops" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    assert "_dense_layer" in best.snippet
