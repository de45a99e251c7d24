"""NumPy arrays given as example inputs, made tensors before the export.

Both exporters take tensors (and Python numbers, None, and containers of them); a NumPy array
among the example inputs stops the TorchScript exporter with "Only tuples, lists and Variables
are supported as JIT inputs/outputs ... unsupported type: numpy.ndarray" (DeepCTR-Torch#83) and
torch.export with an input it cannot flatten. The model itself usually takes the tensor the
array becomes: `torch.from_numpy` keeps the array's dtype and values, so the ONNX model's inputs
are what the arrays were. The fix is checked by exporting with the arrays made tensors and
comparing with PyTorch on those tensors; a forward() that needs NumPy itself fails the check.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import ArraysAsTensors, Recipe

CODES = ("OD107",)

SNIPPET = """import numpy as np
import torch


def as_tensors(value):
    \"\"\"NumPy arrays and scalars (also inside tuples, lists and dicts) as tensors of their dtype.\"\"\"
    if isinstance(value, (np.ndarray, np.generic)):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, dict):
        return {key: as_tensors(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(as_tensors(item) for item in value)
    return value


example_inputs = as_tensors(example_inputs)
torch.onnx.export(model, example_inputs, 'model.onnx')
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The example's NumPy inputs made tensors, for a script whose loader refused them."""
    where = ctx.facts_of(Stage.LOAD).get("numpy_inputs") or []
    if ctx.target_kind != "script" or finding.stage is not Stage.LOAD or not where:
        return []
    shown = ", ".join(str(w) for w in where[:3]) + (", ..." if len(where) > 3 else "")
    return [Fix(
        kind="array_inputs",
        title=f"Make the NumPy input{'s' if len(where) > 1 else ''} {shown} tensors (torch.from_numpy) "
              "before exporting",
        snippet=SNIPPET,
        applicability=Applicability.SAFE,
        cost="none: the tensors keep the arrays' dtypes and values; at run time feed the ONNX model the arrays "
             "themselves",
        # The inputs change at LOAD: a worker of its own (docs/ARCHITECTURE.md).
        recipe=Recipe("array_inputs", (ArraysAsTensors(),), isolated=True),
    )]
