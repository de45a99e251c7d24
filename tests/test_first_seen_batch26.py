"""General mechanisms for failures not seen before (issue 22), written during the twenty-sixth
first-seen batch (fixtures/corpus/first_seen_2026-12-05q.txt)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, Finding
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


def _diagnosed(path: Path, *, fix: bool = True) -> Finding:
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=fix, check_shapes=False))
    return diagnosis.findings[0]


# A moving average as differences of a running sum (an integral signal): the window sums cancel
# all but a few digits of the cumsum, so its accumulator's width decides the result.
BOX_FILTER = '''
import torch

dynamo = False
opset_version = 17


class BoxFilter(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        total = torch.cumsum(x, dim=-1)
        return (total[..., 64:] - total[..., :-64]) / 64


def get_model():
    torch.manual_seed(0)
    return BoxFilter().eval(), (torch.rand(2, 200000),)
'''


@pytest.mark.slow
def test_a_cumsum_onnx_runtime_sums_narrower_than_pytorch_is_computed_in_float64(tmp_path: Path) -> None:
    # PyTorch's CPU cumsum keeps a float64 accumulator for float32 data; ONNX Runtime's CumSum sums
    # in float32, 0.05 apart after 10^5 steps: computed in float64 and rounded once, exactly equal.
    script = tmp_path / "box_filter.py"
    script.write_text(textwrap.dedent(BOX_FILTER))
    finding = _diagnosed(script)
    assert finding.code == "OD601"
    best = finding.fixes[0]
    assert best.kind == "cast" and best.verified and "CumSum in float64" in best.title, \
        [(f.title, f.verified) for f in finding.fixes]
    assert best.check is not None and best.check.max_abs_diff == 0.0
