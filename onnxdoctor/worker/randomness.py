"""Parity for models that draw random numbers: compared in distribution, over many runs.

ONNX Runtime's RandomNormalLike, RandomUniform, Multinomial, ... never draw the numbers PyTorch's
generator draws, whatever the seed, so a model that samples (noise in a vocoder, a Gumbel trick,
a random start point) differs from PyTorch on every run even when its export is right. Comparing
one run with one run says nothing; comparing what each produces over many runs does.

The check: both run the example K times (PyTorch reseeded each time, ONNX Runtime drawing
afresh). Elements that never vary in either must agree as in the ordinary comparison; the
elements that vary in either (a rare event may leave one side unchanged by chance) are compared
three ways: their means and their spreads element by element, and the shape of their per-element
standardised values (a Kolmogorov-Smirnov statistic). How large a difference chance alone makes
is measured, not assumed: the run labels are shuffled and the statistics recomputed (a
permutation test, the smallest of the three p-values counted three times). Shuffling whole runs
keeps whatever ties the elements of one run together (a softmax over noise, one random start
point), so the test stays honest for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

# ONNX ops that draw random numbers: ONNX Runtime's draws are not PyTorch's, whatever the seed.
RANDOM_OPS = frozenset({"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike",
                        "Multinomial", "Bernoulli"})

MIN_RUNS = 16  # fewer runs cannot tell a wrong scale from chance
MAX_RUNS = 48
PERMUTATIONS = 499
SIGNIFICANCE = 0.01
MAX_ELEMENTS = 4096  # positions compared in all the outputs (a seeded sample of larger ones)
SHAPE_ELEMENTS = 256  # of which the distributions' shapes are compared (sorting is the cost)


def random_ops(model: Any) -> list[str]:
    """The random ops in a model, subgraphs included, sorted: random ONNX ops, and the random
    aten ops a Python kernel runs inside ONNX Runtime (`onnxdoctor::aten_*` nodes, named by
    their aten op), which draw from torch's generator in that process, not PyTorch's sequence."""
    from onnxdoctor.onnxkit.walk import walk_nodes

    found = set()
    flags = _constant_flags(model.graph)
    for _, node in walk_nodes(model.graph):
        if node.op_type in RANDOM_OPS and node.domain in ("", "ai.onnx") or training_dropout(node, flags):
            found.add(node.op_type)
        elif node.domain == "onnxdoctor" and node.op_type.startswith("aten_"):
            overload = next((a.s.decode() for a in node.attribute if a.name == "overload"), "")
            if draws_random(overload):
                found.add(overload.split(".", 1)[0])
    return sorted(found)


def training_dropout(node: Any, flags: dict[str, bool]) -> bool:
    """A Dropout told to drop (its training_mode input a constant true: `F.dropout(x, training=True)`
    kept in an exported eval model, Monte Carlo dropout): it draws a mask on every run."""
    return (node.op_type == "Dropout" and node.domain in ("", "ai.onnx") and len(node.input) > 2
            and flags.get(node.input[2]) is True)


def _constant_flags(graph: Any) -> dict[str, bool]:
    """The boolean scalars the graph holds as constants (initializers and Constant nodes), by name."""
    from onnx import numpy_helper

    tensors = [(t.name, t) for t in graph.initializer]
    tensors += [(n.output[0], a.t) for n in graph.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value" and a.HasField("t")]
    flags: dict[str, bool] = {}
    for name, tensor in tensors:
        if tensor.data_type == 9 and not tensor.dims:  # BOOL scalar
            flags[name] = bool(numpy_helper.to_array(tensor))
    return flags


def draws_random(overload: str) -> bool:
    """Whether an aten overload ("aten::_sample_dirichlet.default") draws random numbers."""
    import torch

    name, _, overload_name = overload.partition(".")
    try:
        op = getattr(getattr(torch.ops.aten, name.removeprefix("aten::")), overload_name or "default")
    except (AttributeError, RuntimeError):
        return False
    return torch.Tag.nondeterministic_seeded in op.tags


def compare_in_distribution(
    run_torch: Callable[[int], list[Any]],
    run_runtime: Callable[[], list[Any]],
    budget_s: float,
    atol: float,
    rtol: float,
) -> dict[str, Any]:
    """Run both sides up to MAX_RUNS times within budget_s and compare their outputs' distributions.

    `run_torch(seed)` returns PyTorch's outputs as numpy arrays with the generator seeded;
    `run_runtime()` ONNX Runtime's. The result has `matched` (None when it could not be judged:
    too slow for MIN_RUNS runs, or statistics that are not numbers), `runs`, `p_value`,
    `varying_outputs` (the outputs with elements that change from run to run) and a `message`.
    Larger outputs are compared at a seeded sample of MAX_ELEMENTS positions in all, kept from
    each run as it comes, so memory does not grow with the outputs' size.
    """
    started = time.monotonic()
    first_torch = [np.asarray(v) for v in run_torch(1)]
    first_runtime = [np.asarray(v) for v in run_runtime()]
    each = max(time.monotonic() - started, 1e-4)
    if len(first_torch) != len(first_runtime):
        return _differs(1, f"PyTorch returned {len(first_torch)} outputs, ONNX Runtime {len(first_runtime)}")
    for index, (t, r) in enumerate(zip(first_torch, first_runtime)):
        if t.shape != r.shape:
            return _differs(1, f"output {index}: shape {r.shape} from ONNX Runtime, {t.shape} from PyTorch")
    runs = min(MAX_RUNS, int(budget_s / each))
    if runs < MIN_RUNS:
        return {"matched": None, "runs": runs,
                "message": f"not compared in distribution: one run of each takes {each:.2g} s, and "
                           f"{MIN_RUNS} runs do not fit in {budget_s:g} s"}
    picks = _positions([t.size for t in first_torch])

    def kept(outputs: list[Any]) -> list[np.ndarray]:
        return [np.asarray(o).reshape(-1)[p].astype(np.float64) for o, p in zip(outputs, picks)]

    torch_runs = [kept(first_torch)] + [kept(run_torch(seed)) for seed in range(2, runs + 1)]
    runtime_runs = [kept(first_runtime)] + [kept(run_runtime()) for _ in range(runs - 1)]
    return _compare(torch_runs, runtime_runs, atol, rtol)


def _positions(sizes: list[int]) -> list[np.ndarray]:
    """Which flat positions of each output are compared: all of them, or a seeded sample of
    MAX_ELEMENTS in all, shared out in proportion to the outputs' sizes."""
    total = sum(sizes)
    if total <= MAX_ELEMENTS:
        return [np.arange(n) for n in sizes]
    picker = np.random.default_rng(0)
    return [np.sort(picker.choice(n, min(n, max(1, -(-MAX_ELEMENTS * n // total))), replace=False)) if n else np.arange(0)
            for n in sizes]


def _compare(torch_runs: list[list[np.ndarray]], runtime_runs: list[list[np.ndarray]], atol: float,
             rtol: float) -> dict[str, Any]:
    runs = len(torch_runs)
    varying_t: list[np.ndarray] = []
    varying_r: list[np.ndarray] = []
    varying_outputs: list[int] = []
    for index in range(len(torch_runs[0])):
        t_stack = np.stack([run[index] for run in torch_runs])
        r_stack = np.stack([run[index] for run in runtime_runs])
        t_moves, r_moves = _varies(t_stack, atol, rtol), _varies(r_stack, atol, rtol)
        fixed = ~t_moves & ~r_moves
        if fixed.any() and not np.allclose(r_stack[0][fixed], t_stack[0][fixed], atol=atol, rtol=rtol, equal_nan=True):
            gap = float(np.nanmax(np.abs(r_stack[0][fixed] - t_stack[0][fixed])))
            return _differs(runs, f"output {index}: elements that are the same on every run differ "
                                  f"(max abs error {gap:.3g})")
        # An element that varies on one side only is left to the statistics: sparse draws (a
        # rare event, tiny noise) leave some elements unchanged over a few dozen runs by chance.
        columns = np.flatnonzero(t_moves | r_moves)
        if columns.size:
            varying_outputs.append(index)
            varying_t.append(t_stack[:, columns])
            varying_r.append(r_stack[:, columns])
    if not varying_outputs:
        return {"matched": True, "runs": runs, "p_value": None, "statistic": None, "varying_outputs": [],
                "message": f"no output varies from run to run over {runs} runs; they agree"}
    both = _finite_codes(np.concatenate([np.concatenate(varying_t, axis=1), np.concatenate(varying_r, axis=1)]))
    picker = np.random.default_rng(0)
    shape_columns = np.sort(picker.choice(both.shape[1], min(both.shape[1], SHAPE_ELEMENTS), replace=False))
    observed = _statistics(both, runs, shape_columns)
    if not np.isfinite(observed).all():
        return {"matched": None, "runs": runs, "varying_outputs": varying_outputs,
                "message": "not compared in distribution: the outputs' statistics are not finite numbers"}
    shuffler = np.random.default_rng(1)
    as_large = np.zeros(len(observed))
    for _ in range(PERMUTATIONS):
        as_large += _statistics(both[shuffler.permutation(2 * runs)], runs, shape_columns) >= observed
    # Three statistics, so three chances: the smallest p-value counts three times (Bonferroni).
    p_values = (1 + as_large) / (1 + PERMUTATIONS)
    worst = int(np.argmin(p_values))
    p_value = float(min(1.0, len(p_values) * p_values[worst]))
    matched = p_value > SIGNIFICANCE
    figures = f"{runs} runs each, {both.shape[1]} varying elements, permutation test p={p_value:.2g}"
    if not matched:
        figures += f", the {_STATISTICS[worst]} differ"
    return {"matched": matched, "runs": runs, "p_value": p_value, "statistic": _STATISTICS[worst],
            "varying_outputs": varying_outputs,
            "message": (f"outputs are random; ONNX Runtime's match PyTorch's in distribution ({figures})" if matched
                        else f"outputs are random, and ONNX Runtime's differ from PyTorch's in distribution ({figures})")}


def _finite_codes(values: np.ndarray) -> np.ndarray:
    """Non-finite values as finite codes beyond every finite one (+inf, -inf, NaN apart), so a
    model that sometimes overflows is compared by how often, not turned into overflowing sums."""
    finite = np.isfinite(values)
    if finite.all():
        return values
    largest = float(np.abs(values[finite]).max(initial=0.0))
    coded = values.copy()
    coded[np.isposinf(values)] = 2 * largest + 1
    coded[np.isneginf(values)] = -(2 * largest + 1)
    coded[np.isnan(values)] = 3 * largest + 2
    return coded


_STATISTICS = ("per-element means", "per-element spreads", "distributions' shapes")


def _varies(stack: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """Elements whose value moves between runs by more than the comparison's tolerance."""
    spread = np.nanmax(stack, axis=0) - np.nanmin(stack, axis=0)
    return np.nan_to_num(spread, nan=0.0) > atol + rtol * np.abs(np.nan_to_num(stack[0]))


def _statistics(both: np.ndarray, runs: int, shape_columns: np.ndarray) -> np.ndarray:
    """How far the first `runs` rows are from the rest: per-element means (squared difference
    over the pooled variance), spreads (log ratio of the variances), and the shape of the
    per-element standardised values (Kolmogorov-Smirnov, on a sample of the elements). Means
    and spreads are compared element by element, so opposite errors in two elements (an inverted
    probability) cannot cancel as they would in one pooled distribution."""
    first, second = both[:runs], both[runs:]
    var_first, var_second = first.var(axis=0), second.var(axis=0)
    pooled = (var_first + var_second) / 2 + 1e-300
    means = float(np.mean((first.mean(axis=0) - second.mean(axis=0)) ** 2 / pooled))
    floor = pooled * 1e-6
    spreads = float(np.mean(np.abs(np.log((var_first + floor) / (var_second + floor)))))
    sample = both[:, shape_columns]
    spread = sample.std(axis=0)
    spread[spread == 0] = 1.0
    standard = (sample - sample.mean(axis=0)) / spread
    a, b = np.sort(standard[:runs].ravel()), np.sort(standard[runs:].ravel())
    grid = np.concatenate([a, b])
    gap = np.max(np.abs(np.searchsorted(a, grid, side="right") / a.size - np.searchsorted(b, grid, side="right") / b.size))
    return np.array([means, spreads, float(gap)])


def _differs(runs: int, why: str) -> dict[str, Any]:
    return {"matched": False, "runs": runs, "p_value": None, "statistic": None,
            "message": f"outputs are random, and they differ beyond chance: {why} ({runs} runs each)"}
