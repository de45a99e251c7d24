"""Complex outputs returned as real pairs (pytorch/pytorch#113504).

ONNX has no complex outputs: the dynamo exporter writes a complex tensor as its (real, imaginary)
pairs in a last dim of 2, so an STFT with `return_complex=True` comes back (B, F, T, 2) float32
where PyTorch has (B, F, T) complex64. The model wrapped to return `torch.view_as_real` of its
complex outputs says so in its own interface; the caller turns pairs back with
`torch.view_as_complex` (or `a[..., 0] + 1j * a[..., 1]` in numpy). Run as a `load_prelude`, so
parity compares the wrapped model with its export.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD602", "OD603", "OD604")

WRAPPER = """import torch


class RealPairs(torch.nn.Module):
    \"\"\"forward() returns each complex output as (real, imaginary) pairs in a last dim of 2, as ONNX
    holds it; numpy callers get the complex values back with a[..., 0] + 1j * a[..., 1].\"\"\"

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    @classmethod
    def pairs(cls, out):
        if isinstance(out, torch.Tensor):
            return torch.view_as_real(out) if out.is_complex() else out
        if isinstance(out, (tuple, list)):
            return type(out)(cls.pairs(item) for item in out)
        if isinstance(out, dict):
            return {key: cls.pairs(value) for key, value in out.items()}
        return out

    def forward(self, *args, **kwargs):
        return self.pairs(self.model(*args, **kwargs))


model = RealPairs(model).train(model.training)
"""
EXPORT = "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)\n"


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Complex outputs as real pairs, for a model forward() of which returns complex tensors."""
    outputs = ctx.facts_of(Stage.LOAD).get("outputs") or []
    if ctx.target_kind != "script" or not any("complex" in str(o.get("dtype")) for o in outputs):
        return []
    return [Fix(
        kind="complex_outputs",
        title="Return complex outputs as (real, imaginary) pairs with torch.view_as_real (ONNX has no "
              "complex outputs)",
        snippet=WRAPPER + EXPORT,
        applicability=Applicability.UNSAFE,
        cost="each complex output gains a last dim of 2 (its real and imaginary parts): the caller "
             "converts back (torch.view_as_complex, or a[..., 0] + 1j * a[..., 1])",
        recipe=Recipe("complex_outputs", (LoadCode(WRAPPER),), isolated=True),
    )]
