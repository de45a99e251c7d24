"""`diagnose --format github`: GitHub Actions workflow commands that annotate the user's lines.

GitHub shows at most ten annotations of each kind (error, warning, notice) per step, so the first
ten of each are written and one plain summary line follows with the count of the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from onnxdoctor.codes import slug
from onnxdoctor.model import Diagnosis, Finding, Severity
from onnxdoctor.render.assertion import best_verified_fix

# What GitHub shows per kind and step (its documented annotation limit).
PER_KIND = 10
_COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


@dataclass(frozen=True)
class Location:
    """A finding's place in the user's files: a path as the user named it, and a line if known."""

    path: str
    line: int | None = None


def locate(finding: Finding, script: str) -> Location:
    """Where `finding` points: `source` ("model.py:31", a file in the script's folder) resolved
    beside `script` (the target as the user gave it), else the script itself without a line."""
    folder = os.path.dirname(script)
    name, line = os.path.basename(script), None
    if finding.source:
        head, _, tail = finding.source.rpartition(":")
        if head and tail.isdigit():
            name, line = head, int(tail)
    path = script if name == os.path.basename(script) else os.path.join(folder, name)
    if os.path.isabs(path):  # relative to where the command ran (a repository's root in CI)
        relative = os.path.relpath(path)
        path = path if relative.startswith("..") else relative
    return Location(path.replace(os.sep, "/"), line)


def escape_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (%, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (file, title): also `:` and `,`."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def message(finding: Finding, exporter: str | None) -> str:
    """The annotation's text: the slug and message, where, and the best verified fix."""
    parts = [f"{slug(finding.code)}: {finding.message}"]
    where = ", ".join(f"{key} {value}" for key, value in (("op", finding.op_label), ("node", finding.node)) if value)
    if where or exporter:
        parts.append("; ".join(p for p in (where, f"{exporter} exporter" if exporter else "") if p))
    fix = best_verified_fix(finding)
    if fix is not None:
        parts.append(f"verified fix: {fix.title}")
    elif finding.fixes:
        parts.append(f"fixes proposed: {len(finding.fixes)} (none verified)")
    parts.append(f"onnxdoctor explain {finding.code}")
    return "\n".join(parts)


def to_github(diagnoses: tuple[Diagnosis, ...], script: str) -> str:
    """Workflow command lines for every run's findings, then one summary line."""
    lines: list[str] = []
    shown: dict[Severity, int] = {}
    left: dict[Severity, int] = {}
    seen: set[tuple[str, str | None, str | None, str]] = set()
    for diagnosis in diagnoses:
        for finding in diagnosis.findings:
            key = (finding.code, finding.op, finding.source, finding.message)
            if key in seen:  # the same finding from both exporters is one annotation
                continue
            seen.add(key)
            if shown.get(finding.severity, 0) >= PER_KIND:
                left[finding.severity] = left.get(finding.severity, 0) + 1
                continue
            shown[finding.severity] = shown.get(finding.severity, 0) + 1
            place = locate(finding, script)
            properties = [f"file={escape_property(place.path)}"]
            if place.line is not None:
                properties.append(f"line={place.line}")
            properties.append(f"title={escape_property(finding.code)}")
            exporter = diagnosis.exporter if len(diagnoses) > 1 else None
            lines.append(f"::{_COMMANDS[finding.severity]} {','.join(properties)}::"
                         f"{escape_data(message(finding, exporter))}")
    counts = {s: shown.get(s, 0) + left.get(s, 0) for s in _COMMANDS}
    verdict = "healthy" if all(d.healthy for d in diagnoses) else "not healthy"
    summary = (f"onnxdoctor: {escape_data(diagnoses[0].target)}: {verdict}; {counts[Severity.ERROR]} error(s), "
               f"{counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} note(s)")
    rest = sum(left.values())
    if rest:
        summary += (f"; {rest} not annotated (GitHub shows {PER_KIND} per kind): "
                    "`onnxdoctor diagnose --format console` lists them all")
    lines.append(summary)
    return "\n".join(lines) + "\n"
