"""`onnxdoctor env`'s runtime probe: onnx's and ONNX Runtime's facts, from a child process.

The probe imports onnx and onnxruntime, which the command-line process never does
(docs/ARCHITECTURE.md): `start_probe` starts `python -c "...; _probe_main()"` and reads the JSON
it prints.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROBE_TIMEOUT_S = 60.0


def _ort_refusal(message: str) -> str:
    """ONNX Runtime's message without its `[ONNXRuntimeError] : 1 : FAIL : file.h:46 fn()` part."""
    text = " ".join(message.split())
    stripped = re.sub(r"^\[ONNXRuntimeError\].*?\.(?:h|cc|cpp):\d+\s.*?\)\s(?=[A-Z])", "", text)
    return stripped[:600]


def _highest_loading(
    loads: Callable[[int], str | None], start: int, limit: int
) -> tuple[int | None, str]:
    """Scan versions upward: the last that loads before the first refusal, and that refusal."""
    best: int | None = None
    for version in range(start, limit + 1):
        refusal = loads(version)
        if refusal is None:
            best = version
        elif best is not None:
            return best, _ort_refusal(refusal)
    return best, ""


def _probe_main() -> None:
    """Child-process entry: print one JSON line of onnx and ONNX Runtime facts.

    Only this function imports onnx and onnxruntime, and it runs in a child of `onnxdoctor env`.
    """
    facts: dict[str, Any] = {"onnx": {"installed": False}, "onnxruntime": {"installed": False}}
    try:
        import onnx
        from onnx import TensorProto, helper
    except Exception as exc:  # any failure to import is a fact to report, not a crash
        facts["onnx"]["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(facts))
        return
    facts["onnx"] = {
        "installed": True,
        "max_opset": int(onnx.defs.onnx_opset_version()),
        "ir_version": int(onnx.IR_VERSION),
    }
    try:
        import onnxruntime as ort  # noqa: TID251 - runs only in this child process
    except Exception as exc:
        facts["onnxruntime"]["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(facts))
        return
    ort.set_default_logger_severity(4)  # opset/IR refusals are expected; keep stderr quiet

    def identity_model(opset: int, ir_version: int) -> bytes:
        value = helper.make_tensor_value_info
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "probe",
            [value("x", TensorProto.FLOAT, [1])],
            [value("y", TensorProto.FLOAT, [1])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = ir_version
        return bytes(model.SerializeToString())

    def refusal(model: bytes) -> str | None:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        try:
            ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own Fail/InvalidGraph types; all mean "refused"
            return str(exc) or type(exc).__name__
        return None

    started = time.perf_counter()
    max_opset = int(onnx.defs.onnx_opset_version())
    # Scan well past onnx's own maximum: ONNX Runtime may know newer opsets than the onnx package.
    opset, opset_refusal = _highest_loading(
        lambda v: refusal(identity_model(v, 7)), 1, max_opset + 16
    )
    # IR versions with an opset every runtime knows; IR 3 is the first with opset imports.
    ir_version, ir_refusal = _highest_loading(
        lambda v: refusal(identity_model(min(opset or 7, 7), v)), 3, int(onnx.IR_VERSION) + 16
    )
    facts["onnxruntime"] = {
        "installed": True,
        "version": str(ort.__version__),
        "max_opset": opset,
        "max_ir_version": ir_version,
        "next_opset_refusal": opset_refusal,
        "next_ir_refusal": ir_refusal,
        "providers": list(ort.get_available_providers()),
        "device": str(ort.get_device()),
        "scan_seconds": round(time.perf_counter() - started, 3),
    }
    print(json.dumps(facts))


def _probe_command() -> list[str]:
    # Put onnxdoctor's own folder first, and (PYTHONSAFEPATH below) not the current directory, so
    # a user's `onnx.py` next to their model cannot shadow the real package in the probe.
    root = str(Path(__file__).resolve().parent.parent)
    code = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from onnxdoctor.envprobe import _probe_main; _probe_main()"
    )
    return [sys.executable, "-c", code]


class ProbeFailed(Exception):
    """The probe process failed or took too long; the message says which, in one line."""


def start_probe() -> subprocess.Popen[str]:
    """Start the probe's child process (`finish_probe` reads its facts)."""
    env = dict(os.environ, PYTHONSAFEPATH="1")
    return subprocess.Popen(
        _probe_command(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def finish_probe(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """The facts the started probe printed (`_probe_main`), with the seconds it took.

    Raises:
        ProbeFailed: the probe timed out or printed no facts.
    """
    started = time.perf_counter()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise ProbeFailed(f"the probe took longer than {timeout:g} s and was stopped") from None
    lines = out.strip().splitlines()
    try:
        facts = json.loads(lines[-1])
    except (IndexError, ValueError):
        last = (err.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        raise ProbeFailed(f"the probe process failed: {last[:300]}") from None
    facts["seconds"] = round(time.perf_counter() - started, 3)
    return dict(facts)
