"""If nodes whose branches return an output in different element types, made to agree.

A function scripted while tracing (`@torch.jit.script_if_tracing`, detectron2's
`paste_masks_in_image`, detectron2#4907) can return a uint8 constant on one side of a branch and a
bool mask on the other; TorchScript lets the types differ, ONNX's If does not ("Mismatched tensor
element type: inferred=bool declared=uint8"). Each branch's output is cast to one type at its end.
Which type is PyTorch's depends on the side it takes, so both are tried: the check against PyTorch
at the example says which one holds.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import AlignIfBranches, Recipe

CODES = ("OD303", "OD304", "OD499")

_MISMATCH = re.compile(r"Mismatched tensor element type: inferred=(\w+) declared=(\w+)")
# ONNX type names in the message, as numpy spells them.
_NUMPY = {"bool": "bool", "uint8": "uint8", "int8": "int8", "int32": "int32", "int64": "int64",
          "float": "float32", "float16": "float16", "double": "float64", "int16": "int16"}

SNIPPET = """import onnx
from onnxdoctor.onnxkit.transforms import align_if_branches

# after torch.onnx.export(..., 'model.onnx'):
model = onnx.load('model.onnx')
# the If's branches return this output in different types: cast both sides to one
onnx.save(align_if_branches(model, {to!r}), 'model.onnx')
# or, in the scripted function, return the same dtype on both sides (mask.to(torch.uint8))
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Both branches cast to each of the two types the message names."""
    match = _MISMATCH.search(finding.message)
    if match is None or "If" not in f"{finding.op} {finding.onnx_op}":
        return []
    fixes = []
    for name in dict.fromkeys(match.groups()):
        to = _NUMPY.get(name)
        if to is None:
            continue
        fixes.append(Fix(
            kind="cast",
            title=f"Make the If's branches return {to} on both sides (a Cast at the end of the other branch)",
            snippet=SNIPPET.format(to=to),
            applicability=Applicability.SAFE,
            cost=f"one Cast in a branch; the output is {to} whichever side runs",
            recipe=Recipe("align_if_branches", (ctx.file_rewrite(AlignIfBranches(to)),)),
        ))
    return fixes
