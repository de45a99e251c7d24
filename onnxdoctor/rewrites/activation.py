"""Activations: rrelu at inference (no exporter function), and log_sigmoid, which both exporters
write as Log(Sigmoid(x)): ONNX Runtime's Sigmoid gives 0 from about x = -18 in float32, and the log
of it is -inf where PyTorch's stable kernel gives about x."""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

RRELU = r'''
def rrelu_with_noise(x, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """F.rrelu / nn.RReLU at inference: a leaky ReLU whose slope is (lower + upper) / 2."""
    if training:
        raise NotImplementedError("rrelu in training mode draws random slopes: export the model in eval()")
    return torch.nn.functional.leaky_relu(x, (lower + upper) / 2)


def rrelu(x, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    """torch.rrelu (what F.rrelu calls)."""
    return rrelu_with_noise(x, None, lower, upper, training, generator)
'''


LOG_SIGMOID = r'''
def log_sigmoid(x):
    """F.logsigmoid in its stable form: min(x, 0) - log1p(exp(-|x|)), finite for every finite x."""
    return torch.minimum(x, torch.zeros_like(x)) - torch.log1p(torch.exp(-x.abs()))


def log_sigmoid_forward(x):
    """aten::log_sigmoid_forward (what autograd-recording calls reach): the value and an unused buffer."""
    return log_sigmoid(x), torch.zeros(0, dtype=x.dtype)
'''

REWRITES = (
    Rewrite(
        op="aten::rrelu_with_noise",
        family="activation",
        targets=("aten.rrelu.default", "aten.rrelu_with_noise.default"),
        functions=("rrelu", "rrelu_with_noise"),
        function="rrelu",
        source=RRELU,
        exactness=Exactness.EXACT,
        error="the same values: torch's inference slope (lower + upper) / 2",
        limits="inference (training=False, a model in eval()): in training the slopes are random "
        "and no export can reproduce them",
        reported_as=("aten::rrelu", "aten::rrelu_with_noise_functional"),
    ),
    Rewrite(
        op="aten::log_sigmoid",
        family="activation",
        targets=("aten.log_sigmoid.default", "aten.log_sigmoid_forward.default"),
        functions=("log_sigmoid", "log_sigmoid_forward"),
        function="log_sigmoid",
        source=LOG_SIGMOID,
        exactness=Exactness.ROUNDING,
        error="the formula PyTorch's CPU kernel uses: float rounding of exp and log1p",
        limits="floating-point inputs",
        reported_as=("aten::log_sigmoid_forward",),
        # Both exporters map it, as Log(Sigmoid(x)): a rewrite for the numbers, not for a failure.
        mismatch_only=True,
    ),
)
