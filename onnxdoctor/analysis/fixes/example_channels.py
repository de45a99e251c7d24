"""forward() raised at the example because an input has another channel count than the layer
reading it was built for (OD108).

The dummy input is the part of an export script written last and checked least: an SDXL
inpainting UNet's first conv takes 9 channels (latents, mask, masked image) and the export script
gave it a 4-channel latent (Stable-Diffusion-WebUI-TensorRT#210: "weight of size [320, 9, 3, 3],
expected input[2, 4, 128, 128] to have 9 channels, but got 4 channels instead"). Where an example
tensor has exactly the shape the conv was given, the route is that tensor with the channels the
weights expect (the example's own channels taken in turn, so its values stay in their range);
whether forward() then runs and the export matches, the run decides.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD108",)

# torch's convolution check: the input's shape and the channel count the weight expects.
_CHANNELS = re.compile(r"expected input\[(?P<shape>[\d, ]+)\] to have (?P<want>\d+) channels, but got (?P<got>\d+)")

_RESHAPED = '''# The example's {shape} input given the {want} channels the layer's weights expect (its own
# {got} channels taken in turn): forward() reads {want}.
example_inputs = tuple(
    x.index_select(1, torch.arange({want}, device=x.device) % {got})
    if isinstance(x, torch.Tensor) and list(x.shape) == {shape} else x
    for x in example_inputs)
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The example input the conv was given, with the channel count its weights expect."""
    match = _CHANNELS.search(ctx.load_error_text(finding))
    inputs = ctx.facts_of(Stage.LOAD).get("inputs") or []
    if ctx.target_kind != "script" or match is None:
        return []
    shape = [int(d) for d in match["shape"].split(",") if d.strip()]
    # Only where one example tensor has exactly the conv's input shape (not an intermediate value
    # that happens to share the channel count); the code finds it among the positional inputs by
    # that shape.
    positions = [n for n, i in enumerate(inputs) if isinstance(i, dict) and list(i.get("shape") or ()) == shape]
    if len(positions) != 1 or len(shape) < 2:
        return []
    want, got = int(match["want"]), int(match["got"])
    code = "import torch\n\n" + _RESHAPED.format(shape=shape, want=want, got=got)
    return [Fix(
        kind="example_channels",
        title=f"Give the example's {tuple(shape)} input the {want} channels the layer's weights expect (it has "
              f"{got}): the model is built for them",
        snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx')\n",
        applicability=Applicability.UNSAFE,
        cost=f"this is the example changed, not the model: the ONNX model takes {want} channels in that input, "
             "as the model's weights do; build the real input with them",
        recipe=Recipe("example_channels", (LoadCode(code),), isolated=True),
    )]
