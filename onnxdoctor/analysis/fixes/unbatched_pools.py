"""A pool given an unbatched input, written as an ONNX pool of the wrong rank (OD303/OD304/OD501).

torch's pooling functionals take an unbatched input (`max_pool2d` of a (C, H, W) tensor), and
SuperPoint's `simple_nms` pools its (B, H, W) score map that way (hloc#391). The TorchScript
exporter writes the ONNX pool on that input as it is; ONNX's MaxPool and AveragePool read the first
two dims as batch and channels, so the 2-D pool's attributes do not fit the rank-3 input and shape
inference and ONNX Runtime refuse the node ("Attribute dilations has incorrect size"). The route
pools with a batch axis of 1 while the tracer runs and takes it off again
(recipe.EagerExport.unbatched_pools): the same numbers, a pool of the rank the attributes are for.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.dynamic_shapes import torchscript_steps
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import EagerExport, Recipe

CODES = ("OD303", "OD304", "OD501")

# Each ONNX pool and the functional the snippet shows for it.
_POOL_OPS = {"MaxPool": "max_pool2d", "AveragePool": "avg_pool2d", "LpPool": "lp_pool2d"}
# What shape inference or the runtime says when a pool's attributes do not fit its input's rank.
_RANK = re.compile(r"incorrect size|[Rr]ank|kernel_shape|dimensions? (?:mismatch|do not match)")

_SNIPPET = """\
# An unbatched input ((C, H, W) for a 2-D pool) is written as an ONNX pool on that rank, which reads
# the first two dims as batch and channels. Pool with a batch axis of 1 and take it off again:
# before:  peaks = F.max_pool2d(scores, kernel_size=9, stride=1, padding=4)
peaks = F.max_pool2d(scores.unsqueeze(0), kernel_size=9, stride=1, padding=4).squeeze(0)
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The TorchScript export with each unbatched pool pooled as a batch of one."""
    if ctx.target_kind != "script" or finding.op not in _POOL_OPS or finding.stage not in (
            Stage.CHECK, Stage.ORT_LOAD, Stage.ORT_RUN) or not _RANK.search(finding.message):
        return []
    where = f" ({finding.source})" if finding.source else ""
    return [Fix(
        kind="unbatched_pools",
        title=f"Give the pool{where} a batch axis of 1 where its input has none (F.{_functional(finding)}"
              "(x.unsqueeze(0), ...).squeeze(0)), so the ONNX pool has the rank its attributes are for",
        snippet=_SNIPPET,
        applicability=Applicability.SAFE,
        cost="none: the same pool of the same values (an Unsqueeze and a Squeeze around it)",
        recipe=Recipe("unbatched_pools", torchscript_steps(ctx, EagerExport(unbatched_pools=True)), isolated=True),
    )]


def _functional(finding: Finding) -> str:
    """The functional the finding's pool came from, by its torch op where known (max_pool2d)."""
    op = (finding.torch_op or "").split("::")[-1]
    return op if op.endswith(("pool1d", "pool2d", "pool3d")) else _POOL_OPS.get(finding.op or "", "max_pool2d")
