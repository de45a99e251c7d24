"""The fixtures fail with the RAW libraries the way fixtures/CATALOG.md says.

No onnxdoctor code is exercised here: these tests pin the libraries' behaviour the classifier
relies on, so a torch/onnx/onnxruntime upgrade that changes a message shows up as a failure here
first. Script fixtures run in subprocesses: they register custom ops and symbolics globally, and
some crash or exit on purpose.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onnxdoctor.forkserver import spawn_script
from onnxdoctor.proctree import become_subreaper

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
sys.path.insert(0, str(FIXTURES))
import make_onnx  # noqa: E402
from expected import FIXTURES as INDEX  # noqa: E402
from expected import Fixture  # noqa: E402


def _by_path(path: str) -> Fixture:
    return next(f for f in INDEX if f.path == path)


def _onnx_fixtures(stage: str) -> list[Fixture]:
    return [f for f in INDEX if f.path.endswith(".onnx") and f.path.startswith(stage + "/")]


def _observe(target: str, exporter: str = "script", timeout: float = 240) -> list[dict[str, Any]]:
    """Run fixtures/observe.py as a fresh interpreter would (a fork of onnxdoctor's fork server,
    which has torch and the export libraries imported already, else a fresh interpreter); return
    its JSON records."""
    script, args = str(FIXTURES / "observe.py"), [target, "--exporter", exporter, "--json"]
    become_subreaper()  # the forked run is adopted by this process
    env = dict(os.environ, PYTHONPATH=str(FIXTURES.parent))
    run = spawn_script(script, args, env, str(FIXTURES.parent), seconds=timeout)
    if run is None:
        out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=timeout,
                             cwd=FIXTURES.parent)
        code, stdout, stderr = out.returncode, out.stdout, out.stderr
    else:
        raw_out, raw_err = run.communicate(timeout)
        code, stdout, stderr = run.returncode, raw_out.decode(), raw_err.decode(errors="replace")
    assert code == 0, stderr[-2000:]
    return json.loads(stdout)


def _failed(record: dict[str, Any]) -> dict[str, Any]:
    failed = [s for s in record["stages"] if s["status"] == "failed"]
    assert failed, f"nothing failed: {[s['stage'] for s in record['stages']]}"
    return failed[0]


def _text(stage: dict[str, Any]) -> str:
    return "\n".join(line for link in stage["chain"] for line in link["message"])


# ------------------------------------------------------------------ generated ONNX files

def test_make_onnx_is_deterministic_and_committed(tmp_path: Path) -> None:
    for rel, build in make_onnx.BUILDERS.items():
        first, second = build(), build()
        assert first == second, rel
        assert (FIXTURES / rel).read_bytes() == first, f"{rel} is stale: run fixtures/make_onnx.py"
        assert len(first) < 50_000
    make_onnx.write_external(tmp_path)  # the external-data folders build without error
    link = tmp_path / "load/od111_escape_symlink/weights.bin"
    assert link.is_symlink() and os.readlink(link) == "../od111_outside.bin"
    assert (FIXTURES / "load/od111_escape_symlink/weights.bin").is_symlink()


@pytest.mark.parametrize("fx", [f for f in _onnx_fixtures("check") if f.code != "OD305"], ids=lambda f: f.path)
def test_checker_rejects(fx: Fixture) -> None:
    import onnx

    with pytest.raises((onnx.checker.ValidationError, onnx.shape_inference.InferenceError)) as info:
        onnx.checker.check_model(str(FIXTURES / fx.path), full_check=True)
    assert fx.raw in str(info.value)
    if fx.node:
        assert fx.node in str(info.value)


def test_aten_node_passes_checker_but_not_ort() -> None:
    import onnx
    import onnxruntime as ort

    fx = _by_path("check/od305_aten_node.onnx")
    onnx.checker.check_model(str(FIXTURES / fx.path), full_check=True)
    with pytest.raises(Exception, match=r"org\.pytorch\.aten:ATen\(-1\) is not a registered function/op"):
        ort.InferenceSession(str(FIXTURES / fx.path), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("fx", _onnx_fixtures("ort_load"), ids=lambda f: f.path)
def test_ort_refuses(fx: Fixture) -> None:
    import onnx
    import onnxruntime as ort

    path = str(FIXTURES / fx.path)
    if fx.code == "OD403":
        # The checker refuses IR 15 before ORT gets a say; ORT refuses too.
        with pytest.raises(onnx.checker.ValidationError, match=r"ir_version 15 is higher than the checker's \(14\)"):
            onnx.checker.check_model(path, full_check=True)
        with pytest.raises(Exception, match=r"Unsupported model IR version: 15, max supported IR version: 14"):
            ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return
    onnx.checker.check_model(path, full_check=True)  # OD406: the checker passes these
    with pytest.raises(Exception) as info:
        ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert fx.raw in str(info.value)


def test_ort_kernel_table_names_det_types() -> None:
    from onnxruntime.capi import _pybind_state as C

    types = {t for d in C.get_all_opkernel_def() if d.op_name == "Det" and d.domain == ""
             and d.provider == "CPUExecutionProvider" for v in d.type_constraints.values() for t in v}
    assert types == {"tensor(float)"}


def test_reshape_fails_at_run_time() -> None:
    import numpy as np
    import onnxruntime as ort

    fx = _by_path("ort_run/od501_reshape_mismatch.onnx")
    sess = ort.InferenceSession(str(FIXTURES / fx.path), providers=["CPUExecutionProvider"])
    sess.run(None, {"x": np.zeros((5, 3), np.float32)})  # N=5 fits [5, -1]
    with pytest.raises(Exception, match="cannot be reshaped to the requested shape"):
        sess.run(None, {"x": np.zeros((2, 3), np.float32)})


@pytest.mark.parametrize("fx", [f for f in INDEX if f.code in ("OD110", "OD111", "OD112")], ids=lambda f: f.path)
def test_bad_onnx_files(fx: Fixture) -> None:
    import onnx

    path = str(FIXTURES / fx.path)
    try:
        model = onnx.load(path)
    except Exception as exc:  # noqa: BLE001 - any parse/containment error is the observation
        assert fx.raw in str(exc)
        return
    # Empty file / bare GraphProto: onnx.load does NOT raise; only the checker notices.
    assert fx.path.endswith(("od110_empty.onnx", "od110_graphproto.onnx"))
    assert len(model.graph.node) == 0
    with pytest.raises(onnx.checker.ValidationError, match=fx.raw):
        onnx.checker.check_model(model)


def test_healthy_external_data_loads() -> None:
    import onnx

    model = onnx.load(str(FIXTURES / "load/healthy_external/model.onnx"))
    onnx.checker.check_model(model, full_check=True)


# ------------------------------------------------------------------ model scripts

_LOAD_PROBE = r"""
import json, sys, runpy
sys.path.insert(0, sys.argv[1])
import observe
out = {}
for path in sys.argv[2:]:
    try:
        model, inputs, kwargs, settings = observe.load_script(path)
        model(*inputs, **kwargs)
        out[path] = "ok"
    except BaseException as exc:  # SystemExit included
        out[path] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


def test_load_fixtures_fail_at_load() -> None:
    scripts = [f for f in INDEX if f.stage == "load" and not f.path.endswith(".onnx")]
    paths = [str(FIXTURES / f.path) for f in scripts]
    out = subprocess.run([sys.executable, "-c", _LOAD_PROBE, str(FIXTURES), *paths],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout)
    for fx, path in zip(scripts, paths):
        got = results[path]
        if fx.path.endswith("od102_not_utf8_comment_only.py"):
            assert got == "ok", got  # runpy runs it: onnxdoctor must check the encoding itself
            with pytest.raises(UnicodeDecodeError):
                Path(path).read_bytes().decode("utf-8")
            continue
        assert got != "ok", fx.path
        if fx.raw:
            assert fx.raw in got, (fx.path, got)


def test_headline_custom_op_fails_with_both_exporters() -> None:
    ts, dyn = _observe("fixtures/export/od203_custom_op_myselu.py", "both")
    st = _failed(ts)
    assert st["stage"].startswith("export")
    assert st["chain"][0]["type"] == "torch.onnx.errors.UnsupportedOperatorError"
    assert "unrecognized namespace mynamespace::myselu" in _text(st)
    # The user's line is in the TorchScript node's sourceRange (a frame local, not an attribute).
    assert any("od203_custom_op_myselu.py(31): forward" in line
               for node in st["nodes"] for line in node.get("sourceRange", []))
    st = _failed(dyn)
    types = [link["type"].rsplit(".", 1)[-1] for link in st["chain"]]
    assert types == ["ConversionError", "ConversionError", "DispatchError"]
    assert "No ONNX function found for <OpOverload(op='mynamespace.myselu'" in _text(st)
    assert any("line 31, in forward" in line for node in st["nodes"] for line in node.get("stack_trace_tail", []))


@pytest.mark.slow
@pytest.mark.parametrize("fx", [f for f in INDEX if f.stage == "export" and f.raw and f.code != "OD203"],
                         ids=lambda f: f.path)
def test_export_fixture_raw_message(fx: Fixture) -> None:
    exporter = "both" if fx.exporters == "both" else "script"
    for rec in _observe(str(FIXTURES / fx.path), exporter):
        st = next(s for s in rec["stages"] if s["stage"].startswith("export"))
        text = _text(st) if st["status"] == "failed" else "\n".join(st["stderr_head"])
        assert fx.raw in text, (rec.get("exporter"), text[:2000])


@pytest.mark.slow
def test_dynamo_substitutes_opset_18_for_11() -> None:
    (rec,) = _observe("fixtures/export/od207_dynamo_opset11.py")
    loaded = next(s for s in rec["stages"] if s["stage"] == "check:onnx.load")
    assert loaded["opset_import"] == {"": 18}
    assert all(s["status"] == "passed" for s in rec["stages"])


@pytest.mark.slow
def test_dynamo_silently_drops_dynamic_batch() -> None:
    (rec,) = _observe("fixtures/export/od208_dynamic_shapes_specialized.py")
    assert all(s["status"] == "passed" for s in rec["stages"]), rec


@pytest.mark.slow
@pytest.mark.parametrize("path,code", [
    ("fixtures/parity/od601_symbolic_wrong_math.py", "Not equal to tolerance"),
    ("fixtures/parity/od603_symbolic_wrong_shape.py", "output 0 shape: torch (4,) vs ort (4, 1)"),
    ("fixtures/parity/od604_symbolic_wrong_dtype.py", "output 0 dtype: torch float32 vs ort int64"),
    ("fixtures/ort_load/od401_myselu_symbolic.py", "mynamespace:MYSELU(-1) is not a registered function/op"),
])
def test_late_stage_script_fixtures(path: str, code: str) -> None:
    (rec,) = _observe(path)
    assert code in _text(_failed(rec))


def _run_get_model(path: Path, timeout: float) -> subprocess.CompletedProcess[bytes]:
    code = f"import runpy; runpy.run_path({str(path)!r}, run_name='__onnxdoctor__')['get_model']()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=timeout,
                          start_new_session=True)


@pytest.mark.slow
@pytest.mark.parametrize("name,expected", [
    ("od901_segfault.py", -signal.SIGSEGV), ("od901_abort.py", -signal.SIGABRT), ("od903_os_exit.py", 3)])
def test_tool_fixtures_die(name: str, expected: int) -> None:
    assert _run_get_model(FIXTURES / "tool" / name, 120).returncode == expected


@pytest.mark.slow
def test_flood_prints_50_mib() -> None:
    out = _run_get_model(FIXTURES / "tool/od904_flood.py", 120)
    assert out.returncode == 0 and len(out.stdout) == 50 * 1024 * 1024 and len(out.stderr) >= 1024 * 1024


def test_every_code_has_a_fixture_or_a_reason() -> None:
    from expected import NO_FIXTURE

    from onnxdoctor.codes import CODES

    have = {f.code for f in INDEX}
    missing = [c.code for c in CODES if c.code not in have and c.code not in NO_FIXTURE]
    assert not missing, f"codes with neither a fixture nor a reason: {missing}"
    for f in INDEX:
        if f.code:
            assert f.code in {c.code for c in CODES}, f.code
        if not f.path.endswith("od101_does_not_exist.py"):
            assert (FIXTURES / f.path).exists() or (FIXTURES / f.path).is_symlink(), f.path


@pytest.mark.slow
@pytest.mark.parametrize("fx", [f for f in INDEX if f.code is None and f.path.endswith(".py")], ids=lambda f: f.path)
def test_healthy_fixtures_pass_every_stage(fx: Fixture) -> None:
    target = str(FIXTURES / fx.path) + (":make_small" if fx.path.endswith("form_named_factory.py") else "")
    for rec in _observe(target, "both" if fx.exporters == "both" else "script"):
        assert [s for s in rec["stages"] if s["status"] != "passed"] == [], rec.get("exporter")
        assert rec["stages"][-1]["stage"].startswith("parity")
