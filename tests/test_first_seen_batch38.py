"""General mechanisms for failures not seen before (issue 22), written after the thirty-eighth
first-seen batch (fixtures/corpus/first_seen_2026-12-05zc.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# pytorch/pytorch#15644's shape: forward() returns the gradient of an energy with respect to its
# input, taking it with torch.autograd.grad (the model never enables gradients itself).
GRADIENT_IN_FORWARD = '''
import torch
dynamo = False
opset_version = 17
class M(torch.nn.Module):
    def forward(self, x):
        x = x.detach().requires_grad_(True)
        energy = (x ** 2).abs().sum()
        (force,) = torch.autograd.grad(energy, x, create_graph=True)
        return force
def get_model():
    return M().eval(), (torch.randn(3, 4),)
'''


@pytest.mark.slow
def test_a_forward_that_takes_gradients_is_run_with_them(tmp_path: Path) -> None:
    # The reference calls run under torch.no_grad; this forward needs gradients (OD108 before).
    script = tmp_path / "model.py"
    script.write_text(GRADIENT_IN_FORWARD, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::sgn"), finding.message
    assert finding.fixes[0].kind == "exporter" and finding.fixes[0].verified, \
        [(f.title, f.verified) for f in finding.fixes]
