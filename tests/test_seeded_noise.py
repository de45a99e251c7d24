"""Random draws given an explicit torch.Generator (pytorch#136860): the generator's numbers kept as
a constant where forward() reseeds it, the graph's own random op where it moves on."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_first_seen_batch14 import _diagnosed

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"

HEADER = '''
import torch

dynamo = False
opset_version = 17
'''

# A generator seeded once, drawn from on every call: each call's noise is new.
STATEFUL = HEADER + '''

class Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.gen = torch.Generator().manual_seed(7)

    def forward(self, x):
        return self.lin(x) + 0.1 * torch.randn(x.shape, generator=self.gen)


def get_model():
    torch.manual_seed(0)
    return Noisy().eval(), (torch.randn(32, 64),)
'''

# Reseeded per call and drawn in place into a fresh tensor.
IN_PLACE = HEADER + '''

class Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x):
        generator = torch.Generator().manual_seed(3)
        return self.lin(x) + torch.empty_like(x).normal_(generator=generator)


def get_model():
    torch.manual_seed(0)
    return Noisy().eval(), (torch.randn(32, 64),)
'''


@pytest.mark.slow
def test_a_generator_reseeded_in_forward_is_kept_as_its_numbers() -> None:
    (diagnosis,) = diagnose(str(CORPUS / "randn_generator_constant_sde_noise_sampler_pytorch_136860.py"),
                            DiagnoseOptions(fix=True))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD299", "aten::randn")
    best = finding.fixes[0]
    assert best.kind == "seeded_noise_constant" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]
    # PyTorch's own numbers: an exact comparison, not one in distribution.
    assert best.check is not None and best.check.max_abs_diff is not None and best.check.max_abs_diff < 1e-5


@pytest.mark.slow
def test_a_generator_that_moves_on_is_not_frozen_but_drawn_by_the_graph(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, STATEFUL, fix=True, all_fixes=True)
    fixes = {fix.kind: fix for fix in diagnosis.findings[0].fixes}
    assert fixes["seeded_noise_constant"].verified is False
    assert fixes["seeded_noise_unseeded"].verified is True
    assert "distribution" in fixes["seeded_noise_unseeded"].check.detail


@pytest.mark.slow
def test_an_in_place_draw_from_a_reseeded_generator_is_written_as_data_flow(tmp_path: Path) -> None:
    diagnosis = _diagnosed(tmp_path, IN_PLACE, fix=True)
    best = diagnosis.findings[0].fixes[0]
    assert best.kind == "seeded_noise_constant" and best.verified is True
    assert best.check.max_abs_diff is not None and best.check.max_abs_diff < 1e-5
    # No Python kernel chained after it: the in-place write is exported as plain ops.
    assert "inside ONNX Runtime" not in best.title
