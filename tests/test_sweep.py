"""`onnxdoctor sweep`: discovery, the results file, resuming, the report, --compare, both engines.

The real sweep (healthy, failing and hanging scripts, `--no-fix`) runs once per module and the
resume, report and Ray tests read it. The hanging script sleeps instead of spinning (as
fixtures/tool/od902_hang.py does) so that its timeout costs wall time, not CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from onnxdoctor.errors import RefusedWrite, UsageError
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.outputs import open_append
from onnxdoctor.render.sweep import sweep_html, sweep_markdown
from onnxdoctor.sweep.compare import compare
from onnxdoctor.sweep.discover import discover, options_record
from onnxdoctor.sweep.record import SweepResult
from onnxdoctor.sweep.store import latest_per_model, read_results
from onnxdoctor.sweep.summary import summarize

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
HEALTHY = FIXTURES / "healthy" / "mlp.py"
FAILING = FIXTURES / "export" / "od203_custom_op_myselu.py"
HANG = '"""Never returns a model; sleeps, so the timeout costs no CPU."""\nimport time\n\n\ndef get_model():\n    time.sleep(3600)\n'
# Each model's --timeout: the two real ones need ~10 s alone, over 45 s on a machine loaded 4x over.
# The hang holds its runner this long (asleep), while the lone diagnose and the other runner work;
# 60 s keeps a margin over the loaded case without holding a test worker longer than that needs.
TIMEOUT = 60
VERSIONS = {"onnxdoctor": "0", "torch": "1"}


def _options(**changes: Any) -> dict[str, Any]:
    return options_record(replace(DiagnoseOptions(fix=False), **changes))


def _result(target: str, verdict: str, codes: tuple[str, ...] = (), content_hash: str = "h") -> SweepResult:
    findings = [{"code": c, "stage": "export", "severity": "error", "fixes": []} for c in codes]
    diagnosis = {"healthy": verdict == "healthy", "findings": findings, "stages": []}
    return SweepResult(target=target, shown=target, content_hash=content_hash, key="k", versions=VERSIONS,
                       options={}, verdict=verdict, codes=codes, diagnosis=diagnosis, seconds=1.0)


# ------------------------------------------------------------------ discovery and keys (no models run)


def test_a_folder_gives_its_scripts_and_onnx_files_once_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("b.py", "a.onnx", "__init__.py", "_helper.py", "conftest.py", "notes.md"):
        (tmp_path / name).write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.py").write_text("x = 1\n")
    (tmp_path / "models.txt").write_text("# the list\nb.py\n\nsub\nb.py:get_model\n")
    monkeypatch.chdir(tmp_path)
    jobs = discover([".", "models.txt"], VERSIONS, _options())
    assert [Path(j.target.split(":")[0]).name + (":" + j.target.split(":")[1] if ":" in j.target else "")
            for j in jobs] == ["a.onnx", "b.py", "deep.py", "b.py:get_model"]
    assert [j.shown for j in jobs] == ["a.onnx", "b.py", "sub/deep.py", "b.py:get_model"]


@pytest.mark.parametrize("item", ["missing.py", "notes.md", "dir:factory"])
def test_a_bad_path_item_is_one_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, item: str) -> None:
    (tmp_path / "notes.md").write_text("hi")
    (tmp_path / "dir").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError):
        discover([item], VERSIONS, _options())


def test_the_resume_key_follows_content_versions_and_options(tmp_path: Path) -> None:
    script = tmp_path / "m.py"
    script.write_text("x = 1\n")
    (first,) = discover([str(script)], VERSIONS, _options())
    assert discover([str(script)], VERSIONS, _options())[0].key == first.key
    assert discover([str(script)], {**VERSIONS, "torch": "2"}, _options())[0].key != first.key
    assert discover([str(script)], VERSIONS, _options(opset=17))[0].key != first.key
    script.write_text("x = 2\n")
    assert discover([str(script)], VERSIONS, _options())[0].key != first.key


# ------------------------------------------------------------------ the results file


def test_results_are_whole_lines_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    line = _result("/m/a.py", "failing", ("OD203",)).to_line()
    path.write_text(line + "\n" + line[: len(line) // 2])  # a sweep killed in the middle of a write
    log = open_append(path, what="--results")
    log.append(_result("/m/b.py", "healthy").to_line())
    log.close()
    stored = read_results(path)
    assert [r.target for r in stored.results] == ["/m/a.py", "/m/b.py"]
    assert stored.unreadable == 1
    assert stored.results[0].codes == ("OD203",)


def test_the_results_file_is_never_a_link_a_folder_or_a_model(tmp_path: Path) -> None:
    (tmp_path / "real.jsonl").write_text("")
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "real.jsonl")
    model = tmp_path / "m.py"
    model.write_text("x = 1\n")
    for path, protected in ((tmp_path / "link.jsonl", ()), (tmp_path, ()), (model, (model,))):
        with pytest.raises(RefusedWrite):
            open_append(path, what="--results", protected=protected)


# ------------------------------------------------------------------ compare and report (records only)


def test_compare_lists_the_models_whose_verdict_or_codes_changed() -> None:
    old = [_result("/m/a.py", "healthy"), _result("/m/b.py", "failing", ("OD203",)),
           _result("/m/c.py", "failing", ("OD201",)), _result("/m/gone.py", "healthy")]
    new = [_result("/m/a.py", "failing", ("OD401",)), _result("/m/b.py", "failing", ("OD203",)),
           _result("/m/c.py", "failing", ("OD202",)), _result("/m/new.py", "healthy", content_hash="n")]
    result = compare(old, new)
    assert [(c.shown, c.old_verdict, c.new_verdict, c.new_codes) for c in result.changes] == [
        ("/m/a.py", "healthy", "failing", ("OD401",)), ("/m/c.py", "failing", "failing", ("OD202",))]
    assert (result.same, result.only_old, result.only_new) == (1, ("/m/gone.py",), ("/m/new.py",))


def test_the_report_escapes_model_names() -> None:
    hostile = "x`| <b>\n# y.py"
    summary = summarize([_result(hostile, "failing", ("OD203",))])
    markdown = sweep_markdown(summary)
    assert "\n# y.py" not in markdown  # no heading of its own
    cells = None  # every row of a table has its header's number of cells (no `|` split a name)
    for line in markdown.splitlines():
        count = line.replace("\\|", "").count("|") if line.startswith("|") else None
        cells = count if cells is None else cells
        assert count in (None, cells), line
        cells = None if count is None else cells
    assert "`` x`\\| <b>\\n# y.py ``" in markdown
    assert "| OD203 | export | error | 1 |" in markdown
    assert "<b>" not in sweep_html(summary) and "&lt;b&gt;" in sweep_html(summary)


# ------------------------------------------------------------------ a real sweep

_CHILD = """
import json, sys
from typer.testing import CliRunner
from onnxdoctor.cli.commands import app
result = CliRunner().invoke(app, json.loads(sys.argv[1]))
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "onnxruntime"))
print(json.dumps({"exit_code": result.exit_code, "output": result.output, "heavy": heavy}))
"""


def _start_sweep(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """The command in a fresh process (CliRunner there), which reports the heavy modules it imported."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)


def _outcome(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return dict(json.loads(out.strip().splitlines()[-1]))


def _sweep_in_child(args: list[str], cwd: Path) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    outcome = _outcome(_start_sweep(args, cwd))
    return outcome, time.monotonic() - started


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sweep")
    models = root / "models"
    models.mkdir()
    shutil.copy(HEALTHY, models / HEALTHY.name)
    shutil.copy(FAILING, models / FAILING.name)
    (models / "a_sleeps_forever.py").write_text(HANG)  # first in name order: the first runner takes it
    args = ["sweep", "models", "--no-fix", "--timeout", str(TIMEOUT), "--jobs", "2",
            "--results", "r.jsonl", "--report", "r.md"]
    started = time.monotonic()
    running = _start_sweep(args, root)
    # The lone diagnose to compare with runs meanwhile (the sweep spends most of TIMEOUT waiting), in
    # a process of its own: a diagnosis ends every process its process started after its worker.
    lone = subprocess.run([sys.executable, "-m", "onnxdoctor", "diagnose", str(FAILING), "--no-fix", "--json"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=600, check=False)
    first = _outcome(running)
    first_s = time.monotonic() - started
    second, second_s = _sweep_in_child([*args, "--force"], root)
    return {"root": root, "first": first, "first_s": first_s, "second": second, "second_s": second_s,
            "lone": tuple(dict.fromkeys(f["code"] for f in json.loads(lone.stdout)["findings"])),
            "results": {Path(r.target).name: r for r in read_results(root / "r.jsonl").results}}


@pytest.mark.slow
def test_a_sweep_gives_one_result_per_model_with_a_lone_diagnose_codes(swept: dict[str, Any]) -> None:
    results = swept["results"]
    assert swept["first"]["exit_code"] == 1, swept["first"]["output"]
    assert swept["first"]["heavy"] == []  # the models ran in runners' workers, not in the command
    assert sorted(results) == ["a_sleeps_forever.py", "mlp.py", "od203_custom_op_myselu.py"]
    assert len(read_results(swept["root"] / "r.jsonl").results) == 3  # the rerun appended nothing
    assert swept["lone"] and results["od203_custom_op_myselu.py"].codes == swept["lone"]
    assert results["od203_custom_op_myselu.py"].verdict == "failing"
    # Healthy; nothing in mlp.py is declared dynamic, so the SHAPES stage's fixed-size warning may be there.
    assert results["mlp.py"].verdict == "healthy" and set(results["mlp.py"].codes) <= {"OD801"}
    assert results["od203_custom_op_myselu.py"].diagnosis["schema"] == 2


@pytest.mark.slow
def test_a_hang_times_out_without_holding_the_others(swept: dict[str, Any]) -> None:
    hang = swept["results"]["a_sleeps_forever.py"]
    assert hang.verdict == "timed_out" and "OD902" in hang.codes
    assert hang.seconds < TIMEOUT + 5
    # With two runners, the hang held one; the other two models finished on the other meanwhile.
    others = [swept["results"][n] for n in ("mlp.py", "od203_custom_op_myselu.py")]
    assert max(r.started_at + r.seconds for r in others) < hang.started_at + hang.seconds


@pytest.mark.slow
def test_a_rerun_resumes_everything_and_reports_the_counts(swept: dict[str, Any]) -> None:
    second = swept["second"]
    assert second["exit_code"] == 1
    assert "3 models: 1 healthy, 1 failing, 1 timed out" in second["output"]
    assert swept["second_s"] < swept["first_s"] / 4, (swept["first_s"], swept["second_s"])
    report = (swept["root"] / "r.md").read_text()
    for row in ("| healthy | 1 |", "| failing | 1 |", "| timed out | 1 |", "| OD203 | export | error | 1 |"):
        assert row in report


@pytest.mark.slow
def test_the_ray_engine_gives_the_local_engines_results(swept: dict[str, Any]) -> None:
    pytest.importorskip("ray")
    root = swept["root"]
    # One model (an export costs seconds of CPU): the failing one, whose codes say the most.
    (root / "one.txt").write_text(f"models/{FAILING.name}\n")
    outcome, _ = _sweep_in_child(["sweep", "one.txt", "--no-fix", "--timeout", "120", "--jobs", "1",
                                  "--engine", "ray", "--results", "ray.jsonl", "--compare", "r.jsonl"], root)
    assert outcome["heavy"] == []
    assert "compared: 0 changed, 1 unchanged, 0 new, 2 gone" in outcome["output"], outcome["output"]
    ray_results = {Path(r.target).name: r for r in latest_per_model(read_results(root / "ray.jsonl").results)}
    assert {n: (r.verdict, r.codes, r.engine) for n, r in ray_results.items()} == {
        n: (swept["results"][n].verdict, swept["results"][n].codes, "ray") for n in ray_results}
    assert list(ray_results) == [FAILING.name] and ray_results[FAILING.name].codes


def test_the_ray_engine_without_ray_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    code = ("import sys; sys.modules['ray'] = None\n"  # as if Ray were not installed
            "sys.argv = ['onnxdoctor', 'sweep', 'm.py', '--engine', 'ray']\n"
            "from onnxdoctor.cli.commands import main\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "onnxdoctor: error: --engine ray needs Ray: pip install 'onnxdoctor[ray]'"


def test_a_finished_sweeps_results_make_a_report_and_a_comparison(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from onnxdoctor.cli.commands import app

    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text(_result("/m/a.py", "healthy").to_line() + "\n" + _result("/m/b.py", "healthy").to_line() + "\n")
    new.write_text(_result("/m/a.py", "failing", ("OD401",)).to_line() + "\n"
                   + _result("/m/b.py", "healthy").to_line() + "\n")
    result = CliRunner().invoke(app, ["sweep", "--results", str(new), "--compare", str(old),
                                      "--report", str(tmp_path / "r.html")])
    assert result.exit_code == 1, result.output
    assert "/m/a.py: healthy -> failing (OD401)" in result.output
    page = (tmp_path / "r.html").read_text()
    assert "<td>healthy</td><td>1</td>" in page and "<td>failing</td><td>1</td>" in page
    again = CliRunner().invoke(app, ["sweep", "--results", str(new), "--report", str(tmp_path / "r.html")])
    assert again.exit_code == 2 and "exists; pass --force" in again.output  # never overwritten silently


@pytest.mark.slow
def test_ctrl_c_leaves_whole_lines_and_no_process(tmp_path: Path) -> None:
    import signal

    from onnxdoctor.proctree import descendants, proc_stat

    models = tmp_path / "models"
    models.mkdir()
    (models / "a_no_model.py").write_text("x = 1\n")  # OD105 in a few seconds
    (models / "b_hangs.py").write_text(HANG)
    results = tmp_path / "r.jsonl"
    # As a terminal's Ctrl-C finds it: SIGINT raising KeyboardInterrupt (a background job would
    # inherit it ignored).
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "sys.argv = ['onnxdoctor', 'sweep', 'models', '--no-fix', '--timeout', '300', '--jobs', '2', "
            f"'--results', {str(results)!r}]\n"
            "from onnxdoctor.entry import main\nmain()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (results.exists() and results.read_text().endswith("\n")):
        time.sleep(0.2)
    tree = descendants(proc.pid)
    assert tree, "the runners and the hanging model's worker are running"
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole foreground group
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted: 1 model(s) not run" in err
    stored = read_results(results)
    assert [Path(r.target).name for r in stored.results] == ["a_no_model.py"] and stored.unreadable == 0
    time.sleep(1)  # a worker sees its runner gone within a second
    alive = [pid for pid in tree if (stat := proc_stat(pid)) is not None and stat[2] not in ("Z", "X")]
    assert alive == []  # (a zombie is dead: this container's init may reap it late)


def test_only_the_ray_engine_imports_ray() -> None:
    import ast

    importers = set()
    for path in (REPO / "onnxdoctor").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "ray" or n.startswith("ray.") for n in names):
                importers.add(path.relative_to(REPO).as_posix())
    assert importers == {"onnxdoctor/sweep/ray_engine.py"}


def test_a_ctrl_c_while_a_result_is_recorded_waits_until_it_is_written_and_counted() -> None:
    # The line on disk and the count behind "N model(s) not run" must agree (a Ctrl-C once fell
    # between them: the file held the result and the message said it had not run).
    import signal

    from onnxdoctor.sweep.run import _interrupt_deferred

    steps: list[str] = []
    # Python's own handler, as in the sweep's process: a pytest-xdist worker may hold another
    # (the run this test is in once left SIGINT ignored, and the deferred Ctrl-C was dropped).
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), _interrupt_deferred():
            signal.raise_signal(signal.SIGINT)  # delivered to this thread, not any of the process's
            steps.append("written")
            steps.append("counted")
        assert steps == ["written", "counted"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back as it was
    finally:
        signal.signal(signal.SIGINT, outer)
