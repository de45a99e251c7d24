"""OD206 counts the modules whose own mode is training, not the wrapper's, and counts them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

SCRIPT = """
import torch

class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Dropout(0.5) for _ in range({n}))
        self.bn = torch.nn.BatchNorm1d(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.fc(self.bn(x))

class Wrapper(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner(){inner_mode}

    def forward(self, x):
        return self.inner(x)

def get_model():
    torch.manual_seed(0)
    return Wrapper(), (torch.randn(4, 8),)  # the wrapper stays in training mode
"""


def _od206(tmp_path: Path, n: int, inner_mode: str) -> list[str]:
    script = tmp_path / "wrapped.py"
    script.write_text(SCRIPT.format(n=n, inner_mode=inner_mode))
    options = DiagnoseOptions(exporter="torchscript", fix=False, timeout=300)
    (diagnosis,) = diagnose(str(script), options)
    return [f.message for f in diagnosis.findings if f.code == "OD206"]


@pytest.mark.slow
def test_a_train_mode_wrapper_around_an_eval_model_is_not_flagged(tmp_path: Path) -> None:
    assert _od206(tmp_path, 20, ".eval()") == []


@pytest.mark.slow
def test_every_module_in_training_mode_is_counted(tmp_path: Path) -> None:
    (message,) = _od206(tmp_path, 24, "")
    assert "25 mode-sensitive module(s)" in message  # 24 dropouts and the batch norm, no cap at 20


@pytest.mark.slow
def test_a_mismatch_training_mode_explains_is_said_so_without_a_node_search() -> None:
    fixture = Path(__file__).resolve().parent.parent / "fixtures/export/od206_training_mode.py"
    options = DiagnoseOptions(exporter="dynamo", fix=False, timeout=300)
    (diagnosis,) = diagnose(str(fixture), options)
    (parity,) = [f for f in diagnosis.findings if f.code == "OD601"]
    assert "training mode and 2 module(s) depend on it" in parity.message
    assert "first value that differs" not in parity.message  # no localisation spent on it
