"""A Python number among forward()'s outputs: a real dynamo export fails in its return node."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

SCRIPT = '''
import torch


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        return x + 1, x.shape[0]


def get_model():
    return Model(), (torch.randn(3, 4),)
'''


@pytest.mark.slow
def test_an_int_output_is_OD211_and_returning_tensors_only_is_verified(tmp_path: Path) -> None:
    script = tmp_path / "int_output.py"
    script.write_text(SCRIPT, encoding="utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(exporter="dynamo", timeout=300))
    codes = [f.code for f in diagnosis.findings]
    assert "OD299" not in codes, [f.message for f in diagnosis.findings]
    (finding,) = [f for f in diagnosis.findings if f.code == "OD211"]
    assert "Python int" in finding.message and finding.op is None
    checks = {fix.kind: fix.check for fix in finding.fixes}
    assert checks["tensor_outputs"] is not None and checks["tensor_outputs"].works
