"""The Python API: `onnxdoctor.diagnose` and `onnxdoctor.testing.assert_exportable` (docs/api.md).

Real exports in real workers: a program whose model and custom op live in `__main__` (carried
by value), and models defined in this module (carried by reference, imported again).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent

# A user's program: the custom op, its fake and the model are defined in __main__.
PROGRAM = '''
import json, sys
import torch
import onnxdoctor
from onnxdoctor.render.assertion import failure_message


@torch.library.custom_op("apitest::softclip", mutates_args=())
def softclip(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


@softclip.register_fake
def _(x):
    return torch.empty_like(x)


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return softclip(self.linear(x))  # LINE


torch.manual_seed(0)
result = onnxdoctor.diagnose(Head().eval(), (torch.randn(2, 8),), fix=True, timeout=400)
print(json.dumps({"dict": result.to_dict(), "repr": repr(result), "html": result._repr_html_(),
                  "message": failure_message(result.runs)}))
'''


def _line_of(marker: str, text: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if marker in line)


@pytest.mark.slow
def test_custom_op_defined_in_main_is_OD203_with_a_verified_fix(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text(PROGRAM, "utf-8")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch)}
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=600, check=False,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    document = out["dict"]
    assert document["schema"] == 2 and document["healthy"] is False
    (finding,) = [f for f in document["findings"] if f["severity"] == "error"]
    assert finding["code"] == "OD203" and finding["op"] == "apitest::softclip"
    # The user's line in the user's file, not the generated script's.
    assert finding["source"] == f"train.py:{_line_of('# LINE', PROGRAM)}"
    best = finding["fixes"][0]
    assert best["verified"] is True and best["reached"] == "parity" and best["max_abs_diff"] < 1e-4
    assert "OD203" in out["repr"] and "apitest::softclip" in out["repr"]
    assert "OD203" in out["html"] and "<pre" in out["html"]
    assert "best verified fix" in out["message"] and "train.py:" in out["message"]
    # The private folder (the pickled model, its script, the workers' files) is gone.
    assert [p.name for p in scratch.iterdir() if p.name.startswith("onnxdoctor-")] == []


class _Healthy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


@pytest.mark.slow
def test_healthy_model_has_no_error_finding() -> None:
    import onnxdoctor

    torch.manual_seed(0)
    # The TorchScript exporter: the cheaper export, and the `exporter` argument reaches the worker.
    result = onnxdoctor.diagnose(_Healthy().eval(), (torch.randn(2, 4),), exporter="torchscript", timeout=300)
    assert isinstance(result, onnxdoctor.Diagnosis)
    assert result.healthy and result.errors == ()
    assert [s.status.value for s in result.stages] == ["passed"] * 6
    document = result.to_dict()
    assert document["healthy"] is True and document["target"] == "_Healthy (test_api.py)"
    assert [r["exporter"] for r in document["runs"]] == ["torchscript"]


@pytest.mark.slow
def test_assert_exportable_raises_with_code_op_and_line() -> None:
    from onnxdoctor.testing import assert_exportable

    with pytest.raises(AssertionError) as raised:
        # TorchScript: it stops at the op at once (the cheaper run); fix=False: no fix checks.
        assert_exportable(_NoMapping().eval(), (torch.randn(2, 4),), exporter="torchscript", fix=False,
                          timeout=300)
    message = str(raised.value)
    assert "OD203" in message and "apitest::nomapping" in message
    assert f"test_api.py:{_NOMAPPING_LINE}" in message


def test_a_model_that_cannot_be_pickled_is_a_load_finding_not_a_crash() -> None:
    import onnxdoctor

    model = torch.nn.Linear(2, 2)
    model.lock = threading.Lock()  # what a model may hold and pickle cannot carry
    result = onnxdoctor.diagnose(model, (torch.randn(1, 2),))
    (finding,) = result.findings
    assert finding.code == "OD199" and "lock" in finding.message and "docs/api.md" in finding.message
    assert not result.healthy and result.stages[0].status.value == "failed"
    not_a_module = onnxdoctor.diagnose(lambda x: x, (torch.randn(1, 2),))
    assert [f.code for f in not_a_module.findings] == ["OD113"]


def test_bad_arguments_raise_value_error() -> None:
    import onnxdoctor

    with pytest.raises(ValueError, match="exporter"):
        onnxdoctor.diagnose(None, (), exporter="onnx")
    with pytest.raises(ValueError, match="target"):
        onnxdoctor.diagnose(None, (), targets=("nowhere",))


def test_importing_onnxdoctor_and_its_api_names_imports_no_torch() -> None:
    code = textwrap.dedent("""
        import sys, onnxdoctor
        onnxdoctor.diagnose, onnxdoctor.Diagnosis, onnxdoctor.testing.assert_exportable
        print(sorted(m for m in ("torch", "onnxruntime", "onnx", "numpy") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# An op in an importable module (this one): the worker imports the module again to have it.
@torch.library.custom_op("apitest::nomapping", mutates_args=())
def nomapping(x: torch.Tensor) -> torch.Tensor:
    return x.abs() + 1


@nomapping.register_fake
def _nomapping_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _NoMapping(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nomapping(x)


_NOMAPPING_LINE = _line_of("return nomapping(x)", Path(__file__).read_text("utf-8"))
