"""A half-precision model (float16, bfloat16) the runtime's CPU kernels do not cover, or compute
otherwise: run it in float32.

ONNX Runtime's CPU provider has few bfloat16 kernels (Where, Mul, Add refuse it) and its Python
API cannot even hand a bfloat16 output back as an array, so a model exported in bfloat16 stops
at the first op without a kernel and, cast op by op, at the next. Converting the model and its
floating inputs to float32 before the export gives an ONNX model every CPU kernel takes; it is
verified against the model in float32 (the export's fidelity), and the cost says what that means
for numbers compared with the half-precision model.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

# OD601: ONNX Runtime's half-precision kernels round otherwise than PyTorch's (which compute in
# float32 and round each result), and an argmin over near-ties turns that into other indices
# (onnxruntime#18227).
# OD108: forward() itself refuses the example in half precision on the CPU ("expected m1 and m2
# to have the same dtype, but got: float != c10::Half", "not implemented for 'Half'").
CODES = ("OD108", "OD299", "OD303", "OD304", "OD402", "OD501", "OD601")

_HALF_WORDS = re.compile(r"\b(?:c10::)?(Half|BFloat16)\b")

HALF = ("float16", "bfloat16")

FLOAT32 = '''import torch

# The model and its half-precision inputs in float32, which every ONNX Runtime CPU kernel takes.
model = model.float()
_HALF = (torch.float16, torch.bfloat16)
example_inputs = tuple(t.float() if isinstance(t, torch.Tensor) and t.dtype in _HALF else t for t in example_inputs)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Export the model converted to float32, when it computes in a half-precision type."""
    if ctx.target_kind != "script":
        return []
    load = ctx.facts_of(Stage.LOAD)
    if finding.code == "OD601" and ctx.parity_facts.get("stateful"):
        return []  # outputs that differ from call to call: not a matter of precision
    # A mismatch is put down to half precision where the inputs are half (the model computes in
    # it); a float32 model that returns a .half() result is not.
    tensors = [*(load.get("inputs") or ()), *(load.get("outputs") or () if finding.code != "OD601" else ())]
    dtypes = {str(t.get("dtype")) for t in tensors if isinstance(t, dict)}
    said = finding.message.split(";")[0].lower()  # ONNX Runtime says "MLFloat16", "BFloat16"
    half = next((d for d in HALF if d in dtypes or d in said), None)
    if finding.code == "OD108":
        named = _HALF_WORDS.search(finding.message)
        half = {"Half": "float16", "BFloat16": "bfloat16"}[named.group(1)] if named else None
    if half is None:
        return []
    why = (f"ONNX Runtime's {half} arithmetic can round otherwise than PyTorch's" if finding.code == "OD601"
           else f"PyTorch's own forward() refuses {half} on the CPU" if finding.code == "OD108"
           else f"ONNX Runtime's CPU kernels do not cover {half}")
    return [Fix(
        kind="float",
        title=f"Export the model in float32 ({why})",
        snippet=FLOAT32 + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.UNSAFE,
        cost=(f"the ONNX model computes in float32: twice the memory of {half} weights, and its numbers are "
              f"those of your model in float32, which differ from the {half} model's by {half}'s rounding "
              "(and, where an argmax, argmin or threshold meets near-ties, by whole indices; the check "
              "compares with the model in float32); keep the half-precision export for a GPU execution "
              "provider that has the kernels"),
        recipe=Recipe("float32_model", (LoadCode(FLOAT32),), isolated=True),
    )]
