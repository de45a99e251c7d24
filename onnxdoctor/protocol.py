"""The request, event and result formats both processes speak (plain JSON, standard library only)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The parent's pid, in the worker's environment: the worker ends itself when that process is gone.
PARENT_PID_ENV = "ONNXDOCTOR_PARENT_PID"


@dataclass(frozen=True)
class WorkerRequest:
    """Everything the worker needs to run the pipeline once (plus fix re-runs)."""

    target: str
    kind: str  # "script" | "onnx"
    workdir: str
    events_path: str
    factory: str | None = None
    exporter: str | None = None  # "dynamo" | "torchscript" | None: the script's setting, else torch's
    opset: int | None = None
    custom_op_libraries: tuple[str, ...] = ()
    atol: float = 1e-4
    rtol: float = 1e-3
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    # Cap on the inputs generated for a .onnx target from its declared shapes.
    max_input_bytes: int = 256 * 1024 * 1024
    # A fix recipe applied to the main run (the fix verification of a process-unsafe fix).
    apply_fix: dict[str, Any] | None = None
    # Fix recipes verified one after another in this process after the main run (safe ones).
    verify_fixes: tuple[dict[str, Any], ...] = ()
    # Gather registry facts for failing ops (costs an import or two; off for fix re-runs).
    gather_facts: bool = True
    # Stop the main run after LOAD (fix verification only needs the loaded model).
    load_only: bool = False
    # Skip CHECK (graph --runtime checks in-process and wants the runtime's verdict regardless).
    skip_check: bool = False
    # Stop verifying fixes after the first one that reaches parity.
    stop_on_success: bool = False
    # After the main run, classify it, propose fixes and verify the in-process-safe ones here.
    plan_fixes: bool = False
    all_fixes: bool = False
    # The first load's model fingerprint: a fix worker that re-imports the script must build the
    # same model, or its verdict is about someone else's model (OD114).
    expected_fingerprint: str | None = None
    # Deployment targets the worker runs itself after the main run (docs/targets.md): "openvino".
    targets: tuple[str, ...] = ()

    def to_json(self) -> str:
        """The request as JSON, for the worker's command line."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerRequest:
        """Rebuild a request from `to_json`'s text."""
        data = json.loads(text)
        data["custom_op_libraries"] = tuple(data.get("custom_op_libraries", ()))
        data["verify_fixes"] = tuple(data.get("verify_fixes", ()))
        data["targets"] = tuple(data.get("targets", ()))
        return cls(**data)


def append_event(path: str, event: dict[str, Any]) -> None:
    """Append one event line and flush it to disk, so a crash right after still leaves it."""
    line = json.dumps(event, default=_json_default) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def read_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """The events written so far; a half-written last line (a crash mid-write) is skipped."""
    try:
        text = Path(path).read_text("utf-8", errors="replace")
    except FileNotFoundError:
        return
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            yield event


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy / torch scalars
        try:
            return value.item()
        except (TypeError, ValueError, RuntimeError):  # an array of several values
            return repr(value)
    return repr(value)


@dataclass(frozen=True)
class WorkerResult:
    """How the worker process ended, its events, and what it printed (bounded)."""

    events: list[dict[str, Any]]
    returncode: int | None
    ended_at: float  # wall-clock time.time() when the worker ended (or was killed)
    timed_out: bool
    seconds: float
    stdout: str = ""
    stderr_tail: str = ""
    output_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def signal_name(self) -> str | None:
        """The name of the signal that killed the worker, if one did."""
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None
