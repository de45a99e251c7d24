"""Names with DOT, HTML or SVG syntax in them render as text and never change the graph.

Every test renders real SVG with Graphviz and parses it as XML: a name that escaped its quotes
would add or drop nodes, and one that injected markup would break the XML or add elements.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from graph_models import SVG, model, save, svg_nodes, value
from onnx import helper
from typer.testing import CliRunner

from onnxdoctor.cli import app
from onnxdoctor.graph.elements import dot_quote
from onnxdoctor.graph.elements import visible as _visible

HOSTILE = [
    'q"uote',
    "brace{x}",
    "<b>bold</b>",
    "a&amp;b & c",
    "line1\nline2",
    'end]; evil [color=red label="pwned"',
    "ünïcødé ✓ 漢字",
    "back\\slash\\N\\G",
    "-- digraph {",
    "</text><script>alert(1)</script>",
    "tab\there\x01",
    "",
]


def _hostile_model() -> tuple[Path, list[str]]:
    nodes = []
    previous = "x"
    for index, name in enumerate(HOSTILE):
        out = "y" if index == len(HOSTILE) - 1 else f"{name}#out{index}"
        nodes.append(helper.make_node("Relu", [previous], [out], name=name))
        previous = out
    return nodes, [f"{n}#out{i}" for i, n in enumerate(HOSTILE[:-1])]


@pytest.mark.parametrize(
    "flags",
    [[], ["--layout", "layered"], ["--tensors"], ["--tensors", "--layout", "layered"]],
    ids=["dot", "layered", "tensors", "tensors-layered"],
)
def test_hostile_names_render_literally(tmp_path: Path, flags: list[str]) -> None:
    nodes, tensor_names = _hostile_model()
    path = save(model(nodes), tmp_path / "m.onnx")
    result = CliRunner().invoke(app, ["graph", str(path), *flags])
    assert result.exit_code == 0, result.output
    svg = tmp_path / "m.svg"
    root = ET.parse(svg).getroot()  # well-formed XML: nothing was injected
    assert not [e for e in root.iter() if e.tag.endswith("script")]
    drawn = svg_nodes(svg)
    ops = [n for n in drawn if n and n[0] == "Relu"]
    assert len(ops) == len(HOSTILE)
    for name in HOSTILE[:-1]:
        assert ["Relu", _visible(name)] in ops, name
    expected = len(HOSTILE) + 2  # ops, input, output
    if "--tensors" in flags:
        expected += len(tensor_names)
        for tensor in tensor_names:
            assert [_visible(tensor), "float32[2,3]"] in drawn, tensor
    assert len(drawn) == expected
    # No label turned a node red or renamed it: fills are the default domain colour only.
    fills = {e.get("fill") for e in root.iter(f"{SVG}path")} - {"none", None}
    assert fills == {"#dbe9f6"}


def test_edge_labels_are_text_too(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ['<i>"t"</i> & ];'], name="a"),
        helper.make_node("Relu", ['<i>"t"</i> & ];'], ["y"], name="b"),
    ]
    path = save(model(nodes), tmp_path / "m.onnx")
    assert CliRunner().invoke(app, ["graph", str(path)]).exit_code == 0
    root = ET.parse(tmp_path / "m.svg").getroot()
    edge_texts = [
        t.text
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "edge"
        for t in g.iter(f"{SVG}text")
    ]
    assert '<i>"t"</i> & ];' in edge_texts


def test_dot_quote_escapes_what_graphviz_would_interpret() -> None:
    assert dot_quote('a"b') == '"a\\"b"'
    assert dot_quote("a\\N") == '"a\\\\N"'  # no \N substitution (the node's name)
    assert dot_quote("x&amp;") == '"x&amp;amp;"'  # Graphviz decodes entities in plain labels
    assert dot_quote("a\nb") == '"a\\\\nb"'  # a newline inside a name shows as \n
    assert dot_quote("one", "two") == '"one\\ntwo"'  # separate lines are real line breaks
    assert dot_quote("x" * 100).endswith('…"')


def test_non_utf8_names_are_drawn(tmp_path: Path) -> None:
    data = model([helper.make_node("Relu", ["x"], ["y"], name="NAMEXXXX")]).SerializeToString()
    path = tmp_path / "m.onnx"
    path.write_bytes(data.replace(b"NAMEXXXX", b"NAME\xff\xfeXX"))
    result = CliRunner().invoke(app, ["graph", str(path)])
    assert result.exit_code == 0, result.output
    assert ["Relu", "NAME\\xff\\xfeXX"] in svg_nodes(tmp_path / "m.svg")


def test_value_helper_shapes() -> None:
    assert value("x", ["batch", 3]).type.tensor_type.shape.dim[0].dim_param == "batch"
