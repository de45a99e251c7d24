"""nn.Transformer's causal-mask detection, left out of the export.

`nn.TransformerEncoder`/`TransformerDecoder` compare the attention mask they are given with a
causal mask of its size (`_detect_is_causal_mask`: `bool((mask == causal).all())`), to pass the
attention kernels an `is_causal` hint. torch.export cannot decide a tensor's value ("Could not
guard on data-dependent expression", pytorch/pytorch#153955). The hint changes no number: with
it off, the mask is applied as given. While exporting, the recipe's code answers the hint the
caller gave (`is_causal=` / `tgt_is_causal=`), or none; outside an export torch's own detection
runs.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD204", "OD299")

DETECTION = "transformer._detect_is_causal_mask"

DECLARED_HINT = '''import torch
from torch.nn.modules import transformer as transformer_layers

_detect_is_causal_mask = transformer_layers._detect_is_causal_mask


def declared_causal_hint(mask, is_causal=None, size=None):
    # Exporting: the hint the caller gave, or none (the mask is then applied as it is, which
    # gives the same attention); otherwise torch's own comparison with a causal mask.
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return bool(is_causal) if is_causal is not None else False
    return _detect_is_causal_mask(mask, is_causal, size)


transformer_layers._detect_is_causal_mask = declared_causal_hint
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The declared hint while exporting, for an export stopped in torch's causal-mask detection."""
    if ctx.target_kind != "script" or DETECTION not in (ctx.export_facts.get("torch_nn_functions") or ()):
        return []
    return [Fix(
        kind="causal_hint",
        title="Export nn.Transformer layers with the is_causal hint the call declares instead of comparing "
              "the mask with a causal one (a data-dependent check torch.export cannot trace)",
        snippet=DECLARED_HINT + "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)\n"
                "# or pass tgt_is_causal=True / is_causal=True where the mask is causal\n",
        applicability=Applicability.SAFE,
        cost="none: the mask is applied as given, which is what the hint would let a kernel skip",
        recipe=Recipe("causal_hint", (LoadCode(DECLARED_HINT),), isolated=True),
    )]
