"""The static tables against real ONNX models built here (no export): freshness, grouping, scale."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxdoctor.targets.tables import check_model, load_table, source_line

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "build" / "capability_docs"


def bert_like(opset: int = 18) -> onnx.ModelProto:
    """A small BERT-like encoder, as torch exports one: embedding lookups (Gather), LayerNorm,
    attention with a Where mask and Softmax, a Tanh pooler, Casts."""
    hidden, vocab, seq = 8, 16, 4
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [
        weight("word_emb", vocab, hidden), weight("pos_emb", seq, hidden),
        weight("ln_w", hidden), weight("ln_b", hidden),
        weight("wq", hidden, hidden), weight("wk", hidden, hidden), weight("wv", hidden, hidden),
        weight("pool_w", hidden, hidden), weight("pool_b", hidden),
        numpy_helper.from_array(np.arange(seq, dtype=np.int64), "positions"),
        numpy_helper.from_array(np.array(np.sqrt(hidden), dtype=np.float32), "scale"),
        numpy_helper.from_array(np.array(-1e4, dtype=np.float32), "neg"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "one"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
    ]
    n = helper.make_node
    nodes = [
        n("Gather", ["word_emb", "input_ids"], ["tok"], name="embeddings_word"),
        n("Gather", ["pos_emb", "positions"], ["pos"], name="embeddings_position"),
        n("Add", ["tok", "pos"], ["emb"], name="embeddings_add"),
        n("LayerNormalization", ["emb", "ln_w", "ln_b"], ["h0"], name="embeddings_layernorm", axis=-1),
        n("MatMul", ["h0", "wq"], ["q"], name="attn_q"),
        n("MatMul", ["h0", "wk"], ["k"], name="attn_k"),
        n("MatMul", ["h0", "wv"], ["v"], name="attn_v"),
        n("Transpose", ["k"], ["kt"], name="attn_kt", perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["scores"], name="attn_scores"),
        n("Div", ["scores", "scale"], ["scaled"], name="attn_scale"),
        n("Cast", ["attention_mask"], ["mask_bool"], name="mask_cast", to=TensorProto.BOOL),
        n("Unsqueeze", ["mask_bool", "axis1"], ["mask3"], name="mask_unsqueeze"),
        n("Where", ["mask3", "scaled", "neg"], ["masked"], name="attn_mask"),
        n("Softmax", ["masked"], ["probs"], name="attn_softmax", axis=-1),
        n("MatMul", ["probs", "v"], ["ctx"], name="attn_context"),
        n("Add", ["ctx", "h0"], ["res"], name="attn_residual"),
        n("LayerNormalization", ["res", "ln_w", "ln_b"], ["h1"], name="attn_layernorm", axis=-1),
        n("Slice", ["h1", "zero", "one", "axis1"], ["cls3"], name="pooler_cls"),
        n("Squeeze", ["cls3", "axis1"], ["cls"], name="pooler_squeeze"),
        n("Gemm", ["cls", "pool_w", "pool_b"], ["pooled_lin"], name="pooler_dense"),
        n("Tanh", ["pooled_lin"], ["pooled"], name="pooler_tanh"),
        n("Cast", ["pooled"], ["pooled_out"], name="pooler_cast", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes, "bert_like",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq])],
        [helper.make_tensor_value_info("pooled_out", TensorProto.FLOAT, [1, hidden]),
         helper.make_tensor_value_info("h1", TensorProto.FLOAT, [1, seq, hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_plain_bert_like_model_passes_ort_web() -> None:
    model = bert_like()
    result = check_model("ort-web", model)
    refused = {v.node: v.reason for v in result.verdicts if v.status.value != "supported"}
    assert refused == {}
    assert result.findings == () and result.reached == "table"
    ops = {v.op for v in result.verdicts}
    assert {"Gather", "Softmax", "Cast", "Where", "Tanh", "LayerNormalization"} <= ops


def test_each_table_states_its_document_revision_and_date() -> None:
    sources = json.loads((DOCS / "sources.json").read_text("utf-8"))
    for name, meta in sources.items():
        table = load_table(name)
        line = source_line(table.source)
        assert table.source.get("commit") or table.source.get("package"), name
        assert (meta.get("date") or "date not known") in line, line
        assert table.source.get("date") == meta.get("date")
    web = load_table("ort-web").source
    assert web["date"] == "2026-10-26" and "onnxruntime-web 1.31.1" in source_line(web)
    trt = source_line(load_table("tensorrt").source)
    assert trt == "onnx/onnx-tensorrt docs/operators.md, at 96e781103cfc (10.0), 2024-06-17"


def test_the_verdict_line_and_env_name_the_revision_and_date() -> None:
    from onnxdoctor.targets import available

    model = bert_like()
    model.graph.node.append(helper.make_node("Det", ["h1"], ["det"], name="det0"))
    model.graph.output.append(helper.make_tensor_value_info("det", TensorProto.FLOAT, [1]))
    result = check_model("ort-web", model)
    assert "onnxruntime-web 1.31.1 (npm package), 2026-10-26" in result.note
    assert any("2026-10-26" in e for f in result.findings for e in f.evidence)
    ok, line = available("ort-web")
    assert ok and "onnxruntime-web 1.31.1 (npm package), 2026-10-26" in line


def test_an_op_version_above_a_closed_range_is_refused() -> None:
    # GridSample is registered for opsets 16-19 on WebGPU: opset 20 selects GridSample-20.
    def grid(opset: int) -> onnx.ModelProto:
        node = helper.make_node("GridSample", ["x", "g"], ["y"], name="grid0")
        graph = helper.make_graph(
            [node], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4]),
             helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 4, 4, 2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 10
        return model

    assert check_model("ort-web", grid(19)).verdicts[0].status.value == "supported"
    refused = check_model("ort-web", grid(20)).verdicts[0]
    assert refused.status.value == "unsupported" and "16-19" in refused.reason


@pytest.mark.parametrize("domain", ["com.microsoft"])
def test_contrib_ops_the_web_list_names_are_supported(domain: str) -> None:
    node = helper.make_node("FastGelu", ["x"], ["y"], name="fg0", domain=domain)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(domain, 1)])
    assert check_model("ort-web", model).verdicts[0].status.value == "supported"
    assert check_model("coreml", model).verdicts[0].status.value == "unsupported"


def _chain(op: str, count: int, opset: int = 18) -> onnx.ModelProto:
    nodes = [helper.make_node(op, [f"v{i}"], [f"v{i + 1}"], name=f"{op.lower()}_{i}") for i in range(count)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info(f"v{count}", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def test_refused_nodes_are_one_finding_per_op_with_the_count_and_names() -> None:
    model = _chain("Abs", 28)
    model.graph.node.append(helper.make_node("Neg", ["v28"], ["n"], name="neg_0"))
    model.graph.output[0].name = "n"
    result = check_model("coreml", model)
    od705 = [f for f in result.findings if f.code == "OD705"]
    assert [f.op for f in od705] == ["Abs", "Neg"]
    abs_finding = od705[0]
    assert "28 nodes" in abs_finding.message and "abs_0" in abs_finding.message
    assert abs_finding.node == "abs_0"
    assert any("abs_27" in e for e in abs_finding.evidence)  # every name, for --verbose and JSON
    assert "28 nodes" not in od705[1].message and od705[1].node == "neg_0"
    assert result.counts["unsupported"] == 29 and len(result.verdicts) == 29


def test_a_5000_node_chain_is_judged_quickly() -> None:
    model = _chain("Abs", 5000)
    started = time.perf_counter()
    result = check_model("coreml", model)
    assert time.perf_counter() - started < 10
    assert len(result.findings) == 1 and result.counts["unsupported"] == 5000


# ---------------------------------------------------------------- fixes judged per target (no worker)


def _judged(tmp_path: Path, fixed: onnx.ModelProto, findings_count: int) -> tuple[list, object]:
    from onnxdoctor.model import Fix, FixCheck, Stage, Status
    from onnxdoctor.protocol import WorkerResult
    from onnxdoctor.recipe import ExpandFunction, Recipe, RewriteOnnx
    from onnxdoctor.targets.judge import FixJudge

    path = tmp_path / "fixed.onnx"
    onnx.save(fixed, path)
    recipe = Recipe("expand", (RewriteOnnx(ExpandFunction("HardSwish", "coreml"), None),))
    fix = Fix("expand", "Write HardSwish as its body", recipe=recipe,
              check=FixCheck(Stage.PARITY, Status.PASSED, artifact=str(path)))
    original = _chain("HardSwish", 3)
    before = check_model("coreml", original)
    web = check_model("ort-web", original)
    findings = [f for f in before.findings if f.code == "OD705"] * findings_count
    findings = [__import__("dataclasses").replace(f, fixes=(fix,)) for f in findings]
    events = [{"event": "target", "target": "openvino", "run": "main", "status": "failed", "step": "read"}]
    runs = {recipe.key(): (WorkerResult(events, 0, 0.0, False, 0.0), "main")}
    openvino = __import__("onnxdoctor.targets", fromlist=["TargetResult"]).TargetResult(
        "openvino", "runtime", "parity", "passed")
    judge = FixJudge((before, web, openvino), runs)
    return judge.judge(findings), judge


def test_each_fixed_model_is_judged_once_per_target_however_many_findings_share_it(tmp_path: Path) -> None:
    from onnxdoctor.onnxkit.transforms import expand_for_target

    fixed = expand_for_target(_chain("HardSwish", 3), "HardSwish", "coreml")
    judged, judge = _judged(tmp_path, fixed, 40)
    assert judge.checks == 2  # coreml and ort-web, once each, for 40 findings
    verdicts = dict(judged[0].fixes[0].check.targets)
    assert verdicts == {"ort-cpu": "parity", "coreml": "all ops listed", "ort-web": "all ops listed",
                        "openvino": "failed at read"}
    assert all(f.fixes[0].verified for f in judged)


def test_a_fix_that_leaves_its_own_target_refusing_the_op_is_tried_and_failing(tmp_path: Path) -> None:
    judged, _judge = _judged(tmp_path, _chain("HardSwish", 3), 1)  # "fixed" model unchanged
    check = judged[0].fixes[0].check
    assert check.works is False and check.problem == "OD705"
    assert check.detail == "coreml still reports HardSwish in the fixed model"


def test_a_5000_node_chain_is_written_as_function_bodies_quickly() -> None:
    from onnxdoctor.onnxkit.transforms import expand_for_target

    started = time.perf_counter()
    fixed = expand_for_target(_chain("HardSwish", 5000), "HardSwish", "coreml")
    assert time.perf_counter() - started < 15  # was 43 s: every node scanned every name
    assert len(fixed.graph.node) == 10000


def test_openvino_refusals_are_one_finding_per_op_and_the_json_entry_names_the_nodes() -> None:
    # The worker's `target` event as onnxdoctor/worker writes it for OpenVINO.
    from onnxdoctor.targets.collect import collect
    from onnxdoctor.targets.matrix import target_dict

    record = {"event": "target", "target": "openvino", "run": "main", "status": "failed", "version": "2025.3.0",
              "reached": None, "step": "read", "error": "OpConversionFailure: No conversion rule found for "
              "operations: com.microsoft.Inverse",
              "unconverted": [{"op": "com.microsoft::Inverse", "node": f"inv{i}"} for i in range(3)]}
    (openvino,) = collect(["ort-cpu", "openvino"], [], [record], None)[1:]
    (finding,) = openvino.findings
    assert finding.code == "OD701" and finding.node == "inv0" and "3 nodes: inv0, inv1, inv2" in finding.message
    nodes = target_dict(openvino)["nodes"]
    assert [n["node"] for n in nodes] == ["inv0", "inv1", "inv2"]
    assert {n["op"] for n in nodes} == {"com.microsoft::Inverse"}


@pytest.mark.skipif(__import__("importlib").util.find_spec("openvino") is None, reason="openvino is not installed")
def test_openvino_check_compiles_once_without_the_query_it_does_not_need(tmp_path: Path) -> None:
    # query_model cost as much as compiling and placed every op of every model tried: it is asked
    # only when compiling fails (docs/targets.md, Cost).
    from onnxdoctor.worker.openvino_target import COMPILE_CONFIG, run_openvino

    model = bert_like()
    path = tmp_path / "bert.onnx"
    onnx.save(model, path)
    feeds = [np.array([[1, 2, 3, 4]], dtype=np.int64), np.array([[1, 1, 1, 0]], dtype=np.int64)]
    record = run_openvino(str(path), model, feeds, None, 1e-4, 1e-4)
    assert record["status"] == "passed" and record["reached"] == "run", record
    assert "not_placed" not in record
    assert COMPILE_CONFIG == {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def test_graph_marks_every_node_a_grouped_target_finding_stands_for(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from onnxdoctor.cli import app

    path = tmp_path / "chain.onnx"
    onnx.save(_chain("Abs", 6), path)
    out = tmp_path / "chain.dot"
    result = CliRunner().invoke(app, ["graph", str(path), "--dot", "-o", str(out), "--target", "coreml"])
    assert result.exit_code == 1, result.output
    text = out.read_text("utf-8")
    marked = [line for line in text.splitlines() if "OD705" in line and "label=" in line]
    assert len(marked) == 6, marked  # one finding, six red boxes
    assert result.output.count("OD705 error") == 1
