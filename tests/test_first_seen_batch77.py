"""General mechanisms for failures not seen before (issue 22), written after the seventy-seventh
first-seen batch (fixtures/corpus/first_seen_2026-12-07q.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from onnxdoctor.model import DiagnoseOptions, Stage
from onnxdoctor.pipeline import diagnose

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"

# pytorch/pytorch#70280: a queue kept in a buffer that forward() rebinds; the tracer's own call
# leaves the new queue on the model, and the export writes it as the initializer.
FIFO = CORPUS / "fifo_buffer_rebind_state_lost_streaming_wav_buffer_pytorch_70280.py"


@pytest.mark.slow
def test_an_export_that_starts_one_call_later_is_named_stateful_and_fixed_by_carrying_the_state() -> None:
    diagnosis = diagnose(str(FIFO), DiagnoseOptions(fix=True))[0]
    finding = diagnosis.findings[0]
    assert finding.code == "OD601" and "PyTorch's second call, not its first" in finding.message, finding.message
    parity = next(o for o in diagnosis.stages if o.stage is Stage.PARITY)
    assert parity.facts["stateful"]["tensor_state"] == ["wavbuf"] and parity.facts["stateful"]["call"] == 1
    best = finding.fixes[0]
    assert best.kind == "state_io" and best.verified is True, best.check


# microsoft/onnxruntime#11085: a GRU's hidden state kept in an nn.Parameter (no gradient) whose
# `.data` forward() replaces.
GRU_STATE = CORPUS / "gru_state_parameter_update_lost_online_aec_onnxruntime_11085.py"


def test_a_parameter_whose_data_forward_replaces_is_state() -> None:
    from onnxdoctor.worker.fixkit import python_state
    from onnxdoctor.worker.loader import load_script
    from onnxdoctor.worker.stateful import describe_writes

    loaded = load_script(GRU_STATE, None)
    state = python_state(loaded.model)
    weight = loaded.model.fc_in.weight.detach().clone()
    with torch.no_grad():
        loaded.model(*loaded.args)
    assert state.written() == ["hidden"]
    described = describe_writes(loaded.model, ["hidden"])[0]
    line = int(described["source"].rpartition(":")[2])
    assert described["kind"] == "parameter", described
    assert "self.hidden.data =" in GRU_STATE.read_text("utf-8").splitlines()[line - 1]
    state()
    assert not loaded.model.hidden.abs().sum() and torch.equal(loaded.model.fc_in.weight, weight)


@pytest.mark.slow
def test_state_held_in_a_parameter_is_carried_through_the_graph() -> None:
    finding = diagnose(str(GRU_STATE), DiagnoseOptions(fix=True))[0].findings[0]
    assert finding.code == "OD601" and "second call" in finding.message, finding.message
    best = finding.fixes[0]
    assert best.verified is True and "state_io" in (best.steps or (best.kind,)), (best.title, best.check)


class _AliasedState(torch.nn.Module):
    """State in a parameter whose `.data` forward() points at the output it returns."""

    def __init__(self) -> None:
        super().__init__()
        self.h = torch.nn.Parameter(torch.zeros(3), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.h + x
        self.h.data = h
        return h


def test_putting_state_back_leaves_the_outputs_that_share_its_memory() -> None:
    from onnxdoctor.worker.fixkit import reference_call
    from onnxdoctor.worker.loader import LoadedModel

    loaded = LoadedModel(model=_AliasedState().eval(), args=(torch.ones(3),), kwargs={})
    written: list[str] = []
    out = reference_call(loaded, written)
    assert written == ["h"]
    torch.testing.assert_close(out, torch.ones(3))  # not the zeros the state went back to
    assert not loaded.model.h.abs().sum()


def test_a_write_to_an_attribute_named_data_is_still_a_write() -> None:
    import ast

    from onnxdoctor.worker.stateful import _writes

    for line in ("self.data = x", "self.data[0] = 1", "self.data.add_(1)", "self.hidden.data = h"):
        node = ast.parse(line).body[0]
        target = "hidden" if "hidden" in line else "data"
        assert _writes(node.value if isinstance(node, ast.Expr) else node, target), line


class _Cell(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.h = torch.nn.Parameter(torch.zeros(3), requires_grad=False)


class _Parent(torch.nn.Module):
    """A child's hidden state written by its parent, and a frozen weight too large to be state."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = _Cell()
        self.big = torch.nn.Parameter(torch.zeros(128, 256), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cell.h.data = self.cell.h + x
        return self.cell.h * 2


def test_a_small_frozen_parameter_is_state_whoever_writes_it() -> None:
    from onnxdoctor.worker.fixkit import python_state

    model = _Parent().eval()
    state = python_state(model)
    with torch.no_grad():
        model(torch.ones(3))
    assert state.written() == ["cell.h"]  # the 128 KiB frozen weight is not copied as state
    state()
    assert not model.cell.h.abs().sum()
