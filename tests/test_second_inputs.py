"""OD210 checked at a second input set: a frozen trace is judged by what it does on other inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, SecondInputs, Severity
from onnxdoctor.pipeline import diagnose

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# The tracer turns `float(self.scale)` into a Python number: frozen, but the same for every input.
BENIGN = '''
import torch

dynamo = False


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float(self.scale)


def get_model():
    return Scaled().eval(), (torch.randn(2, 5),)


def get_inputs2():
    return (torch.linspace(-4.0, 4.0, 10).reshape(2, 5),)
'''


@pytest.mark.slow
def test_a_frozen_branch_that_flips_is_an_error_with_the_numbers() -> None:
    diagnosis = diagnose(str(FIXTURES / "export/od204_data_dependent_if.py"),
                         DiagnoseOptions(exporter="torchscript", fix=False))[0]
    [frozen] = [f for f in diagnosis.findings if f.code == "OD210"]
    assert frozen.severity is Severity.ERROR and not diagnosis.healthy
    assert isinstance(frozen.detail, SecondInputs) and frozen.detail.matched is False
    assert "floats scaled by -1.7" in frozen.message and "max abs error" in frozen.message


@pytest.mark.slow
def test_a_frozen_value_that_does_not_matter_is_a_warning_checked_at_the_script_s_own_inputs(tmp_path: Path) -> None:
    script = tmp_path / "scaled.py"
    script.write_text(BENIGN)
    diagnosis = diagnose(str(script), DiagnoseOptions(fix=False))[0]
    [frozen] = [f for f in diagnosis.findings if f.code == "OD210"]
    assert frozen.severity is Severity.WARNING and diagnosis.healthy
    assert frozen.detail == SecondInputs("the script's get_inputs2()", True, frozen.detail.max_abs_diff)  # type: ignore[union-attr]
    assert "matches PyTorch too" in frozen.message
