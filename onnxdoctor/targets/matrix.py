"""The target matrix (target x step reached, node counts) as plain rows for every renderer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxdoctor.targets.verdict import TargetResult

STATIC_LINE = "static = a verdict from the runtime's published operator table, not a run"


@dataclass(frozen=True)
class MatrixRow:
    """One target's line: what it is, how far the model got, and how many nodes it refuses."""

    target: str
    kind: str
    reached: str
    verdict: str
    unsupported: int
    partly: int
    note: str


def matrix_rows(targets: tuple[TargetResult, ...]) -> list[MatrixRow]:
    """One row per target, in the order they were asked for."""
    rows = []
    for t in targets:
        unsupported = t.counts.get("unsupported", 0)
        fallback = t.counts.get("fallback", 0)
        # The matrix has one column for nodes that run, but not as asked: restricted or on the CPU.
        partly = t.counts.get("partly", 0) + fallback
        if t.status == "static":
            verdict = ("refuses nodes" if unsupported else "CPU fallback" if fallback
                       else "restricted" if partly else "all ops listed")
        else:
            verdict = t.status
        rows.append(MatrixRow(t.target, "static" if t.kind == "table" else "run", t.reached or "-",
                              verdict, unsupported, partly, t.note))
    return rows


def document_lines(targets: tuple[TargetResult, ...]) -> list[str]:
    """One line per static table judged: which document, at which revision and date, it read."""
    return [f"{t.target}: {t.document}" for t in targets if t.kind == "table" and t.document]


def target_dict(result: TargetResult) -> dict[str, Any]:
    """One target as JSON (schema 2, `targets` array)."""
    return {
        "target": result.target,
        "kind": "static" if result.kind == "table" else "run",
        "reached": result.reached,
        "status": result.status,
        "counts": dict(result.counts),
        "seconds": round(result.seconds, 4),
        "added_seconds": result.added_seconds,
        "max_abs_diff": result.max_abs_diff,
        "note": result.note,
        "document": result.document or None,
        "findings": [f.code for f in result.findings],
        "nodes": [
            {"node": v.node, "op": v.op, "status": v.status.value, "reason": v.reason, "source": v.source}
            for v in result.verdicts if v.status.value != "supported"
        ],
    }
