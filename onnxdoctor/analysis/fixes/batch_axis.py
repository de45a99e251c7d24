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
# anything else (a missing key, a None, a dtype) is not answered by adding an axis.
_SHAPE_ERROR = re.compile(
    r"size|shape|dimension|dimensional|\bdims?\b|\d+D\b|elements not|to unpack|out of range|channels",
    re.IGNORECASE,
)

BATCHED = '''# The example, each tensor input given a leading batch axis of 1: forward() takes a batch.
example_inputs = tuple(t.unsqueeze(0) if isinstance(t, torch.Tensor) and t.dim() else t for t in example_inputs)
'''

BATCHED_KWARGS = '''example_kwargs = {k: v.unsqueeze(0) if isinstance(v, torch.Tensor) and v.dim() else v
                  for k, v in example_kwargs.items()}
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The example with a batch axis, where forward() raised about sizes at the example."""
    load = ctx.facts_of(Stage.LOAD)
    error = next((o.error for o in ctx.outcomes if o.stage is Stage.LOAD and o.error is not None), None)
    text = error.all_text() if error is not None else finding.message
    inputs = [i for i in load.get("inputs") or () if isinstance(i, dict) and i.get("shape")]
    if ctx.target_kind != "script" or not inputs or not _SHAPE_ERROR.search(text):
        return []
    tree = load.get("input_tree")
    keywords = isinstance(tree, list) and len(tree) == 2 and isinstance(tree[1], dict) and bool(tree[1])
    code = BATCHED + (BATCHED_KWARGS if keywords else "")
    shapes = ", ".join(_shape(i["shape"]) for i in inputs[:3]) + (", ..." if len(inputs) > 3 else "")
    batched = ", ".join(_shape([1, *i["shape"]]) for i in inputs[:3]) + (", ..." if len(inputs) > 3 else "")
    return [Fix(
        kind="batch_axis",
        title=f"The example looks like one sample without its batch axis ({shapes}): give each tensor input "
              f"a leading batch axis of 1 ({batched}) and export that",
        snippet="import torch\n\n" + code + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.UNSAFE,
        cost="the ONNX model takes batched inputs (declare the batch axis dynamic to take more than one "
             "sample); this is the example changed, not the model",
        recipe=Recipe("batch_axis", (LoadCode(code),), isolated=True),
    )]


def _shape(shape: list[Any]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
