"""The Python API: `onnxdoctor.diagnose(model, args)` from a program, a notebook or a test.

The model lives in the caller's process, but the export runs in a worker, as for the command: the
model and its inputs are pickled by value into a private folder with a three-line model script
that loads them (onnxdoctor/worker/pickled.py), and the usual pipeline diagnoses that script. An
export that crashes, hangs or exhausts memory kills a worker, never the caller; every stage and
every fix check works unchanged. docs/api.md gives the trade-off against exporting in-process.
"""

from __future__ import annotations

import inspect
import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from onnxdoctor.model import (
    PIPELINE_STAGES,
    DiagnoseOptions,
    Finding,
    Severity,
    Stage,
    StageOutcome,
    Status,
)
from onnxdoctor.model import Diagnosis as RunDiagnosis

__all__ = ["Diagnosis", "diagnose"]

# The generated model script's name in its private folder (messages about LOAD may name it).
SCRIPT_NAME = "onnxdoctor_api_model.py"
_SCRIPT = '''"""Written by onnxdoctor.diagnose(): the model the Python API was given (docs/api.md)."""
from onnxdoctor.worker.pickled import load_model

_payload = load_model(__file__)
globals().update(_payload.names)  # the caller's own classes, functions and custom ops
{settings}

def get_model():
    return _payload.model, _payload.args, _payload.kwargs
'''


@dataclass(frozen=True, repr=False)
class Diagnosis(RunDiagnosis):
    """What `onnxdoctor.diagnose` found: the JSON output's document, typed.

    The fields are the first run's (one run per exporter; `exporter="both"` makes two), except
    `findings`, which holds every run's, as the JSON's top level does. `runs` holds each run.
    """

    runs: tuple[RunDiagnosis, ...] = ()

    @property
    def healthy(self) -> bool:
        """True when every run passed every stage with no error finding (warnings allowed)."""
        return all(run.healthy for run in self.runs) if self.runs else super().healthy

    @property
    def errors(self) -> tuple[Finding, ...]:
        """The findings that make the model unhealthy."""
        return tuple(f for f in self.findings if f.severity is Severity.ERROR)

    def to_dict(self) -> dict[str, Any]:
        """Exactly the document `onnxdoctor diagnose --json` prints (schema 2, README)."""
        from onnxdoctor.render.jsonout import to_json

        return dict(json.loads(to_json(self.runs or (self,))))

    def __repr__(self) -> str:
        from onnxdoctor.render.notebook import to_text

        return to_text(self.runs or (self,))

    def _repr_html_(self) -> str:
        """Jupyter's view: the console report, coloured."""
        from onnxdoctor.render.notebook import to_html

        return to_html(self.runs or (self,))


def diagnose(
    model: Any,
    args: Any,
    kwargs: dict[str, Any] | None = None,
    *,
    fix: bool = False,
    exporter: str | None = None,
    opset: int | None = None,
    targets: tuple[str, ...] | list[str] = (),
    dynamic_shapes: Any = None,
    timeout: float | None = None,
    atol: float = 1e-4,
    rtol: float = 1e-3,
) -> Diagnosis:
    """Export `model` to ONNX, check it, run it in ONNX Runtime and compare it with PyTorch.

    Everything runs in a worker process: the caller's process is never crashed or hung by the
    export. A model, classes, functions and torch.library custom ops defined in `__main__` (a
    notebook, a plain program) travel by value; anything importable is imported again.

    Args:
        model: a torch.nn.Module.
        args: the example inputs: a tensor or a tuple of them.
        kwargs: example keyword inputs.
        fix: propose fixes and verify them (each in a fresh worker; costs exports).
        exporter: "dynamo", "torchscript" or "both"; None: torch's default.
        opset: the opset version to export at.
        targets: deployment targets to judge the model for ("openvino", "tensorrt", ...; docs/targets.md).
        dynamic_shapes: torch.export's `dynamic_shapes` for the export.
        timeout: seconds for the whole call, fix checks included (default 600).
        atol: absolute tolerance of the comparison with PyTorch.
        rtol: relative tolerance of the comparison with PyTorch.

    Returns:
        The Diagnosis: `.healthy`, `.findings` (codes, ops, source lines, fixes), `.to_dict()`.

    Raises:
        ValueError: an argument no export can use (an unknown exporter or target, a bad opset).
    """
    from onnxdoctor.cli.diagnose import validate_options
    from onnxdoctor.errors import UsageError

    options = DiagnoseOptions(exporter=exporter, opset=opset, targets=tuple(targets), fix=fix,
                              timeout=600.0 if timeout is None else float(timeout), atol=atol, rtol=rtol)
    try:
        validate_options(options)
    except UsageError as exc:
        raise ValueError(str(exc)) from None
    from onnxdoctor.pipeline import diagnose as run_pipeline
    from onnxdoctor.supervise import make_workdir
    from onnxdoctor.worker.pickled import NotSerialisable, dump_model, user_source_file

    source = user_source_file(model) or _caller_file()
    display = _display(model, source)
    workdir = make_workdir()
    try:
        folder = workdir / "model"
        folder.mkdir()
        try:
            dump_model(folder, model, args, kwargs, dynamic_shapes)
        except NotSerialisable as exc:
            return _not_carried(display, exc.code, str(exc))
        settings = "dynamic_shapes = _payload.dynamic_shapes\n" if dynamic_shapes is not None else ""
        script = folder / SCRIPT_NAME
        script.write_text(_SCRIPT.format(settings=settings), "utf-8")
        runs = run_pipeline(str(script), replace(options, source_file=source), workdir=workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return from_runs(tuple(replace(run, target=display) for run in runs))


def from_runs(runs: tuple[RunDiagnosis, ...]) -> Diagnosis:
    """The API's Diagnosis of one or more runs (one per exporter), as the JSON sums them up."""
    first = runs[0]
    return Diagnosis(target=first.target, exporter=first.exporter, stages=first.stages,
                     findings=tuple(f for run in runs for f in run.findings), versions=first.versions,
                     facts=first.facts, targets=first.targets, runs=runs)


def _caller_file() -> str | None:
    """The first file up the stack outside onnxdoctor: the caller's own code."""
    package = str(Path(__file__).resolve().parent)
    for frame in inspect.stack(context=0)[1:]:
        name = frame.filename
        if not name.startswith("<") and not str(Path(name).resolve()).startswith(package):
            return name
    return None


def _display(model: Any, source: str | None) -> str:
    """How the model is named in the report: its class, and the file it comes from."""
    from onnxdoctor.safetext import printable

    where = f" ({Path(source).name})" if source else ""
    return printable(f"{type(model).__name__}{where}", one_line=True)


def _not_carried(display: str, code: str, message: str) -> Diagnosis:
    """The diagnosis of a model that could not be handed to the worker: LOAD failed."""
    stages = tuple(StageOutcome(stage, Status.FAILED if stage is Stage.LOAD else Status.SKIPPED)
                   for stage in PIPELINE_STAGES)
    run = RunDiagnosis(target=display, exporter=None, stages=stages,
                           findings=(Finding(code, Stage.LOAD, Severity.ERROR, message),),
                           versions=_versions())
    return from_runs((run,))


def _versions() -> dict[str, str]:
    from onnxdoctor.envinfo import package_versions

    return package_versions()

