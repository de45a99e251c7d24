"""The message of `onnxdoctor.testing.assert_exportable`'s AssertionError: codes, ops, lines, fixes."""

from __future__ import annotations

from onnxdoctor.codes import slug
from onnxdoctor.model import Diagnosis, Finding, Fix, Severity, Status
from onnxdoctor.safetext import printable


def best_verified_fix(finding: Finding) -> Fix | None:
    """The first fix that reached the end of the pipeline (fixes come ranked best first)."""
    return next((fix for fix in finding.fixes if fix.verified), None)


def failure_message(diagnoses: tuple[Diagnosis, ...]) -> str:
    """Why the model does not export cleanly, one block per error finding."""
    first = diagnoses[0]
    lines = [f"{printable(first.target, one_line=True)} does not export cleanly to ONNX (onnxdoctor):"]
    for diagnosis in diagnoses:
        failed = [s for s in diagnosis.stages if s.status not in (Status.PASSED, Status.SKIPPED)]
        ladder = ", ".join(f"{s.stage.value} {s.status.value}" for s in failed)
        exporter = f"{diagnosis.exporter} exporter" if diagnosis.exporter else "no export"
        lines.append(f"  [{exporter}]" + (f" {ladder}" if ladder else ""))
        errors = [f for f in diagnosis.findings if f.severity is Severity.ERROR]
        for finding in errors:
            lines.extend(_finding(finding))
        warnings = [f.code for f in diagnosis.findings if f.severity is Severity.WARNING]
        if warnings:
            lines.append(f"  warnings: {', '.join(warnings)}")
    lines.append("  (`onnxdoctor explain CODE` says more about each code)")
    return "\n".join(lines)


def _finding(finding: Finding) -> list[str]:
    where = "   ".join(f"{key}: {value}" for key, value in (("op", finding.op_label), ("node", finding.node),
                                                           ("source", finding.source)) if value)
    lines = [f"  {finding.code} {slug(finding.code)}: {printable(finding.message, one_line=True)}"]
    if where:
        lines.append(f"    {printable(where, one_line=True)}")
    fix = best_verified_fix(finding)
    if fix is None:
        tried = sum(1 for f in finding.fixes if f.check is not None)
        lines.append(f"    no verified fix ({len(finding.fixes)} proposed, {tried} tried)")
        return lines
    check = fix.check
    figures = f", max abs diff {check.max_abs_diff:.2g}" if check and check.max_abs_diff is not None else ""
    lines.append(f"    best verified fix{figures}: {printable(fix.title, one_line=True)}")
    lines.extend(f"      {printable(line)}".rstrip() for line in fix.snippet.rstrip().splitlines())
    return lines
