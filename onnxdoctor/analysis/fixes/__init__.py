"""Fix families, one module each; `propose_fixes` asks every family that answers a finding's code.

A fix carries a snippet tailored to the finding and a `recipe` the worker applies to verify it.
The recipe's `prelude` is the snippet itself (or its registration part), so what is verified is
what the user is shown. Recipes marked `isolated` change process-wide state (torch's symbolic
registry, the model's mode) and are verified in a fresh worker.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from onnxdoctor.analysis.fixes import (
    aten_fallback,
    contrib_ops,
    control_flow,
    custom_op,
    decompose,
    dynamic_shapes,
    eval_mode,
    exporter,
    onnx_file,
    opset,
    outputs,
    rewrite,
    runtime,
)
from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Finding, Fix

FAMILIES = (
    eval_mode, dynamic_shapes, control_flow, decompose, rewrite, custom_op, opset, onnx_file, contrib_ops,
    exporter, runtime, aten_fallback, outputs,
)

__all__ = ["FAMILIES", "FixContext", "propose_fixes"]


def propose_fixes(finding: Finding, context: dict[str, Any]) -> list[Fix]:
    """Candidate fixes for one finding, best first (before verification reorders them)."""
    ctx = FixContext.build(finding, context)
    fixes: list[Fix] = []
    for family in FAMILIES:
        if finding.code in family.CODES:
            fixes.extend(family.propose(finding, ctx))
    return _unique(fixes)


def notes_for(finding: Finding, context: dict[str, Any]) -> tuple[str, ...]:
    """Plain statements about popular advice that does not apply here."""
    ctx = FixContext.build(finding, context)
    notes: list[str] = []
    for family in FAMILIES:
        if finding.code in family.CODES and hasattr(family, "notes"):
            notes.extend(n for n in family.notes(finding, ctx) if n not in notes)
    return tuple(notes)


def with_fixes(finding: Finding, context: dict[str, Any]) -> Finding:
    """The finding with its proposed fixes and notes attached."""
    return replace(finding, fixes=tuple(propose_fixes(finding, context)), notes=notes_for(finding, context))


def _unique(fixes: list[Fix]) -> list[Fix]:
    seen: set[str] = set()
    result = []
    for fix in fixes:
        key = fix.kind + "|" + repr(sorted((k, repr(v)) for k, v in fix.recipe.items())) + fix.title
        if key not in seen:
            seen.add(key)
            result.append(fix)
    return result
