"""General mechanisms for failures not seen before (issue 22), written after the forty-ninth
first-seen batch (fixtures/corpus/first_seen_2026-12-06i.txt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose

# pytorch-crf's Viterbi backtrace (pytorch/pytorch#39245): tags taken out with `.item()`, a list of
# them put back with torch.as_tensor, which the tracer records as the example's constant.
VITERBI_TAGS = '''
import torch
dynamo = False

class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emit = torch.nn.Linear(4, 3)
        self.transitions = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, x):
        emissions = self.emit(x)                      # [seq, 3]
        score, history = emissions[0], []
        for i in range(1, emissions.shape[0]):
            score, indices = (score.unsqueeze(1) + self.transitions + emissions[i].unsqueeze(0)).max(0)
            history.append(indices)
        best = [score.argmax().item()]
        for indices in reversed(history):
            best.append(indices[best[-1]].item())
        best.reverse()
        return torch.as_tensor(best, dtype=torch.long)

def get_model():
    torch.manual_seed(0)
    return Tagger().eval(), (torch.randn(5, 4),)

def get_inputs2():
    torch.manual_seed(7)
    return (torch.randn(5, 4),)
'''


@pytest.mark.slow
def test_tags_taken_out_and_put_back_with_as_tensor_stay_in_the_graph(tmp_path: Path) -> None:
    script = tmp_path / "tagger.py"
    script.write_text(VITERBI_TAGS)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(check_shapes=False, max_fix_checks=1))
    finding = diagnosis.findings[0]
    assert finding.code == "OD210", [(f.code, f.message) for f in diagnosis.findings]
    # The output is a constant of the file: the call that made it is the torch op it was exported
    # from, beside the .item() that took the values out of the trace.
    line = VITERBI_TAGS.splitlines().index("        return torch.as_tensor(best, dtype=torch.long)") + 1
    assert (finding.op, finding.torch_op) == ("aten::item", "aten::as_tensor"), finding
    assert f"output 0 is a constant in the file (no input reaches it): aten::as_tensor at tagger.py:{line}" in finding.message
    best = finding.fixes[0]
    assert best.kind == "tensor_values" and best.verified is True, [(f.kind, f.check) for f in finding.fixes]


# diffusers' PNDM scheduler keeps past outputs and a step count on itself (pytorch/pytorch#93159):
# each forward() call starts where the last one ended.
STATEFUL = '''
import torch

class Scheduler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ets = []
        self.counter = 0

    def forward(self, x):
        self.ets.append(x * 0.5)
        self.counter += 1
        return x + sum(self.ets) / len(self.ets) * self.counter

def get_model():
    return Scheduler().eval(), (torch.randn(2, 3),)
'''


@pytest.mark.slow
def test_a_forward_that_advances_its_own_state_is_exported_from_where_the_reference_started(tmp_path: Path) -> None:
    script = tmp_path / "scheduler.py"
    script.write_text(STATEFUL)
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=False))
    # The export starts where the reference call did, so the first calls agree and no op is
    # blamed; what remains is the state itself, which a graph cannot keep (tests/test_stateful.py).
    (finding,) = [f for f in diagnosis.findings if f.code == "OD601"]
    assert finding.op is None and "first value that differs" not in finding.message
    assert "forward() writes the attribute `ets` of Scheduler (scheduler.py:" in finding.message
    assert "and 1 more" in finding.message  # the counter


def test_python_state_puts_back_what_a_call_changed() -> None:
    import torch

    from onnxdoctor.worker.fixkit import python_state

    class Cached(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seen, self.steps, self.last = [], 0, torch.zeros(2)
            self.linear = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.append(x)
            self.steps += 1
            self.last.add_(x)
            return self.linear(x)

    model = Cached()
    restore = python_state(model)
    weight = model.linear.weight
    model(torch.ones(2))
    model(torch.ones(2))
    restore()
    assert (model.seen, model.steps, model.last.tolist()) == ([], 0, [0.0, 0.0])
    assert model.linear.weight is weight  # parameters are the model's, not state to put back
