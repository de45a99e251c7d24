"""Fake quantization with learnable scale and zero point (LSQ, MQBench): no exporter maps the
_learnable ops; their forward is fake_quantize's arithmetic with the zero point rounded first."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

FAKE_QUANTIZE_LEARNABLE = r'''
def _fake_quantized(x, scale, zero_point, quant_min, quant_max):
    """torch's fake-quantize kernel: (clamp(round(x * (1 / scale)) + zero, min, max) - zero) * scale,
    rounding half to even; the zero point rounded and clamped to the range as torch does."""
    zero = torch.clamp(torch.round(zero_point), quant_min, quant_max)
    steps = torch.round(x * (1.0 / scale)) + zero
    return (torch.clamp(steps, quant_min, quant_max) - zero) * scale


def fake_quantize_learnable_per_tensor(x, scale, zero_point, quant_min, quant_max, grad_factor=1.0):
    """torch._fake_quantize_learnable_per_tensor_affine's forward (grad_factor scales gradients only)."""
    return _fake_quantized(x, scale.reshape(()), zero_point.reshape(()).to(x.dtype), quant_min, quant_max)


def fake_quantize_learnable_per_channel(x, scale, zero_point, axis, quant_min, quant_max, grad_factor=1.0):
    """torch._fake_quantize_learnable_per_channel_affine's forward: one scale and zero per channel."""
    shape = [1] * x.dim()
    shape[axis] = -1
    return _fake_quantized(x, scale.reshape(shape), zero_point.reshape(shape).to(x.dtype), quant_min, quant_max)
'''

REWRITES = (
    Rewrite(
        op="aten::_fake_quantize_learnable_per_tensor_affine",
        family="quantize",
        targets=("aten._fake_quantize_learnable_per_tensor_affine.default",
                 "aten._fake_quantize_learnable_per_channel_affine.default"),
        functions=("fake_quantize_learnable_per_tensor", "fake_quantize_learnable_per_channel"),
        function="fake_quantize_learnable_per_tensor",
        source=FAKE_QUANTIZE_LEARNABLE,
        exactness=Exactness.EXACT,
        error="torch's arithmetic in float ops, rounding half to even as torch does",
        limits="float32 inputs and scales; the model holds float arithmetic, not QuantizeLinear/"
        "DequantizeLinear pairs (quantize the float model with ONNX Runtime to deploy it in integers)",
        reported_as=("aten::_fake_quantize_learnable_per_channel_affine",),
    ),
)
