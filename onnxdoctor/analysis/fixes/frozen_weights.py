"""Weights the tracer meets outside registered parameters: export them as constants.

"Cannot insert a Tensor that requires grad as a constant" (TorchScript exporter): forward() uses a
module that no `nn.Module` registers (decoders kept in a plain Python list, a network held by a
plain class the export wraps), so its parameters are not the model's; the tracer writes them as
constants and refuses while they require grad. Exported with requires_grad off for every tensor
the model object reaches (recipe.EagerExport.frozen_weights), the graph holds their values. The
edit for the user is to register them (nn.ModuleList, or an attribute of the module).
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe, UseExporter

CODES = ("OD299",)

REFUSAL = "Cannot insert a Tensor that requires grad as a constant"

SNIPPET = '''# forward() uses modules no nn.Module registers (kept in a plain list, or on a plain object):
# their parameters are not the model's, and the tracer refuses them as constants.
# before:  self.decoders = [Decoder() for _ in range(n)]
self.decoders = torch.nn.ModuleList([Decoder() for _ in range(n)])
# or, without touching the model, for the export only:
for p in unregistered_module.parameters():
    p.requires_grad_(False)
'''


# torch.export tracing with autograd on, through an op whose derivative torch does not define for
# the values at hand ("slice_scatter does not support automatic differentiation for outputs with
# complex dtype": a Fourier layer writing its complex modes into a slice, physicsnemo#1013).
NO_DERIVATIVE = "does not support automatic differentiation"


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The TorchScript export with the weights it refused as constants made constants; the
    dynamo export with no weight requiring grad, where tracing met an op autograd refuses."""
    if ctx.target_kind == "script" and NO_DERIVATIVE in ctx.export_error:
        return [Fix(
            kind="frozen_weights",
            title="Export with requires_grad off for the model's weights (torch.export traced with autograd "
                  "on, through an op that has no derivative for these values)",
            snippet="for p in model.parameters():\n    p.requires_grad_(False)\n"
                    "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)\n",
            applicability=Applicability.SAFE,
            cost="none for inference: the ONNX model holds no gradients either way",
            recipe=Recipe("frozen_weights", (EagerExport(frozen_weights=True), UseExporter("dynamo"))),
        )]
    if ctx.target_kind != "script" or REFUSAL not in ctx.export_error:
        return []
    return [Fix(
        kind="frozen_weights",
        title="Register the modules forward() uses outside the model's submodules (or turn their "
              "requires_grad off for the export), so the tracer writes their weights",
        snippet=SNIPPET,
        applicability=Applicability.SAFE,
        cost="none at run time: the weights are the graph's constants, as registered parameters would be",
        recipe=Recipe("frozen_weights", (EagerExport(frozen_weights=True), UseExporter("torchscript"))),
    )]
