"""The results file: JSON lines, one per model (`SweepResult.to_line`), read back for resuming,
reports and comparisons. It is appended to, never rewritten (onnxdoctor.outputs.open_append)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from onnxdoctor.errors import UsageError
from onnxdoctor.sweep.record import ERROR, SweepResult


@dataclass(frozen=True)
class Stored:
    """What a results file holds: its readable results in file order, and how many lines were not."""

    results: tuple[SweepResult, ...]
    unreadable: int


def read_results(path: Path, *, what: str = "--results") -> Stored:
    """Every result line of `path` (none when it does not exist); a line cut short by a killed
    sweep, or any line that is not a result, is counted and skipped.

    Raises:
        UsageError: the file exists but cannot be read.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Stored((), 0)
    except OSError as exc:
        raise UsageError(f"{what} {path}: {exc.strerror or exc}") from None
    results: list[SweepResult] = []
    unreadable = 0
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        result = SweepResult.from_line(line)
        if result is None:
            unreadable += 1
        else:
            results.append(result)
    return Stored(tuple(results), unreadable)


def reusable(stored: Stored) -> dict[tuple[str, str], SweepResult]:
    """(target, resume key) -> the latest result a rerun may keep instead of running again.

    A result without a diagnosis (the sweep could not run the model) is not kept: it says nothing
    about the model, so the model runs again.
    """
    found: dict[tuple[str, str], SweepResult] = {}
    for result in stored.results:
        if result.verdict != ERROR:
            found[(result.target, result.key)] = result
    return found


def latest_per_model(results: tuple[SweepResult, ...]) -> tuple[SweepResult, ...]:
    """The last result of each model (by target), in the order models first appear."""
    latest: dict[str, SweepResult] = {}
    for result in results:
        latest.pop(result.target, None)
        latest[result.target] = result
    order = list(dict.fromkeys(r.target for r in results))
    return tuple(latest[t] for t in order)
