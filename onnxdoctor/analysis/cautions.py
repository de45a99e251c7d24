"""Findings about runs that passed: mode, opset substitution, frozen traces, dims that went static."""

from __future__ import annotations

import re
from dataclasses import replace

from onnxdoctor.analysis.findings import _finding, _from_record
from onnxdoctor.analysis.normalize import normalize_message
from onnxdoctor.model import (
    Finding,
    Severity,
    Stage,
    StageOutcome,
    Status,
)


def _warnings(stages: list[StageOutcome], base_dir: str | None) -> list[Finding]:
    found: list[Finding] = []
    by_stage = {s.stage: s for s in stages}
    load = by_stage.get(Stage.LOAD)
    export = by_stage.get(Stage.EXPORT)
    if load and load.facts.get("training") and load.facts.get("mode_sensitive_modules"):
        modules = load.facts["mode_sensitive_modules"]
        found.append(
            _finding(
                "OD206",
                Stage.EXPORT,
                f"the model is in training mode and has {len(modules)} mode-sensitive module(s) "
                f"({', '.join(modules[:3])}); the export and the outputs depend on it",
                evidence=tuple(w for w in (export.warnings if export else ()) if "training" in w)[:2],
            )
        )
    if export and export.status is Status.PASSED:
        requested = export.facts.get("requested_opset")
        written = export.facts.get("written_opset")
        exporter = export.facts.get("exporter", "")
        ceiling = export.facts.get("exporter_max_opset")
        if requested and ((ceiling and int(requested) > int(ceiling)) or
                          (written and exporter == "dynamo" and int(requested) > int(written))):
            limit = f"its maximum is {ceiling}" if ceiling else f"it wrote opset {written} instead"
            found.append(
                _finding(
                    "OD209",
                    Stage.EXPORT,
                    f"opset {requested} is beyond what the {exporter} exporter supports ({limit})",
                    opset=int(requested),
                    evidence=tuple(w for w in export.warnings if "opset" in w.lower())[:2],
                )
            )
        elif requested and written and int(requested) != int(written):
            found.append(
                _finding(
                    "OD207",
                    Stage.EXPORT,
                    f"opset {requested} was requested but the {export.facts.get('exporter', '')} exporter "
                    f"wrote opset {written}",
                    opset=int(written),
                )
            )
    frozen = [w for w in (export.warnings if export else ()) if "might cause the trace to be incorrect" in w]
    if export and export.status is Status.PASSED and frozen:
        found.append(
            _finding(
                "OD210",
                Stage.EXPORT,
                "the TorchScript tracer turned a tensor into a Python value (a branch or a number) and "
                "recorded only what the example input did: other inputs can give wrong results "
                "without any error",
                source=_warning_source(frozen[0], base_dir),
                evidence=tuple(normalize_message(w, base_dir=base_dir, limit=500) for w in frozen[:2]),
            )
        )
    if export and export.facts.get("dynamic_shapes_requested") and (
        export.facts.get("symbolic_input_dims") == 0 or export.facts.get("dynamic_shapes_violation")
    ):
        found.append(_dynamic_dims_finding(export, base_dir))
    parity = by_stage.get(Stage.PARITY)
    nones = load.facts.get("none_outputs", 0) if load else 0
    if parity and parity.status is Status.PASSED and nones:
        total = len(load.facts.get("outputs", [])) + nones
        found.append(
            replace(
                _finding(
                    "OD602",
                    Stage.PARITY,
                    f"PyTorch returns {total} outputs, {nones} of them None; the ONNX model has "
                    f"{total - nones}: the exporter drops None outputs, so code that unpacks "
                    f"{total} values from ONNX Runtime breaks",
                ),
                severity=Severity.WARNING,
            )
        )
    run = by_stage.get(Stage.ORT_RUN)
    if run and run.status is Status.PASSED and "model_inputs" in run.facts:
        names, given = run.facts["model_inputs"], run.facts.get("example_tensors", 0)
        if len(names) < given:
            found.append(
                _finding(
                    "OD502",
                    Stage.ORT_RUN,
                    f"the exported model takes {len(names)} input(s) ({', '.join(names)}) but the example "
                    f"inputs hold {given} tensors: the exporter dropped unused input(s), so feeding the "
                    "model by the original input names fails",
                )
            )
    check = by_stage.get(Stage.CHECK)
    if check and check.status is Status.PASSED:
        for record in check.facts.get("findings", []):
            found.append(_from_record(record, base_dir))
    return found


def _warning_source(text: str, base_dir: str | None) -> str | None:
    match = re.search(r"([\w.\-/]+\.py):(\d+)", text)
    if match and "site-packages" not in match.group(1):
        return f"{match.group(1).rsplit('/', 1)[-1]}:{match.group(2)}"
    return None


def _dynamic_dims_finding(export: StageOutcome, base_dir: str | None) -> Finding:
    """OD208 for an export that succeeded although torch.export rejects the user's Dims."""
    violation = str(export.facts.get("dynamic_shapes_violation") or "")
    reason = next(
        (ln.strip(" -") for ln in violation.splitlines() if "specialized" in ln or "Not all values" in ln
         or "must always be" in ln), ""
    )
    suggested = [str(x) for x in export.facts.get("dynamic_shapes_suggested") or ()]
    equalities = bool(suggested) and all(re.fullmatch(r"\w+ = [A-Za-z_]\w*", x) for x in suggested)
    severity = Severity.ERROR
    if export.facts.get("symbolic_input_dims") == 0:
        message = (
            "dynamic_shapes were requested but every input dimension of the exported model is static "
            "(the model only accepts the example shapes)"
        )
    elif equalities:
        # torch.onnx merged Dims the model needs equal: the model is right, the declaration was not.
        severity = Severity.WARNING
        message = f"torch.onnx merged dims the model needs equal ({'; '.join(suggested)}) without saying so"
    else:
        message = (
            "torch.onnx relaxed the Dims without saying so"
            + (f" (to {'; '.join(suggested)})" if suggested else "")
            + ": the ONNX model cannot check that condition, so other sizes give wrong answers without "
            "an error"
        )
    if reason:
        # torch's first sentence names the dim; the rest is advice about mark_dynamic and Dim.DYNAMIC.
        message += ": torch.export says " + normalize_message(_readable_guard(reason.split(". ")[0]),
                                                             base_dir=base_dir, limit=240)
    evidence = tuple(normalize_message(ln, base_dir=base_dir, limit=300) for ln in violation.splitlines()[:6])
    if not evidence:
        evidence = tuple(w for w in export.warnings if "dynamic" in w.lower() or "special" in w.lower())[:2]
    return replace(_finding("OD208", Stage.EXPORT, message, evidence=evidence), severity=severity)


def _readable_guard(text: str) -> str:
    """torch's guard notation in the user's terms: L['x'].size()[0] is x.shape[0]."""
    text = re.sub(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]", r"\1.shape[\2]", text)
    return re.sub(r" and [\w.\[\]]+ <= IntInfinity\(\)", "", text)
