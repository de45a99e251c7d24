"""A forward() that differentiates (torch.autograd.grad, Tensor.backward): trace it with make_fx first.

Interatomic potentials return forces as -d(energy)/d(positions), physics-informed networks and
gradient penalties differentiate inside forward(). Neither exporter follows a backward pass:
torch.export stops ("We found a fake tensor in the exported program constant's list") and the
TorchScript tracer refuses the gradient ("Cannot insert a Tensor that requires grad as a
constant"). make_fx (torch.fx.experimental.proxy_tensor) runs forward() once below autograd and
records every aten op it reaches, the backward pass's ops included (mm, tanh_backward, ...), as a
plain GraphModule; the dynamo exporter maps those ops (the TorchScript exporter has no symbolic
for the *_backward ones). The worker's LOAD facts say whether forward() ran a backward pass
(`autograd_in_forward`), so the fix is proposed only for such models.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe, UseExporter

# Export refusals of either exporter, and a mismatch (a tracer that froze the gradient).
CODES = ("OD201", "OD202", "OD203", "OD204", "OD205", "OD211", "OD299", "OD601", "OD603")

TRACE = '''from torch.fx.experimental.proxy_tensor import make_fx


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    # src on input's diagonal, selected element by element: torch's own version writes in
    # place, which the exporter refuses (torch.func's Jacobians build their basis with it).
    x = input.movedim((dim1, dim2), (-2, -1))
    rows = torch.arange(x.shape[-2], device=x.device).unsqueeze(-1)
    cols = torch.arange(x.shape[-1], device=x.device)
    on_diagonal = cols - rows == offset
    # Row i's diagonal element is src[i - max(-offset, 0)] (clamped where row i has none).
    picks = (rows.squeeze(-1) - max(-offset, 0)).clamp(0, src.shape[-1] - 1)
    placed = src.index_select(-1, picks).unsqueeze(-1).expand(x.shape)
    return torch.where(on_diagonal, placed, x).movedim((-2, -1), (dim1, dim2))


def convolution_backward(grad, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    # torch has no decomposition of a convolution's backward: a gradient that flows back through
    # a convolution to its input (guidance, saliency) is the transposed convolution of the
    # gradient, and the weight's (groups of 1) the convolution of the input by the gradient.
    if transposed or (output_mask[1] and groups != 1):
        return NotImplemented
    dims = input.dim() - 2
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        kernel = weight.shape[2:]
        extra = [input.shape[2 + i] - ((grad.shape[2 + i] - 1) * stride[i] - 2 * padding[i]
                                       + dilation[i] * (kernel[i] - 1) + 1) for i in range(dims)]
        transpose = (torch.nn.functional.conv_transpose1d, torch.nn.functional.conv_transpose2d,
                     torch.nn.functional.conv_transpose3d)[dims - 1]
        grad_input = transpose(grad, weight, None, stride, padding, extra, groups, dilation)
    if output_mask[1]:
        convolve = (torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[dims - 1]
        swapped = convolve(input.transpose(0, 1), grad.transpose(0, 1), None, dilation, padding, stride)
        grad_weight = swapped.transpose(0, 1)
        for i in range(dims):
            grad_weight = grad_weight.narrow(2 + i, 0, weight.shape[2 + i])
    if output_mask[2]:
        grad_bias = grad.sum([0, *range(2, grad.dim())])
    return grad_input, grad_weight, grad_bias


def one_hot(tensor, num_classes=-1):
    # F.one_hot checks its indices' range with a read of their values, which make_fx refuses
    # (data-dependent); with the class count given, the comparison with arange is the same one-hot
    # for indices in range (one out of range gives a row of zeros instead of an error). Only calls
    # through torch.nn.functional are seen.
    if num_classes < 0:
        return plain_one_hot(tensor, num_classes)
    return (tensor.unsqueeze(-1) == torch.arange(num_classes, device=tensor.device)).to(torch.int64)


# make_fx runs forward() once below autograd and records every aten op it reaches, those of the
# gradient it computes included, as a plain graph the dynamo exporter can take; functionalize
# makes the in-place writes in it (torch.func's) values. The backward ops (silu_backward,
# _softmax_backward_data, ...) are written as the forward ops torch defines them with, which the
# exporter maps.
from torch._decomp import decomposition_table

decompositions = {op: rule for op, rule in decomposition_table.items() if "_backward" in op.name()}
decompositions[torch.ops.aten.diagonal_scatter.default] = diagonal_scatter
decompositions.setdefault(torch.ops.aten.convolution_backward.default, convolution_backward)


class SymbolicTrace(torch.nn.Module):
    """make_fx's graph traced at symbolic sizes, with the model's weights held as its own."""

    def __init__(self, graph, state):
        super().__init__()
        self.graph_module, self.names = graph, list(state)
        self.held = torch.nn.ParameterDict({name.replace(".", "__"): torch.nn.Parameter(
            value.detach(), requires_grad=value.requires_grad) for name, value in state.items()})

    def state(self):
        return {name: self.held[name.replace(".", "__")] for name in self.names}


def traced_symbolically(model, example_inputs):
    # Sizes the script declares dynamic stay symbolic only in a symbolic trace, which takes the
    # weights as inputs; forward() keeps its own argument names (the exporter reads them).
    import inspect

    parameters = list(inspect.signature(model.forward).parameters.values())
    if len(parameters) != len(example_inputs) or any(
            p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters):
        raise TypeError("forward() takes other arguments than the example's positional inputs")
    names = [p.name for p in parameters]
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    graph = make_fx(lambda held, *inputs: torch.func.functional_call(model, held, inputs),
                    decomposition_table=decompositions, tracing_mode="symbolic")(state, *example_inputs)
    code = {}
    exec(f"def forward(self, {', '.join(names)}):\\n    return self.graph_module(self.state(), {', '.join(names)})",
         code)
    return type("Traced", (SymbolicTrace,), {"forward": code["forward"]})(graph, state)


declared = globals().get("dynamic_axes") or globals().get("dynamic_shapes")
plain_one_hot, torch.nn.functional.one_hot = torch.nn.functional.one_hot, one_hot
try:
    traced = None
    if declared:
        try:
            traced = traced_symbolically(model, example_inputs)
            traced(*example_inputs)
        except Exception:  # data-dependent sizes, other arguments: traced at the example's sizes below
            traced = None
    traced = traced or make_fx(torch.func.functionalize(model, remove="mutations"),
                               decomposition_table=decompositions)(*example_inputs)
except RuntimeError as error:
    if "functorch transform" not in str(error) and "does not require grad" not in str(error):
        raise
    # forward() calls requires_grad_(), which functionalize refuses, or differentiates with
    # respect to an input that requires grad, which functionalize's wrapped inputs no longer do.
    traced = make_fx(model, decomposition_table=decompositions)(*example_inputs)
finally:
    torch.nn.functional.one_hot = plain_one_hot
# The dynamo exporter names each value after its op, and a 2-D transpose's is `t`: an input named
# `t` (a diffusion model's time step) would then share its name and fail ONNX's checks.
graph_module = getattr(traced, "graph_module", traced)
for node in graph_module.graph.nodes:
    value = node.meta.get("val") if node.op == "call_function" else None
    if node.target is torch.ops.aten.t.default and getattr(value, "dim", lambda: 0)() == 2:
        node.target, node.args = torch.ops.aten.permute.default, (node.args[0], [1, 0])
graph_module.recompile()
# The same numbers as your model at the example inputs (with gradients on: forward() needs them).
torch.testing.assert_close(traced(*example_inputs), model(*example_inputs))
model = traced
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Export make_fx's trace of forward(), backward pass included, with the dynamo exporter."""
    load = next((o.facts for o in ctx.outcomes if o.stage is Stage.LOAD), {})
    if ctx.target_kind != "script" or not load.get("autograd_in_forward"):
        return []
    if finding.stage not in (Stage.EXPORT, Stage.PARITY):
        return []
    return [Fix(
        kind="autograd_traced",
        title="Trace forward() with make_fx, the gradient it computes included, and export that graph "
              "with the dynamo exporter",
        snippet="import torch\n" + TRACE + "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)\n",
        applicability=Applicability.UNSAFE,
        cost="the graph takes the branches the example took (Python control flow is frozen, as with "
             "the TorchScript tracer), and is traced at the example's shapes unless the script declares "
             "dynamic ones (then at symbolic sizes where the model allows)",
        recipe=Recipe("autograd_traced", (LoadCode(TRACE), UseExporter("dynamo")), isolated=True),
    )]
