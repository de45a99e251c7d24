"""General mechanisms for failures not seen before (issue 22), written after the thirty-seventh
first-seen batch (fixtures/corpus/first_seen_2026-12-05zb.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose


def _first(tmp_path: Path, source: str, **options: object) -> object:
    script = tmp_path / "model.py"
    script.write_text(source, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=True, check_shapes=False, **options))
    return diagnosis.findings[0]


# huggingface/transformers#43631's shape: a Student-T head's log-likelihood. The distribution's
# argument checks stop torch.export; without them the dynamo exporter meets lgamma, which the
# library rewrites (the TorchScript exporter has no lgamma either).
STUDENT_T = '''
import torch
import torch.nn.functional as F
dynamo = True
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(4, 2)
    def forward(self, x, y):
        loc, raw = self.head(x).unbind(-1)
        return torch.distributions.StudentT(3.0, loc, F.softplus(raw) + 1e-3).log_prob(y)
def get_model():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(5, 4), torch.randn(5))
'''


@pytest.mark.slow
def test_distribution_checks_are_left_out_and_chained_with_the_rewrite_they_uncover(tmp_path: Path) -> None:
    finding = _first(tmp_path, STUDENT_T)
    assert finding.code == "OD204", finding.message
    best = finding.fixes[0]
    assert best.verified and best.steps == ("distribution_checks", "rewrite"), \
        [(f.title, f.steps, f.verified) for f in finding.fixes]
