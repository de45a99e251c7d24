"""Random sampling ops drawn from uniform numbers, the one source ONNX Runtime gets right.

The numbers drawn can never be PyTorch's (ONNX Runtime has its own generator), so these rewrites
are judged in distribution: the worker compares many runs of each (worker/randomness.py).
- aten::bernoulli: ONNX Runtime 1.32's Bernoulli kernel draws 1 with probability 1 - p, not p
  (Bernoulli on p = 0.1 gives 0.92 ones); both exporters write that node. A uniform draw below p is
  1 with probability p.
- aten::uniform (Tensor.uniform_): no exporter maps it; a scaled RandomUniformLike.
- aten::randperm: no exporter maps it; the order that sorts n uniform draws is a random
  permutation, uniform up to ties among float32 draws (about n**2 / 2**25 tied pairs expected: rare
  for the small n models permute, and a tie only keeps two indices in order).
- aten::multinomial: ONNX's Multinomial needs the sample count as a constant (a count from the
  input's size fails the dynamo export) and draws only with replacement. With replacement: the
  number of cumulative probabilities at or below a uniform draw (inverse CDF). Without: the k
  largest of log p plus Gumbel noise, which is sampling without replacement exactly.
"""

from __future__ import annotations

from onnxdoctor.rewrites.entry import Exactness, Rewrite

BERNOULLI = r'''
def bernoulli(input, generator=None):
    """aten::bernoulli: 1 where a uniform draw falls below the probability in `input`."""
    return (torch.rand_like(input) < input).to(input.dtype)


def bernoulli_p(input, p=0.5, generator=None):
    """aten::bernoulli.p (Tensor.bernoulli_(p)): 1 with probability p, in input's shape."""
    return (torch.rand_like(input) < p).to(input.dtype)
'''

UNIFORM = r'''
def uniform(input, low=0.0, high=1.0, generator=None):
    """aten::uniform (Tensor.uniform_(from, to)): uniform draws in [from, to), input's shape."""
    return torch.rand_like(input) * (high - low) + low
'''

RANDPERM = r'''
def randperm(n, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    """aten::randperm: the positions that sort n uniform draws, a uniformly random permutation."""
    return torch.argsort(torch.rand(n)).to(torch.int64 if dtype is None else dtype)
'''

MULTINOMIAL = r'''
def multinomial(input, num_samples, replacement=False, *, generator=None):
    """aten::multinomial from uniform draws (RandomUniformLike: any sample count, even one read
    from an input's size)."""
    p = input / input.sum(-1, keepdim=True)
    if replacement or num_samples == 1:
        # One uniform draw per sample, shaped [..., num_samples, 1] from a tensor of that shape.
        draws = torch.rand_like(p[..., :1].unsqueeze(-2).expand(*p.shape[:-1], num_samples, 1))
        below = (draws >= p.cumsum(-1).unsqueeze(-2)).sum(-1)
        return below.clamp(max=p.shape[-1] - 1)  # a draw above the last sum (rounding) is the last
    gumbel = -torch.log(-torch.log(torch.rand_like(p)))
    return torch.topk(torch.log(p) + gumbel, num_samples, -1).indices
'''

_ERROR = "the same distribution as PyTorch's; the numbers drawn differ (ONNX Runtime has its own generator)"

REWRITES = (
    Rewrite(
        op="aten::multinomial",
        family="sampling",
        targets=("aten.multinomial.default",),
        function="multinomial",
        source=MULTINOMIAL,
        exactness=Exactness.DISTRIBUTION,
        error=_ERROR,
        limits="no generator argument (ONNX has none); a zero-probability class is never drawn, as in "
        "torch; rows must hold a positive sum",
    ),
    Rewrite(
        op="aten::bernoulli",
        family="sampling",
        targets=("aten.bernoulli.default", "aten.bernoulli.p"),
        functions=("bernoulli", "bernoulli_p"),
        function="bernoulli",
        source=BERNOULLI,
        exactness=Exactness.DISTRIBUTION,
        error=_ERROR,
        limits="no generator argument (ONNX has none); float outputs in input's dtype",
        mismatch_only=True,
    ),
    Rewrite(
        op="aten::uniform",
        family="sampling",
        targets=("aten.uniform.default",),
        function="uniform",
        source=UNIFORM,
        exactness=Exactness.DISTRIBUTION,
        error=_ERROR,
        limits="no generator argument (ONNX has none); draws in the input's dtype",
        reported_as=("aten::uniform_", "prims::uniform"),
    ),
    Rewrite(
        op="aten::randperm",
        family="sampling",
        targets=("aten.randperm.default",),
        function="randperm",
        source=RANDPERM,
        exactness=Exactness.DISTRIBUTION,
        error=_ERROR,
        limits="n fixed at export (the example's); no generator argument; ties among float32 draws keep two "
               "indices in order (rare below a few thousand)",
    ),
)
