"""The pure layer on hand-built records: no torch, no worker, milliseconds per test.

Worker events -> stage ladder (judge.outcomes_for_run) -> findings (classify) -> fixes (families)
-> fix verdicts (judge.fix_check); and the renderers against golden files (tests/goldens/).
"""

from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from onnxdoctor.analysis.classify import classify
from onnxdoctor.analysis.fixes import propose_fixes
from onnxdoctor.analysis.judge import fix_check, outcomes_for_run, prepare_findings
from onnxdoctor.model import (
    Applicability,
    DiagnoseOptions,
    Diagnosis,
    DynamicShapesKeys,
    ErrorInfo,
    Finding,
    Fix,
    FixCheck,
    IrTooNew,
    Severity,
    Stage,
    StageOutcome,
    Status,
)
from onnxdoctor.pipeline import FIX_RUN_FACTOR, FIX_RUN_FLOOR, fix_run_cap
from onnxdoctor.protocol import WorkerResult
from onnxdoctor.recipe import Recipe, RewriteOnnx, SetIrVersion, UseExporter
from onnxdoctor.render.console import render_diagnoses
from onnxdoctor.render.markdown import to_markdown
from onnxdoctor.target import Target

GOLDENS = Path(__file__).resolve().parent / "goldens"
SCRIPT = Target(path=Path("/models/model.py"), factory=None, kind="script")
FILE = Target(path=Path("/models/model.onnx"), factory=None, kind="onnx")


def _stage(run: str, stage: str, status: str = "passed", **extra: Any) -> dict[str, Any]:
    return {"event": "stage", "run": run, "stage": stage, "status": status, "seconds": 0.5, **extra}


def _result(events: list[dict[str, Any]], *, timed_out: bool = False, returncode: int | None = 0) -> WorkerResult:
    return WorkerResult(events=events, returncode=returncode, ended_at=time.time(), timed_out=timed_out,
                        seconds=3.0)


# ---- events -> stage ladder ---------------------------------------------------------------------


def test_a_stage_that_started_and_never_ended_is_crashed_and_the_rest_not_reached() -> None:
    events = [{"event": "start", "run": "main", "stage": "load", "time": time.time()},
              _stage("main", "load"),
              {"event": "start", "run": "main", "stage": "export", "time": time.time()}]
    outcomes, tool = outcomes_for_run(_result(events, returncode=-11), "main", SCRIPT)
    assert [o.status for o in outcomes] == [Status.PASSED, Status.CRASHED] + [Status.SKIPPED] * 4
    assert [f.code for f in tool] == ["OD901"] and "SIGSEGV" in tool[0].message


def test_a_killed_worker_is_timed_out_at_the_stage_it_was_in() -> None:
    events = [_stage("main", "load"), {"event": "start", "run": "main", "stage": "export", "time": time.time()}]
    outcomes, tool = outcomes_for_run(_result(events, timed_out=True, returncode=-9), "main", SCRIPT)
    assert outcomes[1].status is Status.TIMED_OUT
    assert [f.code for f in tool] == ["OD902"]


def test_a_fix_check_stopped_by_its_cap_says_which_limit_stopped_it() -> None:
    events = [_stage("main", "load"), {"event": "start", "run": "main", "stage": "export", "time": time.time()}]
    capped = _result(events, timed_out=True, returncode=-9)
    capped.extra["fix_run_cap"] = 1200.0
    _, tool = outcomes_for_run(capped, "main", SCRIPT)
    assert [f.code for f in tool] == ["OD902"] and "may run 1200 s; --fix-timeout" in tool[0].message
    _, tool = outcomes_for_run(_result(events, timed_out=True, returncode=-9), "main", SCRIPT)
    assert "raise --timeout" in tool[0].message and "--fix-timeout" not in tool[0].message


def test_a_fix_check_gets_a_multiple_of_the_main_runs_stages() -> None:
    quick = [{**_stage("main", s), "seconds": 1.0} for s in ("load", "export", "check")]
    slow = [{**_stage("main", s), "seconds": 40.0} for s in ("load", "export", "check")]
    # Another run's stages (a fix the main worker checked in passing) are not the model's cost.
    others = [{**_stage("plan0", s), "seconds": 500.0} for s in ("load", "export")]
    assert fix_run_cap(_result(quick + others)) == FIX_RUN_FLOOR
    assert fix_run_cap(_result(slow)) == FIX_RUN_FACTOR * 120.0


def test_an_onnx_file_has_no_export_or_parity_stage() -> None:
    events = [_stage("main", s) for s in ("load", "check", "ort_load", "ort_run")] + [
        {"event": "run_done", "run": "main"}]
    outcomes, tool = outcomes_for_run(_result(events), "main", FILE)
    assert [o.stage for o in outcomes] == [Stage.LOAD, Stage.CHECK, Stage.ORT_LOAD, Stage.ORT_RUN]
    assert tool == [] and all(o.status is Status.PASSED for o in outcomes)


# ---- outcomes -> findings -> fixes ----------------------------------------------------------------


def _failed(stage: Stage, message: str, **facts: Any) -> StageOutcome:
    error = ErrorInfo(type="builtins.RuntimeError", message=message)
    return StageOutcome(stage, Status.FAILED, 0.1, error=error, facts=facts)


def test_an_ir_version_too_new_is_OD403_with_its_figures_as_data() -> None:
    outcomes = [StageOutcome(Stage.LOAD, Status.PASSED), StageOutcome(Stage.CHECK, Status.PASSED),
                _failed(Stage.ORT_LOAD, "Unsupported model IR version: 15, max supported IR version: 11")]
    findings = classify(outcomes)
    assert [f.code for f in findings][:1] == ["OD403"]
    assert findings[0].detail == IrTooNew(model_ir=15, max_ir=11)
    fixes = propose_fixes(findings[0], {"target": FILE, "outcomes": outcomes})
    assert [_rewrite(f) for f in fixes] == [SetIrVersion(11)]


def test_a_torchscript_symbolic_that_gives_up_names_the_op_and_why() -> None:
    message = ("Unsupported: ONNX export of operator Sort, Ascending is not supported. Please feel free "
               "to request support or submit a pull request on PyTorch GitHub: https://github.com/pytorch")
    outcomes = [StageOutcome(Stage.LOAD, Status.PASSED),
                _failed(Stage.EXPORT, message, exporter="torchscript")]
    (finding,) = [f for f in classify(outcomes) if f.severity is Severity.ERROR]
    assert finding.code == "OD299" and finding.op == "aten::sort"
    assert "Ascending is not supported" in finding.message


def test_an_unrelated_error_that_mentions_symbolic_is_not_blamed_on_a_symbolic() -> None:
    message = ("Detected that you are using FX to torch.jit.trace a dynamo-optimized function. This is "
               "not supported at the moment. (symbolic_trace)")
    error = ErrorInfo(type="builtins.RuntimeError", message=message,
                      traceback_tail='File ".../torch/onnx/utils.py", line 1, in export')
    outcomes = [StageOutcome(Stage.LOAD, Status.PASSED),
                StageOutcome(Stage.EXPORT, Status.FAILED, error=error, facts={"exporter": "torchscript"})]
    (finding,) = [f for f in classify(outcomes) if f.severity is Severity.ERROR]
    assert finding.code == "OD299" and "dynamo-optimized function" in finding.message


def test_the_headline_is_the_cause_torch_wraps_not_its_preamble() -> None:
    preamble = ("Failed to decompose the FX graph for ONNX compatibility. This is step 2/3 of exporting "
                "the model to ONNX. Next steps:\n- Create an issue ...")
    cause = "Cannot view a tensor with shape torch.Size([2, 3]) and strides (1, 2) as a tensor with shape (6,)!"
    error = ErrorInfo(type="torch.onnx._internal.exporter._errors.TorchExportError", message=preamble,
                      chain=("torch.onnx.TorchExportError", "builtins.RuntimeError"),
                      chain_messages=(cause,))
    outcomes = [StageOutcome(Stage.LOAD, Status.PASSED),
                StageOutcome(Stage.EXPORT, Status.FAILED, error=error, facts={"exporter": "dynamo"})]
    (finding,) = [f for f in classify(outcomes) if f.severity is Severity.ERROR]
    assert finding.message.startswith("Cannot view a tensor with shape")
    assert "failed to decompose the FX graph for ONNX compatibility" in finding.message


def test_the_ir_fix_reads_the_figures_not_the_message() -> None:
    finding = Finding("OD403", Stage.ORT_LOAD, Severity.ERROR, "reworded by someone (max 99)",
                      detail=IrTooNew(model_ir=15, max_ir=10))
    fixes = propose_fixes(finding, {"target": FILE, "outcomes": []})
    assert [_rewrite(f) for f in fixes] == [SetIrVersion(10)]


def test_mis_keyed_dynamic_shapes_get_the_key_rename_from_data() -> None:
    finding = Finding("OD208", Stage.EXPORT, Severity.ERROR, "keys differ",
                      detail=DynamicShapesKeys(wanted=("x", "mask"), given=("input", "mask")))
    fixes = propose_fixes(finding, {"target": SCRIPT, "outcomes": []})
    assert fixes and "'input' -> 'x'" in fixes[0].title + fixes[0].snippet


def test_prepare_findings_pins_fixes_to_the_runs_exporter() -> None:
    outcomes = [StageOutcome(Stage.LOAD, Status.PASSED, facts={"training": True,
                                                                "mode_sensitive_modules": ["drop (Dropout)"]}),
                StageOutcome(Stage.EXPORT, Status.PASSED, facts={"exporter": "torchscript"}),
                StageOutcome(Stage.CHECK, Status.PASSED), StageOutcome(Stage.ORT_LOAD, Status.PASSED),
                StageOutcome(Stage.ORT_RUN, Status.PASSED),
                StageOutcome(Stage.PARITY, Status.FAILED, facts={"code": "OD601", "max_abs_diff": 0.5},
                             error=ErrorInfo("AssertionError", "output 0 differs"))]
    findings = prepare_findings(outcomes, [], SCRIPT, DiagnoseOptions(), "torchscript")
    recipes = [fix.recipe for f in findings for fix in f.fixes if fix.recipe]
    assert recipes and all(r.first(UseExporter) for r in recipes)
    assert any(r.kind == "eval_mode" and r.first(UseExporter) == UseExporter("torchscript") for r in recipes)


# ---- fix runs -> verdicts ------------------------------------------------------------------------


def _fix_run(*stages: tuple[str, str], **parity: Any) -> WorkerResult:
    events = [_stage("fix0", stage, status, facts=parity if stage == "parity" else {}) for stage, status in stages]
    return _result([*events, {"event": "run_done", "run": "fix0"}])


def test_a_fix_that_reaches_parity_with_numbers_works() -> None:
    stages = [(s, "passed") for s in ("load", "export", "check", "ort_load", "ort_run", "parity")]
    check = fix_check(_fix_run(*stages, max_abs_diff=1e-7), "fix0", SCRIPT)
    assert check.works and check.reached is Stage.PARITY and check.max_abs_diff == 1e-7
    assert check.problem is None and check.failure == "did not complete"  # never shown for a working fix


def test_a_fix_that_stops_at_a_stage_says_where() -> None:
    stages = [("load", "passed"), ("export", "passed"), ("check", "passed"), ("ort_load", "failed")]
    check = fix_check(_fix_run(*stages), "fix0", SCRIPT)
    assert not check.works and check.failed_at is Stage.ORT_LOAD
    assert check.failure == "failed at ort_load"


def test_a_precision_rewrite_without_reference_numbers_is_not_verified() -> None:
    stages = [(s, "passed") for s in ("load", "check", "ort_load")]
    events = [_stage("fix0", s) for s, _ in stages] + [
        _stage("fix0", "ort_run", facts={"reference_required": True, "reference": "not compared: too big"}),
        {"event": "run_done", "run": "fix0"}]
    check = fix_check(_result(events), "fix0", FILE)
    assert not check.works and not check.numbers_checked
    assert check.failure == "every stage passes, numbers not checked"


def test_a_fix_whose_numbers_differ_from_the_reference_names_OD601() -> None:
    events = [_stage("fix0", s) for s in ("load", "check", "ort_load")] + [
        _stage("fix0", "ort_run", facts={"reference": "the op at opset 20", "reference_mismatch": "output 0"}),
        {"event": "run_done", "run": "fix0"}]
    check = fix_check(_result(events), "fix0", FILE)
    assert check.problem == "OD601" and check.failure == "every stage passes, but OD601"


# ---- renderers against goldens ------------------------------------------------------------------


def _diagnosis() -> Diagnosis:
    verified = Fix("decompose", "Decompose mynamespace::myselu into standard ONNX ops",
                   snippet="program = program.run_decompositions({op: impl})\n",
                   applicability=Applicability.SAFE, cost="none at run time",
                   check=FixCheck(reached=Stage.PARITY, status=Status.PASSED, max_abs_diff=6e-08, seconds=0.7,
                                  detail="exports, loads, runs and matches PyTorch"),
                   recipe=Recipe("decompose"))
    failed = Fix("exporter", "Use the torchscript exporter (dynamo=False)", applicability=Applicability.UNSAFE,
                 check=FixCheck(reached=Stage.CHECK, status=Status.FAILED, failed_at=Stage.ORT_LOAD,
                                problem="OD401", detail="OD401: mynamespace:MYSELU(-1) is not a registered function/op"),
                 recipe=Recipe("exporter"))
    finding = Finding("OD203", Stage.EXPORT, Severity.ERROR,
                      "custom op mynamespace::myselu has no ONNX export mapping (dynamo exporter)",
                      op="mynamespace::myselu", source="model.py:31",
                      evidence=("DispatchError: No ONNX function found",), fixes=(verified, failed),
                      notes=("Downgrading torch does not help.",))
    stages = (StageOutcome(Stage.LOAD, Status.PASSED, 2.1), StageOutcome(Stage.EXPORT, Status.FAILED, 2.08),
              *(StageOutcome(s, Status.SKIPPED) for s in (Stage.CHECK, Stage.ORT_LOAD, Stage.ORT_RUN, Stage.PARITY)))
    return Diagnosis(target="model.py", exporter="dynamo", stages=stages, findings=(finding,),
                     versions={"torch": "2.13.0"})


def _golden(name: str, text: str) -> None:
    path = GOLDENS / name
    if os.environ.get("ONNXDOCTOR_UPDATE_GOLDENS") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, "utf-8")
    assert text == path.read_text("utf-8"), f"{name} changed; ONNXDOCTOR_UPDATE_GOLDENS=1 rewrites it"


def test_console_output_matches_its_golden() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=100, color_system=None, highlight=False)
    render_diagnoses(console, (_diagnosis(),))
    _golden("console_od203.txt", "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))


def test_markdown_report_matches_its_golden() -> None:
    _golden("report_od203.md", to_markdown((_diagnosis(),)))


@pytest.mark.parametrize("name", ["console_od203.txt", "report_od203.md"])
def test_goldens_hold_no_private_paths(name: str) -> None:
    text = (GOLDENS / name).read_text("utf-8")
    assert "/home/" not in text and "/tmp/" not in text and "\x1b" not in text
    json.dumps(text)  # plain text


def _rewrite(fix: Fix) -> object:
    """The ONNX rewrite a fix's recipe applies (None without one)."""
    step = fix.recipe.first(RewriteOnnx) if fix.recipe else None
    return step.transform if step else None


def test_a_mismatch_whose_search_ran_out_of_time_says_so() -> None:
    passed = [StageOutcome(s, Status.PASSED) for s in (Stage.LOAD, Stage.EXPORT, Stage.CHECK, Stage.ORT_LOAD,
                                                        Stage.ORT_RUN)]
    parity = _failed(Stage.PARITY, "output 0 differs: max abs error 0.5", code="OD601",
                     diverging_skipped="over the --localize-budget of 30 s")
    [finding] = [f for f in classify([*passed, parity]) if f.code == "OD601"]
    assert "not searched for: over the --localize-budget of 30 s" in finding.message
    assert finding.node is None  # nothing was located: no node is blamed


def test_the_time_limit_stops_a_step_and_leaves_a_quick_one_alone() -> None:
    from onnxdoctor.worker.parity import OutOfTime, time_limit

    started = time.monotonic()
    with pytest.raises(OutOfTime), time_limit(0.2):
        while True:  # a library call that would run on
            time.sleep(0.01)
    assert time.monotonic() - started < 2.0
    with time_limit(5.0):
        value = sum(range(1000))
    assert value == 499500
    with pytest.raises(OutOfTime), time_limit(0):  # --localize-budget 0 skips the search
        pass
    # A search that catches what each model run raises (module by module) still stops: the
    # one timer signal is not taken by its `except Exception`.
    started = time.monotonic()
    with pytest.raises(OutOfTime), time_limit(0.2):
        while time.monotonic() - started < 3.0:  # bounded: a regression fails rather than hangs
            try:
                time.sleep(0.01)
            except Exception:  # noqa: S112 -- what a search over modules does with a module's error
                continue
    assert time.monotonic() - started < 2.0


def test_a_branch_inside_library_code_is_not_offered_as_an_edit_of_the_user_s_forward() -> None:
    tail = ("Traceback (most recent call last):\n  ...\nThe model library's frame it broke in:\n"
            '  File "/venv/lib/python3.11/site-packages/torchvision/ops/boxes.py", line 103, in '
            "_batched_nms_coordinate_trick\n    if boxes.numel() == 0:\n")
    error = ErrorInfo(type="torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode",
                      message="Could not guard on data-dependent expression Eq(4*u1, 0)", traceback_tail=tail)
    outcomes = [StageOutcome(Stage.LOAD, Status.PASSED),
                StageOutcome(Stage.EXPORT, Status.FAILED, 1.0, error=error, facts={"exporter": "dynamo"})]
    [finding] = [f for f in classify(outcomes) if f.code == "OD204"]
    [fix] = [f for f in propose_fixes(finding, {"target": SCRIPT, "outcomes": outcomes}) if f.kind == "control_flow"]
    assert "library code you cannot edit (torchvision/ops/boxes.py:103)" in fix.title
    assert "import torchvision.ops.boxes as library" in fix.snippet
    assert "library._batched_nms_coordinate_trick = _batched_nms_coordinate_trick_exportable" in fix.snippet
