"""Hostile and unlucky inputs (issue 17): bounded memory, a deadline that holds, no injected code,
no escape sequences, nothing left running or lying around.

The memory bombs are only ever run under a small cap (`--max-memory-mb 1024`): uncapped, one of
them grows a process until the machine's out-of-memory killer fires.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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
    proc = _cli("graph", BOMB, "--dot", "-o", tmp_path / "g.dot", "--max-memory-mb", "256")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "OD905" in proc.stdout and "ran out of memory during check" in proc.stdout
    assert "256 MB" in proc.stdout and "near node 'slice_0' (Slice)" in proc.stdout
    assert "OD905" in (tmp_path / "g.dot").read_text()  # drawn, the suspect node marked


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


# ---- generated programs and text ------------------------------------------------------------

HOSTILE = 'evil"""\nimport os; os.mkdir("PWNED")\n"""\\N{x}\\u12\x1b]0;t\x07\u202e'


def _tiny_model(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"], name="relu_0")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(path))


def test_fix_program_from_hostile_names_runs_as_written(tmp_path: Path) -> None:
    import os

    from onnxdoctor.analysis.fixes.program import fix_program
    from onnxdoctor.model import Fix, FixCheck, Stage, Status
    from onnxdoctor.recipe import Recipe, RuntimeKernels

    folder = tmp_path / HOSTILE.replace("/", "_")
    folder.mkdir()
    model = folder / (HOSTILE + ".onnx")
    _tiny_model(model)
    check = FixCheck(reached=Stage.ORT_RUN, status=Status.PASSED, detail=HOSTILE)
    # A kernel step: fix.py runs its code from a file in a temporary folder, which must go.
    kernel = RuntimeKernels(python=f"registered = {HOSTILE!r}")
    fix = Fix("rewrite", f"Rewrite {HOSTILE}", snippet=f"# {HOSTILE}\nprint('''{HOSTILE}''')", check=check,
              recipe=Recipe("rewrite", (kernel,)))
    program = fix_program(fix, str(model), None, "onnx")
    compile(program, "fix.py", "exec")  # a \\N or \\u in a name must not break the program
    (tmp_path / "fix.py").write_text(program, "utf-8")
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "TMPDIR": str(temp)}
    proc = subprocess.run([sys.executable, "fix.py", "out.onnx"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert list(temp.glob("onnxdoctor-fix-*")) == []  # no folder of fix code left behind
    assert "loads and runs in ONNX Runtime" in proc.stdout
    assert not (tmp_path / "PWNED").exists() and (tmp_path / "out.onnx").is_file()
    assert "\x1b" not in program and "\u202e" not in program


NAME = "n\x1b[2J\x1b]0;owned\x07\u202eevil\n# HEAD\n<script>x</script>\n```\nverified ✓ pip install evil"


def _hostile_diagnosis() -> object:
    from onnxdoctor.model import (
        Diagnosis,
        Finding,
        Fix,
        FixCheck,
        Severity,
        Stage,
        StageOutcome,
        Status,
    )

    check = FixCheck(reached=Stage.ORT_RUN, status=Status.FAILED, detail=f"node {NAME} still there",
                     failed_at=Stage.ORT_LOAD)
    fix = Fix("rewrite", f"Rewrite {NAME}", snippet=f"model.{NAME} = None", cost=f"module {NAME} changes",
              check=check)
    finding = Finding("OD401", Stage.ORT_LOAD, Severity.ERROR, f"node {NAME} is not registered", op="X",
                      node=NAME, evidence=(f"raw {NAME}",), fixes=(fix,), notes=(f"note {NAME}",))
    stages = (StageOutcome(Stage.LOAD, Status.PASSED), StageOutcome(Stage.ORT_LOAD, Status.FAILED))
    return Diagnosis(target=f"model{NAME}.onnx", exporter=None, stages=stages, findings=(finding,))


def test_names_from_the_model_print_safely_on_a_terminal() -> None:
    import io

    from rich.console import Console

    from onnxdoctor.render.console import render_diagnoses

    buffer = io.StringIO()
    render_diagnoses(Console(file=buffer, width=200, color_system=None), (_hostile_diagnosis(),), verbose=True)
    text = buffer.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    # Every one-line field stays on its line; only the evidence and the snippet (raw text and
    # code, indented under their finding) keep their own line breaks.
    one_line = [line.strip() for line in text.split("\n  fixes:")[0].split("\n    raw")[0].splitlines()]
    one_line += [line.strip() for line in text.split("\n  fixes:")[1].splitlines() if "model." not in line][:4]
    assert not any(line.startswith(("# HEAD", "verified", "<script>", "```")) for line in one_line), text


def test_names_from_the_model_stay_text_in_the_markdown_report() -> None:
    from onnxdoctor.render.markdown import to_markdown

    text = to_markdown((_hostile_diagnosis(),))
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    import re

    outside_code = re.sub(r"^( *)(`{3,})[a-z]*\n.*?^\1\2$", "", text, flags=re.MULTILINE | re.DOTALL)
    # Outside code blocks, the tag is either escaped or inside a code span (rendered as text).
    for line in outside_code.splitlines():
        for start in (m.start() for m in re.finditer("<script>", line)):
            assert len(re.findall("`+", line[:start])) % 2 == 1 or line[:start].endswith("\\"), line
    lines = text.splitlines()
    assert not any(line.lstrip().startswith(("# HEAD", "verified")) for line in outside_code.splitlines())
    # Every code block the report opens is closed by its own fence, not by the name's ```.
    blocks, fence = 0, ""
    for line in (line.strip() for line in lines):
        if not fence and line.startswith("```"):
            fence, blocks = line.rstrip("abcdefghijklmnopqrstuvwxyz"), blocks + 1
        elif fence and line == fence:
            fence = ""
        elif not fence:
            assert not line.startswith(("# HEAD", "verified", "<script>")), line
    assert fence == "" and blocks == 2  # the evidence and the snippet, each closed by its own fence


def test_names_from_the_model_round_trip_through_json() -> None:
    import json

    from onnxdoctor.render.jsonout import to_json

    text = to_json((_hostile_diagnosis(),))
    assert "\x1b" not in text and "\u202e" not in text
    assert json.loads(text)["findings"][0]["node"] == NAME


def test_a_domain_with_escape_characters_is_read_off_the_model(tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from onnxdoctor.analysis.classify import classify
    from onnxdoctor.analysis.judge import attach_fixes
    from onnxdoctor.model import DiagnoseOptions, ErrorInfo, Stage, StageOutcome, Status
    from onnxdoctor.worker.runtime import kernel_facts

    domain = "my\x1b[31m dom:x(1) evil"
    node = helper.make_node("MySelu", ["x"], ["y"], domain=domain, name="n0")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
    model.ir_version = 10
    onnx.save(model, str(tmp_path / "m.onnx"))
    try:  # ONNX Runtime's own message, as the worker's ORT_LOAD stage meets it
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        raise AssertionError("ONNX Runtime loaded a model with an unknown domain")
    except Exception as exc:  # noqa: BLE001 - its pybind error types are not importable by name
        message = str(exc)
    facts = kernel_facts(message, model)
    error = ErrorInfo.from_dict({"type": "onnxruntime.Fail", "message": message})
    outcomes = [StageOutcome(Stage.LOAD, Status.PASSED), StageOutcome(Stage.ORT_LOAD, Status.FAILED, error=error,
                                                                      facts=facts)]
    finding = classify(outcomes)[0]
    assert (finding.code, finding.op, finding.node) == ("OD401", f"{domain}::MySelu", "n0")
    fixes = attach_fixes([finding], outcomes, parse_target(str(tmp_path / "m.onnx")), DiagnoseOptions(), None)[0].fixes
    assert any("--namespace 'my\x1b[31m dom:x(1) evil'" in f.snippet for f in fixes)  # pastes as one argument


# ---- writes ---------------------------------------------------------------------------------


def _verified(tmp_path: Path, name: str = "model.onnx") -> tuple[object, object]:
    from onnxdoctor.model import (
        Diagnosis,
        Finding,
        Fix,
        FixCheck,
        Severity,
        Stage,
        StageOutcome,
        Status,
    )
    from onnxdoctor.recipe import Recipe

    check = FixCheck(reached=Stage.ORT_RUN, status=Status.PASSED, detail="loads and runs")
    fix = Fix("rewrite", "Rewrite the node", snippet="pass", check=check, recipe=Recipe("rewrite"))
    finding = Finding("OD401", Stage.ORT_LOAD, Severity.ERROR, "no kernel", fixes=(fix,))
    diagnosis = Diagnosis(target=name, exporter=None, stages=(StageOutcome(Stage.LOAD, Status.PASSED),),
                          findings=(finding,))
    return (diagnosis,), parse_target(str(tmp_path / name))


def test_write_fix_into_a_folder_swapped_for_a_link_is_refused(tmp_path: Path) -> None:
    from onnxdoctor.cli.diagnose import _write_fix
    from onnxdoctor.errors import RefusedWrite

    diagnoses, target = _verified(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    (tmp_path / "out").symlink_to(other)  # the folder, checked empty at the start, is now a link
    try:
        _write_fix(diagnoses, tmp_path / "out", target, force=True, protected=())
        raise AssertionError("wrote through the link")
    except RefusedWrite:
        pass
    assert sorted(p.name for p in other.iterdir()) == ["keep.txt"]


def test_write_fix_for_a_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    from onnxdoctor.cli.diagnose import _write_fix

    diagnoses, target = _verified(tmp_path, "m\udcff.onnx")
    _write_fix(diagnoses, tmp_path / "out", target, force=False, protected=())
    program = (tmp_path / "out" / "fix.py").read_text("utf-8")
    compile(program, "fix.py", "exec")
    assert "\\udcff" in program and "\\udcff" in (tmp_path / "out" / "README.md").read_text("utf-8")


_FULL_DISK = """
import resource, signal, sys
from pathlib import Path

import pytest
sys.path.insert(0, sys.argv[2])
import test_hostile
from onnxdoctor.cli.diagnose import _write_fix
from onnxdoctor.outputs import OutputError
diagnoses, target = test_hostile._verified(Path(sys.argv[1]))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))  # every file write past 64 bytes fails
try:
    _write_fix(diagnoses, Path(sys.argv[1]) / "out", target, force=False, protected=())
except OutputError as exc:
    print("refused:", exc)
"""


def test_write_fix_on_a_full_disk_is_one_line_and_leaves_no_folder(tmp_path: Path) -> None:
    tests = str(Path(__file__).resolve().parent)
    proc = subprocess.run([sys.executable, "-c", _FULL_DISK, str(tmp_path), tests], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("refused: --write-fix: cannot write"), proc.stderr
    assert not (tmp_path / "out").exists()


# ---- processes ------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _all_gone(pidfile: Path, seconds: float) -> bool:
    import time

    forks = Path(str(pidfile) + ".forks")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in _pids(pidfile) + _pids(forks)[-50:]):
            seen = len(_pids(forks))
            time.sleep(0.3)  # and no new generation appears
            if len(_pids(forks)) == seen:
                return True
        time.sleep(0.1)
    return False


def _start(pidfile: Path, *extra: str, hang: bool = False) -> subprocess.Popen[bytes]:
    import os

    root = Path(__file__).resolve().parent.parent
    return subprocess.Popen([sys.executable, "-m", "onnxdoctor", "diagnose", str(FIXTURES / "tool/daemons_escape.py"),
                             "--no-fix", *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(root), "ONNXDOCTOR_FIXTURE_PIDFILE": str(pidfile),
                                 **({"ONNXDOCTOR_FIXTURE_HANG": "1"} if hang else {})})


def _wait_started(pidfile: Path) -> None:
    import time

    deadline = time.monotonic() + 120
    while len(_pids(pidfile)) < 2 or not _pids(Path(str(pidfile) + ".forks")):
        assert time.monotonic() < deadline, "the script never started its daemons"
        time.sleep(0.1)


def test_nothing_the_script_started_outlives_the_run(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    parent = _start(pidfile)
    try:
        assert parent.wait(timeout=120) == 1  # OD109: the script exits once its daemons run
        _wait_started(pidfile)
        assert _all_gone(pidfile, 5), [p for p in _pids(pidfile) if _alive(p)]
    finally:
        parent.kill()


def test_nothing_the_script_started_outlives_a_killed_onnxdoctor(tmp_path: Path) -> None:
    import signal

    pidfile = tmp_path / "pids"
    parent = _start(pidfile, "--timeout", "300", hang=True)
    try:
        _wait_started(pidfile)
        parent.send_signal(signal.SIGKILL)  # no chance to clean up: the OOM killer, a CI cancel
        parent.wait()
        assert _all_gone(pidfile, 10), [p for p in _pids(pidfile) if _alive(p)]
    finally:
        parent.kill()


# ---- deadlines ------------------------------------------------------------------------------


def _events_until_openvino() -> list[dict[str, object]]:
    events: list[dict[str, object]] = []
    for stage in ("load", "check", "ort_load", "ort_run"):
        events += [{"event": "start", "stage": stage, "run": "main", "time": 0.0},
                   {"event": "stage", "stage": stage, "run": "main", "status": "passed",
                    "facts": {"onnx_path": str(BOMB)} if stage == "load" else {}}]
    return [*events, {"event": "run_done", "run": "main"}]


def test_a_target_check_killed_at_the_deadline_is_a_timeout_not_healthy() -> None:
    from onnxdoctor.model import DiagnoseOptions
    from onnxdoctor.pipeline import _targets, _timed_out_targets

    events = _events_until_openvino()
    result = WorkerResult(events=events, returncode=-9, ended_at=40.0, timed_out=True, seconds=40.0)
    target = parse_target(str(BOMB))
    outcomes, tool = outcomes_for_run(result, "main", target)
    assert tool == []  # the stages all finished: only OpenVINO was still compiling
    rows = _timed_out_targets(_targets(DiagnoseOptions(targets=("openvino",)), outcomes, events, target),
                              result, ("openvino",))
    row = next(r for r in rows if r.target == "openvino")
    assert row.status == "failed" and [f.code for f in row.findings] == ["OD902"]
    assert "openvino" in row.findings[0].message


def test_a_fix_killed_at_the_deadline_ran_out_of_time() -> None:
    from onnxdoctor.analysis.judge import fix_check

    events = [{"event": "start", "stage": "load", "run": "main", "time": 0.0},
              {"event": "stage", "stage": "load", "run": "main", "status": "passed"},
              {"event": "start", "stage": "export", "run": "main", "time": 1.0}]
    result = WorkerResult(events=events, returncode=-9, ended_at=9.0, timed_out=True, seconds=9.0)
    check = fix_check(result, "main", parse_target(str(FIXTURES / "healthy/mlp.py")))
    assert check.failure == "ran out of time during export (--timeout)"


# ---- small ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_targets_setting_that_cannot_be_read_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    from onnxdoctor.model import DiagnoseOptions
    from onnxdoctor.pipeline import diagnose

    script = tmp_path / "m.py"
    script.write_text(
        "import torch\n\n"
        "class Bad:\n    def __str__(self):\n        raise RuntimeError('no')\n"
        "    def __repr__(self):\n        raise RuntimeError('no')\n\n"
        "targets = [Bad(), 'nosuchtarget']\ndynamo = False\n\n"
        "def get_model():\n    return torch.nn.Linear(2, 2).eval(), (torch.randn(1, 2),)\n")
    diagnosis = diagnose(str(script), DiagnoseOptions(fix=False, max_memory_mb=4096))[0]
    # (OD801, the SHAPES stage's fixed-size warning for a model with nothing declared dynamic, aside)
    assert [f.code for f in diagnosis.findings if f.stage.value != "shapes"] == ["OD799", "OD799"], diagnosis.findings
    assert all(s.status.value == "passed" for s in diagnosis.stages)
    assert "script" not in [t.target for t in diagnosis.targets]


def test_scaffold_attribute_defaults_keep_to_their_onnx_types() -> None:
    from onnxdoctor.errors import UsageError
    from onnxdoctor.scaffold.generate import parse_attr

    exact = parse_attr(f"a:int={2**53 + 1}")
    assert exact.default == 2**53 + 1 and exact.literal() == str(2**53 + 1)
    assert parse_attr(f"a:int={-(2**63)}").default == -(2**63)
    for bad in ("a:int=99999999999999999999999", f"a:int={2**63}", "a:float=1e39", "a:int=1.5"):
        with pytest.raises(UsageError):
            parse_attr(bad)


def _external_model(folder: Path, data: bytes, *, constant: bool = False) -> Path:
    import onnx
    from onnx import TensorProto, helper

    folder.mkdir()
    (folder / "w.bin").write_bytes(data)
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[8], data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(len(data)))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add_0")]
    initializers = [weight]
    if constant:  # the tensor lives in a Constant node's attribute, not among the initializers
        nodes.insert(0, helper.make_node("Constant", [], ["w"], name="const_0", value=weight))
        initializers = []
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"


def test_external_data_shorter_than_its_shape_is_a_file_finding(tmp_path: Path) -> None:
    import onnx

    from onnxdoctor.onnxkit.files import check_external_data

    # LOAD vets every reference with this before any runtime sees the model.
    path = _external_model(tmp_path / "m", bytes(16))  # 4 floats for a tensor of 8
    problems = check_external_data(onnx.load(str(path), load_external_data=False), path.parent)
    assert [p.code for p in problems] == ["OD112"]
    assert "holds 16 bytes" in problems[0].message and "need 32" in problems[0].message


def test_no_runtime_is_handed_a_constant_nodes_external_tensor(tmp_path: Path) -> None:
    import onnx

    from onnxdoctor.worker.openvino_target import model_and_inputs

    path = _external_model(tmp_path / "m", bytes(32), constant=True)
    model = onnx.load(str(path), load_external_data=False)
    found = model_and_inputs("onnx", path, {"onnx_model": model}, "openvino")
    assert isinstance(found, dict) and found["status"] == "skipped", found


@pytest.mark.slow
def test_the_whole_command_ends_within_its_timeout() -> None:
    import time

    from typer.testing import CliRunner

    from onnxdoctor.cli import app

    started = time.monotonic()
    result = CliRunner().invoke(app, ["diagnose", str(FIXTURES / "tool/od902_hang.py"), "--timeout", "10",
                                      "--no-fix", "--max-memory-mb", "4096"])
    elapsed = time.monotonic() - started
    assert result.exit_code == 1 and "OD902" in result.output, result.output
    assert elapsed < 10.0, f"{elapsed:.1f} s for --timeout 10: the rendering counts too"


def test_write_fix_readme_keeps_the_scripts_names_as_text(tmp_path: Path) -> None:
    from dataclasses import replace

    from onnxdoctor.cli.diagnose import _write_fix

    diagnoses, target = _verified(tmp_path)
    finding = diagnoses[0].findings[0]
    fix = replace(finding.fixes[0], title=f"Swap {NAME}", cost=f"module {NAME} changes")
    diagnoses = (replace(diagnoses[0], findings=(replace(finding, fixes=(fix,)),)),)
    _write_fix(diagnoses, tmp_path / "out", target, force=False, protected=())
    readme = (tmp_path / "out" / "README.md").read_text("utf-8")
    assert "\x1b" not in readme and "\u202e" not in readme
    lines = readme.split("```python")[0].splitlines()  # the prose, before the code block
    assert not any(line.startswith(("# HEAD", "verified", "<script>", "```")) for line in lines), readme


def test_a_crash_in_native_code_names_the_stage_and_its_step() -> None:
    from onnxdoctor.model import DiagnoseOptions
    from onnxdoctor.pipeline import diagnose

    findings = diagnose(str(SEGFAULT), DiagnoseOptions(fix=False, max_memory_mb=1024))[0].findings
    crash = next(f for f in findings if f.code == "OD901")
    assert "SIGSEGV during check, in shape inference" in crash.message, crash.message
