"""Start-up time of the light commands against `import torch` and a bare interpreter (DESIGN §5).

    python bench/bench_startup.py [--runs 7]

Every command is timed as a fresh process, the commands interleaved round-robin so that load on
a shared machine hits them alike; the median of the runs is reported, with ratios measured in the
same run. Targets: under 0.3 s, and well under a third of `python -c "import torch"`.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `argv`, output discarded; exits when the command fails.

    CPU time (user + system, the process and everything it waited for) is reported beside wall
    time because on a shared, loaded machine it is much less disturbed by other work.
    """
    cpu_before = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}"
        )
    return elapsed, _children_cpu() - cpu_before


def main() -> int:
    """Time every command, print medians and ratios, and say whether the targets are met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (median reported)")
    parser.add_argument(
        "--with-env", action="store_true", help="also time `onnxdoctor env` (probes ORT)"
    )
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
        # The floor for explain: the same text printed without typer (and so without pydantic,
        # which typer >= 0.2x imports to coerce any command's parameters).
        "(floor) explain OD203 without typer": (
            [
                sys.executable,
                "-c",
                "from onnxdoctor.codes import explanation; print(explanation('OD203'))",
            ],
            plain,
        ),
    }
    if args.with_env:
        # env exits 1 when it has warnings; time it through a wrapper that ignores that.
        cases["onnxdoctor env --json"] = (
            [
                sys.executable,
                "-c",
                "import subprocess, sys; subprocess.run(sys.argv[1:])",
                *tool,
                "env",
                "--json",
            ],
            plain,
        )
    light = ("onnxdoctor --help", "onnxdoctor codes", "onnxdoctor explain OD203")

    for argv, env in cases.values():  # warm the page cache and .pyc files; not counted
        time_once(argv, env)
    samples: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (argv, env) in cases.items():
            wall, used = time_once(argv, env)
            samples[name].append(wall)
            cpu[name].append(used)
    median = {name: statistics.median(values) for name, values in samples.items()}
    median_cpu = {name: statistics.median(values) for name, values in cpu.items()}

    bare, torch = median["python -c pass"], median["python -c 'import torch'"]
    torch_cpu = median_cpu["python -c 'import torch'"]
    print(f"onnxdoctor start-up, median of {args.runs} runs each ({' '.join(tool)})")
    print(
        f"load average at the end: {' '.join(f'{v:.2f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'command':40} {'median s':>9} {'min s':>7} {'/ torch':>8} {'/ bare':>7} {'cpu s':>7} {'cpu/torch':>9}"
    )
    for name, values in samples.items():
        print(
            f"{name:40} {median[name]:9.3f} {min(values):7.3f} {median[name] / torch:8.3f} "
            f"{median[name] / bare:7.2f} {median_cpu[name]:7.3f} "
            f"{median_cpu[name] / torch_cpu:9.3f}"
        )
    worst = max(median[name] for name in light)
    worst_cpu = max(median_cpu[name] for name in light)
    ok_abs = worst < TARGET_SECONDS
    ok_ratio = worst / torch < TARGET_TORCH_RATIO
    print(
        f"slowest light command: {worst:.3f} s wall, {worst_cpu:.3f} s CPU "
        f"(target < {TARGET_SECONDS} s: {'met' if ok_abs else 'MISSED'}); "
        f"{worst / torch:.3f} of import torch (target < {TARGET_TORCH_RATIO:.3f}: {'met' if ok_ratio else 'MISSED'})"
    )
    if not ok_abs and worst_cpu < TARGET_SECONDS:
        print(
            "(the wall-time miss is load from other processes: the CPU time is within the target)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
