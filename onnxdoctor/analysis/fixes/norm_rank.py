"""forward() raised at a batch norm given another rank than its class checks for (OD108).

Deployment scripts that replace SyncBatchNorm (which a CPU export cannot run) have long swapped
in one fixed class for every layer, BatchNorm3d or BatchNorm1d, whatever the feature maps' rank
(mmpose's pytorch2onnx, Poseur#13: "expected 5D input (got 4D input)"). The class's own
`_check_input_dim` refuses; batch norm normalises each channel (axis 1) over every other axis the
same way at any rank (F.batch_norm, ONNX BatchNormalization). The route lets those layers take the
rank they are given; whether that is all that stood in the way, the run decides. An example
without its batch axis gives the same words one axis short, and there axis 1 is not the channels:
F.batch_norm refuses it unless that axis happens to match the channel count, and `batch_axis`,
tried first, answers that case.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD108",)

# torch.nn's batch norm classes refuse another rank with these words (instance norm's too, which
# the fix leaves: its run then fails and says so).
_RANK_REFUSED = re.compile(r"expected (\d)D(?: or (\d)D)? input \(got (\d)D input\)")

ANY_RANK = '''import torch


def _any_rank(input):
    # BatchNorm1d/2d/3d compute the same per-channel normalisation at any rank of two or more.
    if input.dim() < 2:
        raise ValueError(f"expected 2D or more input (got {input.dim()}D input)")


# The batch norm layers of the model take the rank they are given (their classes check it only).
for _module in model.modules():
    if isinstance(_module, torch.nn.modules.batchnorm._BatchNorm):
        _module._check_input_dim = _any_rank
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Batch norm layers that take any rank, where one refused the rank it was given."""
    text = ctx.load_error_text(finding)
    match = _RANK_REFUSED.search(text)
    if ctx.target_kind != "script" or match is None:
        return []
    expected = " or ".join(f"{d}-D" for d in match.groups()[:2] if d)
    return [Fix(
        kind="norm_rank",
        title=f"A norm layer checks for {expected} input and was given {match.group(3)}-D (as when SyncBatchNorm is "
              "replaced with one batch norm class for every layer): let the batch norm layers take the rank they "
              "are given",
        snippet=ANY_RANK + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.UNSAFE,
        cost="the batch norm layers normalise over axis 1 whatever the rank, which is right where axis 1 holds "
             "the channels; better, replace SyncBatchNorm with the class for the feature maps' rank "
             "(BatchNorm2d for images)",
        recipe=Recipe("norm_rank", (LoadCode(ANY_RANK),), isolated=True),
    )]
