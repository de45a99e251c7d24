"""The worker fork server (docs/ARCHITECTURE.md, "Fork server"): a forked worker reports exactly
what a fresh interpreter reports, and whenever the server cannot serve, a fresh interpreter does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from onnxdoctor import forkserver
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.pipeline import diagnose
from onnxdoctor.proctree import become_subreaper
from onnxdoctor.render.jsonout import to_json

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server is Linux-only")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PACKAGE_ROOT = str(Path(forkserver.__file__).resolve().parent.parent)


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in ("seconds", "elapsed")}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _report(monkeypatch: pytest.MonkeyPatch, served: bool) -> dict[str, Any]:
    monkeypatch.setenv(forkserver.SWITCH_ENV, "1" if served else "0")
    before = forkserver.forked
    # A fix-checked failure would cost a minute here; a healthy model's SHAPES stage computes
    # numbers from generated inputs just the same.
    diagnoses = diagnose(str(FIXTURES / "shapes/healthy_dynamic_batch.py"), DiagnoseOptions(timeout=300))
    assert (forkserver.forked > before) == served, "the server must serve exactly when it is on"
    return _without_times(json.loads(to_json(diagnoses)))


@pytest.mark.slow
def test_a_forked_worker_reports_what_a_fresh_interpreter_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    forked = _report(monkeypatch, served=True)
    fresh = _report(monkeypatch, served=False)
    assert forked == fresh
    # Numbers computed from the generated example inputs: the forked worker drew the same ones.
    assert forked["shapes"] and all(size["max_abs_diff"] is not None for size in forked["shapes"]), forked


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, **extra)
    env.pop(forkserver.SWITCH_ENV, None)
    return env


def _missing_request(tmp_path: Path) -> list[str]:
    return [str(tmp_path / "no-such-request.json")]


@pytest.mark.slow
def test_the_server_serves_only_its_own_environment_and_is_replaced_when_it_dies(tmp_path: Path) -> None:
    become_subreaper()  # as run_worker does: the forked worker is adopted by this process
    forkserver.shutdown()
    try:
        # A run whose time is up before the server has imported torch gets a fresh interpreter; the
        # server keeps starting and serves the next run.
        assert forkserver.spawn_worker(_missing_request(tmp_path), _env(), str(tmp_path), seconds=0.01) is None
        first = forkserver.spawn_worker(_missing_request(tmp_path), _env(), str(tmp_path), seconds=120)
        assert first is not None
        # Our own child, run as a fresh worker would run it: the request file is missing.
        assert first.wait(timeout=60) == 1
        assert b"no-such-request.json" in first.stderr.read()
        server = forkserver._server
        assert server is not None
        # A script runs as `python SCRIPT ARGV` would: its argv, its folder on the path, its exit code.
        script = tmp_path / "probe.py"
        script.write_text("import sys\nprint(sys.argv[1:], sys.path[0])\nsys.exit(3)\n")
        run = forkserver.spawn_script(str(script), ["a", "b"], _env(), str(tmp_path), seconds=120)
        assert run is not None
        out, _err = run.communicate(60)
        assert run.returncode == 3 and out.decode().split() == ["['a',", "'b']", str(tmp_path)]
        # Per-run keys may differ and the same server serves; any other difference needs a server
        # whose imports ran in that environment.
        per_run = _env(TMPDIR=str(tmp_path), ONNXDOCTOR_MAX_MEMORY_MB="2048")
        again = forkserver.spawn_worker(_missing_request(tmp_path), per_run, str(tmp_path), seconds=120)
        assert again is not None and again.wait(timeout=60) == 1
        assert forkserver._server is server
        other = forkserver.spawn_worker(_missing_request(tmp_path), _env(SOMETHING_ELSE="1"), str(tmp_path),
                                        seconds=120)
        assert other is not None and other.wait(timeout=60) == 1
        assert forkserver._server is not server and server.process.poll() is not None
        assert not Path(server.tmp).exists()  # the retired server's temporary folder went with it
        server = forkserver._server
        server.process.kill()
        server.process.wait()
        replaced = forkserver.spawn_worker(_missing_request(tmp_path), _env(), str(tmp_path), seconds=120)
        assert replaced is not None and replaced.wait(timeout=60) == 1
        assert forkserver._server is not None and forkserver._server.process.pid != server.process.pid
    finally:
        forkserver.shutdown()


@pytest.mark.slow
def test_the_server_ends_with_the_process_that_started_it(tmp_path: Path) -> None:
    code = ("import os, sys\n"
            "from onnxdoctor import forkserver\n"
            "from onnxdoctor.proctree import become_subreaper\n"
            "become_subreaper()\n"
            f"w = forkserver.spawn_worker([{str(tmp_path / 'none.json')!r}], dict(os.environ), {str(tmp_path)!r},"
            " seconds=120)\n"
            "w.wait()\n"
            "print(forkserver._server.process.pid, flush=True)\n"
            "os._exit(0)\n")  # no atexit hook: the server must notice on its own
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, TMPDIR=str(tmp))
    env.pop(forkserver.SWITCH_ENV, None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout.split()[0])
    ends = time.monotonic() + 10
    while time.monotonic() < ends and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), "the fork server outlived its parent"
    assert not list(Path(tmp).glob("onnxdoctor-forkserver-*")), "its temporary folder outlived it"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
