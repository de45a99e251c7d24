"""State forward() writes on the model, carried as the graph's inputs and outputs (OD601).

An ONNX graph keeps nothing between runs: a model whose forward() writes a buffer or a tensor
attribute that its next call reads (a streaming layer's history, `self.cache = cat(...)`,
pytorch#60828) is exported with that state frozen as a constant, and ONNX Runtime repeats the first
call (worker/stateful.py finds it by calling PyTorch several times in a row). The route the
maintainers give in that thread is the one taken here: the state becomes an input of the graph and
its new value an output, and the caller carries it from one run to the next. The wrapper puts the
given state on the model for the call and reads it back after, leaving the model as it found it,
so the same wrapper serves PyTorch and the export; the fix is verified by calls in a row in ONNX
Runtime, each fed the state the last returned, against the user's model called as often
(recipe.StateCheck).

State that is not a tensor (a step counter kept as a Python int, a list of past outputs) cannot be
an input of a graph: then no fix is tried, and the finding says what is written and where.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import LoadCode, Recipe, StateCheck

CODES = ("OD601",)

WRAPPER = '''import torch


class StateAsInputs(torch.nn.Module):
    """forward(*inputs, *state) -> (*outputs, *new_state): the state the model's forward() writes
    (buffers, tensor attributes) is taken from the last inputs and returned after the outputs, so
    the exported graph keeps nothing between runs and the caller carries it."""

    def __init__(self, model: torch.nn.Module, state_names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.state_names = list(state_names)

    def _owner(self, name):
        path, _, attribute = name.rpartition(".")
        return (self.model.get_submodule(path) if path else self.model), attribute

    def get_state(self, name):
        owner, attribute = self._owner(name)
        return getattr(owner, attribute)

    def set_state(self, name, value):
        owner, attribute = self._owner(name)
        if attribute in owner._parameters and not isinstance(value, torch.nn.Parameter):
            # State kept in a Parameter: a buffer while the wrapper gives it (a Parameter takes
            # no other tensor); putting the Parameter back makes it one again.
            del owner._parameters[attribute]
            owner.register_buffer(attribute, value)
        else:
            setattr(owner, attribute, value)  # a buffer stays a buffer (nn.Module.__setattr__)

    def forward(self, *args, **kwargs):
        count = len(args) - len(self.state_names)
        inputs, state = args[:count], args[count:]
        kept = [self.get_state(name) for name in self.state_names]
        for name, value in zip(self.state_names, state):
            self.set_state(name, value.clone())  # writes in place land on the copy, not the input
        try:
            out = self.model(*inputs, **kwargs)
            new_state = [self.get_state(name) for name in self.state_names]
        finally:
            for name, value in zip(self.state_names, kept):
                self.set_state(name, value)
        outputs = list(out.values()) if isinstance(out, dict) else list(out) if isinstance(out, (tuple, list)) else [out]
        return (*outputs, *new_state)


'''

USE = '''model = StateAsInputs(model, STATE).train(model.training)
# The state's starting values: what the model holds before its first call.
example_inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
example_inputs = (*example_inputs, *[model.get_state(name).detach().clone() for name in STATE])
if globals().get("input_names"):
    input_names = [*input_names, *[name.replace(".", "_") + "_in" for name in STATE]]
if globals().get("output_names"):
    with torch.no_grad():
        _count = len(model(*example_inputs, **(globals().get("example_kwargs") or {}))) - len(STATE)
    output_names = [*output_names[:_count], *[name.replace(".", "_") + "_out" for name in STATE]]
'''

RUN = '''
# In ONNX Runtime, carry the state from one run to the next:
#     state = [t.numpy() for t in example_inputs[-len(STATE):]]   # the starting values
#     for frame in frames:
#         *outputs, = session.run(None, {**feeds_for(frame), **dict(zip(state_inputs, state))})
#         outputs, state = outputs[:-len(STATE)], outputs[-len(STATE):]
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Export through a wrapper that takes the tensor state as inputs and returns it as outputs."""
    stateful = ctx.parity_facts.get("stateful")
    if ctx.target_kind != "script" or not isinstance(stateful, dict):
        return []
    names = [n for n in stateful.get("tensor_state") or () if isinstance(n, str) and _NAME.fullmatch(n)]
    writes = stateful.get("writes") or []
    if not names or len(names) < len(writes):
        return []  # state that is not a tensor cannot be a graph's input: no wrapper carries it
    code = WRAPPER + f"STATE = {names!r}  # what forward() writes and reads on the next call\n" + USE
    listed = ", ".join(f"`{n}`" for n in names)
    return [Fix(
        kind="state_io",
        title=f"Make the state forward() writes ({listed}) an input and an output of the graph, "
              "and carry it between runs",
        snippet=ctx.build_lines + code + "torch.onnx.export(model, example_inputs, 'model.onnx')\n" + RUN,
        applicability=Applicability.UNSAFE,  # the graph's inputs and outputs change
        cost="the caller keeps the state: each run takes the state the last returned (the starting values "
             "for the first), and a serving process keeps one per stream",
        recipe=Recipe("state_io", (LoadCode(code), StateCheck()), isolated=True),
    )]


# Dotted attribute paths only: the names are written into the fix's code.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")
