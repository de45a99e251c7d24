"""Random draws taken as inputs, where ONNX Runtime's random ops do not reproduce PyTorch's (OD601).

A model that draws inside forward() (`torch.rand(...) <= fire_rate` in a neural cellular automaton,
optimum#2021; the noise of a sampler) exports a RandomUniformLike or RandomNormalLike node that
ONNX Runtime seeds its own way: the numbers always differ, and where several draws or their
order matter (one mask a step, drawn the same in every node), not even their distribution
matches. The draws become inputs instead: the wrapper records, at the example, the shape and
dtype of each `torch.rand`/`randn` (and `_like`) call forward() makes, and replays them from
inputs that follow the model's own, in order. The caller draws the noise (torch or numpy), and
ONNX Runtime computes exactly what PyTorch does with the same numbers, which the check compares.
Where forward() seeds its own draws (TabPFN#97), the recorded numbers are the noise to feed, which
gives the model's own output. Draws of other calls (bernoulli, normal_, randint) are not taken:
the wrapper then says it recorded none, and the check fails with that.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe

CODES = ("OD601",)

# The random ops of a finding this route answers: torch's draws and the ONNX nodes they become.
RANDOM_OPS = frozenset({"aten::rand", "aten::randn", "aten::rand_like", "aten::randn_like", "RandomUniformLike",
                        "RandomNormalLike", "RandomUniform", "RandomNormal"})

WRAPPER = '''import contextlib

import torch


class NoiseAsInputs(torch.nn.Module):
    """forward(*inputs, *noise): the model with each torch.rand / torch.randn (and _like) draw of
    its forward() taken, in order, from the noise inputs after its own. `noise()` gives draws with
    the shapes and dtypes the example's call recorded (uniform for rand, normal for randn), or the
    recorded numbers themselves where forward() seeds its own draws (torch.manual_seed in it)."""

    DRAWS = ("rand", "randn", "rand_like", "randn_like")

    def __init__(self, model, example_inputs, example_kwargs=None):
        super().__init__()
        self.model, self.count, self.recorded, self.seeded = model, len(example_inputs), [], False
        with torch.no_grad(), self.drawing(None):
            model(*example_inputs, **(example_kwargs or {}))
        if not self.recorded:
            raise RuntimeError("forward() drew nothing with torch.rand/randn/rand_like/randn_like at the "
                               "example: its random op comes from another call")

    @contextlib.contextmanager
    def drawing(self, noise):
        originals = {name: getattr(torch, name) for name in (*self.DRAWS, "manual_seed")}

        def draw(name):
            def drawn(*args, **kwargs):
                if noise is None:  # recording: torch's own draw, its shape noted
                    value = originals[name](*args, **kwargs)
                    self.recorded.append((name.split("_")[0], value.clone()))
                    return value
                if not noise:
                    raise RuntimeError(f"forward() drew more than the {len(self.recorded)} numbers it drew "
                                       "at the example: its draws depend on the input")
                return noise.pop(0)
            return drawn

        def seed(*args, **kwargs):
            self.seeded = True
            return originals["manual_seed"](*args, **kwargs)

        for name in self.DRAWS:
            setattr(torch, name, draw(name))
        torch.manual_seed = seed
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(torch, name, original)

    def noise(self):
        if self.seeded:  # the same numbers on every call: those the model draws
            return tuple(value for _kind, value in self.recorded)
        return tuple((torch.rand if kind == "rand" else torch.randn)(value.shape, dtype=value.dtype)
                     for kind, value in self.recorded)

    def forward(self, *args, **kwargs):
        with self.drawing(list(args[self.count:])):
            return self.model(*args[:self.count], **kwargs)


torch.manual_seed(0)
model = NoiseAsInputs(model, tuple(example_inputs), example_kwargs).train(model.training)
example_inputs = (*example_inputs, *model.noise())
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The draws as inputs, for a mismatch at a random op of torch's draws, or in a graph that holds
    one (the search may stop at an op the noise flows through: TabPFN's NaN-masked normalisation)."""
    ops = {finding.op, finding.onnx_op, finding.torch_op}
    held = {str(t).rsplit("::", 1)[-1] for t in ctx.facts_of(Stage.EXPORT).get("op_types") or ()}
    if ctx.target_kind != "script" or not (ops | held) & RANDOM_OPS:
        return []
    return [Fix(
        kind="noise_inputs",
        title="Take the random numbers forward() draws (torch.rand / torch.randn) as inputs the caller "
              "draws, so ONNX Runtime computes with the same numbers as PyTorch",
        snippet=WRAPPER + "torch.onnx.export(model, example_inputs, 'model.onnx')\n"
                "# at run time: feed the model's inputs, then model.noise() (or numpy draws of the same\n"
                "# shapes: np.random.rand / np.random.randn; where forward() seeds its draws, the\n"
                "# recorded numbers model.noise() gives) for the noise inputs\n",
        applicability=Applicability.UNSAFE,
        cost="the model gains one input per draw, with the shape it had at the example (a draw whose "
             "shape follows an input's size is fixed at the example's); the caller draws the noise",
        recipe=Recipe("noise_inputs", (LoadCode(WRAPPER),), isolated=True),
    )]
