"""Embeddings built with max_norm, renormalised out of place (pytorch#72738's Poincaré embeddings).

`nn.Embedding(max_norm=...)` rescales, on every call, the rows it looks up whose norm exceeds
max_norm, and does so in the weight itself (`torch.embedding_renorm_` under no_grad). The
TorchScript tracer records only the lookup: the exported weight holds the example's rows
rescaled and every other row as it was, so other indices give other numbers (OD210, OD803). The
same rescale applied to the looked-up rows, out of place, gives the same values and is data flow
the graph keeps; the weight is no longer written. Run as a `load_prelude`, so the reference is the
rescaled lookup too.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD210", "OD601", "OD802", "OD803")

RENORMED = '''import types

import torch
import torch.nn.functional as F


def renormed_lookup(self, indices):
    """forward() of an nn.Embedding built with max_norm, rescaling the rows it looked up instead of
    the weight: rows whose norm exceeds max_norm scaled to it, as torch.embedding_renorm_ does."""
    rows = F.embedding(indices, self.weight, self.padding_idx, None, self.norm_type, self.scale_grad_by_freq,
                       self.sparse)
    norms = rows.norm(p=self.norm_type, dim=-1, keepdim=True)
    return rows * torch.where(norms > self.max_norm, self.max_norm / (norms + 1e-7), torch.ones_like(norms))


for module in model.modules():
    if type(module) is torch.nn.Embedding and module.max_norm is not None:
        # A bound method, which a deepcopy of the model binds to the copy.
        module.forward = types.MethodType(renormed_lookup, module)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The out-of-place rescale, for a TorchScript export that differs where the model holds an
    embedding built with max_norm."""
    held = ctx.facts_of(Stage.LOAD).get("renormed_embeddings") or []
    if ctx.target_kind != "script" or ctx.exporter != "torchscript" or not held:
        return []
    named = ", ".join(str(name) for name in held[:3])
    return [Fix(
        kind="renormed_embeddings",
        title=f"Rescale the rows the max_norm embedding ({named}) looks up instead of its weight, so the "
              "graph computes the renormalisation for every index",
        snippet=RENORMED + "torch.onnx.export(model, example_inputs, 'model.onnx')\n"
                "# or in the model: nn.Embedding(n, d) without max_norm, and the rescale above after it\n",
        applicability=Applicability.SAFE,
        cost="the weight is no longer renormalised in place: the same values from the lookup, but code that "
             "reads the weight itself (a tied output layer, a distance to every row) sees it unrescaled, "
             "and a training loop that relied on the rescaled rows must rescale them itself",
        recipe=Recipe("renormed_embeddings", (LoadCode(RENORMED),), isolated=True),
    )]
