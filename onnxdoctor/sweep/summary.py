"""A sweep's figures, from its results: verdict counts, codes per stage, failures by code, the fixes
that worked most often, the slowest models. Plain data for the renderers (render/sweep.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from onnxdoctor.sweep.record import VERDICTS, SweepResult, error_codes


@dataclass(frozen=True)
class CodeCount:
    """How many models have a finding with this code (each model once), at its stage."""

    code: str
    stage: str
    severity: str
    models: tuple[str, ...]


@dataclass(frozen=True)
class FixCount:
    """A kind of fix that was verified to work for a code, and on how many models."""

    code: str
    kind: str
    example: str  # one such fix's title
    models: int


@dataclass(frozen=True)
class Summary:
    """Everything a sweep report shows."""

    total: int
    verdicts: dict[str, int]  # every verdict in VERDICTS, zero included
    codes: tuple[CodeCount, ...]  # most models first
    fixes: tuple[FixCount, ...]  # most models first
    slowest: tuple[tuple[str, float, str], ...]  # (model, seconds, verdict)
    failures: tuple[tuple[str, tuple[str, ...]], ...]  # (error code, its models), most models first
    errors: tuple[tuple[str, str], ...]  # (model, why there is no diagnosis)
    seconds: float  # the models' times added up


def summarize(results: Sequence[SweepResult], *, slowest: int = 10) -> Summary:
    """The figures of a sweep's results (one per model)."""
    verdicts = Counter(r.verdict for r in results)
    seen: dict[tuple[str, str, str], list[str]] = {}
    fixes: dict[tuple[str, str], list[str]] = {}
    examples: dict[tuple[str, str], str] = {}
    for result in results:
        findings = result.diagnosis.get("findings", []) if result.diagnosis else []
        counted: set[tuple[str, str, str]] = set()
        for finding in findings:
            key = (str(finding.get("code")), str(finding.get("stage")), str(finding.get("severity")))
            if key not in counted:
                counted.add(key)
                seen.setdefault(key, []).append(result.shown)
            for fix in finding.get("fixes", []):
                if fix.get("verified") is True:
                    fix_key = (key[0], str(fix.get("kind")))
                    if result.shown not in fixes.setdefault(fix_key, []):
                        fixes[fix_key].append(result.shown)
                    examples.setdefault(fix_key, str(fix.get("title")))
    codes = sorted((CodeCount(c, s, sev, tuple(m)) for (c, s, sev), m in seen.items()),
                   key=lambda c: (c.severity != "error", -len(c.models), c.code))
    fix_counts = sorted((FixCount(c, k, examples[(c, k)], len(m)) for (c, k), m in fixes.items()),
                        key=lambda f: (-f.models, f.code, f.kind))
    ranked = sorted(results, key=lambda r: -r.seconds)[:slowest]
    return Summary(
        total=len(results),
        verdicts={v: verdicts.get(v, 0) for v in VERDICTS},
        codes=tuple(codes),
        fixes=tuple(fix_counts),
        slowest=tuple((r.shown, r.seconds, r.verdict) for r in ranked),
        failures=failures_by_code(results),
        errors=tuple((r.shown, r.error or "") for r in results if r.diagnosis is None),
        seconds=sum(r.seconds for r in results),
    )


def failures_by_code(results: Sequence[SweepResult]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Error code -> the failing models that have it, most models first."""
    grouped: dict[str, list[str]] = {}
    for result in results:
        for code in error_codes(result):
            grouped.setdefault(code, []).append(result.shown)
    return tuple(sorted(((c, tuple(m)) for c, m in grouped.items()), key=lambda item: (-len(item[1]), item[0])))
