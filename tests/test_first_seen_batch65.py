"""General mechanisms for failures not seen before (issue 22), written after the sixty-fifth
first-seen batch (fixtures/corpus/first_seen_2026-12-07e.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# kornia#3722: normal_transform_pixel builds a matrix with torch.tensor and scales two of its
# entries in place; the TorchScript tracer holds the matrix as a constant by reference, so the
# file's constant is already scaled and the graph scales it again.
SCALED = '''
import torch
dynamo = False
opset_version = 17

class Normalise(torch.nn.Module):
    def forward(self, points):
        h, w = points.shape[-2:]
        tr_mat = torch.tensor([[1.0, 0.0, -1.0], [0.0, 1.0, -1.0], [0.0, 0.0, 1.0]])
        tr_mat[0, 0] = tr_mat[0, 0] * 2.0 / (w - 1.0)
        tr_mat[1, 1] = tr_mat[1, 1] * 2.0 / (h - 1.0)
        return points.flatten(2)[..., :3] @ tr_mat

def get_model():
    return Normalise(), (torch.rand(1, 2, 4, 5),)
'''


@pytest.mark.slow
def test_writes_into_a_tensor_built_from_data_are_named_and_the_clone_is_verified(tmp_path: Path) -> None:
    script = tmp_path / "scaled.py"
    script.write_text(SCALED)
    # With every fix tried: the dynamo exporter, which keeps the writes, passes too.
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, all_fixes=True))
    finding = next(f for f in diagnosis.findings if f.code == "OD601")
    frozen = next(f for f in diagnosis.findings if f.code == "OD210")
    assert frozen.source == "scaled.py:9", frozen.source  # the tracer's warning, at the user's line
    fix = next(f for f in finding.fixes if f.kind == "cloned_constants")
    assert "scaled.py:9" in fix.title, fix.title
    assert "torch.tensor([[1.0, 0.0, -1.0], [0.0, 1.0, -1.0], [0.0, 0.0, 1.0]]).clone()" in fix.snippet, fix.snippet
    assert fix.verified is True, fix.check


@pytest.mark.slow
def test_a_tensor_built_from_data_and_never_written_gets_no_clone_fix(tmp_path: Path) -> None:
    # The same matrix scaled out of place: the export matches, and nothing is proposed.
    script = tmp_path / "unwritten.py"
    script.write_text(SCALED.replace("        tr_mat[0, 0] = tr_mat[0, 0] * 2.0 / (w - 1.0)\n", "")
                      .replace("tr_mat[1, 1] = tr_mat[1, 1] * 2.0 / (h - 1.0)",
                               "tr_mat = tr_mat * torch.tensor([2.0 / (w - 1.0), 2.0 / (h - 1.0), 1.0])"))
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    assert not [f for f in diagnosis.findings if f.severity.value == "error"], diagnosis.findings


# hpc203/license-plate-detect-recoginition-opencv#1: LPRNet's global context divides each kept
# feature map by `mean(f ** 2).item()`, after convolutions whose batch norms the exporter folds.
DIVISOR = '''
import torch
from torch import nn
dynamo = False
opset_version = 11

class Context(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        f = self.stem(x)
        f = torch.div(f, torch.mean(f ** 2).item())
        return self.head(f)

def get_model():
    torch.manual_seed(0)
    model = Context().eval()
    with torch.no_grad():
        model.stem[1].running_mean.uniform_(-0.5, 0.5)
        model.stem[1].running_var.uniform_(0.5, 2.0)
    return model, (torch.rand(1, 3, 8, 8),)
'''


@pytest.mark.slow
def test_a_number_taken_out_of_a_tensor_names_the_conversion_and_the_node_where_it_shows(tmp_path: Path) -> None:
    script = tmp_path / "divisor.py"
    script.write_text(DIVISOR)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = next(f for f in diagnosis.findings if f.code == "OD210")
    # Not the first convolution (its node holds the folded batch norm the trace's call lacks).
    assert (finding.op, finding.source) == ("aten::item", "divisor.py:15"), (finding.op, finding.source)
    assert finding.node is not None and finding.node.endswith("Div"), finding.node


# pytorch#110866: a Hamiltonian network returning the vector field of its energy, computed with
# torch.func's vmap(jacrev(H)) in forward(); jacrev's basis is written in place (diagonal_scatter).
HAMILTONIAN = '''
import torch
from torch import nn
from torch.func import jacrev, vmap
dynamo = True

class Hamiltonian(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))

    def energy(self, qp):
        return self.net(qp).squeeze(-1)

    def forward(self, qp):
        grad = vmap(jacrev(self.energy))(qp)
        return self.energy(qp), torch.stack([grad[:, 1], -grad[:, 0]], -1)

def get_model():
    torch.manual_seed(0)
    return Hamiltonian().eval(), (torch.randn(5, 2),)
'''


@pytest.mark.slow
def test_a_jacobian_from_torch_func_in_forward_is_traced_below_autograd_and_verified(tmp_path: Path) -> None:
    script = tmp_path / "hamiltonian.py"
    script.write_text(HAMILTONIAN)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    fix = next(f for f in finding.fixes if f.kind == "autograd_traced")
    assert fix.verified is True, (finding.code, fix.check)
