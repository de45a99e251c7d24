"""Ops that change a tensor's layout or memory but never its values: drop them for the export.

`x.to_mkldnn()` / `.to_dense()` (oneDNN layout moves, from CPU-tuned code) and `.pin_memory()`
have no ONNX export in either exporter, and torch.export has no fake kernel for to_mkldnn, yet
they leave every value as it is. A wrapper runs the model with them as identities during the
export, after checking that it gives the model's own numbers at the example inputs.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
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


# torch.utils.mkldnn.to_mkldnn(model) swaps Linear, Conv, BatchNorm and PReLU layers for ScriptModules
# holding oneDNN weights, which the tracer refuses ("Tried to trace <...MkldnnBatchNorm ...> but it
# is not part of the active trace"). Each keeps its dense weights in its state (__getstate__); the
# model gets dense layers built from them again.
DENSE_LAYERS = '''import torch
from torch.utils import mkldnn as _mkldnn


def _dense_layer(layer):
    """The torch.nn layer a torch.utils.mkldnn layer was made from, with its weights."""
    # The layer's own script method: dense copies of its weights (then its `training` flag).
    state = layer._c._get_method("__getstate__")()
    if isinstance(layer, _mkldnn.MkldnnLinear):
        weight, bias = state[0], state[1]
        dense = torch.nn.Linear(weight.shape[1], weight.shape[0])
    elif isinstance(layer, _mkldnn._MkldnnConvNd):
        weight, bias = state[0], state[1]
        conv = {3: torch.nn.Conv1d, 4: torch.nn.Conv2d, 5: torch.nn.Conv3d}[weight.dim()]
        dense = conv(weight.shape[1] * layer.groups, weight.shape[0], tuple(weight.shape[2:]), stride=layer.stride,
                     padding=layer.padding, dilation=layer.dilation, groups=layer.groups)
    elif isinstance(layer, _mkldnn.MkldnnBatchNorm):
        weight, bias, mean, var = state[:4]
        dense = torch.nn.BatchNorm2d(weight.shape[0], eps=layer.eps)
        dense._check_input_dim = lambda x: None  # oneDNN's batch norm takes 2-D and 3-D maps alike
        dense.running_mean.copy_(mean)
        dense.running_var.copy_(var)
    elif isinstance(layer, _mkldnn.MkldnnPrelu):
        weight, bias = state[0], None
        dense = torch.nn.PReLU(weight.numel())
    else:
        return layer
    with torch.no_grad():
        dense.weight.copy_(weight.reshape(dense.weight.shape))
        if bias is not None:
            dense.bias.copy_(bias)
    return dense.train(layer.training)


for _name, _parent in list(model.named_modules()):
    for _child_name, _child in list(_parent.named_children()):
        if type(_child).__module__ == "torch.utils.mkldnn":
            setattr(_parent, _child_name, _dense_layer(_child))
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Export through a wrapper that makes the layout moves identities; a model converted with
    torch.utils.mkldnn.to_mkldnn gets its dense layers back first."""
    if ctx.target_kind == "script" and "torch.utils.mkldnn.Mkldnn" in ctx.export_error:
        code = DENSE_LAYERS + "\n\n" + WRAPPER
        return [Fix(
            kind="inference_noops",
            title="Export the model with its torch.utils.mkldnn layers made dense torch.nn layers again "
                  "(the same weights), through a wrapper that skips .to_mkldnn()/.to_dense()",
            snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
            applicability=Applicability.SAFE,
            cost="none for the ONNX model (ONNX Runtime picks its own layouts); export the model before "
                 "to_mkldnn() converts it, and keep the converted one for PyTorch on CPU",
            recipe=Recipe("inference_noops", (LoadCode(code),), isolated=True),
        )]
    method = NOOP_METHODS.get(finding.op or "")
    if ctx.target_kind != "script" or method is None:
        return []
    if method == "to_dense" and ctx.facts_of(Stage.LOAD).get("sparse_tensors"):
        return []  # to_dense() of a sparse tensor the model holds is its value: sparse_dense's case
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
