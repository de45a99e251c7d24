"""`onnxdoctor env`: real probes, checked against the libraries themselves."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from onnxdoctor import envinfo, envprobe

REPO = Path(__file__).resolve().parent.parent


def _run_cli(
    *args: str, env: dict[str, str] | None = None, python_flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    code = "import sys; from onnxdoctor.cli import main; sys.argv = ['onnxdoctor', *sys.argv[1:]]; main()"
    return subprocess.run(
        [sys.executable, *python_flags, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def env_json() -> dict[str, Any]:
    proc = _run_cli("env", "--json")
    assert proc.returncode in (0, 1), proc.stderr
    return dict(json.loads(proc.stdout))


def test_env_json_has_the_documented_keys(env_json: dict[str, Any]) -> None:
    assert env_json["schema"] == 1
    assert set(env_json) >= {"versions", "exporters", "onnx", "onnxruntime", "tools", "warnings"}
    assert list(env_json["versions"]) == ["python", *envinfo.PACKAGES]
    for warning in env_json["warnings"]:
        assert set(warning) == {"code", "message"}
        assert warning["code"].startswith("OD0")


def test_exit_code_says_whether_there_are_warnings(env_json: dict[str, Any]) -> None:
    proc = _run_cli("env")
    assert proc.returncode == (1 if env_json["warnings"] else 0), proc.stderr
    assert "Traceback" not in proc.stderr
    assert "onnxruntime" in proc.stdout and "opset" in proc.stdout


def test_versions_match_package_metadata(env_json: dict[str, Any]) -> None:
    versions = env_json["versions"]
    assert versions == envinfo.package_versions()
    assert versions["python"] == platform.python_version()
    for name, distributions in envinfo.PACKAGES.items():
        installed = []
        for dist in distributions:
            try:
                installed.append(importlib.metadata.version(dist))
            except importlib.metadata.PackageNotFoundError:
                pass
        assert versions[name] == (installed[0] if installed else envinfo.NOT_INSTALLED), name


def test_onnx_facts_match_onnx(env_json: dict[str, Any]) -> None:
    onnx = pytest.importorskip("onnx")
    assert env_json["onnx"]["max_opset"] == onnx.defs.onnx_opset_version()
    assert env_json["onnx"]["ir_version"] == onnx.IR_VERSION


def _identity(opset: int, ir_version: int) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["b"])],
        "check",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return bytes(model.SerializeToString())


def _loads_and_runs(model: bytes) -> bool:
    import numpy as np
    import onnxruntime as ort  # noqa: TID251 - the test checks the probe against ORT itself

    try:
        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    except Exception:  # ORT's own exception types; any of them means refused
        return False
    x = np.array([1.5, -2.0], dtype=np.float32)
    (y,) = session.run(None, {"a": x})
    return bool((y == x).all())


def test_probed_runtime_limits_are_the_real_ones(env_json: dict[str, Any]) -> None:
    pytest.importorskip("onnxruntime")
    ort_facts = env_json["onnxruntime"]
    opset, ir_version = ort_facts["max_opset"], ort_facts["max_ir_version"]
    assert isinstance(opset, int) and isinstance(ir_version, int)
    # The probe builds IR-7 models to find the opset; check with the probed IR version instead.
    assert _loads_and_runs(_identity(opset, ir_version))
    assert not _loads_and_runs(_identity(opset + 1, ir_version))
    assert _loads_and_runs(_identity(13, ir_version))
    assert not _loads_and_runs(_identity(13, ir_version + 1))
    assert "IR version" in ort_facts["next_ir_refusal"]
    assert str(opset + 1) in ort_facts["next_opset_refusal"]


def test_providers_match_onnxruntime(env_json: dict[str, Any]) -> None:
    ort = pytest.importorskip("onnxruntime")
    assert env_json["onnxruntime"]["providers"] == ort.get_available_providers()
    assert env_json["onnxruntime"]["version"] == ort.__version__


def test_torch_constants_read_from_source_equal_the_imported_ones() -> None:
    pytest.importorskip("torch")
    from_source = envinfo.torch_constants()
    assert set(from_source) == {*envinfo._TORCH_CONSTANTS, *envinfo._DYNAMO_CONSTANTS}
    assert from_source == envinfo.torch_constants_imported()


def test_torchlib_opset_is_the_dynamo_exporters_native_opset(env_json: dict[str, Any]) -> None:
    pytest.importorskip("onnxscript")
    dynamo = env_json["exporters"]["dynamo"]
    assert dynamo["torchlib_opset"] is not None
    assert dynamo["torchlib_opset"] == dynamo["min_opset"]


_EXPORT_CODE = """
import io, json, logging, sys, warnings
import torch, onnx
warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
ts_max, ts_max_warn, dynamo_max = (int(a) for a in sys.argv[1:4])
model, x = torch.nn.Linear(3, 2).eval(), torch.randn(1, 3)
def torchscript(opset):
    f = io.BytesIO()
    torch.onnx.export(model, (x,), f, dynamo=False, **({} if opset is None else {"opset_version": opset}))
    return onnx.load_from_string(f.getvalue()).opset_import[0].version
def dynamo(opset):
    p = torch.onnx.export(model, (x,), dynamo=True, **({} if opset is None else {"opset_version": opset}))
    return p.model_proto.opset_import[0].version, p.model_proto.ir_version
out = {"ts_default": torchscript(None), "ts_max": torchscript(ts_max), "ts_max_warn": torchscript(ts_max_warn)}
try:
    torchscript(ts_max_warn + 1)
    out["ts_beyond"] = "exported"
except RuntimeError as e:
    out["ts_beyond"] = str(e)
out["dynamo_default"], out["dynamo_ir"] = dynamo(None)
out["dynamo_max"] = dynamo(dynamo_max)[0]
out["dynamo_11"] = dynamo(11)[0]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_reported_exporter_opsets_are_what_torch_writes(env_json: dict[str, Any]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    ts, dyn = env_json["exporters"]["torchscript"], env_json["exporters"]["dynamo"]
    limits = (ts["max_opset"], ts["max_opset_with_warning"], dyn["max_opset"])
    proc = subprocess.run(
        [sys.executable, "-c", _EXPORT_CODE, *map(str, limits)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = json.loads(proc.stdout.strip().splitlines()[-1])
    assert written["ts_default"] == ts["default_opset"]
    assert written["ts_max"] == ts["max_opset"]
    assert written["ts_max_warn"] == ts["max_opset_with_warning"]
    assert "Unsupported onnx_opset_version" in written["ts_beyond"]
    assert written["dynamo_default"] == dyn["default_opset"]
    assert written["dynamo_ir"] == dyn["ir_version"]
    assert written["dynamo_max"] == dyn["max_opset"] == env_json["onnx"]["max_opset"]
    # The silent substitution the env note (and OD207) describes.
    assert written["dynamo_11"] == dyn["min_opset"]


def test_env_imports_neither_torch_nor_onnxruntime_in_the_cli_process() -> None:
    code = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from onnxdoctor.cli import app\n"
        "result = CliRunner().invoke(app, ['env', '--json'])\n"
        "assert result.exit_code in (0, 1), result.output\n"
        "json.loads(result.stdout)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'onnxruntime', 'onnx'))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def _site_without(tmp_path: Path, hidden: tuple[str, ...]) -> Path:
    """A folder that mirrors site-packages minus the hidden packages (their modules and metadata)."""
    import rich

    site = Path(rich.__file__).resolve().parent.parent
    mirror = tmp_path / "site"
    mirror.mkdir()
    for entry in site.iterdir():
        stem = entry.name.split("-")[0].split(".")[0].lower().replace("_", "-")
        if stem in hidden or stem == "onnxdoctor" or entry.suffix == ".pth":
            continue
        (mirror / entry.name).symlink_to(entry)
    return mirror


def test_missing_packages_are_reported_not_a_traceback(tmp_path: Path) -> None:
    hidden = ("torch", "onnx", "onnxruntime", "onnxscript", "onnxruntime-extensions", "pydot")
    mirror = _site_without(tmp_path, hidden)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(mirror)]))
    # -S: no site-packages, so the only packages are the mirror's (and the stdlib).
    proc = _run_cli("env", "--json", env=env, python_flags=("-S",))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    for name in hidden:
        assert data["versions"][name] == envinfo.NOT_INSTALLED
    assert data["versions"]["rich"] != envinfo.NOT_INSTALLED
    missing = {w["message"].split()[0] for w in data["warnings"] if w["code"] == "OD001"}
    assert missing == set(hidden)
    assert data["exporters"]["dynamo"]["available"] is False
    assert data["onnxruntime"]["installed"] is False

    table = _run_cli("env", env=env, python_flags=("-S",))
    assert table.returncode == 1 and "Traceback" not in table.stderr
    assert "not installed" in table.stdout and "OD001" in table.stdout


def _facts(ort_opset: int, ort_ir: int) -> dict[str, Any]:
    return {
        "versions": envinfo.package_versions(),
        "exporters": {
            "torchscript": {"max_opset": 20},
            "dynamo": {"default_opset": 20, "max_opset": 28, "ir_version": 10},
        },
        "onnx": {"installed": True, "max_opset": 28, "ir_version": 14},
        "onnxruntime": {
            "installed": True,
            "version": "1.x",
            "max_opset": ort_opset,
            "max_ir_version": ort_ir,
        },
        "tools": {"dot": {"found": True}},
    }


def test_a_runtime_older_than_the_writers_is_OD003() -> None:
    none = [w for w in envinfo.mismatch_warnings(_facts(28, 14)) if w["code"] == "OD003"]
    assert none == []
    old = [w["message"] for w in envinfo.mismatch_warnings(_facts(19, 9)) if w["code"] == "OD003"]
    # onnx's newest opset, dynamo's default, TorchScript's max; two IR writers.
    assert len(old) == 5
    assert any("onnx's newest opset" in m and "28" in m and "up to 19" in m for m in old)
    assert any("TorchScript" in m and "20" in m for m in old)
    assert any("IR version" in m and "14" in m and "up to 9" in m for m in old)


def test_missing_dot_is_OD002() -> None:
    facts = _facts(28, 14)
    facts["tools"] = {"dot": {"found": False}}
    assert [w["code"] for w in envinfo.mismatch_warnings(facts)].count("OD002") == 1


def test_the_runtime_refusal_prefix_is_stripped() -> None:
    raw = (
        "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/model.cc:256 "
        "onnxruntime::Model::Model(onnx::ModelProto&&, const onnxruntime::PathString&, "
        "const onnxruntime::logging::Logger&) Unsupported model IR version: 15, max supported IR version: 14"
    )
    assert (
        envprobe._ort_refusal(raw)
        == "Unsupported model IR version: 15, max supported IR version: 14"
    )


def test_a_probe_that_cannot_finish_is_a_warning_not_a_hang() -> None:
    facts = envinfo.probe_runtime(timeout=0.01)
    assert "error" in facts["onnxruntime"]
    env = _facts(28, 14)
    env["onnxruntime"] = facts["onnxruntime"]
    assert any(w["code"] == "OD099" for w in envinfo.mismatch_warnings(env))


def test_companion_libraries_built_for_another_torch_are_named() -> None:
    cuda_build = envinfo.extension_mismatches("2.13.0+cpu", {"torchvision": "0.28.0", "timm": "1.0"})
    assert [w["code"] for w in cuda_build] == ["OD099"]
    assert "CUDA on Linux" in cuda_build[0]["message"] and "download.pytorch.org/whl/cpu" in cuda_build[0]["message"]
    other_torch = envinfo.extension_mismatches("2.13.0+cpu", {"torchvision": "0.22.0+cpu"})
    assert "built for another torch" in other_torch[0]["message"]
    assert envinfo.extension_mismatches("2.13.0+cpu", {"torchvision": "0.28.0+cpu", "torchaudio": "2.13.0+cpu"}) == []
    assert envinfo.extension_mismatches("2.13.0", {"torchvision": "0.28.0"}) == []  # both CUDA builds


def test_env_lists_installed_model_libraries() -> None:
    import importlib.metadata

    found = envinfo.extension_versions()
    for name in envinfo.EXTENSIONS:
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            assert name not in found
        else:
            assert found[name] == installed


def test_gpu_targets_say_whether_they_can_run_here(env_json: dict[str, Any]) -> None:
    import shutil

    import onnxruntime as ort

    rows = {row["target"]: row for row in env_json["targets"]}
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    assert ("real run with CUDAExecutionProvider" in rows["ort-cuda"]["detail"]) is cuda
    assert rows["ort-tensorrt"]["available"] is ("TensorrtExecutionProvider" in ort.get_available_providers())
    assert env_json["tools"]["nvidia-smi"]["found"] is (shutil.which("nvidia-smi") is not None)
