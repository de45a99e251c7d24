"""Start-up hygiene: the light commands import none of the heavy libraries (DESIGN §3, §5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

# torch and onnxruntime may only ever be imported by the worker; onnx, onnxscript, numpy and pydot
# cost 0.05-1 s each, which the light commands must not pay either.
HEAVY = ("torch", "onnxruntime", "onnx", "onnxscript", "onnx_ir", "numpy", "pydot")

_CHILD = """
import json, sys
from typer.testing import CliRunner
import onnxdoctor.cli
runner = CliRunner()
results = []
for args in json.loads(sys.argv[1]):
    r = runner.invoke(onnxdoctor.cli.commands.app, args)
    results.append({"args": args, "exit_code": r.exit_code, "stdout": r.stdout,
                    "exception": repr(r.exception) if r.exception and not isinstance(r.exception, SystemExit) else None})
heavy = sorted(m for m in sys.modules if m.split(".")[0] in json.loads(sys.argv[2]))
print(json.dumps({"results": results, "heavy": heavy}))
"""


def _run_in_child(
    *commands: list[str], heavy: tuple[str, ...] = HEAVY, timeout: float = 120
) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(list(commands)), json.dumps(heavy)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_imports_nothing_heavy() -> None:
    assert _run_in_child()["heavy"] == []


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["codes"],
        ["codes", "--json"],
        ["explain", "OD203"],
        ["explain", "unregistered-custom-op"],
    ],
    ids=lambda a: " ".join(a),
)
def test_light_command_imports_nothing_heavy(args: list[str]) -> None:
    outcome = _run_in_child(args)
    (result,) = outcome["results"]
    assert result["exception"] is None
    assert result["exit_code"] == 0, result["stdout"]
    assert result["stdout"].strip()
    assert outcome["heavy"] == []


def test_all_light_commands_in_one_process_import_nothing_heavy() -> None:
    outcome = _run_in_child(
        ["--help"], ["codes"], ["explain", "OD203"], ["explain", "OD999"], ["--version"]
    )
    assert [r["exit_code"] for r in outcome["results"]] == [0, 0, 0, 0, 0]
    assert outcome["heavy"] == []


def test_the_real_entry_point_imports_nothing_heavy() -> None:
    # The console script's path through `main()` (not CliRunner), checked after the command ran.
    code = (
        "import atexit, json, sys\n"
        f"heavy = {HEAVY!r}\n"
        "atexit.register(lambda: sys.__stderr__.write('HEAVY=' + json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in heavy)) + '\\n'))\n"
        "sys.argv = ['onnxdoctor', 'explain', 'OD203']\n"
        "from onnxdoctor.cli import main\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "## What it means" in proc.stdout
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("HEAVY="))
    assert json.loads(line[len("HEAVY=") :]) == []


# The heavy commands may import onnx and pydot, but torch and onnxruntime belong to the worker alone;
# checked in a child so that no other test in this process can have imported them first.
WORKER_ONLY = ("torch", "onnxruntime")


def test_heavy_commands_leave_torch_and_onnxruntime_to_the_worker(tmp_path: Path) -> None:
    fixture = REPO / "fixtures" / "export" / "od203_custom_op_myselu.py"
    onnx_file = REPO / "fixtures" / "ort_load" / "od401_custom_domain_myselu.onnx"
    outcome = _run_in_child(
        ["diagnose", str(fixture), "--no-fix", "--json"],
        ["diagnose", str(onnx_file), "--json"],
        ["graph", str(onnx_file), "--runtime", "-o", str(tmp_path / "g.svg")],
        heavy=WORKER_ONLY,
        timeout=300,
    )
    # Each command really ran the worker and found the fixture's failure.
    assert [r["exception"] for r in outcome["results"]] == [None, None, None]
    assert [r["exit_code"] for r in outcome["results"]] == [1, 1, 1]
    assert json.loads(outcome["results"][0]["stdout"])["findings"][0]["code"] == "OD203"
    assert json.loads(outcome["results"][1]["stdout"])["findings"][0]["code"] == "OD401"
    assert "OD401" in (tmp_path / "g.svg").read_text()
    assert outcome["heavy"] == []
