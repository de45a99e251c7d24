"""forward() unpacks an argument the example gave as one tensor (OD108).

darts' TCN module takes one tuple, `x, _ = x_in` (past target, static covariates; darts#2617):
given the series tensor alone, forward() unpacks the tensor's rows and raises "not enough values
to unpack (expected 2, got 1)". The export takes tensors, so the route is a wrapper whose own
argument is that tensor and which passes forward() the tuple it expects, the tensor first and None
for the rest (the optional covariates such modules take). Verified like any fix: where forward()
needs the other members, the run fails and says so.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.sources import source_text
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD108",)

_UNPACK = re.compile(r"not enough values to unpack \(expected (\d+), got \d+\)|too many values to unpack \(expected (\d+)")

WRAPPER = '''import torch


class TupleInput(torch.nn.Module):
    """Takes forward()'s argument {name!r} as a tensor and passes it on as the tuple forward()
    unpacks: the tensor, then None for the other {rest} member(s)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args):
        args = list(args)
        args[{position}] = (args[{position}], *[None] * {rest})
        return self.model(*args)


model = TupleInput(model).train(model.training)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """A wrapper passing the tensor as the tuple forward() unpacks, where the raising line
    unpacks one of forward()'s own arguments."""
    load = ctx.facts_of(Stage.LOAD)
    match = _UNPACK.search(ctx.load_error_text(finding))
    if ctx.target_kind != "script" or match is None or not finding.source or not ctx.target_path:
        return []
    size = int(match.group(1) or match.group(2))
    found = source_text(finding.source, Path(ctx.target_path).parent)
    try:
        tree = ast.parse(found[0]) if found else None
    except (SyntaxError, ValueError):
        return []
    if tree is None or found is None:
        return []
    line = str(found[1])
    unpacked = next((node.value.id for node in ast.walk(tree)
                     if isinstance(node, ast.Assign) and str(node.lineno) == line and len(node.targets) == 1
                     and isinstance(node.targets[0], (ast.Tuple, ast.List)) and len(node.targets[0].elts) == size
                     and isinstance(node.value, ast.Name)), None)
    parameters = list(load.get("forward_parameters") or ())
    if unpacked is None or unpacked not in parameters or parameters.index(unpacked) >= len(load.get("inputs") or ()):
        return []
    position, rest = parameters.index(unpacked), size - 1
    code = WRAPPER.format(name=unpacked, position=position, rest=rest)
    return [Fix(
        kind="tuple_input",
        title=f"forward() unpacks its argument `{unpacked}` into {size} values ({finding.source}): export through "
              f"a wrapper that passes the tensor as ({unpacked}, {', '.join(['None'] * rest)})",
        snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.UNSAFE,
        cost=f"the ONNX model takes the tensor alone: the other member(s) of `{unpacked}` are None in the export; "
             "where forward() uses them, pass them as inputs of their own instead",
        recipe=Recipe("tuple_input", (LoadCode(code),), isolated=True),
    )]
