"""The JSON output (schema 2, README "Output contract"): stable keys, plain data, no colour."""

from __future__ import annotations

import json
import math
from typing import Any

from onnxdoctor import __version__
from onnxdoctor.codes import slug
from onnxdoctor.model import Diagnosis, Finding, Fix, SizeCheck, StageOutcome
from onnxdoctor.targets.matrix import target_dict

SCHEMA_VERSION = 2  # 2 added `targets` (README: output contract)


def stage_dict(outcome: StageOutcome) -> dict[str, Any]:
    """One stage outcome as JSON (schema 2)."""
    return {"stage": outcome.stage.value, "status": outcome.status.value, "seconds": round(outcome.seconds, 3)}


def fix_dict(fix: Fix) -> dict[str, Any]:
    """One fix and its check as JSON (schema 2)."""
    check = fix.check
    return {
        "kind": fix.kind,
        "title": fix.title,
        "snippet": fix.snippet,
        "applicability": fix.applicability.value,
        "cost": fix.cost,
        "verified": fix.verified,
        "reached": check.reached.value if check and check.reached else None,
        "failed_at": check.failed_at.value if check and check.failed_at else None,
        "status": check.status.value if check else None,
        "max_abs_diff": check.max_abs_diff if check else None,
        "max_rel_diff": check.max_rel_diff if check else None,
        "seconds": check.seconds if check else None,
        "detail": check.detail if check else None,
        # The fixed model per requested deployment target (empty unless --target asked for more).
        "targets": dict(check.targets) if check else {},
        # A chain's steps' kinds, in the order found (empty for a single fix).
        "steps": list(fix.steps),
        # The other input sizes the fixed model passed at (the SHAPES stage), e.g. "x=4x12".
        "sizes": list(check.sizes) if check else [],
    }


def finding_dict(finding: Finding) -> dict[str, Any]:
    """One finding with its fixes as JSON (schema 2)."""
    return {
        "code": finding.code,
        "slug": slug(finding.code),
        "stage": finding.stage.value,
        "severity": finding.severity.value,
        "message": finding.message,
        "op": finding.op,
        # The op's two names where the export knows both (`op` is one of them, or neither for a
        # custom domain's node): the ONNX node's `domain::op_type` and the torch op behind it.
        "onnx_op": finding.onnx_op,
        "torch_op": finding.torch_op,
        "node": finding.node,
        "source": finding.source,
        "opset": finding.opset,
        "evidence": list(finding.evidence),
        "notes": list(finding.notes),
        "fixes": [fix_dict(f) for f in finding.fixes],
    }


def diagnosis_dict(diagnosis: Diagnosis) -> dict[str, Any]:
    """One diagnosis as JSON (schema 2)."""
    return {
        "target": diagnosis.target,
        "exporter": diagnosis.exporter,
        "healthy": diagnosis.healthy,
        "stages": [stage_dict(s) for s in diagnosis.stages],
        "findings": [finding_dict(f) for f in diagnosis.findings],
        "shapes": [size_dict(c) for c in diagnosis.shapes],
    }


def size_dict(check: SizeCheck) -> dict[str, Any]:
    """One size the SHAPES stage checked: `inputs` ({name: shape}), `status` ("passed", "failed",
    "refused"), `max_abs_diff`, `error`."""
    return {"inputs": {name: list(shape) for name, shape in check.inputs}, "status": check.status,
            "max_abs_diff": check.max_abs_diff, "error": check.error}


def error_json(code: str, message: str) -> str:
    """The one JSON object `--json` prints when the command could not give a diagnosis (a usage
    error, a refused output, an internal error): `schema`, `tool_version` and `error`."""
    document = {"schema": SCHEMA_VERSION, "tool_version": __version__,
                "error": {"code": code, "message": message}}
    return json.dumps(document, indent=2, default=str)


def to_json(diagnoses: tuple[Diagnosis, ...], error: dict[str, str] | None = None) -> str:
    """Schema 2. `runs` holds every run (one per exporter); the top level sums them up: `healthy`
    only when every run is, `findings` from every run (each with its `exporter`), `stages` and
    `exporter` of the first run. `error` (code, message) says what the command then failed to do
    (an output it could not write)."""
    first = diagnoses[0]
    findings = [
        {**finding_dict(f), "exporter": d.exporter} for d in diagnoses for f in d.findings
    ]
    document: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "tool_version": __version__,
        **diagnosis_dict(first),
        "healthy": all(d.healthy for d in diagnoses),
        "findings": findings,
        "versions": first.versions,
        "runs": [diagnosis_dict(d) for d in diagnoses],
        "targets": [target_dict(t) for t in first.targets],
    }
    if error is not None:
        document["error"] = dict(error)
    return json.dumps(finite(document), indent=2, default=str, allow_nan=False)


def finite(value: Any) -> Any:
    """NaN and infinities are not JSON: they become null (in dicts and lists, at any depth)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value
