"""Typed fix recipes and stage records: what crosses the process boundary, without torch (fast)."""

from __future__ import annotations

import json

import pytest

from onnxdoctor.analysis.judge import outcomes_for_run
from onnxdoctor.model import Stage, Status
from onnxdoctor.protocol import (
    AFTER_FAILURE,
    FAILED,
    NOT_REQUESTED,
    PASSED,
    SKIPPED,
    StageRecord,
    WorkerRequest,
    WorkerResult,
)
from onnxdoctor.recipe import (
    CastAround,
    CustomOpsets,
    DynamicShapes,
    EvalMode,
    ExportCode,
    Recipe,
    Reference,
    RewriteOnnx,
    RuntimeKernels,
    SetOpset,
    UseExporter,
    UseOpset,
)
from onnxdoctor.target import Target

EVERY_STEP = Recipe("everything", (
    EvalMode(),
    UseExporter("torchscript"),
    UseOpset(17),
    ExportCode("x = 1\n", program="program", translation_table="table"),
    CustomOpsets((("mydomain", 1),)),
    DynamicShapes(rename=(("x", "input"),), suggested=("b = a",)),
    RewriteOnnx(CastAround("Det", "float"), Reference(required=True)),
    RewriteOnnx(SetOpset(20), Reference(opset=20)),
    RuntimeKernels(libraries=("/lib/x.so",), python="k = 1\n", extensions=True),
), isolated=True)


def test_every_step_survives_the_trip_through_json() -> None:
    text = json.dumps(EVERY_STEP.to_dict())
    assert Recipe.from_dict(json.loads(text)) == EVERY_STEP
    assert Recipe.from_dict(json.loads(text)).key() == EVERY_STEP.key()


def test_a_request_carries_its_recipes_typed() -> None:
    request = WorkerRequest(target="m.py", kind="script", workdir="/tmp", events_path="/tmp/e",
                            apply_fix=EVERY_STEP, verify_fixes=(Recipe("exporter", (UseExporter("dynamo"),)),))
    again = WorkerRequest.from_json(request.to_json())
    assert again == request
    assert isinstance(again.apply_fix, Recipe) and isinstance(again.verify_fixes[0].steps[0], UseExporter)


@pytest.mark.parametrize("data", [
    {"type": "Recipe", "kind": "x", "steps": [{"type": "os.system", "command": "rm"}]},
    {"type": "Recipe", "kind": "x", "steps": [{"type": "UseOpset", "opset": 17, "extra": 1}]},
    {"type": "UseOpset", "opset": 17},
    {"kind": "x"},
])
def test_malformed_recipes_are_refused_by_name(data: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="recipe|UseOpset|malformed"):
        Recipe.from_dict(data)


def test_chaining_runs_both_fixes_and_the_later_choice_wins() -> None:
    opset = Recipe("opset", (UseOpset(16), UseExporter("torchscript")))
    cast = Recipe("cast", (RewriteOnnx(CastAround("Det", "float")),), isolated=True)
    eval_mode = Recipe("eval_mode", (EvalMode(), UseExporter("dynamo")))
    chained = opset.then(cast).then(eval_mode)
    assert chained.chain == ("opset", "cast", "eval_mode")
    assert chained.kind == "opset+cast+eval_mode"
    assert chained.isolated  # one isolated part makes the whole chain isolated
    assert chained.all(UseExporter) == [UseExporter("dynamo")]  # the later exporter replaces the earlier
    assert chained.first(UseOpset) == UseOpset(16)
    assert chained.first(RewriteOnnx) == RewriteOnnx(CastAround("Det", "float"))


def test_with_default_never_overrides_a_fix_s_own_choice() -> None:
    own = Recipe("rewrite", (UseExporter("dynamo"),))
    assert own.with_default(UseExporter("torchscript")) == own
    bare = Recipe("eval_mode", (EvalMode(),))
    assert bare.with_default(UseExporter("torchscript")).first(UseExporter) == UseExporter("torchscript")


def _result(*records: StageRecord, done: bool = True) -> WorkerResult:
    events = [r.to_event() for r in records] + ([{"event": "run_done", "run": "main"}] if done else [])
    return WorkerResult(events=events, returncode=0, ended_at=0.0, timed_out=False, seconds=0.0)


SCRIPT = Target(path=__import__("pathlib").Path("/tmp/model.py"), factory=None, kind="script")


def test_the_ladder_reads_stated_statuses_and_leaves_out_what_was_not_requested() -> None:
    result = _result(
        StageRecord("main", "load", PASSED),
        StageRecord("main", "export", PASSED),
        StageRecord("main", "check", SKIPPED, reason=NOT_REQUESTED),
        StageRecord("main", "ort_load", FAILED, error={"type": "Fail", "message": "no kernel"}),
        StageRecord("main", "ort_run", SKIPPED, reason=AFTER_FAILURE),
        StageRecord("main", "parity", SKIPPED, reason=AFTER_FAILURE),
    )
    outcomes, tool = outcomes_for_run(result, "main", SCRIPT)
    assert [(o.stage, o.status) for o in outcomes] == [
        (Stage.LOAD, Status.PASSED), (Stage.EXPORT, Status.PASSED), (Stage.ORT_LOAD, Status.FAILED),
        (Stage.ORT_RUN, Status.SKIPPED), (Stage.PARITY, Status.SKIPPED),
    ]
    assert tool == []


def test_a_worker_that_died_mid_stage_is_the_one_inference_left() -> None:
    result = _result(StageRecord("main", "load", PASSED), done=False)
    result.events.append({"event": "start", "stage": "export", "run": "main", "time": 0.0})
    outcomes, tool = outcomes_for_run(result, "main", SCRIPT)
    assert [o.status for o in outcomes[:3]] == [Status.PASSED, Status.CRASHED, Status.SKIPPED]
    assert [f.code for f in tool] == ["OD903"]


def test_a_malformed_record_reads_as_a_failure_never_an_exception() -> None:
    record = StageRecord.from_event({"event": "stage", "run": "main", "stage": "load", "status": "weird",
                                     "facts": [1, 2], "seconds": None})
    assert record.status == FAILED and record.facts == {} and record.seconds == 0.0
