"""Fake quantization with learnable scale and zero point (LSQ, MQBench): no exporter maps the
_learnable ops; their forward is fake_quantize's arithmetic with the zero point rounded first.
Nor the fused observer + fake-quantize op a QAT model prepared with torch.ao's default qconfig
calls (FusedMovingAvgObsFakeQuantize, pytorch#68638): for inference it is fake_quantize with the
scale and zero point the observer holds."""

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


def fused_observer_fake_quantize(x, observer_on, fake_quant_on, running_min, running_max, scale, zero_point,
                                 averaging_const, quant_min, quant_max, ch_axis, per_row_fake_quant=False,
                                 symmetric_quant=False):
    """torch.fused_moving_avg_obs_fake_quant with its observer off (a model exported for inference):
    fake_quantize with the observer's scale and zero point where fake_quant_on, else x itself."""
    if per_row_fake_quant:
        quantized = fake_quantize_learnable_per_channel(x, scale, zero_point, ch_axis, quant_min, quant_max)
    else:
        quantized = fake_quantize_learnable_per_tensor(x, scale, zero_point, quant_min, quant_max)
    return torch.where(fake_quant_on.reshape(()) != 0, quantized, x)


def fused_observer_fake_quantize_functional(x, observer_on, fake_quant_on, running_min, running_max, scale,
                                            zero_point, averaging_const, quant_min, quant_max, ch_axis,
                                            per_row_fake_quant=False, symmetric_quant=False):
    """The functional form torch.export writes for it: the output, the gradient mask (unused for
    inference) and the observer's state, unchanged."""
    output = fused_observer_fake_quantize(x, observer_on, fake_quant_on, running_min, running_max, scale,
                                          zero_point, averaging_const, quant_min, quant_max, ch_axis,
                                          per_row_fake_quant, symmetric_quant)
    return (output, torch.ones_like(x, dtype=torch.bool), running_min.clone(), running_max.clone(), scale.clone(),
            zero_point.clone())
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
    Rewrite(
        op="aten::fused_moving_avg_obs_fake_quant",
        family="quantize",
        targets=("aten.fused_moving_avg_obs_fake_quant.default",
                 "aten._fused_moving_avg_obs_fq_helper_functional.default"),
        functions=("fused_observer_fake_quantize", "fused_observer_fake_quantize_functional"),
        function="fused_observer_fake_quantize",
        source=FAKE_QUANTIZE_LEARNABLE,
        exactness=Exactness.EXACT,
        error="torch's fake-quantize arithmetic in float ops, rounding half to even as torch does",
        limits="inference only: the observer's running range is not updated (disable_observer(), as a model "
        "being exported should have), and the scale and zero point are the buffers as the last forward with "
        "fake quantization on wrote them (torch recomputes them from the running range on every call: buffers "
        "set by hand would differ, which the fix's check shows); the model holds float arithmetic, not "
        "QuantizeLinear/DequantizeLinear pairs",
        reported_as=("aten::_fused_moving_avg_obs_fq_helper",),
    ),
)
