"""General mechanisms for failures not seen before (issue 22), written after the eighty-first
first-seen batch (fixtures/corpus/first_seen_2026-12-07u.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, Finding
from onnxdoctor.pipeline import diagnose

# A SyncBatchNorm replaced with BatchNorm3d in a network of 2-D feature maps (Poseur#13's
# pytorch2onnx): only the class's rank check refuses.
WRONG_RANK = '''import torch
import torch.nn as nn


def get_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm3d(8), nn.ReLU(), nn.Conv2d(8, 4, 1))
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model.eval(), (torch.randn(1, 3, 16, 16),)
'''


def _forward_failed(tmp_path: Path, source: str, refusal: str) -> Finding:
    script = tmp_path / "model.py"
    script.write_text(source, "utf-8")
    finding = diagnose(str(script), DiagnoseOptions(fix=True))[0].findings[0]
    assert finding.code == "OD108" and refusal in finding.message, finding.message
    return finding


@pytest.mark.slow
def test_a_batch_norm_of_another_rank_takes_the_rank_it_is_given(tmp_path: Path) -> None:
    finding = _forward_failed(tmp_path, WRONG_RANK, "expected 5D input (got 4D input)")
    best = finding.fixes[0]
    assert best.kind == "norm_rank" and best.verified is True, best.check
    assert "5-D" in best.title and "4-D" in best.title



# One image without its batch axis where the image's height equals the channel count: a batch norm
# let take 3-D input would run, normalising over the height; the batch axis is the answer.
UNBATCHED_SQUARE = '''import torch
import torch.nn as nn


def get_model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
    return model.eval(), (torch.randn(3, 16, 16),)
'''


@pytest.mark.slow
def test_an_unbatched_example_gets_the_batch_axis_before_any_rank_change(tmp_path: Path) -> None:
    finding = _forward_failed(tmp_path, UNBATCHED_SQUARE, "expected 4D input (got 3D input)")
    assert finding.fixes[0].kind == "batch_axis" and finding.fixes[0].verified is True, finding.fixes[0].check
