"""The float model a PyTorch-quantized model was made from, rebuilt from its dequantized weights.

Neither torch exporter takes PyTorch's quantized kernels and packed parameters (eager-mode
`prepare`/`convert`, FX `convert_fx`, `quantize_dynamic`). The quantized fix family exports this
float copy instead and quantizes the ONNX model with ONNX Runtime's tools. Each quantized module
becomes its float class holding the dequantized weights (the numbers the quantized model computes
with, up to activation rounding); QuantStub/DeQuantStub become identities; in an FX-converted
GraphModule the `quantize_per_tensor`/`dequantize` calls are dropped and the quantized functional
ops become their float ones. Where the quantized model rounds an activation to a fixed grid (static
quantization: QuantStub, each quantized module's output scale and zero point), the float copy
rounds to the same grid with `fake_quantize_per_tensor_affine`, which both exporters write as
QuantizeLinear/DequantizeLinear: the ONNX model reproduces the PyTorch model's own clipping
instead of a calibration of its own. Anything else quantized is named by `unsupported`, and then no fix is
proposed rather than a wrong one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

# FX-converted graphs: quantized functional ops -> their float op, and the arguments kept (the
# output scale and zero point are dropped).
_FX_FLOAT_OPS = {"add": ("add", 2), "mul": ("mul", 2), "cat": ("cat", 1), "add_relu": ("add_relu", 2)}


def _fake_quantize_class() -> type:
    import torch

    class FakeQuantize(torch.nn.Module):
        """Rounds and clips to a quantized module's output grid (scale, zero point, dtype's range):
        exported as QuantizeLinear/DequantizeLinear."""

        def __init__(self, scale: float, zero_point: int, dtype: Any) -> None:
            super().__init__()
            self.scale, self.zero_point = float(scale), int(zero_point)
            info = torch.iinfo(dtype)
            self.quant_min, self.quant_max = int(info.min), int(info.max)

        def forward(self, x: Any) -> Any:
            return torch.fake_quantize_per_tensor_affine(x, self.scale, self.zero_point,
                                                         self.quant_min, self.quant_max)

    return FakeQuantize


_FAKE: list[type] = []


def fake_quantize(scale: float, zero_point: int, dtype: Any) -> Any:
    """A module rounding to the grid (scale, zero_point, dtype) the quantized model rounds to."""
    if not _FAKE:
        _FAKE.append(_fake_quantize_class())
    return _FAKE[0](scale, zero_point, dtype)


def _converters() -> dict[type, Callable[[Any], Any]]:
    """Quantized module class -> a function building its float module (weights dequantized, the
    output rounded to the module's own output grid where it has one: static quantization)."""
    import torch

    nn = torch.nn
    nnq = torch.ao.nn.quantized
    nnqd = nnq.dynamic
    nniq = torch.ao.nn.intrinsic.quantized

    def weights(float_module: Any, module: Any) -> Any:
        with torch.no_grad():
            float_module.weight.copy_(module.weight().dequantize())
            bias = module.bias()
            if bias is not None:
                float_module.bias.copy_(bias)
        return float_module

    def linear(module: Any) -> Any:
        return weights(nn.Linear(module.in_features, module.out_features, bias=module.bias() is not None), module)

    def conv(cls: type) -> Callable[[Any], Any]:
        def build(module: Any) -> Any:
            extra = {"output_padding": module.output_padding} if "Transpose" in cls.__name__ else {}
            float_conv = cls(module.in_channels, module.out_channels, module.kernel_size, stride=module.stride,
                             padding=module.padding, dilation=module.dilation, groups=module.groups,
                             bias=module.bias() is not None, padding_mode=module.padding_mode, **extra)
            return weights(float_conv, module)
        return build

    def then(build: Callable[[Any], Any], activation: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return lambda module: nn.Sequential(build(module), activation(module))

    def rounded(build: Callable[[Any], Any]) -> Callable[[Any], Any]:
        # A statically quantized module's output is quint8 on its (scale, zero_point) grid.
        def wrap(module: Any) -> Any:
            return nn.Sequential(build(module), fake_quantize(module.scale, module.zero_point, torch.quint8))
        return wrap

    def recurrent(cls: type) -> Callable[[Any], Any]:
        def build(module: Any) -> Any:
            float_rnn = cls(module.input_size, module.hidden_size, module.num_layers, bias=module.bias,
                            batch_first=module.batch_first, dropout=float(module.dropout),
                            bidirectional=module.bidirectional)
            values = module._weight_bias()  # torch's own accessor for the packed cell parameters
            with torch.no_grad():
                for group in ("weight", "bias"):
                    for key, value in values[group].items():
                        tensor = value.dequantize() if value.is_quantized else value
                        getattr(float_rnn, key).copy_(tensor)
            return float_rnn
        return build

    def norm(cls: type) -> Callable[[Any], Any]:
        def build(module: Any) -> Any:
            # The quantized norms subclass the float ones: same parameters, float forward.
            float_norm = copy.copy(module)
            float_norm.__class__ = cls
            return float_norm
        return build

    def prelu(module: Any) -> Any:
        float_prelu = nn.PReLU(module.num_parameters)
        with torch.no_grad():
            float_prelu.weight.copy_(module.weight.dequantize().reshape(float_prelu.weight.shape))
        return float_prelu

    class ConvAdd(nn.Module):
        """A quantized conv fused with the residual add (and relu) after it: forward(input,
        extra_input), rounded to the fused module's output grid."""

        def __init__(self, conv: Any, relu: bool, rounding: Any) -> None:
            super().__init__()
            self.conv, self.relu, self.rounding = conv, relu, rounding

        def forward(self, input: Any, extra_input: Any) -> Any:
            y = self.conv(input) + extra_input
            return self.rounding(torch.relu(y) if self.relu else y)

    def conv_add(relu: bool) -> Callable[[Any], Any]:
        return lambda m: ConvAdd(conv(nn.Conv2d)(m), relu, fake_quantize(m.scale, m.zero_point, torch.quint8))

    def embedding(module: Any) -> Any:
        # Float output: a quantized embedding dequantizes the rows it looks up.
        return nn.Embedding.from_pretrained(module.weight().dequantize(), freeze=True)

    def static_lstm(module: Any) -> Any:
        # A statically quantized LSTM is torch's quantizable LSTM run on quantized tensors: the
        # same module, that class again, with its quantized gates (Linear, QFunctional) rebuilt.
        module.__class__ = torch.ao.nn.quantizable.LSTM
        for name, inner in quantized_modules(module):
            if name and type(inner) in table:
                parent, _, child = name.rpartition(".")
                setattr(module.get_submodule(parent) if parent else module, child, table[type(inner)](inner))
        return module

    table: dict[type, Callable[[Any], Any]] = {
        nnq.Quantize: lambda m: fake_quantize(m.scale, m.zero_point, m.dtype),
        nnq.DeQuantize: lambda m: nn.Identity(),
        nnq.Linear: rounded(linear),
        nnqd.Linear: linear,
        nniq.LinearReLU: rounded(then(linear, lambda m: nn.ReLU())),
        nniq.LinearLeakyReLU: rounded(then(linear, lambda m: nn.LeakyReLU(m.negative_slope))),
        nniq.LinearTanh: rounded(then(linear, lambda m: nn.Tanh())),
        nniq.ConvAdd2d: conv_add(relu=False), nniq.ConvAddReLU2d: conv_add(relu=True),
        nniq.BNReLU2d: rounded(then(norm(nn.BatchNorm2d), lambda m: nn.ReLU())),
        nniq.BNReLU3d: rounded(then(norm(nn.BatchNorm3d), lambda m: nn.ReLU())),
        nnq.Conv1d: rounded(conv(nn.Conv1d)), nnq.Conv2d: rounded(conv(nn.Conv2d)),
        nnq.Conv3d: rounded(conv(nn.Conv3d)),
        nnq.ConvTranspose1d: rounded(conv(nn.ConvTranspose1d)),
        nnq.ConvTranspose2d: rounded(conv(nn.ConvTranspose2d)),
        nnq.ConvTranspose3d: rounded(conv(nn.ConvTranspose3d)),
        nniq.ConvReLU1d: rounded(then(conv(nn.Conv1d), lambda m: nn.ReLU())),
        nniq.ConvReLU2d: rounded(then(conv(nn.Conv2d), lambda m: nn.ReLU())),
        nniq.ConvReLU3d: rounded(then(conv(nn.Conv3d), lambda m: nn.ReLU())),
        nnqd.LSTM: recurrent(nn.LSTM),
        nnq.LSTM: static_lstm,
        nnqd.GRU: recurrent(nn.GRU),
        nnq.BatchNorm2d: rounded(norm(nn.BatchNorm2d)), nnq.BatchNorm3d: rounded(norm(nn.BatchNorm3d)),
        nnq.LayerNorm: rounded(norm(nn.LayerNorm)), nnq.GroupNorm: rounded(norm(nn.GroupNorm)),
        nnq.ReLU6: lambda m: nn.ReLU6(),
        nnq.Hardswish: rounded(lambda m: nn.Hardswish()),
        nnq.LeakyReLU: rounded(lambda m: nn.LeakyReLU(m.negative_slope)),
        nnq.ELU: rounded(lambda m: nn.ELU(m.alpha)),
        nnq.Sigmoid: lambda m: nn.Sigmoid(),
        nnq.PReLU: rounded(prelu),
        nnq.Softmax: rounded(lambda m: nn.Softmax(m.dim)),
        nnq.Embedding: embedding,
        nnq.InstanceNorm1d: rounded(norm(nn.InstanceNorm1d)), nnq.InstanceNorm2d: rounded(norm(nn.InstanceNorm2d)),
        nnq.InstanceNorm3d: rounded(norm(nn.InstanceNorm3d)),
        nnq.Dropout: lambda m: nn.Identity(),
        nnq.QFunctional: lambda m: nnq.FloatFunctional(),
    }
    return table


def _is_quantized_class(module: Any) -> bool:
    return type(module).__module__.startswith(("torch.ao.nn.quantized", "torch.ao.nn.intrinsic.quantized"))


def _is_packed_params(module: Any) -> bool:
    import torch

    return isinstance(module, torch.ao.nn.quantized.modules.linear.LinearPackedParams)


def quantized_modules(model: Any) -> list[tuple[str, Any]]:
    """The model's outermost PyTorch-quantized modules (the packed parameters inside them left out)."""
    found: list[tuple[str, Any]] = []
    for name, module in model.named_modules():
        if not _is_quantized_class(module) or _is_packed_params(module):
            continue
        if type(module).__name__ in ("FloatFunctional", "FXFloatFunctional"):
            continue
        if any(name.startswith(outer + ".") for outer, _ in found if outer):
            continue  # inside a quantized module already listed (an LSTM's packed cells)
        found.append((name, module))
    return found


def _fx_quantized_calls(model: Any) -> list[Any]:
    import torch

    if not isinstance(model, torch.fx.GraphModule):
        return []
    return [node for node in model.graph.nodes
            if node.op == "call_function" and str(getattr(node.target, "__module__", "") or "")
            .startswith("torch._ops.quantized")]


def unsupported(model: Any) -> list[str]:
    """Quantized modules and FX calls `float_model_of` cannot rebuild (empty: it can)."""
    table = _converters()
    missing = [f"{name} ({type(module).__qualname__})" for name, module in quantized_modules(model)
               if type(module) not in table]
    for node in _fx_quantized_calls(model):
        name = getattr(node.target, "_opname", str(node.target))
        if name not in _FX_FLOAT_OPS:
            missing.append(f"quantized::{name}")
    return missing


def is_dynamic(model: Any) -> bool:
    """Whether every quantized module quantizes its activations at run time (`quantize_dynamic`)."""
    return all(type(module).__module__.startswith("torch.ao.nn.quantized.dynamic")
               for _, module in quantized_modules(model))


def _fx_value(model: Any, argument: Any) -> Any:
    """An FX argument's value: a get_attr node reads the module's attribute."""
    if getattr(argument, "op", None) == "get_attr":
        value = model
        for part in argument.target.split("."):
            value = getattr(value, part)
        return value.item() if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1 else value
    return argument


def _strip_fx(model: Any) -> None:
    """Drop an FX-converted graph's quantize/dequantize calls; float ops for its quantized ones."""
    import torch

    graph = model.graph
    for index, node in enumerate(list(graph.nodes)):
        if node.op == "call_function" and node.target is torch.quantize_per_tensor:
            # Rounded to the grid the quantized model rounds its input to.
            scale, zero_point, dtype = (_fx_value(model, a) for a in node.args[1:4])
            name = f"input_fake_quantize_{index}"
            model.add_module(name, fake_quantize(float(scale), int(zero_point), dtype))
            with graph.inserting_after(node):
                rounded = graph.call_module(name, (node.args[0],))
            node.replace_all_uses_with(rounded)
            graph.erase_node(node)
        elif node.op == "call_method" and node.target == "dequantize":
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    for node in _fx_quantized_calls(model):
        name = getattr(node.target, "_opname", "")
        float_name, kept = _FX_FLOAT_OPS[name]
        if float_name == "add_relu":
            with graph.inserting_after(node):
                added = graph.call_function(torch.add, tuple(node.args[:2]))
            with graph.inserting_after(added):
                relu = graph.call_function(torch.relu, (added,))
            node.replace_all_uses_with(relu)
        else:
            with graph.inserting_after(node):
                replacement = graph.call_function(getattr(torch, float_name), tuple(node.args[:kept]))
            node.replace_all_uses_with(replacement)
        graph.erase_node(node)
    graph.eliminate_dead_code()
    graph.lint()
    model.recompile()


def float_model_of(model: Any) -> Any:
    """A float copy of a PyTorch-quantized `model`, for export; the model itself is not changed.

    Raises ValueError naming what it cannot rebuild (`unsupported`)."""
    missing = unsupported(model)
    if missing:
        raise ValueError("cannot rebuild these quantized parts as float: " + ", ".join(missing[:5]))
    import torch

    table = _converters()
    float_model = copy.deepcopy(model)
    for name, module in quantized_modules(float_model):
        if not name:
            raise ValueError("the model itself is a quantized module: wrap it in a float parent")
        parent, _, child = name.rpartition(".")
        setattr(float_model.get_submodule(parent) if parent else float_model, child, table[type(module)](module))
    if isinstance(float_model, torch.fx.GraphModule):
        _strip_fx(float_model)
    float_model.train(model.training)
    return float_model
