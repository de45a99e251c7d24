"""General mechanisms for failures not seen before (issue 22), written after the sixty-fourth
first-seen batch (fixtures/corpus/first_seen_2026-12-07d.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# Megvii-BaseDetection/YOLOX#375: the Focus stem's strided slices at opset 9, where the Slice
# symbolic refuses a step with a SymbolicValueError (and prints the whole graph after it).
FOCUS = '''
import torch
dynamo = False
opset_version = 9

class Focus(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(12, 4, 1)

    def forward(self, x):
        patches = torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]], 1)
        return self.conv(patches)

def get_model():
    torch.manual_seed(0)
    return Focus().eval(), (torch.rand(1, 3, 8, 8),)
'''


@pytest.mark.slow
def test_a_symbolic_refusing_a_call_at_an_old_opset_is_od201_with_the_opset_that_takes_it(tmp_path: Path) -> None:
    script = tmp_path / "focus.py"
    script.write_text(FOCUS)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD201", "aten::slice"), (finding.code, finding.message)
    assert "step!=1 is currently not supported" in finding.message and "opset 10 registers" in finding.message
    fix = finding.fixes[0]
    assert fix.kind == "opset" and fix.verified is True, [(f.kind, f.verified) for f in finding.fixes]


# OSVAI/KernelWarehouse#1: a dynamic convolution whose per-sample kernels run as one grouped conv
# (groups = batch), called through a class attribute bound to F.conv2d, with the batch dynamic.
WAREHOUSE = '''
import torch
import torch.nn.functional as F
dynamo = False
input_names = ["x"]
dynamic_axes = {"x": {0: "batch"}}

class MixedConv(torch.nn.Module):
    func_conv = F.conv2d

    def __init__(self):
        super().__init__()
        self.bank = torch.nn.Parameter(torch.randn(3, 4, 2, 3, 3) * 0.2)
        self.attend = torch.nn.Linear(2, 3)

    def forward(self, x):
        b = x.shape[0]
        mix = torch.softmax(self.attend(x.mean((2, 3))), -1)
        weight = torch.einsum("bk,koihw->boihw", mix, self.bank).reshape(b * 4, 2, 3, 3)
        out = self.func_conv(x.reshape(1, b * 2, *x.shape[2:]), weight, None, 1, 1, 1, b)
        return out.reshape(b, 4, *out.shape[2:])

def get_model():
    torch.manual_seed(0)
    return MixedConv().eval(), (torch.rand(2, 2, 8, 8),)

def get_inputs2():
    return (torch.rand(3, 2, 8, 8),)
'''


@pytest.mark.slow
def test_a_per_sample_kernel_conv_with_a_dynamic_batch_is_unfolded_even_through_a_class_attribute(tmp_path: Path) -> None:
    script = tmp_path / "warehouse.py"
    script.write_text(WAREHOUSE)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert "convolution for kernel of unknown shape" in finding.message, (finding.code, finding.message)
    fix = next(f for f in finding.fixes if f.recipe is not None and f.recipe.kind == "unfolded_convs")
    assert fix.verified is True, fix.check
