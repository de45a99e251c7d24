"""Start-up time of the light commands against `import torch` and a bare interpreter (DESIGN §5).

    python bench/bench_startup.py [--runs 7]

Every command is timed as a fresh process, the commands interleaved round-robin so that load on
a shared machine hits them alike; the median of the runs is reported, with ratios measured in the
same run. Targets: under 0.3 s, and well under a third of `python -c "import torch"`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_SECONDS = 0.3
TARGET_TORCH_RATIO = 1 / 3


def onnxdoctor_command() -> list[str]:
    """The installed console script next to this interpreter, else `python -m onnxdoctor.cli`.

    Version-manager shims (pyenv) put a shell script in front of the console script; time the
    real one, since that is what a user's shell ends up running.
    """
    script = Path(sys.executable).parent / "onnxdoctor"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "onnxdoctor.cli"]


def time_once(argv: list[str], env: dict[str, str]) -> float:
    """Wall time of one run of `argv`, output discarded; raises when the command fails."""
    started = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return elapsed


def main() -> int:
    """Time every command, print medians and ratios, and say whether the targets are met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (median reported)")
    parser.add_argument("--with-env", action="store_true", help="also time `onnxdoctor env` (probes ORT)")
    args = parser.parse_args()

    tool = onnxdoctor_command()
    plain = dict(os.environ)
    # What-if row: typer's help without rich (what `rich_markup_mode=None` in cli.py would give).
    no_rich = dict(os.environ, TYPER_USE_RICH="0")
    cases: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass": ([sys.executable, "-c", "pass"], plain),
        "python -c 'import torch'": ([sys.executable, "-c", "import torch"], plain),
        "onnxdoctor --help": ([*tool, "--help"], plain),
        "onnxdoctor codes": ([*tool, "codes"], plain),
        "onnxdoctor explain OD203": ([*tool, "explain", "OD203"], plain),
        "(what-if) --help, TYPER_USE_RICH=0": ([*tool, "--help"], no_rich),
    }
    if args.with_env:
        # env exits 1 when it has warnings; time it through a wrapper that ignores that.
        cases["onnxdoctor env --json"] = (
            [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])", *tool, "env", "--json"],
            plain,
        )
    light = ("onnxdoctor --help", "onnxdoctor codes", "onnxdoctor explain OD203")

    for argv, env in cases.values():  # warm the page cache and .pyc files; not counted
        time_once(argv, env)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (argv, env) in cases.items():
            samples[name].append(time_once(argv, env))
    median = {name: statistics.median(values) for name, values in samples.items()}

    bare, torch = median["python -c pass"], median["python -c 'import torch'"]
    print(f"onnxdoctor start-up, median of {args.runs} runs each ({' '.join(tool)})")
    print(f"{'command':40} {'median s':>9} {'min s':>7} {'/ torch':>8} {'/ bare':>7}")
    for name, values in samples.items():
        print(f"{name:40} {median[name]:9.3f} {min(values):7.3f} {median[name] / torch:8.3f} {median[name] / bare:7.2f}")
    worst = max(median[name] for name in light)
    ok_abs = worst < TARGET_SECONDS
    ok_ratio = worst / torch < TARGET_TORCH_RATIO
    print(
        f"slowest light command: {worst:.3f} s (target < {TARGET_SECONDS} s: {'met' if ok_abs else 'MISSED'}); "
        f"{worst / torch:.3f} of import torch (target < {TARGET_TORCH_RATIO:.3f}: {'met' if ok_ratio else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
