"""The model's inference method exported where forward() computes nothing.

Some models keep their inference path in another method and leave forward() for training or as a
stub: NVIDIA's WaveGlow checkpoint class returns None from forward() and synthesises audio in
`infer(spect, sigma)` (waveglow#97); a CTC recognizer's forward(input_dict) is the training step
that unpacks targets, and raises given the image, while `inferrence(x)` returns the log-probabilities
(Text-Recognition-on-Cross-Domain-Datasets#6). torch.onnx.export traces forward(), so the file holds an empty
graph that ONNX Runtime refuses. The route is a wrapper whose forward() calls that method with the
example inputs; verified against the same method run by PyTorch, and said so in the title: the ONNX
model is infer()'s, not forward()'s.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import EagerExport, LoadCode, Recipe

CODES = ("OD499", "OD211", "OD299", "OD108")

WRAPPER = '''import torch


class {cls}(torch.nn.Module):
    """Exports model.{method}(), the model's inference method, in place of forward()."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        return self.model.{method}(*args, **kwargs)


model = {cls}(model)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """A wrapper exporting each inference-named method that takes the example inputs."""
    # LOAD looks for such methods only where forward() returned no tensor or raised (OD108: then
    # only methods that ran at the example and returned a tensor).
    methods = ctx.facts_of(Stage.LOAD).get("entry_methods") or []
    if ctx.target_kind != "script" or not methods:
        return []
    why = "which raises with the example inputs" if finding.code == "OD108" else "which returns nothing to export"
    fixes = []
    for method in methods[:2]:
        code = WRAPPER.format(method=method, cls="".join(part.title() for part in method.split("_")) + "Entry")
        fixes.append(Fix(
            kind="entry_method",
            title=f"Export the model's {method}() instead of forward(), {why}",
            snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
            applicability=Applicability.UNSAFE,
            cost=f"the ONNX model computes {method}() with its default arguments, checked against PyTorch's "
                 f"{method}() at the example; forward() is not exported",
            # Inference methods end in `.data` or `.cpu()` more often than forward() does: the
            # tracer follows `.data` as a detach here (EagerExport.traced_data), as it cannot itself.
            recipe=Recipe("entry_method", (LoadCode(code), EagerExport(traced_data=True)), isolated=True),
        ))
    return fixes
