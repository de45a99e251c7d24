"""flex_attention computed as dense attention for the export (pytorch/pytorch#140400).

Neither exporter converts torch.nn.attention.flex_attention: the dynamo exporter stops at the
block mask's construction (`aten::sort.stable`, which it has no function for) or at the
flex_attention operator itself, the TorchScript one at the operator. Dense, the same attention is
a score matrix, the score_mod and mask_mod applied to all of it, and a softmax: standard ops
(recipe.EagerExport.dense_attention). The load stage says whether the model's code calls it.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import EagerExport, Recipe

CODES = ("OD202", "OD203", "OD204", "OD299")

SNIPPET = """\
import math

import torch
from torch.nn.attention.flex_attention import _vmap_for_bhqkv  # torch's own vmap over (b, h, q, kv)


# flex_attention as dense attention: neither ONNX exporter converts flex_attention or builds its
# block mask. Call this instead (pass the mask function itself where you built a block mask).
def dense_attention(query, key, value, score_mod=None, mask_mod=None, scale=None):
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    groups = query.size(-3) // key.size(-3)  # grouped-query attention: repeat the kv heads
    key, value = key.repeat_interleave(groups, -3), value.repeat_interleave(groups, -3)
    scores = (query.float() @ key.float().transpose(-2, -1)) * scale
    b, h, m, n = (torch.arange(size) for size in scores.shape)
    if score_mod is not None:
        scores = _vmap_for_bhqkv(score_mod, prefix=(0,))(scores, b, h, m, n)
    if mask_mod is not None:
        scores = scores.masked_fill(~_vmap_for_bhqkv(mask_mod, prefix=())(b, h, m, n), float("-inf"))
    seen = (scores > float("-inf")).any(-1, keepdim=True)  # a row with every key masked gives zeros
    weights = torch.where(seen, torch.softmax(scores, -1), torch.zeros_like(scores))
    return weights.to(query.dtype) @ value
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The export with flex_attention computed densely, where the model's code calls it."""
    if ctx.target_kind != "script" or not ctx.facts_of(Stage.LOAD).get("flex_attention"):
        return []
    return [Fix(
        kind="rewrite",
        title="Compute flex_attention as dense attention for the export (score_mod and mask_mod applied to the "
              "whole score matrix; neither exporter converts flex_attention or its block mask)",
        snippet=SNIPPET,
        applicability=Applicability.SAFE,
        cost="the full query x key score matrix is computed (memory grows with sequence length squared) and "
             "blocks the mask skips are computed too; the same sums otherwise",
        recipe=Recipe("dense_attention", (EagerExport(dense_attention=True),), isolated=True),
    )]
