"""`diagnose --format sarif`: SARIF 2.1.0 for code-scanning tools (GitHub's among them).

One rule per code that occurs (its explanation and where that text is), one result per finding,
located at the user's file and line. Fields are added, never renamed without a deprecation note
(docs/api.md).
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from onnxdoctor import __version__
from onnxdoctor.codes import explanation, get_code, slug
from onnxdoctor.model import Diagnosis, Finding, Severity
from onnxdoctor.render.github import locate, message
from onnxdoctor.render.jsonout import finite, fix_dict

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def help_uri(code: str) -> str:
    """The explanation's file as installed (a file: URI): the project publishes no web page, and
    `onnxdoctor explain CODE` prints the same text."""
    return Path(str(resources.files("onnxdoctor").joinpath(f"explanations/{code}.md"))).absolute().as_uri()


def _first_section(text: str) -> str:
    """The "What it means" paragraph of an explanation, as plain text."""
    body = text.split("\n## ", 2)
    section = body[1].split("\n", 1)[1] if len(body) > 1 and "\n" in body[1] else text
    return " ".join(section.split())


def rule(code: str) -> dict[str, Any]:
    """One SARIF reportingDescriptor: the code, its slug, summary and explanation."""
    entry = get_code(code)
    text = explanation(code)
    return {
        "id": code,
        "name": slug(code),
        "shortDescription": {"text": entry.summary},
        "fullDescription": {"text": _first_section(text)},
        "help": {"text": text, "markdown": text},
        "helpUri": help_uri(code),
        "defaultConfiguration": {"level": _LEVELS[entry.severity]},
        "properties": {"tags": [entry.stage.value]},
    }


def _uri(path: str) -> str:
    """A relative path as a relative URI reference; an absolute one as a file: URI."""
    if os.path.isabs(path):
        return Path(path).as_uri()
    return quote(path, safe="/")


def result(finding: Finding, script: str, rule_index: int, exporter: str | None) -> dict[str, Any]:
    """One SARIF result: the finding at the user's file and line, its fixes as properties."""
    place = locate(finding, script)
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(place.path)}}
    if not os.path.isabs(place.path):
        physical["artifactLocation"]["uriBaseId"] = "%SRCROOT%"
    if place.line is not None:
        physical["region"] = {"startLine": place.line}
    # SARIF's own `fixes` are file edits; ours are code to paste, so they live in the property bag.
    properties: dict[str, Any] = {
        "stage": finding.stage.value, "op": finding.op, "onnx_op": finding.onnx_op, "torch_op": finding.torch_op, "node": finding.node, "source": finding.source,
        "opset": finding.opset, "exporter": exporter, "notes": list(finding.notes),
        "fixes": [fix_dict(f) for f in finding.fixes],
    }
    return {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": _LEVELS[finding.severity],
        "message": {"text": message(finding, None)},
        "locations": [{"physicalLocation": physical}],
        "properties": {k: v for k, v in properties.items() if v not in (None, [])},
    }


def to_sarif(diagnoses: tuple[Diagnosis, ...], script: str) -> str:
    """A SARIF 2.1.0 log with one run of onnxdoctor over every exporter run's findings."""
    codes: list[str] = []
    results: list[dict[str, Any]] = []
    for diagnosis in diagnoses:
        for finding in diagnosis.findings:
            if finding.code not in codes:
                codes.append(finding.code)
            results.append(result(finding, script, codes.index(finding.code), diagnosis.exporter))
    base = Path.cwd().as_uri().rstrip("/") + "/"
    log = {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {
                "name": "onnxdoctor",
                "version": __version__,
                "semanticVersion": __version__,
                "rules": [rule(code) for code in codes],
            }},
            "originalUriBaseIds": {"%SRCROOT%": {"uri": base}},
            "invocations": [{"executionSuccessful": True}],
            "results": results,
            "properties": {
                "healthy": all(d.healthy for d in diagnoses),
                "runs": [{"exporter": d.exporter, "healthy": d.healthy,
                          "stages": [{"stage": s.stage.value, "status": s.status.value} for s in d.stages]}
                         for d in diagnoses],
            },
        }],
    }
    return json.dumps(finite(log), indent=2, default=str, allow_nan=False)
