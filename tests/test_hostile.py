"""Hostile and unlucky inputs (issue 17): bounded memory, a deadline that holds, no injected code,
no escape sequences, nothing left running or lying around.

The memory bombs are only ever run under a small cap (`--max-memory-mb 1024`): uncapped, one of
them grows a process until the machine's out-of-memory killer fires.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from onnxdoctor.analysis.judge import outcomes_for_run
from onnxdoctor.protocol import WorkerResult
from onnxdoctor.target import parse_target

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BOMB = FIXTURES / "tool/od905_slice_shape_bomb.onnx"
SEGFAULT = FIXTURES / "tool/od901_slice_shape_segfault.onnx"


def _cli(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "onnxdoctor", *[str(a) for a in args]],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


# ---- memory ---------------------------------------------------------------------------------


def test_graph_checks_a_shape_inference_bomb_under_the_cap(tmp_path: Path) -> None:
    proc = _cli("graph", BOMB, "--dot", "-o", tmp_path / "g.dot", "--max-memory-mb", "1024")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "OD905" in proc.stdout and "ran out of memory during check" in proc.stdout
    assert "1024 MB" in proc.stdout
    assert (tmp_path / "g.dot").is_file()  # the drawing survives the check


def test_graph_reports_a_crashing_shape_inference_as_a_crash(tmp_path: Path) -> None:
    proc = _cli("graph", SEGFAULT, "--dot", "-o", tmp_path / "g.dot", "--max-memory-mb", "1024")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "OD901" in proc.stdout and "SIGSEGV" in proc.stdout
    assert (tmp_path / "g.dot").is_file()


def test_a_worker_killed_by_the_system_ran_out_of_memory() -> None:
    # SIGKILL that onnxdoctor did not send (no timeout): the kernel's out-of-memory killer.
    events = [{"event": "start", "stage": "load", "run": "main", "time": 0.0},
              {"event": "stage", "stage": "load", "run": "main", "status": "passed"},
              {"event": "start", "stage": "check", "run": "main", "time": 1.0}]
    result = WorkerResult(events=events, returncode=-9, ended_at=2.0, timed_out=False, seconds=2.0,
                          extra={"max_memory_mb": 2048})
    _outcomes, tool = outcomes_for_run(result, "main", parse_target(str(BOMB)))
    assert [f.code for f in tool] == ["OD905"]
    assert "during check" in tool[0].message and "2048 MB" in tool[0].message
    assert "SIGKILL" in tool[0].message


def test_memory_cap_must_be_usable() -> None:
    proc = _cli("diagnose", BOMB, "--max-memory-mb", "10")
    assert proc.returncode == 2 and "--max-memory-mb" in proc.stderr
