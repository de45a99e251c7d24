"""Each working fix's model judged by every requested target: the fix x target matrix.

ONNX Runtime CPU's verdict is the fix check itself; a static table judges the fixed model's file;
OpenVINO's is the run the fix's worker made of the fixed model (its `target` event). A fix for a
target's own finding works only when that target no longer has the finding's problem with the
fixed model and reports nothing new (docs/targets.md, "Fixes per target").

Every fixed model is read and judged once per target, however many findings share the fix: a
model with 5,000 refused nodes must not be re-judged 5,000 times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from onnxdoctor.model import Finding, Fix, FixCheck, Status, TargetGap
from onnxdoctor.targets import get_target
from onnxdoctor.targets.matrix import matrix_rows
from onnxdoctor.targets.verdict import TargetResult

# What a fix run left: its worker's events and the run id the fix ran under (by recipe key).
FixRuns = Mapping[str, tuple[Any, str]]


@dataclass
class FixJudge:
    """Judges fixed models by the requested targets, reading and checking each model once."""

    targets: tuple[TargetResult, ...]
    runs: FixRuns
    # (artifact, target) -> the table's verdict on that fixed model; artifact -> the model (or None).
    _judged: dict[tuple[str, str], TargetResult] = field(default_factory=dict)
    _models: dict[str, Any] = field(default_factory=dict)
    checks: int = 0  # how many table checks ran (the cost the cache bounds)

    def judge(self, findings: Sequence[Finding]) -> list[Finding]:
        """Every finding with each working fix's per-target verdicts filled in."""
        return [self.judge_one(f) for f in findings]

    def judge_one(self, finding: Finding) -> Finding:
        """One finding: each working fix with a model file gets one verdict per target."""
        if not self.targets or not any(f.check and f.check.works and f.check.artifact for f in finding.fixes):
            return finding
        own = finding.detail.target if isinstance(finding.detail, TargetGap) else _named_target(finding)
        return replace(finding, fixes=tuple(self._fix(finding, fix, own) for fix in finding.fixes))

    def _fix(self, finding: Finding, fix: Fix, own: str | None) -> Fix:
        check = fix.check
        if check is None or not check.works or not check.artifact:
            return fix
        verdicts: list[tuple[str, str]] = [("ort-cpu", check.reached.value if check.reached else "passed")]
        still = False
        for result in self.targets:
            if result.target in ("ort-cpu", "script"):
                continue
            if result.target == "openvino":
                verdict = openvino_verdict(self.runs.get(fix.recipe.key()) if fix.recipe else None)
                verdicts.append(("openvino", verdict))
                still = still or (own == "openvino" and verdict not in ("parity", "passed"))
                continue
            judged = self._table(check.artifact, result.target)
            # A GPU provider's real run is the main model's; fixed models get its table's verdict.
            if judged is None:
                verdicts.append((result.target, "not checked"))
                still = still or own == result.target
                continue
            row = matrix_rows((judged,))[0]
            verdicts.append((result.target, f"refuses {row.unsupported} node(s)" if row.unsupported
                             else f"{row.verdict} ({row.partly} node(s))" if row.partly else row.verdict))
            if own == result.target:
                check, failed = _own_target(finding, check, judged, result, own)
                still = still or failed
        check = replace(check, targets=tuple(verdicts))
        if still:
            check = replace(check, status=Status.FAILED, problem=finding.code,
                            detail=check.detail or f"{own} still does not take the fixed model")
        return replace(fix, check=check)

    def _table(self, artifact: str, target: str) -> TargetResult | None:
        if get_target(target).kind != "table":
            return None
        key = (artifact, target)
        if key not in self._judged:
            model = self._model(artifact)
            if model is None:
                return None
            from onnxdoctor.targets.tables import check_model

            self.checks += 1
            self._judged[key] = check_model(target, model)
        return self._judged[key]

    def _model(self, artifact: str) -> Any:
        if artifact not in self._models:
            from onnxdoctor.onnxkit.files import OnnxFileError, read_onnx

            try:
                self._models[artifact] = read_onnx(Path(artifact), load_external_data=False)
            except OnnxFileError:
                self._models[artifact] = None
        return self._models[artifact]


def _own_target(finding: Finding, check: FixCheck, judged: TargetResult, before: TargetResult,
                own: str) -> tuple[FixCheck, bool]:
    """Whether a fix for `own`'s finding still leaves `own` with the problem, or brings a new one."""
    problems = target_problems(judged.findings)
    brought = problems - target_problems(before.findings)
    if (finding.code, finding.op) not in problems and not brought:
        return check, False
    new_ops = ", ".join(sorted(str(op) for _code, op in brought))
    detail = (f"the fixed model has {new_ops}, which {own} does not take" if brought
              else f"{own} still reports {finding.op} in the fixed model")
    return replace(check, detail=detail), True


def _named_target(finding: Finding) -> str | None:
    """The target a finding without a gap is about, where fixed models are judged by a real run of
    it (OpenVINO's OD702-OD704), so that a fix for it works only where that target takes the fixed
    model."""
    # Only OpenVINO's: the fix workers run it on each fixed model (a GPU provider's findings are
    # the main model's run, and fixed models get its static table's verdict, which saw other things).
    if finding.code in ("OD702", "OD703", "OD704") and finding.message.startswith("[openvino]"):
        return "openvino"
    return None


def target_problems(findings: Sequence[Finding]) -> set[tuple[str, str | None]]:
    """The (code, op) pairs a target reported: what a fix must not leave or bring."""
    return {(f.code, f.op) for f in findings}


def openvino_verdict(run: tuple[Any, str] | None) -> str:
    """What OpenVINO did with a fixed model, from the fix run's `target` event."""
    if run is None:
        return "not run"
    result, run_id = run
    record = next((e for e in result.events if e.get("event") == "target" and e.get("target") == "openvino"
                   and e.get("run", "main") == run_id), None)
    if record is None:
        return "not run"
    if record.get("status") == "passed":
        return str(record.get("reached") or "passed")
    step = record.get("step") or record.get("reached") or "?"
    return f"failed at {step}"
