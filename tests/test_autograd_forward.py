"""A forward() that differentiates (issue 22): the worker notices the backward pass, and make_fx's
trace of forward(), gradient included, is exported and verified."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from onnxdoctor.analysis.fixes.autograd import TRACE
from onnxdoctor.model import DiagnoseOptions, Stage
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker.scripted import autograd_watch

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "corpus"


class Forces(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.energy = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def forward(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            pos = pos.detach().requires_grad_(True)
            energy = self.energy(pos).sum()
            return energy, -torch.autograd.grad(energy, pos, create_graph=True)[0]


def test_the_watch_counts_grad_and_backward_and_puts_the_engine_back() -> None:
    engine = torch.autograd._engine_run_backward
    x = torch.randn(4, requires_grad=True)
    with autograd_watch() as calls:
        torch.autograd.grad((x * x).sum(), x)
        (x * 3).sum().backward()
        torch.tanh(x.detach())  # no backward pass
    assert calls == [2]
    assert torch.autograd._engine_run_backward is engine
    with autograd_watch() as calls, torch.no_grad():
        Forces().eval()(torch.randn(5, 3))
    assert calls == [1]


def test_the_traced_graph_computes_the_same_gradient_without_autograd() -> None:
    torch.manual_seed(0)
    model, pos = Forces().eval(), torch.randn(5, 3)
    scope = {"torch": torch, "model": model, "example_inputs": (pos,)}
    exec(TRACE, scope)  # noqa: S102 -- the fix's own code, as the worker runs it
    traced = scope["model"]
    assert isinstance(traced, torch.fx.GraphModule)
    with autograd_watch() as calls, torch.no_grad():
        energy, forces = traced(pos)
    assert calls == [0]  # the backward pass is in the graph now, not in autograd
    expected_energy, expected_forces = model(pos)
    torch.testing.assert_close(forces, expected_forces)
    torch.testing.assert_close(energy, expected_energy)


@pytest.mark.slow
def test_forces_from_autograd_grad_export_through_make_fx() -> None:
    diagnosis = diagnose(str(CORPUS / "autograd_grad_forces_torchscript_pytorch_55747.py"),
                         DiagnoseOptions(fix=True))[0]
    load = next(o for o in diagnosis.stages if o.stage is Stage.LOAD)
    assert load.facts["autograd_in_forward"] == 1
    finding = diagnosis.findings[0]
    assert finding.code == "OD299"
    best = finding.fixes[0]
    assert best.kind == "autograd_traced" and best.verified is True, best.check
    assert best.check is not None and best.check.max_abs_diff is not None and best.check.max_abs_diff < 1e-5


def test_a_scripted_model_that_needs_gradients_is_exported_as_scripted() -> None:
    # The reference call runs forward() with gradients through a wrapper; the exporters read a
    # ScriptModule's code off model.forward, so the wrapper must not hide it (pytorch#105838).
    diagnosis = diagnose(str(CORPUS / "grad_scripted_forces_nequip_style_potential_opset18_pytorch_105838.py"),
                         DiagnoseOptions(fix=False))[0]
    load = next(o for o in diagnosis.stages if o.stage is Stage.LOAD)
    assert load.facts["forward_needs_gradients"] is True
    finding = diagnosis.findings[0]
    assert (finding.code, finding.op) == ("OD202", "aten::grad"), finding.message


class InputGradient(torch.nn.Module):
    """Forces with respect to an input the caller made require grad (NequIP's convention), through
    SiLU, whose backward op the dynamo exporter does not map."""

    def __init__(self) -> None:
        super().__init__()
        self.energy = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.SiLU(), torch.nn.Linear(8, 1))

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        energy = self.energy(pos).sum()
        return -torch.autograd.grad([energy], [pos])[0]


def test_an_input_that_requires_grad_is_traced_and_backward_ops_are_decomposed() -> None:
    # functionalize's wrapped inputs no longer require grad: the trace falls back to plain make_fx,
    # and silu_backward is written as the forward ops it is defined with.
    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(0)
    model, pos = InputGradient().eval(), torch.randn(5, 3).requires_grad_(True)
    with pytest.raises(RuntimeError, match="does not require grad"):
        make_fx(torch.func.functionalize(model, remove="mutations"))(pos)  # what the fallback is for
    scope = {"torch": torch, "model": model, "example_inputs": (pos,)}
    exec(TRACE, scope)  # noqa: S102 -- the fix's own code, as the worker runs it
    traced = scope["model"]
    targets = {str(n.target) for n in traced.graph.nodes if n.op == "call_function"}
    assert not any("backward" in t for t in targets), targets
    torch.testing.assert_close(traced(pos), model(pos))


@pytest.mark.slow
def test_a_scripted_potential_gets_its_eager_class_traced_below_autograd() -> None:
    # The eager class is compared with the scripted model with gradients on, then traced by make_fx
    # (pytorch#105838): a two-step chain with no kernel.
    diagnosis = diagnose(str(CORPUS / "grad_scripted_forces_nequip_style_potential_opset18_pytorch_105838.py"),
                         DiagnoseOptions(fix=True))[0]
    best = diagnosis.findings[0].fixes[0]
    assert best.verified is True, best.check
    assert best.recipe is not None and [s.__class__.__name__ for s in best.recipe.steps].count("RuntimeKernels") == 0
    assert "scripted_eager" in best.recipe.key() and "autograd_traced" in best.recipe.key(), best.recipe.key()
    assert "with torch.enable_grad():" in best.snippet
