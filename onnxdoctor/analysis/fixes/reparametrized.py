"""Weights computed from other parameters (weight_norm, spectral_norm, parametrizations): folded.

`torch.nn.utils.weight_norm` / `spectral_norm` (forward pre-hooks) and `torch.nn.utils.
parametrize` (parametrizations.weight_norm, spectral_norm, orthogonal, user parametrizations)
recompute a weight from other parameters on every call. For inference that computation is
constant, yet the exporters write it (or fold it) through symbolics of their own, which can get
it wrong: the TorchScript symbolic of `aten::_weight_norm` reduces over every axis of a 1-D weight
(pytorch/pytorch#191749), and a parametrization's Python code is traced like any other. Folding
the computed weight into a plain parameter before the export (PyTorch's own
`remove_weight_norm`, `remove_spectral_norm`, `remove_parametrizations(leave_parametrized=True)`)
exports the weight PyTorch computes, whatever the reparametrization: checked against the model as
it was, in eval mode (a spectral norm in training runs a power iteration on every call).
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

# Wherever the reparametrization's export goes wrong: a mismatch, an export or a runtime error.
CODES = ("OD201", "OD202", "OD299", "OD301", "OD304", "OD402", "OD501", "OD601", "OD603")

FOLD = '''import torch
from torch.nn.utils import parametrize

# The weights PyTorch computes from other parameters, kept as plain parameters: the export writes
# those numbers instead of the computation (for inference it never changes).
for module in model.modules():
    for hook in list(module._forward_pre_hooks.values()):
        kind = type(hook).__name__
        if kind == "WeightNorm":
            torch.nn.utils.remove_weight_norm(module, hook.name)
        elif kind == "SpectralNorm":
            torch.nn.utils.remove_spectral_norm(module, hook.name)
    if parametrize.is_parametrized(module):
        for name in list(module.parametrizations.keys()):
            parametrize.remove_parametrizations(module, name, leave_parametrized=True)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Fold the reparametrized weights for a model that has any (a script target)."""
    found = ctx.facts_of(Stage.LOAD).get("reparametrized") or []
    if ctx.target_kind != "script" or not found or ctx.training:
        return []
    names = ", ".join(f"{r.get('module') or 'model'}.{r.get('name')} ({r.get('kind')})"
                      for r in found[:3] if isinstance(r, dict))
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return [Fix(
        kind="fold_reparametrized",
        title=f"Fold the reparametrized weights into plain parameters before the export: {names}{more}",
        snippet=FOLD + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.SAFE,
        cost=("none for inference: the same weights as a constant; fold a copy (copy.deepcopy(model)) if "
              "you go on training the model"),
        recipe=Recipe("fold_reparametrized", (LoadCode(FOLD),), isolated=True),
    )]
