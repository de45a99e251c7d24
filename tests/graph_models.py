"""Small ONNX models for the graph tests, built with onnx.helper (no torch)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import onnx
from onnx import TensorProto, helper

SVG = "{http://www.w3.org/2000/svg}"


def value(
    name: str, shape: Sequence[int | str] | None = (2, 3), dtype: int = TensorProto.FLOAT
) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, None if shape is None else list(shape))


def model(
    nodes: Sequence[onnx.NodeProto],
    *,
    inputs: Sequence[onnx.ValueInfoProto] | None = None,
    outputs: Sequence[onnx.ValueInfoProto] | None = None,
    initializers: Sequence[onnx.TensorProto] = (),
    opsets: Sequence[tuple[str, int]] = (("", 17),),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "g",
        list(inputs if inputs is not None else [value("x")]),
        list(outputs if outputs is not None else [value("y")]),
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def chain(n: int, op: str = "Relu", prefix: str = "node") -> onnx.ModelProto:
    """x -> op -> op -> ... -> y, nodes named node0..node{n-1}, tensors t1..t{n-1}."""
    names = ["x", *[f"t{i}" for i in range(1, n)], "y"]
    nodes = [
        helper.make_node(op, [names[i]], [names[i + 1]], name=f"{prefix}{i}") for i in range(n)
    ]
    return model(nodes)


def if_model(depth: int = 1, bad_inner: bool = False) -> onnx.ModelProto:
    """`depth` nested If nodes; the innermost then-branch holds Gelu (bad at opset 17) if asked."""
    inner_op = "Gelu" if bad_inner else "Relu"
    body = helper.make_graph(
        [helper.make_node(inner_op, ["x"], ["b0"], name="innermost")], "b0", [], [value("b0")]
    )
    for level in range(1, depth + 1):
        other = helper.make_graph(
            [helper.make_node("Neg", ["x"], [f"e{level}"], name=f"else{level}")],
            f"e{level}",
            [],
            [value(f"e{level}")],
        )
        node = helper.make_node(
            "If", ["c"], [f"b{level}"], name=f"if{level}", then_branch=body, else_branch=other
        )
        body = helper.make_graph([node], f"b{level}", [], [value(f"b{level}")])
    top = list(body.node)
    top.append(helper.make_node("Identity", [f"b{depth}"], ["y"], name="out"))
    return model(top, inputs=[value("x"), value("c", [], TensorProto.BOOL)])


def save(m: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(m.SerializeToString())
    return path


def svg_nodes(path: Path) -> list[list[str]]:
    """The text lines of every Graphviz node in an SVG (parsed as XML: markup must not leak)."""
    root = ET.parse(path).getroot()
    nodes = []
    for group in root.iter(f"{SVG}g"):
        if group.get("class") == "node":
            nodes.append([t.text or "" for t in group.iter(f"{SVG}text")])
    return nodes


def svg_clusters(path: Path) -> list[list[str]]:
    root = ET.parse(path).getroot()
    return [
        [t.text or "" for t in g.iter(f"{SVG}text")]
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "cluster"
    ]


def svg_node_fill(path: Path, text: str) -> str | None:
    """The fill colour of the first node whose text contains `text`."""
    root = ET.parse(path).getroot()
    for group in root.iter(f"{SVG}g"):
        if group.get("class") != "node":
            continue
        if any(text in (t.text or "") for t in group.iter(f"{SVG}text")):
            for shape in group.iter():  # the shape sits inside an <a> when there is a tooltip
                fill = shape.get("fill")
                if shape.tag in (f"{SVG}path", f"{SVG}polygon", f"{SVG}ellipse") and fill not in (
                    None,
                    "none",
                ):
                    return fill
    return None
