"""Where the test suite's time goes, from pytest logs with `--durations=N`; and the schedule's table.

    python bench/suite_profile.py LOG [LOG ...]            per-file and per-test seconds
    python bench/suite_profile.py LOG [LOG ...] --write    also rewrite tests/durations.json

A log is pytest's output with its "slowest N durations" section (`-n 0 --durations=0` on a few
files, or the full suite's `--durations=80`). Seconds are setup + call + teardown per test. When
several logs name a test, the last one wins; a test only an earlier log names is scaled by the
median ratio of the tests both logs name (logs taken on a busier machine read slower).

tests/durations.json is what tests/conftest.py orders the suite by (longest first, so no long test
starts last while the other worker idles). Only the order matters, so stale or missing entries cost
a little balance, never a failure.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "tests" / "durations.json"
LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S.*\S)\s*$")
# Tests under this many seconds are left out of the table: they only fill the tail.
TABLE_FLOOR = 3.0


def _plain_id(test: str) -> str:
    """A test's id without the `@group` suffix xdist's loadgroup gives grouped tests."""
    return test.rsplit("@", 1)[0] if test.rfind("@") > test.rfind("]") else test


def read_log(path: Path) -> dict[str, float]:
    """Seconds per test id in one log's durations section."""
    seconds: dict[str, float] = defaultdict(float)
    inside = False
    for line in path.read_text(errors="replace").splitlines():
        if "slowest" in line and "durations" in line:
            inside = True
            continue
        if inside:
            match = LINE.match(line)
            if match:
                seconds[_plain_id(match.group(3))] += float(match.group(1))
            elif line.startswith("="):
                inside = False
    return dict(seconds)


def merge(logs: list[dict[str, float]]) -> dict[str, float]:
    """One table from several logs: later logs win; earlier-only tests are rescaled to the latest."""
    merged: dict[str, float] = {}
    for log in logs:
        common = [merged[k] / log[k] for k in log if k in merged and log[k] > 0]
        scale = 1 / statistics.median(common) if common else 1.0
        merged = {k: v * scale for k, v in merged.items()}
        merged.update(log)
    return merged


def per_file(seconds: dict[str, float]) -> list[tuple[str, float, int]]:
    """(file, total seconds, tests) from the largest total down."""
    totals: dict[str, list[float]] = defaultdict(list)
    for test, value in seconds.items():
        totals[test.split("::", 1)[0]].append(value)
    return sorted(((f, sum(v), len(v)) for f, v in totals.items()), key=lambda row: -row[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--write", action="store_true", help=f"rewrite {TABLE.relative_to(REPO)}")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    seconds = merge([read_log(p) for p in args.logs])
    print(f"{'seconds':>8} {'tests':>5}  file (tests listed in the logs only)")
    for name, total, count in per_file(seconds):
        print(f"{total:8.1f} {count:5d}  {name}")
    print()
    for test, value in sorted(seconds.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{value:8.1f}  {test}")
    if args.write:
        table = {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1]) if v >= TABLE_FLOOR}
        TABLE.write_text(json.dumps(table, indent=1) + "\n")
        print(f"\nwrote {len(table)} tests to {TABLE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
