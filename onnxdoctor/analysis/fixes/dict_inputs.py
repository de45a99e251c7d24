"""forward() reads its inputs by name from a dict the example gave as tensors (OD108).

Detection and lane models take a batch dict (lanedet's `forward(batch)` reads `batch['img']`,
lanedet#36), or a list of one dict per image (detectron2's batched inputs). Given the image
tensor itself, forward() indexes a tensor by a string and raises ("new(): invalid data type
'str'", "too many indices for tensor"). The LOAD stage, where forward() raised, calls it once more
with a dict that answers each key forward() asks for by the next example tensor (`dict_inputs`:
the keys in the order read, and whether forward() took a list of dicts); only where every tensor
was read once and forward() returned tensors. The route is a wrapper taking the tensors and
passing forward() that dict; the export's inputs are the same tensors, in the same order.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD108",)

WRAPPER = '''import torch


class DictInputs(torch.nn.Module):
    """Takes the tensors forward() reads from {what} by name, in the order it reads them."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, {params}):
        batch = {{{entries}}}
        return self.model({passed})


model = DictInputs(model).train(model.training)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """A wrapper passing the example's tensors as the dict (or list of one dict) forward() reads."""
    found = ctx.facts_of(Stage.LOAD).get("dict_inputs")
    if ctx.target_kind != "script" or not isinstance(found, dict) or not found.get("keys"):
        return []
    # LOAD keeps only keys that can name the wrapper's parameters (fixkit.dict_input_keys).
    keys = [str(k) for k in found["keys"]]
    listed = bool(found.get("listed"))
    what = "a list of one dict" if listed else "one dict"
    code = WRAPPER.format(what=what, params=", ".join(keys),
                          entries=", ".join(f"{k!r}: {k}" for k in keys), passed="[batch]" if listed else "batch")
    named = ", ".join(f"'{k}'" for k in keys)
    return [Fix(
        kind="dict_inputs",
        title=f"Pass the example to forward() as {what} ({named}), which it reads its input{'s' if len(keys) > 1 else ''} from",
        snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        # One key is what forward() reads; with several, which tensor goes with which key follows the
        # order forward() reads them in, and the check (through the same wrapper) cannot tell.
        applicability=Applicability.SAFE if len(keys) == 1 else Applicability.UNSAFE,
        cost=f"the ONNX model takes the tensors {named} in that order"
             + ("" if len(keys) == 1 else ", matched to the example's tensors in the order forward() reads the keys: "
                "check each is the one you meant")
             + "; other keys forward() reads only in other branches are not given",
        recipe=Recipe("dict_inputs", (LoadCode(code),), isolated=True),
    )]
