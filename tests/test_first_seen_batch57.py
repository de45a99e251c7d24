"""General mechanisms for failures not seen before (issue 22), written after the fifty-seventh
first-seen batch (fixtures/corpus/first_seen_2026-12-06q.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# zju3dv/LoFTR#337: matched points cut to the number of matches with `[:len(mconf)]`; the tracer
# writes len() of a tensor as the example's number, so another match count breaks the graph.
LENGTH_SLICE = '''
import torch
dynamo = False

class Matches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.offsets = torch.nn.Parameter(torch.linspace(0.0, 1.0, 16))

    def forward(self, scores):
        confident = scores[scores > 0]
        return self.offsets[:len(confident)] * 2 + confident

def get_model():
    torch.manual_seed(0)
    return Matches().eval(), (torch.randn(16),)

def get_inputs2():
    return (torch.linspace(-1.0, 2.0, 16),)
'''

# pytorch/pytorch#20126: a count head sampling a negative binomial (a gamma draw); torch registers
# aten::_standard_gamma's symbolic only to refuse it.
GAMMA_SAMPLE = '''
import torch
dynamo = False

class Counts(torch.nn.Module):
    def forward(self, rate):
        return torch._standard_gamma(rate.exp())

def get_model():
    return Counts().eval(), (torch.randn(4, 3),)
'''

# thu-ml/tianshou#314: a policy returns its result object (a Batch of tensors), which the
# TorchScript exporter refuses in words that say "input".
OBJECT_OUTPUT = '''
import torch
dynamo = False

class Batch:
    def __init__(self, **fields):
        self.__dict__.update(fields)

class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(6, 3)

    def forward(self, obs):
        logits = self.net(obs)
        return Batch(logits=logits, act=logits.argmax(-1))

def get_model():
    torch.manual_seed(0)
    return Policy().eval(), (torch.randn(2, 6),)
'''

# BaofengZan/EffLOFTR-trt-ort#2: F.unfold given a stride computed from traced sizes (a 0-d tensor
# under the tracer) fails in torch's own argument parsing; F.unfold is aten::im2col.
UNFOLD_STRIDE = '''
import torch
import torch.nn.functional as F
dynamo = False

class Windows(torch.nn.Module):
    def forward(self, fine, coarse):
        stride = fine.shape[2] // coarse.shape[2]
        return F.unfold(fine, kernel_size=(2, 2), stride=stride), coarse.mean()

def get_model():
    return Windows().eval(), (torch.randn(1, 2, 8, 8), torch.randn(1, 2, 4, 4))
'''


@pytest.mark.slow
def test_len_of_a_traced_tensor_is_read_as_its_traced_size(tmp_path: Path) -> None:
    script = tmp_path / "matches.py"
    script.write_text(LENGTH_SLICE)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD210", [(f.code, f.message) for f in diagnosis.findings]
    line = LENGTH_SLICE.splitlines().index("        return self.offsets[:len(confident)] * 2 + confident") + 1
    fix = next(f for f in finding.fixes if f.kind == "traced_length")
    assert f"matches.py:{line}" in fix.title
    assert "return self.offsets[:confident.shape[0]] * 2 + confident" in fix.snippet
    # Held to the script's other inputs and the derived sets, where the count of positives differs.
    assert fix.verified is True and "input sets" in fix.check.detail, fix.check


@pytest.mark.slow
def test_a_symbolic_registered_only_to_refuse_is_an_unsupported_op(tmp_path: Path) -> None:
    script = tmp_path / "counts.py"
    script.write_text(GAMMA_SAMPLE)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::_standard_gamma"), finding


@pytest.mark.slow
def test_an_object_forward_returns_is_named_an_output_and_its_tensors_exported(tmp_path: Path) -> None:
    script = tmp_path / "policy.py"
    script.write_text(OBJECT_OUTPUT)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD299" and finding.message.startswith("forward() returns a Batch object"), finding
    fix = next(f for f in finding.fixes if f.kind == "tensor_outputs")
    assert fix.verified is True, fix.check


@pytest.mark.slow
def test_f_unfold_is_named_as_the_aten_op_it_calls(tmp_path: Path) -> None:
    script = tmp_path / "windows.py"
    script.write_text(UNFOLD_STRIDE)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, fix=False))
    finding = diagnosis.findings[0]
    assert "iteration over a 0-d tensor" in finding.message
    assert finding.op == "aten::im2col", finding  # aten::unfold is Tensor.unfold, another op


def test_refuses_always_reads_the_registered_symbolics() -> None:
    from onnxdoctor.worker.registry import refuses_always

    assert refuses_always("aten::_standard_gamma") and refuses_always("aten::_sample_dirichlet")
    # Symbolics that refuse some calls only, or none.
    assert not refuses_always("aten::embedding_bag") and not refuses_always("aten::grid_sampler")
    assert not refuses_always("aten::add")


def test_length_edit_writes_shape_zero_for_each_len_call() -> None:
    from onnxdoctor.analysis.fixes.control_flow import length_edit

    source = "def f(a, b):\n    return a[:len(b)] + len(a[0]) * len(b + 1)\n"
    before, after = length_edit(source, 2)
    assert before == "    return a[:len(b)] + len(a[0]) * len(b + 1)"
    assert after == "    return a[:b.shape[0]] + a[0].shape[0] * (b + 1).shape[0]"
    assert length_edit(source, 1) is None
    nested = "def f(x, y):\n    n = len(x[:len(y)])\n"
    assert length_edit(nested, 2)[1] == "    n = x[:len(y)].shape[0]"


# unit8co/darts#2617: darts' TCN module takes one tuple (series, static covariates) and unpacks it;
# given the series tensor alone, forward() unpacks the tensor's rows.
TUPLE_ARGUMENT = '''
import torch

class Module(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(3, 4, 2)

    def forward(self, x_in):
        x, covariates = x_in
        y = self.conv(x.transpose(1, 2))
        return y if covariates is None else y + covariates

def get_model():
    torch.manual_seed(0)
    return Module().eval(), (torch.randn(1, 6, 3),)
'''


@pytest.mark.slow
def test_a_tensor_forward_unpacks_is_passed_as_the_tuple_it_expects(tmp_path: Path) -> None:
    script = tmp_path / "tcn.py"
    script.write_text(TUPLE_ARGUMENT)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD108", [(f.code, f.message) for f in diagnosis.findings]
    (fix,) = [f for f in finding.fixes if f.kind == "tuple_input"]
    assert "unpacks its argument `x_in` into 2 values (tcn.py:10)" in fix.title
    assert fix.verified is True, fix.check


@pytest.mark.slow
def test_a_traced_size_torch_nn_functional_iterates_is_read_as_its_int(tmp_path: Path) -> None:
    script = tmp_path / "windows.py"
    script.write_text(UNFOLD_STRIDE)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, all_fixes=True))
    finding = diagnosis.findings[0]
    (fix,) = [f for f in finding.fixes if f.kind == "int_sizes"]
    assert "windows.py:9" in fix.title and fix.verified is True, fix.check
