"""Random draws given an explicit `torch.Generator`, which no exporter can write.

`torch.randn(shape, generator=g)` traces to a `prim::Constant` holding the Generator object, and
the TorchScript exporter stops with "Unsupported prim::Constant kind: 'ival'" (pytorch#136860);
the dynamo exporter stops on the same argument ("Expected a value of type 'Optional[Generator]'").
What the generator is for decides the fix:

- seeded in forward() (a per-call noise sampler, `g.manual_seed(seed)` then `randn`): every call
  draws the same numbers at a given size, so they are a constant of the graph. Exported with the
  draw made by PyTorch while the tracer looks away, the ONNX model gives PyTorch's own numbers;
- seeded once and drawn from on every call: each call draws new numbers, which only a random op
  reproduces, and only in distribution. Exported without the generator, the graph keeps ONNX's
  random op, and the check compares the two in distribution.

The fix's check at other inputs tells the two apart: a constant drawn from a generator that moves
on differs from PyTorch's next call.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe, UseExporter

CODES = ("OD299",)

GENERATOR = re.compile(r"Generator = prim::Constant|type 'Optional\[Generator\]'|Generator argument")

CONSTANT_SNIPPET = """\
# forward() seeds its generator on every call, so its numbers are the same each time: draw them
# once at the size the model is exported for and keep them as a buffer (a constant in the graph).
class WithNoise(torch.nn.Module):
    def __init__(self, model, example_inputs):
        super().__init__()
        self.model = model
        # e.g. the noise of noise_sampler(x): the same call forward() makes, made eagerly
        self.register_buffer("noise", model.noise_sampler(*example_inputs))

# ... and in forward(), use self.noise instead of torch.randn(..., generator=generator).
torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False)
"""

UNSEEDED_SNIPPET = """\
# Draw without the generator: the ONNX graph then has its own random op (RandomNormalLike), which
# gives different numbers from PyTorch's, with the same distribution.
noise = torch.randn(x.shape, dtype=x.dtype)          # was: torch.randn(..., generator=generator)
"""


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The draw as a constant of the graph, then without its generator, for an export that stopped
    on a Generator argument."""
    if ctx.target_kind != "script":
        return []
    text = f"{finding.message} {ctx.export_error}"
    if not GENERATOR.search(text):
        return []
    return [
        Fix(
            kind="seeded_noise_constant",
            title="Keep the seeded generator's numbers as a constant of the graph (they are the same "
                  "every call)",
            snippet=CONSTANT_SNIPPET,
            applicability=Applicability.UNSAFE,
            cost="the noise is that of the exported size: at another size, draw it again and re-export; "
                 "the TorchScript exporter",
            recipe=Recipe("seeded_noise_constant", (UseExporter("torchscript"), EagerExport(seeded_noise="constant")),
                          isolated=True),
        ),
        Fix(
            kind="seeded_noise_unseeded",
            title="Draw the noise without the generator: the ONNX model's own random op",
            snippet=UNSEEDED_SNIPPET,
            applicability=Applicability.UNSAFE,
            cost="the ONNX model's noise differs from PyTorch's seeded noise, call by call; the two agree "
                 "in distribution only",
            recipe=Recipe("seeded_noise_unseeded", (EagerExport(seeded_noise="unseeded"),), isolated=True),
        ),
    ]
