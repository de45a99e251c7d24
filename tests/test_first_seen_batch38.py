"""General mechanisms for failures not seen before (issue 22), written after the thirty-eighth
first-seen batch (fixtures/corpus/first_seen_2026-12-05zc.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose


def _first(tmp_path: Path, source: str, **options: object) -> object:
    """The first finding for `source` written as a script (fixes as `options` say)."""
    script = tmp_path / "model.py"
    script.write_text(source, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, **options))
    return diagnosis.findings[0]

# pytorch/pytorch#15644's shape: forward() returns the gradient of an energy with respect to its
# input, taking it with torch.autograd.grad (the model never enables gradients itself).
GRADIENT_IN_FORWARD = '''
import torch
dynamo = False
opset_version = 17
class M(torch.nn.Module):
    def forward(self, x):
        x = x.detach().requires_grad_(True)
        energy = (x ** 2).abs().sum()
        (force,) = torch.autograd.grad(energy, x, create_graph=True)
        return force
def get_model():
    return M().eval(), (torch.randn(3, 4),)
'''


@pytest.mark.slow
def test_a_forward_that_takes_gradients_is_run_with_them(tmp_path: Path) -> None:
    # The reference calls run under torch.no_grad; this forward needs gradients (OD108 before).
    finding = _first(tmp_path, GRADIENT_IN_FORWARD, fix=True, max_fix_checks=1)
    assert (finding.code, finding.op) == ("OD202", "aten::sgn"), finding.message
    assert finding.fixes[0].kind == "exporter" and finding.fixes[0].verified, \
        [(f.title, f.verified) for f in finding.fixes]


# pytorch/pytorch#158658: a 0-d float32 parameter times a bfloat16 input under autocast is written
# as a complex128 scalar, which the file writer refuses naming only the type.
COMPLEX_SCALAR = '''
import torch
dynamo = False
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.tensor(1.5), requires_grad=False)
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return x * self.p
def get_model():
    return M().eval(), (torch.randn(2, 2).to(torch.bfloat16),)
'''


@pytest.mark.slow
def test_a_type_no_node_writes_is_named_by_the_node_that_reads_it(tmp_path: Path) -> None:
    finding = _first(tmp_path, COMPLEX_SCALAR, fix=False)
    assert "ComplexDouble" in finding.message
    assert (finding.op, finding.onnx_op, finding.source) == ("aten::mul", "Mul", "model.py:10"), \
        (finding.op, finding.onnx_op, finding.source)


# maskrcnn-benchmark's empty-input Conv2d (pytorch/pytorch#24233): the tracer fails in the
# autograd.Function's apply with a message that names nothing ("unordered_map::at").
EMPTY_FUNCTION = '''
import torch
dynamo = False
opset_version = 11
class NewEmpty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, shape):
        ctx.shape = x.shape
        return x.new_empty(shape)
    @staticmethod
    def backward(ctx, grad):
        return NewEmpty.apply(grad, ctx.shape), None
class Conv(torch.nn.Conv2d):
    def forward(self, x):
        if x.numel() > 0:
            return super().forward(x)
        shape = [x.shape[0], self.weight.shape[0], x.shape[2] - 2, x.shape[3] - 2]
        return NewEmpty.apply(x, shape)
def get_model():
    torch.manual_seed(0)
    return Conv(4, 8, 3).eval(), (torch.zeros(0, 4, 14, 14),)
'''


@pytest.mark.slow
def test_a_failure_on_a_line_applying_a_function_names_the_function(tmp_path: Path) -> None:
    finding = _first(tmp_path, EMPTY_FUNCTION, fix=False)
    assert finding.code == "OD299" and finding.op == "NewEmpty", (finding.code, finding.op, finding.message)
