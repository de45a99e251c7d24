"""A forward() that writes the model's own state (worker/stateful.py, fixes/state_io.py).

An ONNX graph keeps nothing between runs: the state is frozen at export, ONNX Runtime repeats the
first call, and no fix is verified by a single call. The first test is pytorch#60828 from the
corpus, whose opset and bridge fixes were once called verified on one call.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions, Severity
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
STREAMING_CACHE = CORPUS / "registered_buffer_cache_mutation_streaming_dilated_causal_conv_pytorch_60828.py"

# A running mean kept in buffers that forward() updates in place, exported by the dynamo exporter.
RUNNING_MEAN = '''
import torch
dynamo = True

class RunningNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.zeros(8))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        self.count += 1
        self.mean.copy_(self.mean + (x.mean(0) - self.mean) / self.count)
        return self.proj(x - self.mean)

def get_model():
    torch.manual_seed(0)
    return RunningNorm().eval(), (torch.randn(4, 8),)
'''

# Counts its calls in a buffer that no output reads: the state is written but changes nothing.
CALL_COUNTER = '''
import torch

class Counted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        self.calls += 1
        return self.proj(x)

def get_model():
    torch.manual_seed(0)
    return Counted().eval(), (torch.randn(4, 8),)
'''

# A step counter kept as a Python int: state no graph input can carry.
PYTHON_STEPS = '''
import torch

class Stepped(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        self.step += 1
        return self.proj(x) * self.step

def get_model():
    torch.manual_seed(0)
    return Stepped().eval(), (torch.randn(4, 8),)
'''


@pytest.mark.slow
def test_a_streaming_cache_in_a_buffer_is_carried_as_input_and_output_and_checked_over_calls() -> None:
    (diagnosis,) = diagnose(str(STREAMING_CACHE), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD601", [(f.code, f.message) for f in diagnosis.findings]
    line = STREAMING_CACHE.read_text().splitlines().index("        self.cache = cache_update") + 1
    assert "the ONNX model repeats the first call" in finding.message
    assert f"writes the buffer `cache` of StreamingGatedCausalConv ({STREAMING_CACHE.name}:{line})" in finding.message
    assert finding.source is not None and finding.source.endswith(f":{line}")
    # Only the fix that carries the state is offered: an opset, an exporter or a kernel keeps
    # the graph stateless and would pass the first call only.
    assert [f.kind for f in finding.fixes] == ["state_io"], [(f.kind, f.title) for f in finding.fixes]
    fix = finding.fixes[0]
    assert fix.verified is True, fix.check
    assert "3 calls in a row in ONNX Runtime, each fed the state the last returned (cache)" in fix.check.detail


@pytest.mark.slow
def test_state_written_in_place_under_the_dynamo_exporter_is_found_and_carried(tmp_path: Path) -> None:
    script = tmp_path / "running_mean.py"
    script.write_text(RUNNING_MEAN)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD601", [(f.code, f.message) for f in diagnosis.findings]
    line = RUNNING_MEAN.splitlines().index("        self.mean.copy_(self.mean + (x.mean(0) - self.mean) / self.count)") + 1
    assert f"the buffer `mean` of RunningNorm (running_mean.py:{line}) and 1 more" in finding.message
    (fix,) = finding.fixes
    assert (fix.kind, fix.verified) == ("state_io", True), fix.check


@pytest.mark.slow
def test_state_no_output_reads_is_healthy_and_a_python_counter_gets_no_wrapper(tmp_path: Path) -> None:
    counted = tmp_path / "counted.py"
    counted.write_text(CALL_COUNTER)
    stepped = tmp_path / "stepped.py"
    stepped.write_text(PYTHON_STEPS)
    (healthy,) = diagnose(str(counted), DiagnoseOptions(check_shapes=False))
    assert not [f for f in healthy.findings if f.severity is Severity.ERROR], healthy.findings
    (diagnosis,) = diagnose(str(stepped), DiagnoseOptions(check_shapes=False))
    finding = diagnosis.findings[0]
    assert finding.code == "OD601" and "writes the attribute `step` of Stepped (stepped.py:" in finding.message
    assert finding.fixes == (), [(f.kind, f.title) for f in finding.fixes]  # an int is no graph input


def test_the_state_check_fails_a_wrapper_that_does_not_carry_the_state(tmp_path: Path) -> None:
    import torch

    from onnxdoctor.analysis.fixes.state_io import WRAPPER
    from onnxdoctor.recipe import StateCheck
    from onnxdoctor.worker.fixkit import load
    from onnxdoctor.worker.runtime import cpu_session
    from onnxdoctor.worker.stateful import check_state_steps
    from onnxdoctor.worker.tracebacks import StageFailed

    script = tmp_path / "running_mean.py"
    script.write_text(RUNNING_MEAN)
    loaded = load(str(script))
    namespace: dict[str, object] = {}
    exec(WRAPPER, namespace)
    names = ["mean", "count"]
    wrapper = namespace["StateAsInputs"](loaded.model, names)
    loaded.model = wrapper
    loaded.args = (*loaded.args, *[wrapper.get_state(n).clone() for n in names])
    good, bad = tmp_path / "good.onnx", tmp_path / "bad.onnx"
    torch.onnx.export(wrapper, loaded.args, str(good), dynamo=False)

    class Forgetful(torch.nn.Module):
        """Returns the state it was given instead of the state the call left."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = wrapper

        def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = self.inner(*args)
            return (out[0], *[a + 0 for a in args[-len(names):]])

    torch.onnx.export(Forgetful(), loaded.args, str(bad), dynamo=False)
    facts = check_state_steps(cpu_session(str(good), ()), loaded, StateCheck(), 1e-4, 1e-3)
    assert (facts["calls"], facts["state"]) == (3, names)
    with pytest.raises(StageFailed) as failed:
        check_state_steps(cpu_session(str(bad), ()), loaded, StateCheck(), 1e-4, 1e-3)
    assert failed.value.code == "OD601" and "call 2 of 3" in failed.value.message


def test_model_state_names_what_a_call_wrote_and_puts_buffers_back() -> None:
    import torch

    from onnxdoctor.worker.fixkit import python_state

    class Streaming(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("history", torch.zeros(3))
            self.register_buffer("total", torch.zeros(()))
            self.register_buffer("scale", torch.ones(()))  # read, never written

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.history = torch.cat([self.history[1:], x])
            self.total.add_(x.sum())
            return self.history * self.scale + self.total

    model = Streaming()
    history = model.history
    state = python_state(model)
    model(torch.ones(1))
    assert sorted(state.written()) == ["history", "total"]
    state()
    assert model.history is history and model.history.tolist() == [0.0, 0.0, 0.0]
    assert model.total.item() == 0.0 and state.written() == []


def test_write_site_finds_the_line_outside_init() -> None:
    import torch

    from onnxdoctor.worker.stateful import write_site

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("cache", torch.zeros(2))
            self.cache = torch.zeros(2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x + self.cache
            self.cache[0] = x.sum()
            return y

    site = write_site(Layer, "cache")
    assert site is not None
    file, line = site.split(":")
    assert file == Path(__file__).name
    assert Path(__file__).read_text().splitlines()[int(line) - 1].strip() == "self.cache[0] = x.sum()"
    assert write_site(Layer, "other") is None


def test_a_buffer_holding_nan_that_no_call_writes_is_not_state() -> None:
    import torch

    from onnxdoctor.worker.fixkit import python_state

    class Uninitialized(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scratch", torch.full((3,), float("nan")))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    model = Uninitialized()
    state = python_state(model)
    model(torch.ones(3))
    assert state.written() == []
