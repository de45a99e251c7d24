"""Activations with no exporter function: rrelu at inference."""

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
)
