"""forward() raised at the example because the example has no batch axis (OD108).

The most common first try at an export: a dummy input shaped like one sample, `torch.randn(3,
224, 224)` for a Conv2d network, `(12, 12)` for a 12-lead ECG classifier. Conv layers take some
unbatched inputs and read the first axis as channels, so the error comes from deeper in: a
BatchNorm whose running mean "should contain 12 elements not 128", a Linear whose "mat1 and mat2
shapes cannot be multiplied", a `b, c, h, w = x.shape` with "not enough values to unpack". The
route is the same example with a leading batch axis of one on every tensor input; whether that is
what forward() takes, the run decides (a pruned model whose channel counts disagree fails it
again, and is left to the user).
"""

from __future__ import annotations

import re
from typing import Any

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD108",)

# What forward() raises when an axis is missing: sizes and ranks that disagree. An error about
# anything else (a missing key, a None, a dtype, an index out of range) is not answered by adding
# an axis, and each proposal costs a run.
_SHAPE_ERROR = re.compile(
    r"size mismatch|sizes? of tensors?|input of size|shape|dimension out of range|dimensional|"
    r"tensor of dimension|too many indices|\d+-?D\b|hidden\[\d\] size|elements not|to unpack|channels",
    re.IGNORECASE,
)

# Every tensor of the example, nested ones too, given a leading axis (0-d tensors stay scalars).
BATCHED = '''# The example, each tensor input given a leading batch axis of 1: forward() takes a batch.
example_inputs, example_kwargs = torch.utils._pytree.tree_map_only(
    torch.Tensor, lambda t: t.unsqueeze(0) if t.dim() else t,
    (tuple(example_inputs), dict(globals().get("example_kwargs") or {})))
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The example with a batch axis, where forward() raised about sizes at the example."""
    load = ctx.facts_of(Stage.LOAD)
    text = ctx.load_error_text(finding)
    inputs = [i for i in load.get("inputs") or () if isinstance(i, dict) and i.get("shape")]
    settings = load.get("settings") or {}
    if ctx.target_kind != "script" or not inputs or not _SHAPE_ERROR.search(text):
        return []
    if settings.get("dynamic_axes") or settings.get("dynamic_shapes"):
        return []  # the dims they declare would move by one: the user's to renumber
    shapes = ", ".join(_shape(i["shape"]) for i in inputs[:3]) + (", ..." if len(inputs) > 3 else "")
    batched = ", ".join(_shape([1, *i["shape"]]) for i in inputs[:3]) + (", ..." if len(inputs) > 3 else "")
    export = "torch.onnx.export(model, example_inputs, 'model.onnx', kwargs=example_kwargs)\n"
    return [Fix(
        kind="batch_axis",
        title=f"If the example is one sample without its batch axis ({shapes}), give each tensor input a "
              f"leading batch axis of 1 ({batched}) and export that",
        snippet="import torch\n\n" + BATCHED + export,
        applicability=Applicability.UNSAFE,
        cost="the ONNX model takes batched inputs (declare the batch axis dynamic to take more than one "
             "sample); this is the example changed, not the model",
        recipe=Recipe("batch_axis", (LoadCode(BATCHED),), isolated=True),
    )]


def _shape(shape: list[Any]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
