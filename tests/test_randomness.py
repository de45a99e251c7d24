"""Parity in distribution for models that draw random numbers (worker/randomness.py).

The statistics are tested on draws whose distributions are known; the check itself on real
exports run in ONNX Runtime, including one where ONNX Runtime 1.32 samples the wrong distribution
(its Bernoulli kernel draws 1 with probability 1 - p).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from onnxdoctor.model import DiagnoseOptions, Stage, Status
from onnxdoctor.pipeline import diagnose
from onnxdoctor.worker.randomness import MIN_RUNS, compare_in_distribution


def _draws(sample: Callable[[np.random.Generator], list[np.ndarray]], seed: int) -> Callable[..., list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return lambda *_: sample(rng)


def _compare(torch_side: Callable[[np.random.Generator], list[np.ndarray]],
             runtime_side: Callable[[np.random.Generator], list[np.ndarray]]) -> dict[str, Any]:
    return compare_in_distribution(_draws(torch_side, 1), _draws(runtime_side, 2), 60.0, 1e-4, 1e-3)


CENTRES = np.linspace(-3.0, 3.0, 40)
PROBABILITIES = np.linspace(0.05, 0.95, 40)


def _normal(scale: float = 1.0, shift: float = 0.0) -> Callable[[np.random.Generator], list[np.ndarray]]:
    return lambda rng: [CENTRES + shift + scale * rng.standard_normal(40), np.arange(5.0)]


def _bernoulli(inverted: bool) -> Callable[[np.random.Generator], list[np.ndarray]]:
    def draw(rng: np.random.Generator) -> list[np.ndarray]:
        ones = rng.random(40) < PROBABILITIES
        return [(~ones if inverted else ones).astype(np.float32)]
    return draw


def _softmax_noise(rng: np.random.Generator) -> list[np.ndarray]:
    # Every element of a run depends on the same draws: the test must stay calibrated.
    logits = CENTRES[:8] + rng.gumbel(size=8)
    return [np.exp(logits) / np.exp(logits).sum()]


def test_the_same_distributions_match() -> None:
    found = _compare(_normal(), _normal())
    assert found["matched"] is True, found["message"]
    assert found["runs"] >= MIN_RUNS
    found = _compare(_softmax_noise, _softmax_noise)
    assert found["matched"] is True, found["message"]


@pytest.mark.parametrize(("reference", "runtime", "what"), [
    (_normal(), _normal(scale=1.6), "spreads"),
    (_normal(), _normal(shift=0.8), "means"),
    (_bernoulli(inverted=False), _bernoulli(inverted=True), "means"),
    (_normal(), lambda rng: [CENTRES + rng.uniform(-np.sqrt(3), np.sqrt(3), 40), np.arange(5.0)], "shapes"),
])
def test_a_different_distribution_is_found(reference: Callable[[np.random.Generator], list[np.ndarray]],
                                           runtime: Callable[[np.random.Generator], list[np.ndarray]],
                                           what: str) -> None:
    found = _compare(reference, runtime)
    assert found["matched"] is False, found["message"]
    assert what in found["message"]


def test_fixed_elements_are_compared_as_numbers_and_must_stay_fixed() -> None:
    found = _compare(_normal(), lambda rng: [CENTRES + rng.standard_normal(40), np.arange(5.0) + 1.0])
    assert found["matched"] is False and "same on every run differ" in found["message"]
    found = _compare(_normal(), lambda rng: [CENTRES + rng.standard_normal(40), np.arange(5.0) + rng.random(5)])
    # Varying in ONNX Runtime only: left to the statistics, which find it (means and spreads).
    assert found["matched"] is False and "in distribution" in found["message"]
    assert found["varying_outputs"] == [0, 1]


def _rare(rng: np.random.Generator) -> list[np.ndarray]:
    # A rare event: over a few dozen runs some elements never fire on one side, by chance.
    return [(rng.random(200) < 0.05) * 3.0]


def _overflowing(rng: np.random.Generator) -> list[np.ndarray]:
    values = rng.standard_normal(50)
    values[rng.random(50) < 0.02] = np.inf
    return [values]


@pytest.mark.parametrize("draw", [_rare, _overflowing, lambda rng: [0.5 + 1e-4 * rng.standard_normal(100)]])
def test_sparse_tiny_and_overflowing_draws_of_one_distribution_match(
        draw: Callable[[np.random.Generator], list[np.ndarray]]) -> None:
    found = _compare(draw, draw)
    assert found["matched"] is True, found["message"]


def test_a_model_too_slow_for_enough_runs_is_not_judged() -> None:
    def slow(_: Any = None) -> list[np.ndarray]:
        import time
        time.sleep(0.05)
        return [np.zeros(3)]

    found = compare_in_distribution(slow, slow, 0.5, 1e-4, 1e-3)
    assert found["matched"] is None and "do not fit" in found["message"]


class _Bernoulli(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.bernoulli(torch.sigmoid(x))


class _Noise(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) + 0.3 * torch.randn_like(x)


def _runtime_against_eager(model: torch.nn.Module, tmp_path: Path) -> dict[str, Any]:
    import onnxruntime as ort

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    path = tmp_path / "model.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {session.get_inputs()[0].name: x.numpy()}

    def run_torch(seed: int) -> list[np.ndarray]:
        torch.manual_seed(seed)
        with torch.no_grad():
            return [model(x).numpy()]

    return compare_in_distribution(run_torch, lambda: session.run(None, feeds), 60.0, 1e-4, 1e-3)


def test_onnx_runtime_noise_matches_in_distribution_and_its_bernoulli_does_not(tmp_path: Path) -> None:
    assert _runtime_against_eager(_Noise(), tmp_path)["matched"] is True
    found = _runtime_against_eager(_Bernoulli(), tmp_path)
    assert found["matched"] is False and "means" in found["message"], found["message"]


NOISY_VOCODER = '''
import torch

dynamo = False
opset_version = 17
dynamic_axes = {"mel": {2: "frames"}}
input_names = ["mel"]


class NoisyVocoder(torch.nn.Module):
    """A VITS-style flow input: noise scaled into the prior, drawn at inference."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv1d(8, 4, 3, padding=1)

    def forward(self, mel):
        mean = self.proj(mel)
        return mean + torch.randn_like(mean) * 0.667


def get_model():
    torch.manual_seed(0)
    return NoisyVocoder().eval(), (torch.randn(1, 8, 20),)
'''

BERNOULLI_MASK = '''
import torch

dynamo = False
opset_version = 17


class MaskSampler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.score = torch.nn.Linear(6, 6)

    def forward(self, x):
        return x * torch.bernoulli(torch.sigmoid(self.score(x)))


def get_model():
    torch.manual_seed(0)
    return MaskSampler().eval(), (torch.randn(5, 6),)
'''


@pytest.mark.slow
def test_a_model_that_samples_noise_is_healthy_in_distribution_at_every_size(tmp_path: Path) -> None:
    script = tmp_path / "vocoder.py"
    script.write_text(textwrap.dedent(NOISY_VOCODER), "utf-8")
    diagnosis = diagnose(str(script), DiagnoseOptions(fix=False))[0]
    assert diagnosis.healthy, [f.message for f in diagnosis.findings]
    parity = next(o for o in diagnosis.stages if o.stage is Stage.PARITY)
    assert parity.status is Status.PASSED and parity.facts["random"]["ops"] == ["RandomNormalLike"]
    assert diagnosis.shapes and all(c.status == "passed" for c in diagnosis.shapes)


@pytest.mark.slow
def test_onnx_runtimes_bernoulli_is_named_and_rewritten(tmp_path: Path) -> None:
    script = tmp_path / "mask.py"
    script.write_text(textwrap.dedent(BERNOULLI_MASK), "utf-8")
    finding = diagnose(str(script), DiagnoseOptions(fix=True))[0].findings[0]
    assert finding.code == "OD601" and finding.op == "aten::bernoulli"
    assert "not distributed as PyTorch's" in finding.message
    best = finding.fixes[0]
    assert best.kind == "rewrite" and best.verified is True, best.check
    assert best.check is not None and "in distribution" in best.check.detail
