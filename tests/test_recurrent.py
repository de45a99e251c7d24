"""LSTM with proj_size (issue 22 §4b): rewritten as its recurrence in exportable ops, verified."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from onnxdoctor.analysis.fixes.recurrent import UNROLLED
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.mark.parametrize("options", [{"batch_first": True}, {"num_layers": 2, "bidirectional": True},
                                     {"num_layers": 2, "batch_first": True, "bidirectional": True, "bias": False}])
def test_the_unrolled_recurrence_is_nn_lstm_with_projections(options: dict[str, object]) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.LSTM(8, 16, proj_size=4, **options)).eval()  # type: ignore[arg-type]
    x = torch.randn(2, 5, 8) if options.get("batch_first") else torch.randn(5, 2, 8)
    expected, (h, c) = model(x)
    scope = {"model": model}
    exec(UNROLLED, scope)  # noqa: S102 -- the fix's own code, as the worker runs it
    got, (got_h, got_c) = scope["model"](x)
    for a, b in ((got, expected), (got_h, h), (got_c, c)):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.slow
def test_an_lstm_with_projections_exports_through_the_rewrite() -> None:
    diagnosis = diagnose(str(FIXTURES / "ort_run/od501_lstm_proj_size.py"), DiagnoseOptions(fix=True))[0]
    finding = diagnosis.findings[0]
    assert finding.code == "OD501" and finding.op == "LSTM"
    best = finding.fixes[0]
    assert best.kind == "projected_lstm" and best.verified is True, best.check
