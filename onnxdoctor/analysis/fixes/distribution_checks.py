"""torch.distributions' argument checks, left out of the export.

A distribution built with argument validation (torch's default) checks its parameters and the
values given to `log_prob` against their constraints (`if not valid.all(): raise ValueError`), a
branch on tensor values that torch.export cannot decide ("Could not guard on data-dependent
expression", huggingface/transformers#43631's Student-T head). For valid inputs the checks change
no number: the recipe builds every distribution without them, in the export and in the reference.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD204", "OD299")

UNCHECKED = '''import torch
from torch.distributions import Distribution

Distribution.set_default_validate_args(False)
_checked_init = Distribution.__init__


def _unchecked_init(self, batch_shape=torch.Size(), event_shape=torch.Size(), validate_args=None):
    # The checks compare values with their constraints: a data-dependent branch torch.export
    # cannot trace, and no number changes for valid inputs.
    _checked_init(self, batch_shape, event_shape, validate_args=False)


Distribution.__init__ = _unchecked_init
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Distributions without argument validation, for an export stopped inside torch.distributions."""
    passed = ctx.export_facts.get("torch_nn_functions") or ()
    if ctx.target_kind != "script" or not any(str(f).startswith("distributions.") for f in passed):
        return []
    return [Fix(
        kind="distribution_checks",
        title="Build the model's torch.distributions without argument validation (validate_args=False): "
              "their checks are data-dependent branches torch.export cannot trace",
        snippet=UNCHECKED + "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)\n"
                "# or pass validate_args=False where the model builds each distribution\n",
        applicability=Applicability.SAFE,
        cost="no check that parameters and values lie in their supports: an invalid input gives NaN or "
             "a wrong number instead of a ValueError",
        recipe=Recipe("distribution_checks", (LoadCode(UNCHECKED),), isolated=True),
    )]
