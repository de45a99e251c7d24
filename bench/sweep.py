"""`onnxdoctor sweep` on 20 fixtures: --jobs 1, --jobs 2 and the Ray engine, as ratios against
--jobs 1 measured in the same run (machines are noisy), plus a rerun that resumes everything.

Each sweep starts with a fresh results file (nothing to resume), `--no-fix` unless `--fix`.
Two runners cannot beat one by more than the machine's free cores allow. Measured here on 4 models
(`--count 4`), two cores under a load average of about 8 from other work: --jobs 2 0.85, Ray
(--jobs 2, its start of about 6 s included) 0.84, the resumed rerun 0.03 of --jobs 1.

Usage: python bench/sweep.py [--count N] [--fix] [--no-ray]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# Cheap, varied models: healthy ones and failures at each stage (no hang: a timeout would only
# measure --timeout). Order matters for --count: the first N are swept.
MODELS = (
    "healthy/mlp.py", "export/od203_custom_op_myselu.py", "healthy/cnn.py", "load/od105_no_model.py",
    "export/od201_grid_sampler_opset11.py", "ort_load/od402_det_float64.py", "healthy/form_kwargs.py",
    "export/od206_training_mode.py", "parity/od601_symbolic_wrong_math.py", "healthy/form_get_inputs.py",
    "export/od202_fft_torchscript.py", "ort_load/od401_myselu_symbolic.py", "healthy/form_module_level.py",
    "load/od108_forward_raises.py", "export/od207_dynamo_opset11.py", "ort_run/od502_unused_input.py",
    "healthy/form_named_factory.py", "parity/od603_symbolic_wrong_shape.py", "check/od301_gelu_opset11.onnx",
    "ort_load/od402_det_float64.onnx",
)


def _sweep(list_file: Path, extra: list[str], results: Path) -> float:
    command = [sys.executable, "-m", "onnxdoctor", "sweep", str(list_file), "--quiet", "--timeout", "300",
               "--results", str(results), *extra]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sweep failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=len(MODELS), help="sweep the first N models (default 20)")
    parser.add_argument("--fix", action="store_true", help="verify fixes too (much slower)")
    parser.add_argument("--no-ray", action="store_true", help="leave the Ray engine out")
    options = parser.parse_args()
    chosen = MODELS[: max(1, options.count)]
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as folder:
        work = Path(folder)
        list_file = work / "models.txt"
        list_file.write_text("".join(f"{FIXTURES / m}\n" for m in chosen))
        fix = [] if options.fix else ["--no-fix"]
        runs = [("--jobs 1", ["--jobs", "1"]), ("--jobs 2", ["--jobs", "2"])]
        if not options.no_ray and importlib.util.find_spec("ray") is not None:
            runs.append(("--engine ray --jobs 2", ["--engine", "ray", "--jobs", "2"]))
        print(f"{len(chosen)} models, {'with' if options.fix else 'without'} fix verification")
        print(f"{'sweep':<24} {'seconds':>8} {'ratio':>6}")
        base = None
        for index, (name, extra) in enumerate(runs):
            seconds = _sweep(list_file, [*extra, *fix], work / f"r{index}.jsonl")
            base = base or seconds
            print(f"{name:<24} {seconds:8.1f} {seconds / base:6.2f}", flush=True)
        resumed = _sweep(list_file, ["--jobs", "1", *fix], work / "r0.jsonl")
        print(f"{'rerun (all resumed)':<24} {resumed:8.1f} {resumed / base:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
