"""The worker process: its entry point, its parent watch, and its early stop on a working fix."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from onnxdoctor.proctree import become_subreaper, end_descendants
from onnxdoctor.protocol import (
    PARENT_PID_ENV,
    PASSED,
    WorkerRequest,
    WorkerResult,
    append_event,
    read_events,
)
from onnxdoctor.recipe import Recipe
from onnxdoctor.worker.run import Runner


def _works(request: WorkerRequest, run_id: str) -> bool:
    """The parent's own verdict on a fix run (stages and remaining findings), to stop early."""
    from onnxdoctor.analysis.judge import fix_check

    return fix_check(_result_so_far(request), run_id, _target(request)).works


def _target(request: WorkerRequest) -> Any:
    from onnxdoctor.target import Target

    return Target(path=Path(request.target), factory=request.factory, kind=request.kind)


def _result_so_far(request: WorkerRequest) -> WorkerResult:
    events = list(read_events(request.events_path))
    return WorkerResult(events=events, returncode=None, ended_at=time.time(), timed_out=False, seconds=0.0)


def _plan(request: WorkerRequest) -> list[Recipe]:
    """The parent's own fix proposals for the main run, computed here (pure code, no second import)."""
    from onnxdoctor.analysis.judge import (
        outcomes_for_run,
        prepare_findings,
        shapes_outcome,
        shared_fix_plan,
    )
    from onnxdoctor.model import DiagnoseOptions

    target = _target(request)
    options = DiagnoseOptions(exporter=request.exporter, opset=request.opset, all_fixes=request.all_fixes)
    result = _result_so_far(request)
    outcomes, tool = outcomes_for_run(result, "main", target, first_run=False)
    exporter = next((o.facts.get("exporter") for o in outcomes if o.stage.value == "export"), None)
    findings = prepare_findings(outcomes, tool, target, options, exporter, shapes_outcome(result, "main"))
    return shared_fix_plan(findings, options)


def _die_with_parent(workdir: str) -> None:
    """End this worker's whole group, and remove the run's folder, once the parent is gone.

    The parent can die without a chance to clean up (SIGKILL, the OOM killer); nothing would then
    bound this worker's time. A daemon thread polls the parent's pid.
    """
    import shutil
    import signal
    import threading

    try:
        parent = int(os.environ.get(PARENT_PID_ENV, ""))
    except ValueError:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        # Everything the script started goes first, those that left the group too (setsid
        # daemons, start_new_session children: this worker is their subreaper), then the group.
        end_descendants(os.getpid())
        shutil.rmtree(workdir, ignore_errors=True)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="onnxdoctor-parent-watch", daemon=True).start()


def _targets(request: WorkerRequest, state: dict[str, Any]) -> tuple[str, ...]:
    """--target's names, else the script's `targets` setting (names only; the parent validates)."""
    if request.targets:
        return request.targets
    loaded = state.get("loaded")
    wanted = getattr(loaded, "settings", {}).get("targets") if loaded is not None else None
    if isinstance(wanted, str):
        wanted = [wanted]
    # Names only: an element that is not a string (whose __str__ may raise) is the parent's to
    # report, from the settings LOAD recorded.
    names = ({t.strip().lower() for t in wanted or () if isinstance(t, str)}
             if isinstance(wanted, (list, tuple)) else set())
    run_here = ("openvino", "ort-cuda", "ort-tensorrt")
    return run_here if "all" in names else tuple(t for t in run_here if t in names)


def _gpu_targets(request: WorkerRequest, runner: Runner, state: dict[str, Any]) -> None:
    """The GPU execution providers' real runs of the main run's model, or why they were skipped."""
    from onnxdoctor.worker.ep_target import PROVIDERS, run_on_providers, unavailable
    from onnxdoctor.worker.openvino_target import model_and_inputs

    for name in (t for t in _targets(request, state) if t in PROVIDERS):
        found = model_and_inputs(request.kind, runner.target, state, name)
        if found is None:
            continue
        if isinstance(found, dict):
            record = found
        else:
            why = unavailable(name)
            path, _model, feeds, reference = found
            record = ({"event": "target", "target": name, "reached": None, "status": "skipped", "error": why}
                      if why else run_on_providers(name, path, feeds, reference, request.atol, request.rtol,
                                                   runner.workdir))
        append_event(request.events_path, {**record, "run": "main"})


def _openvino(request: WorkerRequest, runner: Runner, state: dict[str, Any], run_id: str) -> None:
    """OpenVINO's verdict on the model this run wrote (docs/targets.md), tagged with the run."""
    record = _openvino_record(request, runner, state)
    if record is not None:
        append_event(request.events_path, {**record, "run": run_id})


def _openvino_record(request: WorkerRequest, runner: Runner, state: dict[str, Any]) -> dict[str, Any] | None:
    from onnxdoctor.worker.openvino_target import check_state

    try:
        return check_state(request.kind, runner.target, state, request.atol, request.rtol)
    except Exception as exc:  # a thread's exception would otherwise vanish: report it as the target's
        return {"event": "target", "target": "openvino", "reached": None, "status": "failed",
                "unconverted": [], "error": f"{type(exc).__name__}: {exc}", "step": "read"}


class _OpenVinoBeside:
    """The main run's OpenVINO check, run in a thread beside ONNX Runtime's stages (docs/targets.md,
    Cost): OpenVINO's import starts with the export, its check once the ONNX model exists."""

    def __init__(self, request: WorkerRequest, runner: Runner) -> None:
        self.request, self.runner = request, runner
        self.thread: threading.Thread | None = None
        self.record: dict[str, Any] | None = None
        self.done = False  # after the main run: fix runs check OpenVINO in turn

    def before_stage(self, name: str, state: dict[str, Any]) -> None:
        """Runner hook: start the import at the export, the check at the first stage after it."""
        if self.done or name == "load" or "openvino" not in _targets(self.request, state):
            return
        from onnxdoctor.worker.openvino_target import import_in_background

        import_in_background()  # torch is imported by now: the two imports share nothing loading
        if name in ("check", "ort_load", "ort_run") and self.thread is None and state.get("onnx_model") is not None:
            self.thread = threading.Thread(target=self._check, args=(state,), name="onnxdoctor-openvino", daemon=True)
            self.thread.start()

    def _check(self, state: dict[str, Any]) -> None:
        self.record = _openvino_record(self.request, self.runner, state)

    def finish(self) -> bool:
        """Wait for the check and write its record; False when it never started."""
        if self.thread is None:
            return False
        waited = time.perf_counter()
        self.thread.join()
        if self.record is not None:
            # What the target added to the run's wall time: the wait for it after ONNX Runtime.
            added = round(time.perf_counter() - waited, 4)
            append_event(self.request.events_path, {**self.record, "run": "main", "added_seconds": added})
        return True


def _fix_run(request: WorkerRequest, runner: Runner, run_id: str, fix: Recipe, reuse: dict[str, Any], *,
             openvino: bool) -> None:
    """One in-process fix run; a fixed model that reached parity is also run in OpenVINO when asked."""
    records, state = runner.run_once(run_id, fix, reuse=reuse)
    if openvino and records and all(r.status == PASSED for r in records):
        _openvino(request, runner, state, run_id)


def main(argv: list[str]) -> int:
    """Worker entry point: `python -m onnxdoctor.worker REQUEST.json`."""
    import faulthandler

    faulthandler.enable(file=sys.stderr, all_threads=False)
    become_subreaper()  # the script's daemons stay in this worker's tree (see _die_with_parent)
    request = WorkerRequest.from_json(Path(argv[0]).read_text("utf-8"))
    _die_with_parent(request.workdir)
    if request.reduce is not None:  # `onnxdoctor reduce`: a search instead of the pipeline
        from onnxdoctor.worker.reduce import finish, reduce_onnx
        from onnxdoctor.worker.reduce_script import reduce_script

        started = time.monotonic()
        finish(request, (reduce_onnx if request.kind == "onnx" else reduce_script)(request, started), started)
        append_event(request.events_path, {"event": "done"})
        return 0
    runner = Runner(request)
    beside = _OpenVinoBeside(request, runner)
    runner.before_stage = beside.before_stage
    records, state = runner.run_once("main", request.apply_fix)
    beside.done = True
    if records and records[0].status == PASSED:
        _gpu_targets(request, runner, state)
    openvino = "openvino" in _targets(request, state)
    # The check that ran beside the stages, or (it never started: no model yet) one now.
    if openvino and records and records[0].status == PASSED and not beside.finish():
        _openvino(request, runner, state, "main")
    if records and records[0].status == PASSED:
        for index, fix in enumerate(request.verify_fixes):
            _fix_run(request, runner, f"fix{index}", fix, state, openvino=openvino)
            if request.stop_on_success and _works(request, f"fix{index}"):
                break
        if request.plan_fixes and records[-1].status != PASSED:
            plan = _plan(request)
            append_event(request.events_path, {"event": "fix_plan", "recipes": [r.to_dict() for r in plan]})
            for index, fix in enumerate(plan):
                _fix_run(request, runner, f"plan{index}", fix, state, openvino=openvino)
                if request.stop_on_success and _works(request, f"plan{index}"):
                    break
    append_event(request.events_path, {"event": "done"})
    return 0
