"""The JSON output (schema 1, DESIGN §4): stable keys, plain data, no colour."""

from __future__ import annotations

import json
from typing import Any

from onnxdoctor import __version__
from onnxdoctor.model import Diagnosis, Finding, Fix, StageOutcome

SCHEMA_VERSION = 1


def stage_dict(outcome: StageOutcome) -> dict[str, Any]:
    return {"stage": outcome.stage.value, "status": outcome.status.value, "seconds": round(outcome.seconds, 3)}


def fix_dict(fix: Fix) -> dict[str, Any]:
    check = fix.check
    return {
        "kind": fix.kind,
        "title": fix.title,
        "snippet": fix.snippet,
        "applicability": fix.applicability.value,
        "cost": fix.cost,
        "verified": fix.verified,
        "reached": check.reached.value if check and check.reached else None,
        "status": check.status.value if check else None,
        "max_abs_diff": check.max_abs_diff if check else None,
        "max_rel_diff": check.max_rel_diff if check else None,
        "seconds": check.seconds if check else None,
        "detail": check.detail if check else None,
    }


def finding_dict(finding: Finding) -> dict[str, Any]:
    return {
        "code": finding.code,
        "slug": finding.slug,
        "stage": finding.stage.value,
        "severity": finding.severity.value,
        "message": finding.message,
        "op": finding.op,
        "node": finding.node,
        "source": finding.source,
        "opset": finding.opset,
        "evidence": list(finding.evidence),
        "notes": list(finding.notes),
        "fixes": [fix_dict(f) for f in finding.fixes],
    }


def diagnosis_dict(diagnosis: Diagnosis) -> dict[str, Any]:
    return {
        "target": diagnosis.target,
        "exporter": diagnosis.exporter,
        "healthy": diagnosis.healthy,
        "stages": [stage_dict(s) for s in diagnosis.stages],
        "findings": [finding_dict(f) for f in diagnosis.findings],
    }


def to_json(diagnoses: tuple[Diagnosis, ...]) -> str:
    """Schema 1: the first run's keys at top level; `runs` holds every run (one per exporter)."""
    first = diagnoses[0]
    document: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "tool_version": __version__,
        **diagnosis_dict(first),
        "versions": first.versions,
        "runs": [diagnosis_dict(d) for d in diagnoses],
    }
    return json.dumps(document, indent=2, default=str)
