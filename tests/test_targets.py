"""Deployment targets: the shipped tables, static verdicts on real ONNX models, real OpenVINO runs."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from onnxdoctor.cli import app
from onnxdoctor.model import DiagnoseOptions, Stage
from onnxdoctor.pipeline import diagnose
from onnxdoctor.targets import TARGETS, UnknownTargetError, resolve_targets
from onnxdoctor.targets.tables import check_model, load_table, table_names

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "build" / "capability_docs"
FIXTURES = ROOT / "fixtures" / "targets"
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
runner = CliRunner()


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           initializers: tuple[onnx.TensorProto, ...] = (), opset: int = 17,
           domains: tuple[str, ...] = ()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    imports = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    return model


def _verdicts(target: str, model: onnx.ModelProto) -> dict[str, tuple[str, str]]:
    result = check_model(target, model)
    return {v.node: (v.status.value, v.reason) for v in result.verdicts}


# ---------------------------------------------------------------- the shipped tables


@pytest.mark.parametrize("name", ["tensorrt", "coreml", "ort-web", "ort-cuda"])
def test_every_table_row_has_op_status_and_source_version(name: str) -> None:
    table = load_table(name)
    # A revision: a commit, or (ort-web) the runtime's release package the document shipped in.
    assert table.source["repository"] and table.source["version"]
    assert len(table.source["commit"] or "") == 40 or table.source["package"]
    assert len(table.rows) > 40
    for row in table.rows.values():
        assert row["op"] and row["status"] in ("supported", "unsupported")
        assert row["source_version"] == table.source["version"]


def test_every_table_target_is_registered() -> None:
    registered = {t.name for t in TARGETS if t.kind == "table"}
    assert set(table_names()) == registered


def test_script_regenerates_the_shipped_tables_from_the_stored_documents(tmp_path: Path) -> None:
    # The stored documents are part of the repository (build/capability_docs/, docs/targets.md):
    # this runs for real, never skipped.
    sources = json.loads((DOCS / "sources.json").read_text("utf-8"))
    assert set(sources) == set(table_names())  # every shipped table comes from a stored document
    script = str(ROOT / "scripts" / "regen_capability_tables.py")
    done = subprocess.run([sys.executable, script, "--docs", str(DOCS), "--out", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in tmp_path.glob("*.json"))
    assert written == sorted(f"{name}.json" for name in sources)
    for path in tmp_path.glob("*.json"):
        table = json.loads(path.read_text("utf-8"))
        meta = sources[table["target"]]
        assert (table["source"]["repository"], table["source"]["path"], table["source"]["commit"]) == (
            meta["repository"], meta["path"], meta["commit"])
        assert len(table["ops"]) > 40
        for row in table["ops"]:
            assert row["op"] and row["status"] in ("supported", "unsupported"), row
            assert row["source_version"] == table["source"]["version"] != "", row["op"]
    check = subprocess.run([sys.executable, script, "--docs", str(DOCS), "--check"],
                           check=False, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_ort_cuda_rows_carry_each_kernel_registration_with_opsets_and_types() -> None:
    table = load_table("ort-cuda")
    assert table.source["commit"] == "9adf238ebb270529666891a110443669e01e742a"
    assert table.source["date"] == "2026-02-11"
    assert table.absent_op == "fallback" and "CUDAExecutionProvider" in table.source["extract"]
    argmax = table.rows[("", "ArgMax")]
    assert [(k["opsets"], k["since"], k["until"]) for k in argmax["kernels"]] == [
        ("13+", 13, None), ("12", 12, 12), ("[1, 11]", 1, 11)]
    assert argmax["kernels"][0]["constraints"] == {"T": ["DOUBLE", "FLOAT", "FLOAT16"]}
    assert table.rows[("", "Relu")]["kernels"][0] == {
        "opsets": "14+", "since": 14, "until": None,
        "constraints": {"T": ["BFLOAT16", "DOUBLE", "FLOAT", "FLOAT16"]}}
    # Kernels registered since the older document (8f063305aacd) this table was built from before.
    assert ("com.microsoft", "Inverse") in table.rows and ("", "Gelu") in table.rows
    assert ("", "HardSwish") in table.rows


def test_resolve_targets_expands_all_and_refuses_unknown_names() -> None:
    assert resolve_targets(["all"]) == tuple(t.name for t in TARGETS)
    assert resolve_targets(["openvino", "openvino"]) == ("ort-cpu", "openvino")
    with pytest.raises(UnknownTargetError, match="tensorflow"):
        resolve_targets(["tensorflow"])


# ---------------------------------------------------------------- static verdicts


def test_op_missing_from_a_table_is_unsupported_there_and_supported_where_listed() -> None:
    axis = numpy_helper.from_array(__import__("numpy").array(0, dtype="int64"), "axis")
    model = _model([helper.make_node("CumSum", ["x", "axis"], ["y"], name="cumsum0")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], (axis,))
    assert _verdicts("coreml", model)["cumsum0"][0] == "unsupported"
    # ONNX Runtime Web's list has CumSum from opset 11 on (onnxruntime-web 1.31.1).
    assert _verdicts("ort-web", model)["cumsum0"][0] == "supported"
    # TensorRT lists CumSum with "`axis` must be an initializer": here it is one.
    assert _verdicts("tensorrt", model)["cumsum0"][0] == "supported"


def test_computed_input_the_table_needs_constant_is_partly_supported() -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape0", start=0, end=1),
        helper.make_node("Sub", ["s", "one"], ["last"], name="sub0"),
        helper.make_node("ReduceSum", ["x", "last"], ["y"], name="reduce0", keepdims=1),
    ]
    one = numpy_helper.from_array(__import__("numpy").array([1], dtype="int64"), "one")
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], (one,))
    status, reason = _verdicts("tensorrt", model)["reduce0"]
    assert status == "partly" and "axes" in reason and "initializer" in reason
    result = check_model("tensorrt", model)
    assert [f.code for f in result.findings] == ["OD706"]
    assert result.findings[0].stage is Stage.TARGET and result.findings[0].message.startswith("[tensorrt]")
    assert "not a run" in result.findings[0].evidence[0]


def test_dtype_the_table_does_not_list_and_rank_restriction_are_partly() -> None:
    conv = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv0")],
                  [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 1, 4, 4]),
                   helper.make_tensor_value_info("w", TensorProto.DOUBLE, [1, 1, 3, 3])],
                  [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    status, reason = _verdicts("tensorrt", conv)["conv0"]
    assert status == "partly" and "DOUBLE" in reason
    pool3d = _model([helper.make_node("MaxPool", ["x"], ["y"], name="pool0", kernel_shape=[2, 2, 2])],
                    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4, 4])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    assert _verdicts("coreml", pool3d)["pool0"][0] == "partly"
    assert _verdicts("tensorrt", pool3d)["pool0"][0] == "supported"  # 2D or 3D pooling


def test_custom_domain_op_is_unsupported_in_every_table_and_falls_back_on_cuda() -> None:
    model = _model([helper.make_node("MYSELU", ["x"], ["y"], domain="mynamespace", name="myselu0")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], domains=("mynamespace",))
    for name in table_names():
        result = check_model(name, model)
        if name == "ort-cuda":
            # ONNX Runtime places it on the CPU provider: a warning, not a refusal.
            assert result.counts == {"fallback": 1} and result.reached == "table"
            assert [(f.code, f.severity.value) for f in result.findings] == [("OD706", "warning")]
            assert "CPU provider" in result.findings[0].message
            continue
        assert result.counts == {"unsupported": 1}, name
        assert result.findings[0].code == "OD705" and result.findings[0].op == "mynamespace::MYSELU"


def test_ort_cuda_flags_op_versions_and_types_without_a_cuda_kernel() -> None:
    nodes = [helper.make_node("Upsample", ["f", "scales"], ["up"], name="upsample0"),
             helper.make_node("Relu", ["i"], ["ri"], name="relu_int64"),
             helper.make_node("Relu", ["f"], ["rf"], name="relu_float"),
             helper.make_node("Inverse", ["f"], ["inv"], domain="com.microsoft", name="inv0")]
    model = _model(nodes, [helper.make_tensor_value_info("f", TensorProto.FLOAT, [3, 3]),
                           helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
                   [helper.make_tensor_value_info(n, t, None) for n, t in
                    (("up", TensorProto.FLOAT), ("ri", TensorProto.INT64), ("rf", TensorProto.FLOAT),
                     ("inv", TensorProto.FLOAT))],
                   (numpy_helper.from_array(__import__("numpy").array([1.0, 2.0], dtype="float32"), "scales"),),
                   domains=("com.microsoft",))
    verdicts = _verdicts("ort-cuda", model)
    # Opset 17 resolves Upsample to Upsample-10; CUDA registers Upsample for opsets 7-8 and 9 only.
    assert verdicts["upsample0"][0] == "fallback" and "version 10" in verdicts["upsample0"][1]
    assert verdicts["relu_int64"][0] == "fallback" and "INT64" in verdicts["relu_int64"][1]
    assert verdicts["relu_float"] == ("supported", "kernel 14+")
    assert verdicts["inv0"][0] == "supported"  # a contrib op the CUDA provider has
    opset10 = _model([helper.make_node("ArgMax", ["f"], ["am"], name="argmax0", axis=1)],
                     [helper.make_tensor_value_info("f", TensorProto.FLOAT, [3, 3])],
                     [helper.make_tensor_value_info("am", TensorProto.INT64, None)], opset=10)
    assert _verdicts("ort-cuda", opset10)["argmax0"] == ("supported", "kernel [1, 11]")
    result = check_model("ort-cuda", model)
    assert result.counts == {"supported": 2, "fallback": 2}
    assert {f.code for f in result.findings} == {"OD706"} and result.status == "static"


# ---------------------------------------------------------------- real runs


def _contrib_inverse_file(folder: Path) -> Path:
    """com.microsoft::Inverse: ONNX Runtime's CPU provider runs it; OpenVINO cannot convert it."""
    model = _model([helper.make_node("Inverse", ["x"], ["y"], domain="com.microsoft", name="inv0"),
                    helper.make_node("Relu", ["y"], ["z"], name="relu0")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                   [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 3])], domains=("com.microsoft",))
    path = folder / "contrib_inverse.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_contrib_op_runs_on_ort_cpu_and_openvino_names_the_op_and_node(tmp_path: Path) -> None:
    path = _contrib_inverse_file(tmp_path)
    (diagnosis,) = diagnose(str(path), DiagnoseOptions(fix=False, targets=("openvino", "tensorrt")))
    by_name = {t.target: t for t in diagnosis.targets}
    assert list(by_name) == ["ort-cpu", "openvino", "tensorrt"]
    assert by_name["ort-cpu"].status == "passed" and by_name["ort-cpu"].reached == "run"
    openvino = by_name["openvino"]
    assert openvino.status == "failed" and openvino.reached is None and openvino.counts == {"unsupported": 1}
    (finding,) = openvino.findings
    assert (finding.code, finding.op, finding.node) == ("OD701", "com.microsoft::Inverse", "inv0")
    assert finding.message.startswith("[openvino]")
    assert by_name["tensorrt"].counts == {"unsupported": 1, "supported": 1}
    assert not diagnosis.healthy  # a target the user asked for refuses the model
    # A run target's JSON entry names its nodes, as a table's does.
    from onnxdoctor.targets.matrix import target_dict

    nodes = target_dict(openvino)["nodes"]
    assert [(n["node"], n["op"], n["status"]) for n in nodes] == [("inv0", "com.microsoft::Inverse", "unsupported")]


@pytest.mark.slow
@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_int64_relu_fails_ort_cpu_and_runs_to_parity_in_openvino() -> None:
    (diagnosis,) = diagnose(str(FIXTURES / "int64_relu.py"),
                            DiagnoseOptions(fix=False, targets=("openvino", "ort-cuda")))
    by_name = {t.target: t for t in diagnosis.targets}
    assert by_name["ort-cpu"].status == "failed"
    assert "OD402" in {f.code for f in diagnosis.findings}
    assert by_name["openvino"].status == "passed" and by_name["openvino"].reached == "parity"
    assert by_name["openvino"].max_abs_diff == 0.0
    # The CUDA kernel table flags the int64 input too: Relu is registered for float types only.
    (cuda,) = by_name["ort-cuda"].findings
    assert (cuda.code, cuda.op) == ("OD706", "Relu") and "INT64" in cuda.message
    assert by_name["ort-cuda"].counts == {"fallback": 1, "supported": 1}  # the int64 Add is listed


# Model scripts one target rejects and another accepts. Each is exported for real (dynamo) and run
# by ONNX Runtime and OpenVINO 2026.4 on this CPU; the comments say what each runtime does.
CIRCULAR_PAD_ARGMAX = """
import torch
import torch.nn.functional as F


class PadThenPick(torch.nn.Module):
    def forward(self, x):
        padded = F.pad(x, (1, 1), mode="circular")  # Pad mode="wrap": OpenVINO cannot convert it
        return padded.argmax(dim=-1)  # ArgMax-13: the CUDA kernel table has it since 9adf238ebb27


model = PadThenPick()
example_inputs = (torch.rand(1, 2, 5),)
"""

ANTIALIAS_RESIZE = """
import torch
import torch.nn.functional as F


class Downsample(torch.nn.Module):
    def forward(self, x):
        # Resize antialias=1: ONNX Runtime filters like PyTorch, OpenVINO's CPU plugin does not
        return F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True)


model = Downsample()
example_inputs = (torch.rand(1, 1, 8, 8),)
"""

TOPK_ZERO = """
import torch


class TopRest(torch.nn.Module):
    def forward(self, x):
        values, _ = torch.topk(x, x.shape[1] - 4, dim=1)  # k = 0 for a width-4 input
        return values + 1.0


model = TopRest()
example_inputs = (torch.rand(2, 4),)
dynamic_shapes = {"x": {1: torch.export.Dim("width", min=4, max=64)}}
"""


def _diagnose_script(folder: Path, text: str, targets: tuple[str, ...]) -> tuple[object, dict]:
    script = folder / "model.py"
    script.write_text(text, "utf-8")
    (diagnosis,) = diagnose(str(script), DiagnoseOptions(fix=False, targets=targets))
    return diagnosis, {t.target: t for t in diagnosis.targets}


@pytest.mark.slow
@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_op_openvino_cannot_convert_is_od702_naming_op_node_and_line(tmp_path: Path) -> None:
    diagnosis, by_name = _diagnose_script(tmp_path, CIRCULAR_PAD_ARGMAX, ("openvino", "ort-cuda", "tensorrt"))
    assert by_name["ort-cpu"].status == "passed" and by_name["ort-cpu"].reached == "parity"
    openvino = by_name["openvino"]
    assert openvino.status == "failed" and openvino.reached is None and openvino.counts == {"unsupported": 1}
    # ArgMax fails too, only because its input is the unconverted Pad: one finding, the cause.
    (finding,) = openvino.findings
    assert (finding.code, finding.op) == ("OD702", "Pad") and finding.node
    assert "wrap" in finding.message and finding.source == "model.py:8"
    cuda = by_name["ort-cuda"]
    assert cuda.status == "static" and cuda.reached == "table" and "fallback" not in cuda.counts
    assert cuda.findings == ()  # the CUDA kernel table lists Pad and ArgMax-13
    assert by_name["tensorrt"].counts.get("unsupported", 0) == 0  # TensorRT's parser lists Pad and ArgMax
    assert not diagnosis.healthy  # OD702 is an error


@pytest.mark.slow
@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_openvino_output_that_differs_from_pytorch_is_od704(tmp_path: Path) -> None:
    diagnosis, by_name = _diagnose_script(tmp_path, ANTIALIAS_RESIZE, ("openvino", "ort-cuda"))
    assert by_name["ort-cpu"].reached == "parity" and by_name["ort-cpu"].status == "passed"
    openvino = by_name["openvino"]
    assert openvino.status == "failed" and openvino.reached == "run"
    assert openvino.max_abs_diff is not None and openvino.max_abs_diff > 0.05  # far above f32 rounding
    assert [f.code for f in openvino.findings] == ["OD704"]
    assert by_name["ort-cuda"].findings == () and by_name["ort-cuda"].counts == {"supported": 1}
    assert [f.code for f in diagnosis.findings if f.stage.value != "shapes"] == ["OD704"]  # OD801 aside


@pytest.mark.slow
@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_openvino_failing_on_the_example_inputs_is_od703_naming_the_node(tmp_path: Path) -> None:
    _, by_name = _diagnose_script(tmp_path, TOPK_ZERO, ("openvino",))
    assert by_name["ort-cpu"].status == "passed" and by_name["ort-cpu"].reached == "parity"
    openvino = by_name["openvino"]
    assert openvino.status == "failed" and openvino.reached == "compile"
    (finding,) = openvino.findings
    assert (finding.code, finding.op) == ("OD703", "TopK")
    assert finding.node and finding.source == "model.py:7" and "K (0)" in finding.message


@pytest.mark.slow
@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_script_targets_setting_is_used_and_json_carries_the_targets(tmp_path: Path) -> None:
    script = tmp_path / "model.py"
    shutil.copy(FIXTURES / "int64_relu.py", script)
    with script.open("a") as f:
        f.write('\ntargets = ["openvino", "ort-web"]\n')
    result = runner.invoke(app, ["diagnose", str(script), "--no-fix", "--json"])
    document = json.loads(result.stdout)
    assert document["schema"] == 2
    targets = {t["target"]: t for t in document["targets"]}
    assert list(targets) == ["ort-cpu", "openvino", "ort-web"]
    assert targets["openvino"]["reached"] == "parity" and targets["openvino"]["kind"] == "run"
    assert targets["ort-web"]["kind"] == "static"


def test_unknown_target_is_one_usage_line(tmp_path: Path) -> None:
    path = _contrib_inverse_file(tmp_path)
    result = runner.invoke(app, ["diagnose", str(path), "--target", "tensorflow"])
    assert result.exit_code == 2
    assert "unknown target 'tensorflow'" in result.output and "Traceback" not in result.output


def test_static_tables_report_in_console_and_markdown(tmp_path: Path) -> None:
    path = _contrib_inverse_file(tmp_path)
    report = tmp_path / "r.md"
    result = runner.invoke(app, ["diagnose", str(path), "--no-fix", "--target", "coreml", "--target", "ort-web",
                                 "--report", str(report)])
    assert result.exit_code == 1, result.output
    assert "not a run" in result.output
    text = report.read_text("utf-8")
    assert "| coreml | static |" in text and "| ort-web | static | - | refuses nodes | 1 |" in text
    # Each table's document, revision and date under the matrix, in both.
    web = "ort-web: microsoft/onnxruntime js/web/docs/webgpu-operators.md, onnxruntime-web 1.31.1 (npm package), 2026-10-26"
    assert web in result.output and f"- {web}" in text


def test_graph_target_marks_the_nodes_a_table_refuses(tmp_path: Path) -> None:
    path = _contrib_inverse_file(tmp_path)
    out = tmp_path / "g.dot"
    result = runner.invoke(app, ["graph", str(path), "--dot", "-o", str(out), "--target", "ort-web"])
    assert result.exit_code == 1, result.output
    text = out.read_text("utf-8")
    assert "OD705" in text and "[ort-web]" in text and "not a run" in result.output
    bad = runner.invoke(app, ["graph", str(path), "--dot", "-o", str(tmp_path / "h.dot"), "--target", "nope"])
    assert bad.exit_code == 2 and "unknown target 'nope'" in bad.output


@pytest.mark.slow
def test_a_verified_fix_is_judged_by_every_requested_target(tmp_path: Path) -> None:
    # The cast fix works on ONNX Runtime CPU; the fixed model's Det is still missing from
    # TensorRT's table, has no CUDA kernel and no OpenVINO conversion: the matrix says so per target.
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "ort_load" / "od402_det_float64.py"
    options = DiagnoseOptions(targets=("tensorrt", "ort-cuda", "openvino"))
    (diagnosis,) = diagnose(str(fixture), options)
    cast = next(f for f in diagnosis.findings[0].fixes if f.kind == "cast")
    assert cast.verified is True and cast.check is not None
    verdicts = dict(cast.check.targets)
    assert verdicts["ort-cpu"] == "parity"
    # OpenVINO ran the fixed model for real in the fix's own run: it has no Det conversion.
    assert verdicts["openvino"] == "failed at read"
    assert verdicts["tensorrt"].startswith("refuses 1 node")
    assert verdicts["ort-cuda"].startswith("CPU fallback")
    # Untried or failed fixes carry no target verdicts: only a working fix has a model to judge.
    assert all(not f.check.targets for f in diagnosis.findings[0].fixes if f.check and not f.check.works)


@pytest.mark.slow
def test_a_fix_verified_in_its_own_worker_is_run_in_openvino_there() -> None:
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "export" / "od206_training_mode.py"
    (diagnosis,) = diagnose(str(fixture), DiagnoseOptions(targets=("openvino",)))
    fix = next(f for f in diagnosis.findings[0].fixes if f.kind == "eval_mode")
    assert fix.verified is True and fix.check is not None
    assert dict(fix.check.targets) == {"ort-cpu": "parity", "openvino": "parity"}


# ---------------------------------------------------------------- target-driven fixes


def _target_finding(diagnosis: object, code: str, target: str, op: str) -> object:
    return next(f for f in diagnosis.findings  # type: ignore[attr-defined]
                if f.code == code and f.message.startswith(f"[{target}]") and f.op == op)


@pytest.mark.slow
def test_an_op_a_target_lacks_is_written_as_its_function_body_and_judged_per_target() -> None:
    # HardSwish: CoreML's list lacks it; its body (HardSigmoid, Mul) is in the list. ONNX Runtime
    # Web lists HardSwish itself (onnxruntime-web 1.31.1) and CUDA has a kernel for it (onnxruntime
    # 9adf238ebb27): no finding there.
    targets = ("coreml", "ort-cuda", "ort-web", *(("openvino",) if HAS_OPENVINO else ()))
    (diagnosis,) = diagnose(str(FIXTURES / "hardswish_mobile_block.py"), DiagnoseOptions(targets=targets))
    coreml = _target_finding(diagnosis, "OD705", "coreml", "HardSwish")
    (fix,) = [f for f in coreml.fixes if f.kind == "expand"]
    assert fix.verified is True and fix.check.max_abs_diff is not None and fix.check.max_abs_diff < 1e-5
    verdicts = dict(fix.check.targets)
    assert verdicts["coreml"] == "all ops listed" and verdicts["ort-cuda"] == "all ops listed"
    assert verdicts["ort-web"] == "all ops listed"
    if HAS_OPENVINO:
        assert verdicts["openvino"] == "parity"  # OpenVINO ran the rewritten model for real
    assert not [f for f in diagnosis.findings if f.message.startswith(("[ort-web]", "[ort-cuda]"))]


@pytest.mark.slow
def test_values_a_target_needs_constant_are_folded_into_initializers(tmp_path: Path) -> None:
    # Slice's end computed from Shape on a static input: CoreML needs it constant (and lacks the
    # Gather that computes it). Folding answers both; the original file, run by ONNX Runtime,
    # is the reference.
    (diagnosis,) = diagnose(str(FIXTURES / "slice_bounds_from_shape.onnx"), DiagnoseOptions(targets=("coreml",)),
                            workdir=tmp_path)
    slice_finding = _target_finding(diagnosis, "OD706", "coreml", "Slice")
    (fix,) = [f for f in slice_finding.fixes if f.kind == "fold_constants"]
    assert fix.verified is True and fix.check.max_abs_diff == 0.0
    assert dict(fix.check.targets)["coreml"] == "all ops listed"
    folded = onnx.load(fix.check.artifact)
    assert [n.op_type for n in folded.graph.node] == ["Slice", "Relu"]
    from fix_programs import run_fix_program

    run_fix_program(fix, FIXTURES / "slice_bounds_from_shape.onnx", tmp_path / "fix")
    gather = _target_finding(diagnosis, "OD705", "coreml", "Gather")
    assert [f.kind for f in gather.fixes] == ["fold_constants"] and gather.fixes[0].verified is True
    # Constant nodes are initializers once loaded: no table calls them unsupported.
    assert not any(f.op == "Constant" for f in diagnosis.findings)


@pytest.mark.slow
def test_int64_a_target_has_no_kernel_for_is_computed_in_int32_there(tmp_path: Path) -> None:
    (diagnosis,) = diagnose(str(FIXTURES / "int64_reduce_prod.py"), DiagnoseOptions(targets=("ort-cuda",)),
                            workdir=tmp_path)
    finding = _target_finding(diagnosis, "OD706", "ort-cuda", "ReduceProd")
    (fix,) = [f for f in finding.fixes if f.kind == "cast"]
    assert "int32" in fix.title and fix.verified is True and fix.check.max_abs_diff == 0.0
    assert dict(fix.check.targets)["ort-cuda"] == "all ops listed"
    fixed = onnx.load(fix.check.artifact)
    prod = next(n for n in fixed.graph.node if n.op_type == "ReduceProd")
    casts = {n.output[0]: n for n in fixed.graph.node if n.op_type == "Cast"}
    assert prod.input[0] in casts and prod.input[1] not in casts  # the int64 axes stay int64
    # --write-fix hands the same rewrite over as a fix.py that runs as written.
    from fix_programs import run_fix_program

    run_fix_program(fix, FIXTURES / "int64_reduce_prod.py", tmp_path / "fix")


def test_int64_relu_gets_no_target_cast_where_the_table_lists_only_floats() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu0")],
                   [helper.make_tensor_value_info("x", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, [2])], opset=14)
    from onnxdoctor.analysis.fixes import target_gaps
    from onnxdoctor.analysis.fixes._context import FixContext

    (finding,) = check_model("ort-cuda", model).findings
    assert finding.detail is not None and finding.detail.need == "types"
    ctx = FixContext(target_kind="onnx", target_name="m.onnx", exporter=None, requested_opset=None, op="Relu")
    # cast_around keeps a value's family: int64 is never computed in float behind the user's back.
    assert target_gaps.propose(finding, ctx) == []


# ---------------------------------------------------------------- GPU execution providers

HAS_CUDA_EP = "CUDAExecutionProvider" in __import__("onnxruntime").get_available_providers()


def _exported_cnn(tmp_path: Path) -> tuple[str, list[object], list[object]]:
    import numpy as np
    import torch

    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 2))
    conv.eval()
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path / "m.onnx"
    torch.onnx.export(conv, (x,), str(path), dynamo=True)
    with torch.no_grad():
        expected = [conv(x).numpy()]
    return str(path), [x.numpy()], [np.asarray(e) for e in expected]


@pytest.mark.slow
def test_nodes_a_provider_leaves_are_named_from_the_sessions_own_profile(tmp_path: Path) -> None:
    # The same path a GPU run takes, with ONNX Runtime's Azure provider in front: it takes no
    # ordinary node, so ONNX Runtime places every node on the CPU, and the record must name each.
    from onnxdoctor.worker.ep_target import run_on_providers

    path, feeds, expected = _exported_cnn(tmp_path)
    record = run_on_providers("ort-cuda", path, feeds, expected, 1e-4, 1e-3, tmp_path,
                              providers=("AzureExecutionProvider",))
    assert record["status"] == "passed" and record["reached"] == "parity", record
    names = {n.name: n.op_type for n in onnx.load(path).graph.node}
    assert {i["node"]: i["op"] for i in record["on_cpu"]} == names
    # With the CPU provider first nothing falls back: there is nothing to report.
    alone = run_on_providers("ort-cuda", path, feeds, expected, 1e-4, 1e-3, tmp_path, providers=("CPUExecutionProvider",))
    assert alone["on_cpu"] == [] and alone["providers"] == ["CPUExecutionProvider"]


def test_a_real_run_with_cpu_fallbacks_is_a_runtime_verdict_naming_each_node() -> None:
    from onnxdoctor.targets.collect import collect

    events = [{"event": "target", "target": "ort-cuda", "run": "main", "status": "passed", "reached": "parity",
               "version": "1.32.0", "providers": ["CPUExecutionProvider", "CUDAExecutionProvider"],
               "on_cpu": [{"node": "node_det", "op": "Det"}], "max_abs_diff": 0.0, "seconds": 0.2}]
    (result,) = collect(("ort-cpu", "ort-cuda"), (), events, None)[1:]
    assert result.kind == "runtime" and result.reached == "parity" and result.counts == {"fallback": 1}
    (finding,) = result.findings
    assert finding.code == "OD706" and finding.node == "node_det" and "real run" in finding.message


@pytest.mark.skipif(HAS_CUDA_EP, reason="this onnxruntime has the CUDA provider: the GPU test runs instead")
def test_without_a_gpu_provider_the_gpu_targets_say_so_in_one_line(tmp_path: Path) -> None:
    (diagnosis,) = diagnose(str(ROOT / "fixtures" / "healthy" / "mlp.py"),
                            DiagnoseOptions(fix=False, targets=("ort-cuda", "ort-tensorrt")))
    results = {t.target: t for t in diagnosis.targets}
    assert results["ort-cuda"].kind == "table" and "not run: onnxruntime" in results["ort-cuda"].note
    assert results["ort-tensorrt"].status == "skipped"
    (missing,) = [f for f in diagnosis.findings if f.code == "OD707"]
    assert "TensorrtExecutionProvider" in missing.message and "\n" not in missing.message


@pytest.mark.slow
@pytest.mark.skipif(not HAS_CUDA_EP, reason="needs onnxruntime with the CUDA provider and a GPU")
def test_ort_cuda_runs_for_real_on_a_gpu() -> None:
    (diagnosis,) = diagnose(str(ROOT / "fixtures" / "healthy" / "cnn.py"), DiagnoseOptions(fix=False, targets=("ort-cuda",)))
    (result,) = [t for t in diagnosis.targets if t.target == "ort-cuda"]
    assert result.kind == "runtime" and result.reached == "parity", result
    assert "CUDAExecutionProvider" in result.note


@pytest.mark.slow
def test_a_model_above_the_tables_opsets_is_exported_at_the_last_one_it_covers() -> None:
    (diagnosis,) = diagnose(str(FIXTURES / "opset21_mlp.py"), DiagnoseOptions(targets=("tensorrt", "coreml")))
    (finding,) = [f for f in diagnosis.findings if f.message.startswith("[tensorrt]")]
    assert finding.code == "OD706" and "opset 21" in finding.message and "9-20" in finding.message
    (fix,) = finding.fixes
    assert fix.kind == "opset" and "opset 20" in fix.title and fix.verified is True
    assert dict(fix.check.targets)["tensorrt"] == "all ops listed"
    # CoreML's list names no opsets: nothing to say there.
    assert not any(f.message.startswith("[coreml]") for f in diagnosis.findings)
