"""One sweep job: a lone `diagnose` of one model, as a result line. Runs where the engine puts it
(a local runner process, a Ray worker), never in the sweep's own process.

The model runs in the same isolated worker as `onnxdoctor diagnose`, within its own whole-command
`--timeout` (a hang is a timed-out result). torch and onnxruntime stay in that worker.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from dataclasses import dataclass, replace
from typing import Any

from onnxdoctor.errors import OnnxDoctorError
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.sweep.record import ERROR, Job, SweepResult, codes_of, verdict_of


@dataclass(frozen=True)
class JobSpec:
    """Everything a runner needs for one job, picklable (it crosses to runners and Ray workers)."""

    job: Job
    options: DiagnoseOptions
    versions: dict[str, str]  # the sweep's versions, part of the resume key
    options_record: dict[str, Any]  # the options as recorded, part of the resume key
    engine: str = "local"


def run_job(spec: JobSpec) -> SweepResult:
    """Diagnose one model as `onnxdoctor diagnose --json` would, and return its result line.

    Never raises for a model's problem: a target the pipeline refuses or an error of our own is
    a result with verdict "error" and the reason.
    """
    from onnxdoctor.pipeline import diagnose
    from onnxdoctor.render.jsonout import to_json
    from onnxdoctor.supervise import make_workdir

    started_at = time.time()
    started = time.monotonic()
    # --timeout is each model's whole budget, from the moment its job starts.
    options = replace(spec.options, deadline=started + spec.options.timeout)
    diagnosis: dict[str, Any] | None = None
    error: str | None = None
    workdir = make_workdir()
    try:
        diagnoses = diagnose(spec.job.target, options, workdir=workdir)
        diagnosis = json.loads(to_json(diagnoses))
    except OnnxDoctorError as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - one model's internal error must not end the sweep
        error = f"internal error: {type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return SweepResult(
        target=spec.job.target, shown=spec.job.shown, content_hash=spec.job.content_hash,
        key=spec.job.key, versions=spec.versions, options=spec.options_record,
        verdict=verdict_of(diagnosis) if diagnosis is not None else ERROR,
        codes=codes_of(diagnosis) if diagnosis is not None else (),
        diagnosis=diagnosis, error=error, seconds=time.monotonic() - started, started_at=started_at,
        engine=spec.engine, host=socket.gethostname(),
    )


def failed_job(spec: JobSpec, reason: str, *, seconds: float, started_at: float,
               verdict: str = ERROR) -> SweepResult:
    """The result of a job whose runner died or never answered: no diagnosis, the reason."""
    return SweepResult(
        target=spec.job.target, shown=spec.job.shown, content_hash=spec.job.content_hash,
        key=spec.job.key, versions=spec.versions, options=spec.options_record, verdict=verdict,
        error=reason, seconds=seconds, started_at=started_at, engine=spec.engine,
        host=socket.gethostname(),
    )
