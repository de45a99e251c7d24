"""What the worker fork server saves (docs/ARCHITECTURE.md, "Fork server").

    python bench/forkserver.py [--runs 3] [FIXTURE ...]

Each run is one fresh Python process that diagnoses every fixture in turn (as a `sweep` chunk or a
test session does: one process, several commands, each with its fix checks), once with the fork
server on and once with `ONNXDOCTOR_FORKSERVER=0`, interleaved so that load on a shared machine
hits both alike. Reported: median wall and CPU seconds (the process and its workers) of each mode,
the ratio on/off, and how many workers the server forked. The findings must be the same.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = (
    "fixtures/healthy/mlp.py",
    "fixtures/corpus/adaptive_max_pool1d_pytorch_61172.py",
    "fixtures/export/od203_custom_op_myselu.py",
    "fixtures/export/od206_training_mode.py",
)
# Runs in the measured process: every fixture diagnosed in turn, the codes and the count of
# workers the fork server forked printed as one JSON line.
PROGRAM = """
import json, sys
from onnxdoctor import forkserver
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
codes = []
for target in sys.argv[1:]:
    diagnoses = diagnose(target, DiagnoseOptions(timeout=600))
    codes.append(sorted((f.code, [x.verified for x in f.fixes]) for d in diagnoses for f in d.findings))
print(json.dumps({"codes": codes, "forked": forkserver.forked}))
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(targets: list[str], served: bool) -> tuple[float, float, dict[str, object]]:
    """Wall and CPU seconds of one process diagnosing every target, and what it printed."""
    env = dict(os.environ, ONNXDOCTOR_FORKSERVER="1" if served else "0", PYTHONPATH=str(ROOT))
    cpu_before = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", PROGRAM, *targets], capture_output=True, text=True, env=env,
                          cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"the {'served' if served else 'fresh'} run failed: {proc.stderr[-800:]}")
    return wall, _children_cpu() - cpu_before, json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    """Time both modes, print medians and the ratio, and check the findings agree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per mode (median reported)")
    parser.add_argument("fixtures", nargs="*", default=list(FIXTURES), help="model scripts to diagnose")
    args = parser.parse_args()
    targets = [str(ROOT / f) for f in args.fixtures]
    walls: dict[bool, list[float]] = {True: [], False: []}
    cpus: dict[bool, list[float]] = {True: [], False: []}
    printed: dict[bool, dict[str, object]] = {}
    for index in range(args.runs):
        for served in ((True, False) if index % 2 == 0 else (False, True)):
            wall, cpu, out = run_once(targets, served)
            walls[served].append(wall)
            cpus[served].append(cpu)
            printed[served] = out
    if printed[True]["codes"] != printed[False]["codes"]:
        print(f"FINDINGS DIFFER:\n  served {printed[True]['codes']}\n  fresh  {printed[False]['codes']}")
        return 1
    on_wall, off_wall = statistics.median(walls[True]), statistics.median(walls[False])
    on_cpu, off_cpu = statistics.median(cpus[True]), statistics.median(cpus[False])
    print(f"{len(targets)} fixtures per process, median of {args.runs} runs per mode, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"{'mode':28} {'wall s':>8} {'cpu s':>8}")
    print(f"{'fork server (forked ' + str(printed[True]['forked']) + ')':28} {on_wall:8.1f} {on_cpu:8.1f}")
    print(f"{'fresh interpreters':28} {off_wall:8.1f} {off_cpu:8.1f}")
    print(f"ratio served/fresh: wall {on_wall / off_wall:.2f}, cpu {on_cpu / off_cpu:.2f}; findings identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
