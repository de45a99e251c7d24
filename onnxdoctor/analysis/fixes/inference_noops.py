"""Ops that change a tensor's layout or memory but never its values: drop them for the export.

`x.to_mkldnn()` / `.to_dense()` (oneDNN layout moves, from CPU-tuned code) and `.pin_memory()`
have no ONNX export in either exporter, and torch.export has no fake kernel for to_mkldnn, yet
they leave every value as it is. A wrapper runs the model with them as identities during the
export, after checking that it gives the model's own numbers at the example inputs.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD201", "OD202", "OD212", "OD299")

# aten op -> the Tensor method that calls it; every one returns a tensor equal to its input.
NOOP_METHODS = {
    "aten::to_mkldnn": "to_mkldnn",
    "aten::to_dense": "to_dense",
    "aten::_to_dense": "to_dense",
    "aten::pin_memory": "pin_memory",
    "aten::_pin_memory": "pin_memory",
}

WRAPPER = '''import torch


def _unchanged(tensor, *args, **kwargs):
    return tensor


class WithoutLayoutMoves(torch.nn.Module):
    """Runs the model with tensor layout and memory moves as identities (they change no value)."""

    MOVES = ("to_mkldnn", "to_dense", "pin_memory")

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        saved = {name: getattr(torch.Tensor, name) for name in self.MOVES}
        for name in saved:
            setattr(torch.Tensor, name, _unchanged)
        try:
            return self.model(*args, **kwargs)
        finally:
            for name, method in saved.items():
                setattr(torch.Tensor, name, method)


wrapped = WithoutLayoutMoves(model).train(model.training)
if not model.training:  # the same numbers as the model as written, at the example inputs
    with torch.no_grad():
        torch.testing.assert_close(wrapped(*example_inputs), model(*example_inputs))
model = wrapped
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Export through a wrapper that makes the layout moves identities."""
    method = NOOP_METHODS.get(finding.op or "")
    if ctx.target_kind != "script" or method is None:
        return []
    return [Fix(
        kind="inference_noops",
        title=f"Export through a wrapper that skips .{method}() and the other layout moves "
              "(they change no value)",
        snippet=WRAPPER + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.SAFE,
        cost="none for the ONNX model (ONNX Runtime picks its own layouts); the wrapper replaces "
             "torch.Tensor methods while forward() runs, so do not run other threads' torch code meanwhile",
        recipe=Recipe("inference_noops", (LoadCode(WRAPPER),), isolated=True),
    )]
