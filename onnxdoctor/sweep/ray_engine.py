"""The Ray engine: each job a Ray task running the same `run_job` as a local runner.

Ray is optional (`pip install 'onnxdoctor[ray]'`) and imported here only. Without an address a
private Ray starts on this machine (node address 127.0.0.1, no dashboard, `--jobs` CPUs; Ray's
services listen on every interface all the same, behind its token authentication); with one, the
tasks go to that cluster, where onnxdoctor and the stack must be installed on every node and the
model paths must be readable there (a shared file system). Each task reserves one CPU; Ray runs a
task in a worker process of its own, so a diagnosis there owns its process tree as it does in a
local runner. Results stream back and the driver writes them as they arrive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from onnxdoctor.errors import UsageError
from onnxdoctor.sweep.jobs import JobSpec, failed_job, run_job
from onnxdoctor.sweep.record import SweepResult

CPUS_PER_TASK = 1


def require_ray() -> Any:
    """The ray module, or one clear usage error when it is not installed."""
    try:
        import ray
    except ImportError:
        raise UsageError("--engine ray needs Ray: pip install 'onnxdoctor[ray]'") from None
    return ray


def _task(spec: JobSpec) -> SweepResult:
    return run_job(spec)


def run_ray(specs: Sequence[JobSpec], jobs: int, address: str | None,
            on_result: Callable[[SweepResult], None]) -> None:
    """Run every job as a Ray task, calling `on_result` in this thread as each one ends.

    On KeyboardInterrupt the tasks still running are cancelled (their worker processes killed,
    and each diagnosis's worker ends itself when its parent is gone), then Ray is shut down.
    """
    if not specs:
        return
    ray = require_ray()
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
        else:
            ray.init(num_cpus=jobs, include_dashboard=False, _node_ip_address="127.0.0.1",
                     log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError, OSError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise UsageError(f"--engine ray: cannot start or reach {where}: {exc}") from None
    pending: dict[Any, JobSpec] = {}
    try:
        task = ray.remote(num_cpus=CPUS_PER_TASK, max_retries=0)(_task)
        pending = {task.remote(spec): spec for spec in specs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in done:
                spec = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a lost task or node is that job's error
                    result = failed_job(spec, f"the Ray task failed: {type(exc).__name__}: {exc}",
                                        seconds=0.0, started_at=0.0)
                on_result(result)
    finally:
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001, S110 - ending anyway; shutdown follows
                pass
        ray.shutdown()
