"""The cost of deployment targets, as ratios measured in one run (machines are noisy).

1. `--target openvino` adds OpenVINO's import+read+compile+run of the exported model to the
   worker; compared with ONNX Runtime's import+session+run of the same model, each measured in a
   fresh process. Target: at most 1.5x.
2. `--target tensorrt --target coreml --target ort-web --target ort-cuda` (static tables): the four
   tables' checks
   of the exported model (onnxdoctor.targets.collect, as diagnose runs it), in this process.
   Target: under 0.2 s.
3. What `--target openvino` adds inside `diagnose` (the worker imports OpenVINO while the model
   exports and runs its check beside ONNX Runtime's stages): OpenVINO's `added_seconds` (the wait
   for it after ONNX Runtime finished) plus how much slower check+ort_load+ort_run+parity ran beside
   it, against ort_load+ort_run without it; medians over alternating runs. Target: at most 1.5x.
Whole-`diagnose` wall times are not compared: on a shared machine the export's noise (seconds)
is larger than what the targets add.

Usage: python bench/bench_targets.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEALTHY = [ROOT / "fixtures" / "healthy" / "mlp.py", ROOT / "fixtures" / "healthy" / "cnn.py"]

EXPORT = r"""
import runpy, sys, numpy as np, torch
ns = runpy.run_path(sys.argv[1], run_name="__bench__")
model, args = ns["get_model"]()[:2]
torch.onnx.export(model, args, sys.argv[2], dynamo=True)
np.savez(sys.argv[2] + ".npz", *[a.numpy() for a in args])
"""

ORT_LOAD_RUN = r"""
import sys, time
t = time.perf_counter()
import numpy as np, onnxruntime as ort
feeds = list(np.load(sys.argv[1] + ".npz").values())
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
s.run(None, {i.name: a for i, a in zip(s.get_inputs(), feeds)})
print(time.perf_counter() - t)
"""

OV_LOAD_RUN = r"""
import sys, time
t = time.perf_counter()
import numpy as np, openvino as ov
feeds = list(np.load(sys.argv[1] + ".npz").values())
core = ov.Core()
m = core.read_model(sys.argv[1])
c = core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"})  # as the worker
c(feeds)
print(time.perf_counter() - t)
"""


def _inner(script: str, path: str, repeat: int) -> float:
    return statistics.median(
        float(subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True,
                             check=True).stdout.strip())
        for _ in range(repeat)
    )


def _tables(path: str, repeat: int) -> float:
    sys.path.insert(0, str(ROOT))
    from onnxdoctor.targets.collect import collect

    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        collect(("ort-cpu", "tensorrt", "coreml", "ort-web", "ort-cuda"), (), (), path)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


_AFTER_EXPORT = ("check", "ort_load", "ort_run", "parity")


def _in_diagnose(fixture: Path, repeat: int) -> tuple[float, float]:
    """(what --target openvino added, ONNX Runtime's load+run), medians of alternating runs."""
    added, ort, beside_cost = [], [], []
    for _ in range(repeat):
        runs = {}
        for extra in ((), ("--target", "openvino")):
            out = subprocess.run([sys.executable, "-m", "onnxdoctor", "diagnose", str(fixture), "--no-fix",
                                  "--json", *extra], capture_output=True, text=True, cwd=ROOT)
            runs[bool(extra)] = json.loads(out.stdout)
        plain = {s["stage"]: s["seconds"] for s in runs[False]["stages"]}
        with_ov = {s["stage"]: s["seconds"] for s in runs[True]["stages"]}
        ov = next(t for t in runs[True]["targets"] if t["target"] == "openvino")
        beside_cost.append(sum(with_ov[s] for s in _AFTER_EXPORT) - sum(plain[s] for s in _AFTER_EXPORT))
        added.append(float(ov.get("added_seconds") or ov["seconds"]))
        ort.append(plain["ort_load"] + plain["ort_run"])
    return statistics.median(added) + max(0.0, statistics.median(beside_cost)), statistics.median(ort)


def main() -> int:
    """Print one line per healthy fixture and the ratios."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for fixture in HEALTHY:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "m.onnx")
            subprocess.run([sys.executable, "-c", EXPORT, str(fixture), path], check=True, capture_output=True)
            ort_s = _inner(ORT_LOAD_RUN, path, args.repeat)
            ov_s = _inner(OV_LOAD_RUN, path, args.repeat)
            tables_s = _tables(path, args.repeat)
        added_s, ort_in_s = _in_diagnose(fixture, args.repeat)
        print(f"{fixture.name}: fresh processes: ORT import+load+run {ort_s:.3f}s, OpenVINO "
              f"import+read+compile+run {ov_s:.3f}s (ratio {ov_s / ort_s:.2f}x); in diagnose: "
              f"--target openvino adds {added_s:.3f}s against ORT load+run {ort_in_s:.3f}s (ratio "
              f"{added_s / ort_in_s:.2f}x, target <= 1.5x); 4 static tables {tables_s:.3f}s (target < 0.2 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
