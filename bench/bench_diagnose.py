"""diagnose's cost as ratios against bare scripts measured in the same run (machines are noisy).

1. `diagnose --no-fix` on healthy models (an MLP, a small CNN) vs a bare script doing the same
   export, checker, ONNX Runtime session, run and comparison. Target: at most 1.2x.
2. `diagnose` with fix verification on each single-finding fixture vs one plain export of the
   same model (a script that imports torch, builds the model and calls torch.onnx.export once).
   Target: at most 3x.

Usage: python bench/bench_diagnose.py [--repeat N] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

BARE_PIPELINE = r"""
import runpy, sys, tempfile, os
import numpy as np, torch, onnx, onnxruntime as ort
ns = runpy.run_path(sys.argv[1], run_name="__bench__")
model, args = ns["get_model"]()[:2]
with torch.no_grad():
    expected = model(*args)
path = os.path.join(tempfile.mkdtemp(), "m.onnx")
torch.onnx.export(model, args, path, dynamo=True)
proto = onnx.load(path)
onnx.checker.check_model(proto, full_check=True)
onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
out = session.run(None, feeds)[0]
assert np.allclose(out, expected.numpy(), atol=1e-4, rtol=1e-3)
"""

PLAIN_EXPORT = r"""
import runpy, sys, tempfile, os
import torch
ns = runpy.run_path(sys.argv[1], run_name="__bench__")
model, args = ns["get_model"]()[:2]
dynamo = ns.get("dynamo", True)
try:
    torch.onnx.export(model, args, os.path.join(tempfile.mkdtemp(), "m.onnx"), dynamo=dynamo,
                      opset_version=ns.get("opset_version"))
except Exception:
    pass  # the fixture fails: one failed export is what a user runs before reaching for a doctor
"""


def _time(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _script(text: str) -> str:
    handle = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
    handle.write(text)
    handle.close()
    return handle.name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one fix fixture only")
    options = parser.parse_args()
    bare = _script(BARE_PIPELINE)
    plain = _script(PLAIN_EXPORT)
    cli = [sys.executable, "-m", "onnxdoctor.cli", "diagnose"]
    print(f"{'healthy model':<36} {'bare (s)':>9} {'diagnose (s)':>13} {'ratio':>6}  target <= 1.2")
    for name in ("healthy/mlp.py", "healthy/cnn.py"):
        path = str(FIXTURES / name)
        base = _time([sys.executable, bare, path], options.repeat)
        ours = _time([*cli, path, "--no-fix", "--quiet", "--exporter", "dynamo"], options.repeat)
        print(f"{name:<36} {base:9.2f} {ours:13.2f} {ours / base:6.2f}")
    print()
    fixtures = ["export/od203_custom_op_myselu.py"]
    if not options.quick:
        fixtures += ["export/od201_grid_sampler_opset11.py", "export/od202_fft_torchscript.py",
                     "export/od206_training_mode.py"]
    print(f"{'fixture (diagnose with --fix)':<36} {'export (s)':>10} {'diagnose (s)':>13} {'ratio':>6}  target <= 3")
    for name in fixtures:
        path = str(FIXTURES / name)
        base = _time([sys.executable, plain, path], options.repeat)
        ours = _time([*cli, path, "--quiet"], max(1, options.repeat - 1))
        print(f"{name:<36} {base:10.2f} {ours:13.2f} {ours / base:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
