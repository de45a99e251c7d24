"""The SHAPES stage's cost as a ratio against a healthy diagnose measured in the same run.

For each model: `diagnose --no-fix` with the stage and with `--no-shapes`, in the library (one
worker each, as the CLI runs it). Reported: the stage's own seconds (its record) over the whole
healthy diagnose, and the wall-clock difference over the run without it. Goal: at most 0.5x.

Usage: python bench/shapes.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onnxdoctor.model import DiagnoseOptions  # noqa: E402
from onnxdoctor.pipeline import diagnose  # noqa: E402

MODELS = (
    "fixtures/shapes/healthy_dynamic_batch.py",  # declared dims: three ORT + eager runs
    "fixtures/healthy/mlp.py",  # nothing declared: eager probes first
    "fixtures/healthy/cnn.py",
)
GOAL = 0.5


def _run(path: str, shapes: bool) -> tuple[float, float]:
    started = time.perf_counter()
    [diagnosis] = diagnose(str(ROOT / path), DiagnoseOptions(fix=False, check_shapes=shapes))
    wall = time.perf_counter() - started
    return wall, float(diagnosis.facts.get("shapes_seconds") or 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    worst = 0.0
    print(f"{'model':<42} {'with':>7} {'without':>8} {'stage':>7} {'stage/run':>10} {'extra/run':>10}")
    for path in MODELS:
        with_stage, without, stage = [], [], []
        for _ in range(args.repeat):
            wall, seconds = _run(path, True)
            with_stage.append(wall)
            stage.append(seconds)
            without.append(_run(path, False)[0])
        w, wo, s = statistics.median(with_stage), statistics.median(without), statistics.median(stage)
        ratio, extra = s / w, (w - wo) / wo
        worst = max(worst, ratio)
        print(f"{path:<42} {w:7.2f} {wo:8.2f} {s:7.3f} {ratio:9.3f}x {extra:9.3f}x")
    print(f"worst stage/run {worst:.3f}x (goal <= {GOAL}x): {'ok' if worst <= GOAL else 'OVER'}")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
