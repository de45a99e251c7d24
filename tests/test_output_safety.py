"""Nothing a user owns is lost: no clobbering, no writing through links, no process left behind.

Every test reproduces the hazard with real files, links, devices (made with mknod in a temp folder,
never the real /dev), processes and signals, and checks the victim byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from onnxdoctor.errors import RefusedWrite, UsageError
from onnxdoctor.outputs import check_output, install, staged, write_file

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
VICTIM_BYTES = b"precious user data\n"


def _cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None,
         cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "onnxdoctor", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


def _victim(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    victim = folder / "victim.txt"
    victim.write_bytes(VICTIM_BYTES)
    return victim


# ---- the writer itself ---------------------------------------------------------------------


def test_a_link_at_the_path_is_replaced_never_written_through(tmp_path: Path) -> None:
    victim = _victim(tmp_path / "outside")
    out = tmp_path / "out" / "report.md"
    out.parent.mkdir()
    out.symlink_to(victim)
    with pytest.raises(RefusedWrite, match="exists; pass --force"):
        write_file(out, "new", force=False, what="--report")
    write_file(out, "new", force=True, what="--report")
    assert victim.read_bytes() == VICTIM_BYTES
    assert not out.is_symlink() and out.read_text() == "new"


def test_a_dangling_link_creates_nothing_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "created.txt"
    outside.parent.mkdir()
    out = tmp_path / "report.md"
    out.symlink_to(outside)
    with pytest.raises(RefusedWrite):
        write_file(out, "new", force=False, what="--report")
    assert not outside.exists()
    write_file(out, "new", force=True, what="--report")
    assert not outside.exists() and out.read_text() == "new"


@pytest.mark.parametrize("kind", ["fifo", "char-device", "folder"])
def test_a_path_that_is_not_a_regular_file_is_refused_even_with_force(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out.md"
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "folder":
        out.mkdir()
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod of a character device needs root")
        os.mknod(out, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    with pytest.raises(RefusedWrite):
        write_file(out, "new", force=True, what="--report")
    mode = os.lstat(out).st_mode
    assert {"fifo": stat.S_ISFIFO, "folder": stat.S_ISDIR, "char-device": stat.S_ISCHR}[kind](mode)


def test_a_file_that_appears_between_check_and_write_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "model.onnx"
    check_output(out, force=False, what="--output")  # the check a run starts with
    with staged(out, what="--output") as temp:
        temp.write_text("the fixed model")
        out.write_bytes(VICTIM_BYTES)  # someone writes there while the run goes on
        with pytest.raises(RefusedWrite):
            install(temp, out, force=False, what="--output")
    assert out.read_bytes() == VICTIM_BYTES
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]  # no temp file left behind


def test_the_file_being_diagnosed_is_never_an_output(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(VICTIM_BYTES)
    alias = tmp_path / "alias.onnx"
    alias.symlink_to(model)
    for path in (model, alias):
        with pytest.raises(RefusedWrite, match="the model itself"):
            write_file(path, "x", force=True, what="--report", protected=(model,))
    assert model.read_bytes() == VICTIM_BYTES


def test_a_name_too_long_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="File name too long"):
        check_output(tmp_path / ("x" * 300 + ".md"), force=False, what="--report")


# ---- diagnose: refused before any work -----------------------------------------------------


def test_output_over_the_diagnosed_script_is_refused_with_force(tmp_path: Path) -> None:
    script = tmp_path / "mlp.py"
    shutil.copy(FIXTURES / "healthy/mlp.py", script)
    before = script.read_bytes()
    for flag in ("--output", "--report"):
        result = _cli("diagnose", str(script), flag, str(script), "--force", timeout=60)
        assert result.returncode == 2 and "the model itself" in _one_line(result)
    assert script.read_bytes() == before


def test_report_over_the_diagnosed_onnx_file_or_its_weights_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(FIXTURES / "load/healthy_external", folder)
    weights = [p for p in folder.iterdir() if p.name != "model.onnx"]
    assert weights
    for path in (folder / "model.onnx", *weights):
        before = path.read_bytes()
        result = _cli("diagnose", str(folder / "model.onnx"), "--report", str(path), "--force", timeout=60)
        assert result.returncode == 2 and "the model itself" in _one_line(result)
        assert path.read_bytes() == before


def test_output_and_report_at_one_path_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "out"
    result = _cli("diagnose", str(FIXTURES / "healthy/mlp.py"), "--output", str(path), "--report", str(path))
    assert result.returncode == 2 and "both" in _one_line(result)
    assert not path.exists()


def test_report_at_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    result = _cli("diagnose", str(FIXTURES / "healthy/mlp.py"), "--report", str(tmp_path))
    assert result.returncode == 2 and "is a folder" in _one_line(result)
    assert "--force" not in result.stderr


def test_outputs_weights_file_is_not_clobbered(tmp_path: Path) -> None:
    weights = tmp_path / "m.onnx.data"
    weights.write_bytes(VICTIM_BYTES)
    result = _cli("diagnose", str(FIXTURES / "healthy/mlp.py"), "--output", str(tmp_path / "m.onnx"))
    assert result.returncode == 2 and "m.onnx.data exists" in _one_line(result)
    assert weights.read_bytes() == VICTIM_BYTES


@pytest.mark.parametrize("flag", ["--report", "--output", "--write-fix", "target"])
def test_names_too_long_are_one_line_usage_errors(tmp_path: Path, flag: str) -> None:
    long = tmp_path / ("x" * 300 + (".py" if flag == "target" else ".md"))
    args = [str(long)] if flag == "target" else [str(FIXTURES / "healthy/mlp.py"), flag, str(long)]
    result = _cli("diagnose", *args, timeout=60)
    assert result.returncode == 2 and "too long" in _one_line(result)


def test_scaffold_and_graph_names_too_long_are_one_line_usage_errors(tmp_path: Path) -> None:
    long = tmp_path / ("x" * 300)
    result = _cli("scaffold", "MYOP", "--out", str(long), timeout=60)
    assert result.returncode == 2 and "too long" in _one_line(result)
    result = _cli("graph", str(FIXTURES / "check/od301_gelu_opset11.onnx"), "-o", str(long) + ".svg", timeout=60)
    assert result.returncode == 2 and "too long" in _one_line(result)


def test_unknown_input_shape_name_lists_the_real_inputs() -> None:
    result = _cli("diagnose", str(FIXTURES / "check/od301_gelu_opset11.onnx"), "--input-shape", "nosuch=1,2")
    line = _one_line(result)
    assert result.returncode == 2 and "'nosuch'" in line and "its inputs are: x" in line


# ---- diagnose: writes at the end ----------------------------------------------------------


@pytest.mark.slow
def test_write_fix_next_to_the_model_keeps_the_users_model(tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    shutil.copy(FIXTURES / "check/od301_gelu_opset11.onnx", model)
    before = model.read_bytes()
    victim = _victim(tmp_path / "outside")
    (tmp_path / "fix.py").symlink_to(victim)  # a planted link among the files --write-fix writes
    result = _cli("diagnose", str(model), "--write-fix", str(tmp_path), "--force", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert model.read_bytes() == before
    assert victim.read_bytes() == VICTIM_BYTES
    assert not (tmp_path / "fix.py").is_symlink()
    assert "model.fixed.onnx" in result.stdout
    assert "'model.fixed.onnx'" in (tmp_path / "README.md").read_text()
    import onnx

    onnx.checker.check_model(onnx.load(str(tmp_path / "model.fixed.onnx")), full_check=True)


@pytest.mark.slow
def test_a_report_that_appears_during_the_run_is_kept_and_the_diagnosis_still_shown(tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    script = tmp_path / "late.py"
    script.write_text(
        "import os, torch\n"
        f"open({str(report)!r}, 'wb').write({VICTIM_BYTES!r})\n"
        "def get_model():\n"
        "    return torch.nn.Linear(2, 2).eval(), (torch.randn(1, 2),)\n"
    )
    result = _cli("diagnose", str(script), "--report", str(report), "--exporter", "torchscript", "--json")
    assert result.returncode == 2, result.stderr
    assert json.loads(result.stdout)["stages"][-1]["status"] == "passed"  # the diagnosis is there
    assert "exists; pass --force" in _one_line(result)
    assert report.read_bytes() == VICTIM_BYTES


# ---- graph ----------------------------------------------------------------------------------


def test_graph_dot_ignores_a_planted_temp_name(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from onnxdoctor.cli import app

    model = tmp_path / "m.onnx"
    shutil.copy(FIXTURES / "check/od301_gelu_opset11.onnx", model)
    victim = _victim(tmp_path / "outside")
    # The old writer used `.NAME.PID.tmp`; CliRunner runs in this process, so this is its name.
    (tmp_path / f".m.dot.{os.getpid()}.tmp").symlink_to(victim)
    result = CliRunner().invoke(app, ["graph", str(model), "--dot", "--no-check"])
    assert result.exit_code == 0, result.output
    assert victim.read_bytes() == VICTIM_BYTES
    assert (tmp_path / "m.dot").read_text().startswith("digraph")


def test_graph_output_onto_a_device_is_refused_with_force(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod of a character device needs root")
    device = tmp_path / "out.svg"
    os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    result = _cli("graph", str(FIXTURES / "check/od301_gelu_opset11.onnx"), "-o", str(device), "--force")
    assert result.returncode == 2 and "not a regular file" in _one_line(result)
    assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_graph_folds_inputs_beyond_the_budget(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    count = 3000
    inputs = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1]) for i in range(count)]
    node = helper.make_node("Sum", [f"x{i}" for i in range(count)], ["y"])
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = tmp_path / "wide.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    result = _cli("graph", str(model), "--dot", "--max-nodes", "50", "--no-check", timeout=120)
    assert result.returncode == 0, result.stderr
    dot = (tmp_path / "wide.dot").read_text()
    assert "2951 more inputs not drawn" in dot and "folded 2951 inputs" in result.stdout
    assert dot.count("float32[1]") < 200  # fifty inputs and the output, not three thousand


def test_graph_draws_a_model_without_ir_version_with_a_warning(tmp_path: Path) -> None:
    import onnx

    model = onnx.load(str(FIXTURES / "check/od301_gelu_opset11.onnx"))
    model.ir_version = 0
    path = tmp_path / "noir.onnx"
    path.write_bytes(model.SerializeToString())
    result = _cli("graph", str(path), "--dot", "--no-check", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "no IR version" in result.stdout and (tmp_path / "noir.dot").exists()


# ---- what is printed --------------------------------------------------------------------------


def test_control_characters_in_a_file_name_are_escaped(tmp_path: Path) -> None:
    script = tmp_path / "evil\x1b[31m\u202ename.py"
    shutil.copy(FIXTURES / "load/od103_syntax_error.py", script)
    result = _cli("diagnose", str(script), timeout=60)
    assert result.returncode == 1
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "evil\\x1b[31m\\u202ename.py" in result.stdout


def test_an_ascii_only_locale_prints_instead_of_crashing() -> None:
    env = {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    result = _cli("diagnose", str(FIXTURES / "load/od103_syntax_error.py"), env=env, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "OD103" in result.stdout and "Traceback" not in result.stderr


def test_a_closed_pipe_ends_quietly_with_the_sigpipe_code() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "onnxdoctor", "diagnose", str(FIXTURES / "load/od103_syntax_error.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before anything was written (`| head -0`)
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 128 + signal.SIGPIPE
    assert stderr == ""


# ---- the model script ---------------------------------------------------------------------------


@pytest.mark.slow
def test_script_sees_its_own_argv_and_its_exit_message_is_shown() -> None:
    result = _cli("diagnose", str(FIXTURES / "healthy/argparse_defaults.py"), "--exporter", "torchscript")
    assert result.returncode == 0, result.stdout + result.stderr
    result = _cli("diagnose", str(FIXTURES / "load/od109_argparse_usage.py"), "--json")
    finding = json.loads(result.stdout)["findings"][0]
    assert finding["code"] == "OD109"
    assert "the following arguments are required: --checkpoint" in finding["message"]


@pytest.mark.slow
def test_a_fix_checked_on_a_different_model_is_not_verified() -> None:
    result = _cli("diagnose", str(FIXTURES / "load/od114_not_reproducible.py"), "--json")
    document = json.loads(result.stdout)
    fixes = [fix for f in document["findings"] for fix in f["fixes"] if fix["kind"] == "eval_mode"]
    assert fixes and all(fix["verified"] is False for fix in fixes)
    assert any("OD114" in (fix.get("detail") or "") for fix in fixes), fixes


# ---- processes ----------------------------------------------------------------------------------


def _is_dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _wait_for(predicate: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
def test_a_daemon_the_script_leaves_is_ended_with_the_run(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    result = _cli("diagnose", str(FIXTURES / "tool/daemon_grandchild.py"), "--exporter", "torchscript",
                  env={"ONNXDOCTOR_FIXTURE_PIDFILE": str(pidfile)})
    assert result.returncode == 0, result.stdout + result.stderr
    pid = int(pidfile.read_text())
    assert _wait_for(lambda: _is_dead(pid), 5), Path(f"/proc/{pid}/status").read_text()[:200]


@pytest.mark.slow
def test_the_worker_dies_with_a_killed_parent_and_its_folder_goes(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild.pid"
    temp = tmp_path / "tmp"
    temp.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-m", "onnxdoctor", "diagnose", str(FIXTURES / "tool/od902_grandchild_sleeps.py"),
         "--timeout", "300", "--no-fix"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp),
             "ONNXDOCTOR_FIXTURE_PIDFILE": str(marker)},
    )
    try:
        assert _wait_for(marker.exists, 120), "the script never started"
        time.sleep(0.3)
        workdirs = list(temp.glob("onnxdoctor-*"))
        assert workdirs
        parent.send_signal(signal.SIGKILL)  # no chance to clean up: the OOM killer, a CI cancel
        parent.wait()
        grandchild = int(marker.read_text())
        assert _wait_for(lambda: _is_dead(grandchild), 10)
        assert _wait_for(lambda: not any(p.exists() for p in workdirs), 10)
    finally:
        parent.kill()


@pytest.mark.slow
def test_timeout_is_the_whole_commands_budget(tmp_path: Path) -> None:
    # The first import is quick; every later one (the fix checks' fresh workers) hangs.
    marker = tmp_path / "imported"
    script = tmp_path / "slow_fixes.py"
    script.write_text(
        "import os, time, torch\n"
        f"if os.path.exists({str(marker)!r}):\n"
        "    time.sleep(600)\n"
        f"open({str(marker)!r}, 'w').close()\n"
        "def get_model():\n"
        "    torch.manual_seed(0)\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))\n"
        "    return model, (torch.randn(4, 8),)\n"
    )
    started = time.monotonic()
    # 25 s leaves the first worker (one TorchScript export of a tiny model) time to finish on two
    # busy cores; the fix checks' workers then hang until the budget is spent.
    result = _cli("diagnose", str(script), "--timeout", "25", "--json", "--exporter", "torchscript")
    elapsed = time.monotonic() - started
    assert elapsed < 25 + 15, elapsed
    document = json.loads(result.stdout)
    assert document["findings"], document


def test_graph_from_deeply_nested_or_surrogate_json_is_handled(tmp_path: Path) -> None:
    model = tmp_path / "g.onnx"
    shutil.copy(FIXTURES / "check/od301_gelu_opset11.onnx", model)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    result = _cli("graph", str(model), "--from", str(deep), "--svg", timeout=60)
    assert result.returncode == 2 and "nested too deeply" in _one_line(result)
    lone = tmp_path / "lone.json"
    lone.write_text('{"findings": [{"code": "OD301", "message": "bad \\ud800 thing", "node": "gelu_0"}]}')
    env = {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    result = _cli("graph", str(model), "--from", str(lone), "--svg", "--no-check", env=env, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "bad \\ud800 thing" in result.stdout


def test_a_dangling_write_fix_link_is_refused_up_front(tmp_path: Path) -> None:
    link = tmp_path / "fixdir"
    link.symlink_to(tmp_path / "nowhere")
    result = _cli("diagnose", str(FIXTURES / "healthy/mlp.py"), "--write-fix", str(link), timeout=60)
    assert result.returncode == 2 and "is a link" in _one_line(result)
    assert not (tmp_path / "nowhere").exists()


def test_the_users_own_library_path_is_shown_whole(tmp_path: Path) -> None:
    library = tmp_path / "libbroken.so"
    library.write_bytes(b"not an ELF file")
    model = FIXTURES / "load/healthy_external/model.onnx"
    result = _cli("diagnose", str(model), "--custom-op-library", str(library), "--json", "--no-fix")
    finding = json.loads(result.stdout)["findings"][0]
    assert finding["code"] == "OD405"
    assert str(library) in finding["message"] and "<tmp>" not in finding["message"]


def test_a_graph_with_no_nodes_is_named_as_such(tmp_path: Path) -> None:
    import onnx
    from onnx import helper

    path = tmp_path / "empty.onnx"
    onnx.save(helper.make_model(helper.make_graph([], "g", [], []),
                                opset_imports=[helper.make_opsetid("", 17)]), path)
    result = _cli("diagnose", str(path), "--json", "--no-fix")
    finding = json.loads(result.stdout)["findings"][0]
    assert finding["code"] == "OD499" and finding["message"].startswith("the graph has no nodes")
    assert "onnxruntime::" not in finding["message"]


@pytest.mark.slow
def test_temporary_files_of_the_script_and_libraries_go_with_the_run(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    script = tmp_path / "litter.py"
    script.write_text(
        "import tempfile, torch\n"
        "tempfile.mkdtemp(prefix='torchinductor_')  # what compiled-kernel caches leave behind\n"
        "def get_model():\n"
        "    return torch.nn.Linear(2, 2).eval(), (torch.randn(1, 2),)\n"
    )
    result = _cli("diagnose", str(script), "--exporter", "torchscript", env={"TMPDIR": str(temp)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(temp.iterdir()) == []
