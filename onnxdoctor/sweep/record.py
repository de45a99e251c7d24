"""What a sweep keeps per model: the job, its result line, and the verdict read from a diagnosis.

Standard library only: the driver, the local runners, Ray's workers and the renderers all speak it.
A result is one JSON line of the results file (README, "sweep"); `SweepResult.from_line` reads
what `to_line` wrote, nothing else.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

RESULT_SCHEMA = 1

# Verdicts, in the order reports list them.
HEALTHY = "healthy"
FAILING = "failing"
TIMED_OUT = "timed_out"
ERROR = "error"  # no diagnosis: the sweep could not run this model (a bad target, a runner death)
VERDICTS = (HEALTHY, FAILING, TIMED_OUT, ERROR)


@dataclass(frozen=True)
class Job:
    """One model to diagnose: the target as `diagnose` takes it, and what its result is keyed by."""

    target: str  # absolute path, with `:factory` when one was named
    shown: str  # the path as the user named it (folder + file name), for reports
    content_hash: str  # sha256 of the file's bytes
    key: str  # resume key: content hash + versions + options (+ factory)


@dataclass(frozen=True)
class SweepResult:
    """One model's result line: the job, the diagnosis (JSON schema 2) and what it took."""

    target: str
    shown: str
    content_hash: str
    key: str
    versions: dict[str, str]
    options: dict[str, Any]
    verdict: str
    codes: tuple[str, ...] = ()  # finding codes, errors first, each once
    diagnosis: dict[str, Any] | None = None  # `diagnose --json`'s document (schema 2)
    error: str | None = None  # why there is no diagnosis (verdict "error")
    seconds: float = 0.0  # wall time of the whole job
    started_at: float = 0.0  # epoch seconds
    engine: str = "local"
    host: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_line(self) -> str:
        """The result as one JSON line (no newline inside; the caller adds the line end)."""
        document = {"schema": RESULT_SCHEMA, "target": self.target, "shown": self.shown,
                    "content_hash": self.content_hash, "key": self.key, "versions": self.versions,
                    "options": self.options, "verdict": self.verdict, "codes": list(self.codes),
                    "seconds": round(self.seconds, 3), "started_at": round(self.started_at, 3),
                    "engine": self.engine, "host": self.host, "error": self.error,
                    "extra": self.extra, "diagnosis": self.diagnosis}
        return json.dumps(document, separators=(",", ":"), ensure_ascii=True, allow_nan=False)

    @classmethod
    def from_line(cls, line: str) -> SweepResult | None:
        """A line `to_line` wrote, or None for anything else (a line cut short by a crash)."""
        try:
            data = json.loads(line)
            if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA:
                return None
            verdict = data["verdict"]
            if verdict not in VERDICTS:
                return None
            return cls(target=str(data["target"]), shown=str(data["shown"]),
                       content_hash=str(data["content_hash"]), key=str(data["key"]),
                       versions=dict(data["versions"]), options=dict(data["options"]), verdict=verdict,
                       codes=tuple(str(c) for c in data["codes"]), diagnosis=data.get("diagnosis"),
                       error=data.get("error"), seconds=float(data["seconds"]),
                       started_at=float(data["started_at"]), engine=str(data.get("engine", "")),
                       host=str(data.get("host", "")), extra=dict(data.get("extra") or {}))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Change:
    """A model whose verdict or codes differ between two sweeps (`--compare`)."""

    shown: str
    old_verdict: str
    new_verdict: str
    old_codes: tuple[str, ...]
    new_codes: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """Two sweeps side by side: what changed, and the models only one of them has."""

    changes: tuple[Change, ...]
    same: int
    only_old: tuple[str, ...]
    only_new: tuple[str, ...]


def resume_key(content_hash: str, factory: str | None, versions: dict[str, str],
               options: dict[str, Any]) -> str:
    """The key a result is found again by: equal file content, versions and options."""
    text = json.dumps({"hash": content_hash, "factory": factory, "versions": versions,
                       "options": options}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def verdict_of(diagnosis: dict[str, Any]) -> str:
    """healthy, timed_out (a stage ran out of time: OD902) or failing, from a schema-2 document."""
    if diagnosis.get("healthy"):
        return HEALTHY
    runs = diagnosis.get("runs") or [diagnosis]
    stages = [s for run in runs for s in run.get("stages", [])]
    if any(s.get("status") == "timed_out" for s in stages) or "OD902" in codes_of(diagnosis):
        return TIMED_OUT
    return FAILING


def codes_of(diagnosis: dict[str, Any]) -> tuple[str, ...]:
    """The diagnosis's finding codes, errors before warnings, each once."""
    findings = diagnosis.get("findings", [])
    ordered = sorted(findings, key=lambda f: f.get("severity") != "error")
    return tuple(dict.fromkeys(str(f.get("code")) for f in ordered))


def error_codes(result: SweepResult) -> tuple[str, ...]:
    """The codes of the findings that are errors (what makes a model fail)."""
    if result.diagnosis is None:
        return ()
    return tuple(dict.fromkeys(str(f.get("code")) for f in result.diagnosis.get("findings", [])
                               if f.get("severity") == "error"))
