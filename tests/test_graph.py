"""`onnxdoctor graph`: writes the picture where asked, marks problems, focuses, cuts, explains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest
from graph_models import chain, if_model, model, save, svg_clusters, svg_node_fill, svg_nodes, value
from onnx import TensorProto, helper
from typer.testing import CliRunner

from onnxdoctor.cli import app

runner = CliRunner()


def _graph(*args: str | Path) -> CliRunner.invoke:  # type: ignore[valid-type]
    return runner.invoke(app, ["graph", *[str(a) for a in args]])


def test_svg_next_to_the_model_with_summary(tmp_path: Path) -> None:
    path = save(chain(3), tmp_path / "m.onnx")
    result = _graph(path)
    assert result.exit_code == 0, result.output
    svg = tmp_path / "m.svg"
    assert result.stdout.startswith(f"wrote {svg} ")
    nodes = svg_nodes(svg)
    assert len(nodes) == 3 + 2  # three ops, the input and the output
    assert ["Relu", "node1"] in nodes
    assert "nodes: 3" in result.stdout and "ops: Relu 3" in result.stdout
    assert "inputs: x: float32[2,3]" in result.stdout
    assert "opsets: ai.onnx 17" in result.stdout
    assert "findings: none" in result.stdout


def test_never_overwrites_without_force(tmp_path: Path) -> None:
    path = save(chain(2), tmp_path / "m.onnx")
    out = tmp_path / "m.svg"
    out.write_text("keep me")
    result = _graph(path, "--svg")
    assert result.exit_code == 2
    assert "exists; pass --force" in result.stderr
    assert out.read_text() == "keep me"
    assert _graph(path, "--svg", "--force").exit_code == 0
    assert out.read_text().lstrip().startswith("<?xml")


def test_output_may_not_be_the_model_itself(tmp_path: Path) -> None:
    path = save(chain(2), tmp_path / "m.onnx")
    before = path.read_bytes()
    result = _graph(path, "--dot", "-o", path, "--force")
    assert result.exit_code == 2 and "the model itself" in result.stderr
    assert path.read_bytes() == before


def test_png_and_dot_formats(tmp_path: Path) -> None:
    path = save(chain(2), tmp_path / "m.onnx")
    assert _graph(path, "--png").exit_code == 0
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = tmp_path / "custom name.dot"
    assert _graph(path, "-o", out).exit_code == 0  # the format follows the suffix
    assert out.read_text().startswith("digraph")
    result = _graph(path, "--png", "--svg")
    assert result.exit_code == 2 and "choose one" in result.stderr


def test_failing_node_is_red_with_its_code(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="fine"),
        helper.make_node("Gelu", ["a"], ["y"], name="bad"),
    ]
    path = save(model(nodes, opsets=(("", 11),)), tmp_path / "m.onnx")
    result = _graph(path)
    assert result.exit_code == 1, result.output
    svg = tmp_path / "m.svg"
    assert ["Gelu", "bad", "OD301"] in svg_nodes(svg)
    assert svg_node_fill(svg, "bad") == "#f8c9c9"
    assert svg_node_fill(svg, "fine") == "#dbe9f6"
    assert "OD301 error: node 'bad' (Gelu): Gelu is not in opset 11" in result.stdout


def test_custom_domain_has_its_own_colour_and_is_listed(tmp_path: Path) -> None:
    nodes = [helper.make_node("MYSELU", ["x"], ["y"], name="mine", domain="mynamespace")]
    path = save(model(nodes, opsets=(("", 17), ("mynamespace", 1))), tmp_path / "m.onnx")
    result = _graph(path)
    assert result.exit_code == 0
    assert ["mynamespace::MYSELU", "mine"] in svg_nodes(tmp_path / "m.svg")
    assert svg_node_fill(tmp_path / "m.svg", "mine") not in (None, "#dbe9f6", "#f8c9c9")
    assert "custom domains: mynamespace (1 node)" in result.stdout


def test_subgraphs_are_clusters_and_inner_failures_are_marked_there(tmp_path: Path) -> None:
    path = save(if_model(depth=2, bad_inner=True), tmp_path / "m.onnx")
    result = _graph(path)
    assert result.exit_code == 1, result.output
    svg = tmp_path / "m.svg"
    assert len(svg_clusters(svg)) == 4  # then/else of two nested Ifs
    assert ["Gelu", "innermost", "OD301"] in svg_nodes(svg)
    assert ["If", "if1"] in svg_nodes(svg)  # the If itself is not blamed for its body
    assert "(4 inside If/Loop/Scan bodies)" in result.stdout


def test_tensors_as_ellipses_and_initializers_on_request(tmp_path: Path) -> None:
    weight = helper.make_tensor("W", TensorProto.FLOAT, [2, 3], [0.0] * 6)
    nodes = [
        helper.make_node("Add", ["x", "W"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    path = save(model(nodes, initializers=[weight]), tmp_path / "m.onnx")
    assert _graph(path).exit_code == 0
    folded = svg_nodes(tmp_path / "m.svg")
    assert len(folded) == 4 and not any("W" in n for n in folded)
    assert _graph(path, "--tensors", "--initializers", "--force").exit_code == 0
    drawn = svg_nodes(tmp_path / "m.svg")
    assert ["a", "float32[2,3]"] in drawn  # the intermediate tensor is its own ellipse
    assert ["W", "float32[2,3]"] in drawn
    assert len(drawn) == 2 + 1 + 1 + 1 + 1  # ops, tensor a, input, output, weight


def test_rankdir(tmp_path: Path) -> None:
    path = save(chain(2), tmp_path / "m.onnx")
    assert _graph(path, "--dot", "--rankdir", "LR").exit_code == 0
    assert "rankdir=LR" in (tmp_path / "m.dot").read_text()
    assert _graph(path, "--dot", "--rankdir", "XY", "--force").exit_code == 2


def test_focus_draws_the_neighbourhood(tmp_path: Path) -> None:
    path = save(chain(30), tmp_path / "m.onnx")
    result = _graph(path, "--focus", "node15", "--radius", "2")
    assert result.exit_code == 0, result.output
    ops = [n for n in svg_nodes(tmp_path / "m.svg") if n and n[0] == "Relu"]
    assert sorted(n[1] for n in ops) == ["node13", "node14", "node15", "node16", "node17"]
    assert "focus: 5 of 30 nodes within 2 step(s) of 'node15'" in result.stdout
    by_tensor = _graph(path, "--focus", "t15", "--radius", "0", "--force")
    assert by_tensor.exit_code == 0
    assert len([n for n in svg_nodes(tmp_path / "m.svg") if n[0] == "Relu"]) == 2


def test_focus_steps_through_drawn_values_not_shared_weights(tmp_path: Path) -> None:
    # Every layer adds the same weight: through it, each of the 30 ops is two steps from any other.
    names = ["x", *[f"t{i}" for i in range(1, 30)], "y"]
    nodes = [helper.make_node("Add", [names[i], "w"], [names[i + 1]], name=f"node{i}") for i in range(30)]
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], [0.5] * 6)
    path = save(model(nodes, initializers=[weight]), tmp_path / "m.onnx")
    result = _graph(path, "--focus", "node15", "--radius", "2")
    assert result.exit_code == 0, result.output
    ops = sorted(n[1] for n in svg_nodes(tmp_path / "m.svg") if n and n[0] == "Add")
    assert ops == ["node13", "node14", "node15", "node16", "node17"]
    assert "focus: 5 of 30 nodes" in result.stdout
    # Drawn, the weight is a value like any other: every op is within two steps through it.
    drawn = _graph(path, "--focus", "node15", "--radius", "2", "--initializers", "--force")
    assert drawn.exit_code == 0 and "focus: 30 of 30 nodes" in drawn.stdout


def test_focus_on_an_unknown_name_suggests_close_ones(tmp_path: Path) -> None:
    path = save(chain(5), tmp_path / "m.onnx")
    result = _graph(path, "--focus", "node_3")
    assert result.exit_code == 2
    assert "no node or tensor named 'node_3'" in result.stderr and "'node3'" in result.stderr
    assert not (tmp_path / "m.svg").exists()


def test_max_nodes_says_what_was_cut_and_how_to_see_it(tmp_path: Path) -> None:
    path = save(chain(50), tmp_path / "m.onnx")
    result = _graph(path, "--max-nodes", "10")
    assert result.exit_code == 0, result.output
    nodes = svg_nodes(tmp_path / "m.svg")
    assert len([n for n in nodes if n[0] == "Relu"]) == 10
    assert ["… 40 more nodes not drawn", "--max-nodes 50 to draw them"] in nodes
    assert "drew the first 10 of 50 nodes; 40 were cut from 'node10' (Relu) on" in result.stdout
    assert "--max-nodes 50" in result.stdout and "--focus NODE" in result.stdout


def test_max_nodes_reports_findings_on_cut_nodes(tmp_path: Path) -> None:
    m = chain(20)
    m.graph.node[15].op_type = "Gelu"
    m.opset_import[0].version = 11
    path = save(m, tmp_path / "m.onnx")
    result = _graph(path, "--max-nodes", "10")
    assert result.exit_code == 1
    assert "1 node(s) with findings were cut: 'node15' (Gelu)" in result.stdout


def test_from_saved_diagnosis_marks_named_nodes(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r"),
        helper.make_node("MYSELU", ["a"], ["y"], name="myselu_0", domain="mynamespace"),
    ]
    path = save(model(nodes, opsets=(("", 17), ("mynamespace", 1))), tmp_path / "m.onnx")
    saved = {
        "schema": 1,
        "target": "m.onnx",
        "stages": [],
        "findings": [
            {
                "code": "OD401",
                "stage": "ort_load",
                "severity": "error",
                "op": "mynamespace::MYSELU",
                "node": "myselu_0",
                "message": "ONNX Runtime has no kernel for mynamespace::MYSELU",
            },
            {
                "code": "OD406",
                "stage": "ort_load",
                "severity": "warning",
                "op": None,
                "node": None,
                "message": "the checker passed",
            },
            {"code": "OD777", "message": "from a newer onnxdoctor: ignored"},
        ],
    }
    diagnosis = tmp_path / "diagnosis.json"
    diagnosis.write_text(json.dumps(saved))
    result = _graph(path, "--from", diagnosis)
    assert result.exit_code == 1, result.output
    assert ["mynamespace::MYSELU", "myselu_0", "OD401"] in svg_nodes(tmp_path / "m.svg")
    assert "OD406 warning: the checker passed" in result.stdout


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"schema": 1}'])
def test_from_rejects_what_is_not_a_diagnosis(tmp_path: Path, content: str) -> None:
    path = save(chain(2), tmp_path / "m.onnx")
    bad = tmp_path / "d.json"
    bad.write_text(content)
    result = _graph(path, "--from", bad)
    assert result.exit_code == 2 and "--from" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_from_does_not_block_on_a_fifo(tmp_path: Path) -> None:
    path = save(chain(2), tmp_path / "m.onnx")
    fifo = tmp_path / "d.json"
    os.mkfifo(fifo)
    result = _graph(path, "--from", fifo)
    assert result.exit_code == 2 and "not a regular file" in result.stderr


def test_large_graph_uses_the_layered_layout(tmp_path: Path) -> None:
    path = save(chain(900), tmp_path / "m.onnx")
    result = _graph(path, "--max-nodes", "0")
    assert result.exit_code == 0, result.output
    assert "layered layout" in result.stdout
    assert len(svg_nodes(tmp_path / "m.svg")) == 902


@pytest.mark.parametrize("rankdir", ["TB", "LR"])
def test_layered_layout_folds_long_chains_into_a_wide_picture(tmp_path: Path, rankdir: str) -> None:
    path = save(chain(400), tmp_path / "m.onnx")
    result = _graph(path, "--layout", "layered", "--rankdir", rankdir)
    assert result.exit_code == 0, result.output
    root = ET.parse(tmp_path / "m.svg").getroot()
    width, height = (float(root.get(k, "0").removesuffix("pt")) for k in ("width", "height"))
    assert 1.0 < width / height < 3.0  # not a 400-box strip


def test_layered_layout_keeps_clusters_and_marks(tmp_path: Path) -> None:
    path = save(if_model(depth=1, bad_inner=True), tmp_path / "m.onnx")
    result = _graph(path, "--layout", "layered")
    assert result.exit_code == 1 and "layered layout" in result.stdout
    assert len(svg_clusters(tmp_path / "m.svg")) == 2
    assert ["Gelu", "innermost", "OD301"] in svg_nodes(tmp_path / "m.svg")


def test_drawing_does_not_need_external_weights_but_reports_them(tmp_path: Path) -> None:
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2, 3])
    weight.data_location = TensorProto.EXTERNAL
    for key, val in (("location", "../outside.bin"),):
        entry = weight.external_data.add()
        entry.key, entry.value = key, val
    (tmp_path / "outside.bin").write_bytes(bytes(24))
    folder = tmp_path / "model"
    folder.mkdir()
    nodes = [helper.make_node("Add", ["x", "W"], ["y"], name="add")]
    path = save(model(nodes, initializers=[weight]), folder / "m.onnx")
    result = _graph(path)
    assert result.exit_code == 1, result.output
    assert (folder / "m.svg").exists()
    assert "OD111 error: external data '../outside.bin' of tensor 'W' uses '..'" in result.stdout


def test_zero_node_model_is_drawn(tmp_path: Path) -> None:
    path = save(model([], outputs=[value("x")]), tmp_path / "m.onnx")
    result = _graph(path)
    assert result.exit_code == 0, result.output
    assert "nodes: 0" in result.stdout
    assert len(svg_nodes(tmp_path / "m.svg")) == 2


def test_graph_help_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from onnxdoctor.cli import app\n"
        "r = CliRunner().invoke(app, ['graph', '--help'])\n"
        "assert r.exit_code == 0 and '--focus' in r.stdout, r.output\n"
        "heavy = [m for m in ('torch', 'onnxruntime', 'onnx', 'pydot') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_default_max_nodes_is_one_number() -> None:
    from onnxdoctor.cli import graph as graph_cmd
    from onnxdoctor.graph import drawing as graph

    assert graph_cmd.DEFAULT_MAX_NODES == graph.DEFAULT_MAX_NODES


def test_unnamed_failing_node_is_still_marked(tmp_path: Path) -> None:
    path = save(
        model([helper.make_node("Gelu", ["x"], ["y"])], opsets=(("", 11),)), tmp_path / "m.onnx"
    )
    assert _graph(path).exit_code == 1
    assert ["Gelu", "OD301"] in svg_nodes(tmp_path / "m.svg")


def test_checker_can_be_skipped(tmp_path: Path) -> None:
    path = save(
        model([helper.make_node("Gelu", ["x"], ["y"], name="g")], opsets=(("", 11),)),
        tmp_path / "m.onnx",
    )
    result = _graph(path, "--no-check")
    assert result.exit_code == 0
    assert ["Gelu", "g"] in svg_nodes(tmp_path / "m.svg")
    assert "--no-check" in result.stdout


def test_onnx_model_roundtrip_helper_is_valid() -> None:
    onnx.checker.check_model(if_model(depth=3), full_check=True)


def test_runtime_marks_what_onnx_runtime_refuses(tmp_path: Path) -> None:
    # The checker passes a custom domain it knows nothing about; only a session load refuses it.
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="r"),
        helper.make_node("MYSELU", ["a"], ["y"], name="myselu_0", domain="mynamespace"),
    ]
    path = save(model(nodes, opsets=(("", 17), ("mynamespace", 1))), tmp_path / "m.onnx")
    assert _graph(path).exit_code == 0
    result = _graph(path, "--runtime", "--force")
    assert result.exit_code == 1, result.output
    [marked] = [n for n in svg_nodes(tmp_path / "m.svg") if "myselu_0" in n]
    assert marked[0] == "mynamespace::MYSELU" and "OD401" in marked[2].split()
    assert svg_node_fill(tmp_path / "m.svg", "myselu_0") == "#f8c9c9"
    assert "OD401 error" in result.stdout


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


def test_a_png_past_a_node_budget_is_laid_out_in_columns_that_stay_readable(tmp_path: Path) -> None:
    # 400 ops in one `dot` strip gave a 92 x 10003 PNG with 5-pixel text.
    small = save(chain(20), tmp_path / "small.onnx")
    big = save(chain(400), tmp_path / "big.onnx")
    assert "--svg" not in _graph(small, "--png").stdout
    result = _graph(big, "--png", "--no-check")
    assert result.exit_code == 0, result.output
    assert "layered layout in " in result.stdout and " columns, " in result.stdout
    assert "too small" not in result.stdout and "-pixel text" not in result.stdout
    width, height = _png_size(tmp_path / "big.png")
    assert 0.4 < width / height < 4, (width, height)  # about 16:10, not a strip
    assert width * height <= 40_000_000
    # The same drawing forced into one dot layout says why it cannot be read.
    forced = _graph(big, "--png", "--no-check", "--layout", "dot", "--force")
    assert forced.exit_code == 0 and "too small to read" in forced.stdout


def test_png_text_size_is_known_before_drawing() -> None:
    from onnxdoctor.graph.graphviz import READABLE_TEXT_PIXELS, png_text_pixels

    assert png_text_pixels((40.0, 25.0)) == 10.0  # small: not scaled
    assert png_text_pixels((120.0, 75.0)) >= 8.0  # bigger than 12 Mpixels: kept readable
    assert png_text_pixels((2000.0, 1250.0)) < READABLE_TEXT_PIXELS  # past cairo's sides: it says so
