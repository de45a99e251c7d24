"""Draw an ONNX graph with Graphviz: our own builder in net_drawer's spirit.

Ops are boxes coloured by domain; nodes with findings are red (warnings orange) and carry their
codes; tensors are either ellipses (`tensors=True`, as net_drawer drew them) or folded into edges;
If/Loop/Scan bodies are clusters. Small graphs are laid out by Graphviz `dot` from a pydot graph.
`dot` is superlinear (about 1.5 s at 1,000 ops with residual edges, minutes at 5,000), so large
graphs get a layered layout computed here, folded into columns, and Graphviz only draws it
(`neato -n2`, straight edges): seconds at 20,000 nodes.

Every label goes through `dot_quote`: names may hold quotes, backslashes, braces, `<`, `&`,
newlines or `];`, and must show as text, never as DOT syntax, escape sequences, HTML entities or
SVG markup.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import subprocess
import tempfile
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnxdoctor.onnxkit.files import safe_text
from onnxdoctor.onnxkit.walk import NodePath, node_bodies, op_label, walk_nodes
from onnxdoctor.outputs import install

if TYPE_CHECKING:
    import onnx

__all__ = [
    "DEFAULT_MAX_NODES",
    "DOT_LAYOUT_LIMIT",
    "DrawOptions",
    "Drawing",
    "GraphvizError",
    "GraphvizMissing",
    "Mark",
    "build_drawing",
    "dot_quote",
    "render",
]

# Ops drawn by default; beyond it the rest is cut with a note (see DrawOptions.max_nodes).
DEFAULT_MAX_NODES = 5000
# Above this many Graphviz nodes (or 3x as many edges), `dot` gets too slow (measured): above it,
# the layered layout.
DOT_LAYOUT_LIMIT = 800
# Above this many ops, edges lose their tensor-name labels (they would only clutter).
EDGE_LABEL_LIMIT = 300
# Labels longer than this are cut in the picture; the tooltip (SVG) keeps the full text.
LABEL_CHARS = 48
# PNG: Graphviz scales the drawing down to about this many pixels (cairo's cost grows with them).
PNG_DPI = 72
PNG_MAX_PIXELS = 12_000_000
PNG_MAX_SIDE = 30_000  # cairo refuses surfaces above 32767 pixels a side
PNG_SMALL_SIDE = 10_000  # pixels a side at most for a `dot` layout

_DOMAIN_COLOURS = {
    "": "#dbe9f6",
    "ai.onnx.ml": "#d9f2d9",
    "com.microsoft": "#e6dcf5",
    "org.pytorch.aten": "#fde2c4",
}
_CUSTOM_COLOURS = ("#fff2b3", "#d4f1f4", "#f9d9ea", "#e2efc6", "#f1e0c5", "#dcdcf5")
_ERROR_FILL, _ERROR_LINE = "#f8c9c9", "#c00000"
_WARN_FILL, _WARN_LINE = "#fde9c8", "#d98200"


class GraphvizMissing(Exception):
    """The Graphviz program needed to render is not on PATH."""


class GraphvizError(Exception):
    """Graphviz ran but failed or timed out (one-line message)."""


@dataclass(frozen=True)
class Mark:
    """A finding drawn on a node."""

    code: str
    severity: str  # "error" | "warning" | "info"
    message: str


@dataclass(frozen=True)
class DrawOptions:
    """What to draw and how.

    Attributes:
        tensors: draw each tensor as an ellipse (net_drawer style) instead of folding it into edges.
        initializers: draw initializers (weights); hidden by default.
        rankdir: "TB" (top to bottom) or "LR" (left to right).
        focus: a node or tensor name; draw only its neighbourhood.
        radius: how many ops away from the focus to draw.
        max_nodes: draw at most this many ops (0: no limit); the rest is cut with a note.
        layout: "auto", "dot" (Graphviz layout) or "layered" (ours, for big graphs).
    """

    tensors: bool = False
    initializers: bool = False
    rankdir: str = "TB"
    focus: str | None = None
    radius: int = 2
    max_nodes: int = DEFAULT_MAX_NODES
    layout: str = "auto"


@dataclass
class Drawing:
    """A graph ready for Graphviz, and what was (not) drawn."""

    dot_text: str
    layout: str  # "dot" or "layered"
    total_ops: int
    drawn_ops: int
    notes: list[str] = field(default_factory=list)
    size_inches: tuple[float, float] | None = None  # known for the layered layout

    @property
    def engine(self) -> tuple[str, ...]:
        """The Graphviz program and its layout flags."""
        return ("dot",) if self.layout == "dot" else ("neato", "-n2")


# -- escaping ---------------------------------------------------------------------------------


def _visible(text: str) -> str:
    """Control characters as visible escapes (`\\n`, `\\x01`): a name is shown, never obeyed."""
    out = []
    for ch in text:
        code = ord(ch)
        if code < 32 or code == 127 or 0x80 <= code < 0xA0 or ch in "\u2028\u2029":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\x{code:02x}"))
        else:
            out.append(ch)
    return "".join(out)


def _shorten(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def dot_quote(*lines: str, limit: int | None = LABEL_CHARS) -> str:
    """A DOT double-quoted string that Graphviz shows exactly as the given text.

    Each argument becomes one line. Inside a line: control characters become visible escapes,
    `&` becomes `&amp;` (Graphviz decodes HTML entities even in plain labels), backslashes are
    doubled (no `\\N`-style substitutions) and quotes escaped. The result is already quoted,
    so pydot passes it through unchanged.
    """
    parts = []
    for line in lines:
        text = _visible(line)
        if limit is not None:
            text = _shorten(text, limit)
        text = text.replace("&", "&amp;").replace("\\", "\\\\").replace('"', '\\"')
        parts.append(text)
    return '"' + "\\n".join(parts) + '"'


# -- the model as items and links -------------------------------------------------------------


@dataclass
class _Item:
    id: str
    kind: str  # op | input | output | init | tensor | missing | more
    lines: list[str]
    tooltip: str
    cluster: str | None = None
    path: NodePath | None = None
    domain: str = ""
    marks: list[Mark] = field(default_factory=list)
    order: int = 0


@dataclass
class _Link:
    src: str
    dst: str
    tensor: str
    dashed: bool = False


@dataclass
class _Cluster:
    id: str
    label: str
    parent: str | None
    owner: str


@dataclass
class _Model:
    items: dict[str, _Item]
    links: list[_Link]
    clusters: dict[str, _Cluster]
    op_ids: list[str]  # in model order, bodies right after their owner
    tensor_info: dict[str, str]


def _type_text(value_type: onnx.TypeProto) -> str:
    """`float32[1,3,'batch']`-style text for a value's type."""

    if value_type.HasField("tensor_type"):
        tensor = value_type.tensor_type
        dtype = _dtype_text(tensor.elem_type)
        if not tensor.HasField("shape"):
            return f"{dtype}[?]"
        dims = []
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value"):
                dims.append(str(dim.dim_value))
            elif dim.HasField("dim_param"):
                dims.append(safe_text(dim.dim_param) or "?")
            else:
                dims.append("?")
        return f"{dtype}[{','.join(dims)}]"
    for kind in ("sequence_type", "map_type", "optional_type", "sparse_tensor_type"):
        if value_type.HasField(kind):
            return kind.replace("_type", "")
    return "?"


def _dtype_text(elem_type: int) -> str:
    import onnx

    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type).name)
    except (KeyError, ValueError, TypeError):
        try:
            return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else "?"
        except ValueError:
            return "?"


def _tensor_text(tensor: onnx.TensorProto) -> str:
    return f"{_dtype_text(tensor.data_type)}[{','.join(str(d) for d in tensor.dims)}]"


def describe_value(value: onnx.ValueInfoProto) -> str:
    """`name: float32[1,3]` for a graph input or output."""
    return f"{safe_text(value.name)}: {_type_text(value.type)}"


def _shape_table(model: onnx.ModelProto) -> dict[str, str]:
    """Known types of tensors (declared, plus what non-strict shape inference adds)."""
    import onnx

    table: dict[str, str] = {}
    inferred = model
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - labels only; the check stage reports real errors
        inferred = model
    graph = inferred.graph
    for value in (*graph.value_info, *graph.input, *graph.output):
        table[safe_text(value.name)] = _type_text(value.type)
    for tensor in graph.initializer:
        table.setdefault(safe_text(tensor.name), _tensor_text(tensor))
    return table


def _collect(model: onnx.ModelProto, with_shapes: bool) -> _Model:
    """Every op, graph input/output, initializer and data link, subgraphs as clusters."""
    items: dict[str, _Item] = {}
    links: list[_Link] = []
    clusters: dict[str, _Cluster] = {}
    op_ids: list[str] = []
    tensor_info = _shape_table(model) if with_shapes else {}
    counter = [0]

    def new_id(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def add_item(item: _Item) -> _Item:
        item.order = len(items)
        items[item.id] = item
        return item

    main = model.graph
    scope: dict[str, str] = {}
    for value in main.input:
        name = safe_text(value.name)
        if name in scope:
            continue
        kind = "input"
        item = add_item(
            _Item(new_id("i"), kind, [name, _type_text(value.type)], describe_value(value))
        )
        scope[name] = item.id
    for tensor in main.initializer:
        name = safe_text(tensor.name)
        if name in scope:  # an initializer also listed as an input (IR < 4): it is a weight
            items[scope[name]].kind = "init"
            continue
        shape = tensor_info.get(name) or _tensor_text(tensor)
        item = add_item(_Item(new_id("w"), "init", [name, shape], f"initializer {name}: {shape}"))
        scope[name] = item.id
    for sparse in main.sparse_initializer:
        name = safe_text(sparse.values.name)
        item = add_item(_Item(new_id("w"), "init", [name, "sparse"], f"sparse initializer {name}"))
        scope.setdefault(name, item.id)
    missing: dict[str, str] = {}

    def walk(
        graph: onnx.GraphProto,
        prefix: NodePath,
        cluster: str | None,
        outer: Sequence[Mapping[str, str]],
    ) -> dict[str, str]:
        local: dict[str, str] = {}
        chain = [local, *outer]
        node_ids: list[str] = []
        for index, node in enumerate(graph.node):
            path = (*prefix, index)
            name = safe_text(node.name)
            label = op_label(node)
            lines = [label] + ([name] if name else [])
            tooltip = f"{label} {name!r}" if name else label
            item = add_item(
                _Item(new_id("n"), "op", lines, tooltip, cluster, path, safe_text(node.domain))
            )
            op_ids.append(item.id)
            node_ids.append(item.id)
            for out in node.output:
                out = safe_text(out)
                if out and out not in local:  # a duplicate producer is marked by the checker
                    local[out] = item.id
            for attr_name, body in node_bodies(node):
                cid = new_id("cluster_")
                clusters[cid] = _Cluster(
                    cid,
                    f"{node.op_type} {name!r} · {attr_name}"
                    if name
                    else f"{node.op_type} · {attr_name}",
                    cluster,
                    item.id,
                )
                body_scope: dict[str, str] = {safe_text(v.name): item.id for v in body.input}
                for tensor in body.initializer:
                    body_scope[safe_text(tensor.name)] = ""  # weights inside a body: not drawn
                produced = walk(body, (*path, attr_name), cid, [body_scope, *chain])
                for out in body.output:
                    out_name = safe_text(out.name)
                    source = produced.get(out_name) or _lookup([body_scope, *chain], out_name)
                    if source:
                        links.append(
                            _Link(source, item.id, f"{attr_name}: {out_name}", dashed=True)
                        )
        # Inputs resolve after every producer in this graph is known, so that unsorted graphs
        # and cycles are drawn as they are (the checker marks them).
        for node_id, node in zip(node_ids, graph.node):
            for inp in node.input:
                inp = safe_text(inp)
                if not inp:
                    continue
                source = _lookup(chain, inp)
                if source is None:
                    if inp not in missing:
                        missing[inp] = add_item(
                            _Item(
                                new_id("m"),
                                "missing",
                                [inp, "(not defined)"],
                                f"{inp} is not defined",
                                cluster,
                            )
                        ).id
                    source = missing[inp]
                if source:
                    links.append(_Link(source, node_id, inp))
        return local

    produced = walk(main, (), None, [scope])
    for value in main.output:
        name = safe_text(value.name)
        item = add_item(
            _Item(new_id("o"), "output", [name, _type_text(value.type)], describe_value(value))
        )
        source = produced.get(name) or scope.get(name)
        if source:
            links.append(_Link(source, item.id, name))
    return _Model(items, links, clusters, op_ids, tensor_info)


def _lookup(chain: Sequence[Mapping[str, str]], name: str) -> str | None:
    for scope in chain:
        if name in scope:
            return scope[name]
    return None


# -- selection: focus and the node budget ------------------------------------------------------


def _neighbourhood(model: _Model, focus: str, radius: int) -> set[str] | None:
    """Items within `radius` ops of the named node or tensor; None when the name is unknown."""
    starts = [
        i.id
        for i in model.items.values()
        if i.kind == "op" and len(i.lines) > 1 and i.lines[1] == focus
    ]
    starts += [
        i.id
        for i in model.items.values()
        if i.kind in ("input", "output", "init") and i.lines[0] == focus
    ]
    for link in model.links:
        if link.tensor == focus or link.tensor.endswith(f": {focus}"):
            starts += [link.src, link.dst]
    if not starts:
        return None
    adjacent: dict[str, set[str]] = defaultdict(set)
    for link in model.links:
        adjacent[link.src].add(link.dst)
        adjacent[link.dst].add(link.src)
    distance = {s: 0 for s in starts}
    queue = deque(starts)
    while queue:
        current = queue.popleft()
        if distance[current] >= radius:
            continue
        for nxt in adjacent[current]:
            if nxt not in distance:
                distance[nxt] = distance[current] + 1
                queue.append(nxt)
    return set(distance)


def _op_names(model: _Model) -> list[str]:
    return [model.items[i].lines[1] for i in model.op_ids if len(model.items[i].lines) > 1]


# -- building the drawing ----------------------------------------------------------------------


def build_drawing(
    model: onnx.ModelProto,
    marks: Mapping[NodePath, Sequence[Mark]],
    options: DrawOptions,
    *,
    title: str = "",
) -> Drawing:
    """Turn a model plus the marks on its nodes into DOT text for Graphviz.

    Args:
        model: the model (read with `read_onnx`; weights are never needed).
        marks: findings to draw, keyed by node path (see `onnxdoctor.onnxkit.checks.walk_nodes`).
        options: what to draw and how.
        title: a label for the whole picture (the model's file name).

    Returns:
        The drawing: DOT text, the layout used, and notes on anything not drawn.

    Raises:
        LookupError: `options.focus` names no node or tensor (the message suggests close names).
    """
    total_ops = sum(1 for _ in walk_nodes(model.graph))
    with_shapes = total_ops <= EDGE_LABEL_LIMIT or options.tensors
    collected = _collect(model, with_shapes)
    for item in collected.items.values():
        if item.path is not None and item.path in marks:
            item.marks = list(marks[item.path])
    notes: list[str] = []
    keep: set[str] | None = None
    if options.focus is not None:
        keep = _neighbourhood(collected, options.focus, options.radius)
        if keep is None:
            import difflib

            names = _op_names(collected) + sorted({link.tensor for link in collected.links})
            close = difflib.get_close_matches(options.focus, names, n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise LookupError(f"no node or tensor named {options.focus!r} in the model{hint}")
        kept_ops = sum(1 for i in keep if collected.items[i].kind == "op")
        notes.append(
            f"focus: {kept_ops} of {total_ops} nodes within {options.radius} step(s) "
            f"of {options.focus!r}"
        )
    ops_in_view = [i for i in collected.op_ids if keep is None or i in keep]
    if options.max_nodes and len(ops_in_view) > options.max_nodes:
        allowed = set(ops_in_view[: options.max_nodes])
        cut = [i for i in ops_in_view if i not in allowed]
        marked_cut = [collected.items[i] for i in cut if collected.items[i].marks]
        keep = (keep if keep is not None else set(collected.items)) - set(cut)
        first_cut = collected.items[cut[0]]
        notes.append(
            f"drew the first {len(allowed)} of {len(ops_in_view)} nodes; {len(cut)} were cut from "
            f"{_item_name(first_cut)} on. To see them: --max-nodes {len(ops_in_view)} "
            "(SVG; Graphviz still copes), or --focus NODE --radius K for one region"
        )
        if marked_cut:
            listed = ", ".join(_item_name(i) for i in marked_cut[:5])
            notes.append(f"{len(marked_cut)} node(s) with findings were cut: {listed}")
        more = _Item(
            "more",
            "more",
            [
                f"… {len(cut)} more nodes not drawn",
                f"--max-nodes {len(ops_in_view)} to draw them",
            ],
            "nodes cut by --max-nodes",
        )
        more.order = len(collected.items)
        collected.items["more"] = more
        keep.add("more")
        redirected = []
        for link in collected.links:
            if link.src in keep and link.dst in cut:
                redirected.append(_Link(link.src, "more", "", dashed=True))
        seen_pairs: set[tuple[str, str]] = set()
        for link in redirected:
            if (link.src, link.dst) not in seen_pairs:
                seen_pairs.add((link.src, link.dst))
                collected.links.append(link)
    if keep is not None:
        # Keep inputs/outputs/weights only where they touch a kept op.
        touching = set(keep)
        collected.items = {k: v for k, v in collected.items.items() if k in touching}
        collected.links = [l for l in collected.links if l.src in touching and l.dst in touching]
        used_clusters = {i.cluster for i in collected.items.values() if i.cluster}
        for cid in list(used_clusters):
            parent = collected.clusters[cid].parent
            while parent:
                used_clusters.add(parent)
                parent = collected.clusters[parent].parent
        collected.clusters = {k: v for k, v in collected.clusters.items() if k in used_clusters}
    if not options.initializers:
        hidden = {k for k, v in collected.items.items() if v.kind == "init"}
        collected.items = {k: v for k, v in collected.items.items() if k not in hidden}
        collected.links = [l for l in collected.links if l.src not in hidden]
    if options.max_nodes:
        _fold_boxes(collected, options.max_nodes, notes)
    # Isolated inputs/outputs that lost all links through a cut stay: they are the interface.
    drawn_ops = sum(1 for i in collected.items.values() if i.kind == "op")
    labelled_edges = drawn_ops <= EDGE_LABEL_LIMIT
    elements, edges = _elements(collected, options.tensors, labelled_edges)
    layout = options.layout
    if layout == "auto":
        small = len(elements) <= DOT_LAYOUT_LIMIT and len(edges) <= 3 * DOT_LAYOUT_LIMIT
        layout = "dot" if small else "layered"
    if layout == "dot":
        text = _pydot_text(
            elements, edges, collected.clusters, options, title, quick=len(elements) > 300
        )
        return Drawing(text, "dot", total_ops, drawn_ops, notes)
    text, size = _layered_text(elements, edges, collected.clusters, options, title)
    return Drawing(text, "layered", total_ops, drawn_ops, notes, size)


def _fold_boxes(collected: _Model, limit: int, notes: list[str]) -> None:
    """Draw at most `limit` boxes that are not ops (inputs, outputs, weights, tensors).

    --max-nodes bounds the ops, but one op can have 100,000 inputs or a model 10^6 initializers:
    the rest is folded into one box per kind, so Graphviz's work stays bounded too.
    """
    # Outputs and marked boxes are kept first: they are what a reader looks for.
    others = sorted((i for i in collected.items.values() if i.kind not in ("op", "more")),
                    key=lambda i: (i.kind != "output" and not i.marks, i.order))
    if len(others) <= limit:
        return
    folded = others[limit:]
    gone = {item.id for item in folded}
    counts: dict[str, int] = {}
    for item in folded:
        counts[item.kind] = counts.get(item.kind, 0) + 1
    words = {"input": "inputs", "output": "outputs", "init": "initializers", "tensor": "tensors",
             "missing": "missing tensors"}
    for kind, count in counts.items():
        box = _Item(f"folded{kind}", "more", [f"… {count} more {words.get(kind, kind)} not drawn"],
                    "folded by --max-nodes")
        box.order = len(collected.items) + len(counts)
        collected.items[box.id] = box
    kind_of = {item.id: item.kind for item in folded}
    links: list[_Link] = []
    seen: set[tuple[str, str]] = set()
    for link in collected.links:
        src = f"folded{kind_of[link.src]}" if link.src in gone else link.src
        dst = f"folded{kind_of[link.dst]}" if link.dst in gone else link.dst
        if src != link.src or dst != link.dst:
            if (src, dst) in seen:
                continue
            seen.add((src, dst))
            link = _Link(src, dst, "", dashed=True)
        links.append(link)
    collected.links = links
    for key in gone:
        del collected.items[key]
    summary = ", ".join(f"{count} {words.get(kind, kind)}" for kind, count in counts.items())
    notes.append(f"folded {summary} into one box each (more boxes than --max-nodes {limit})")


def _item_name(item: _Item) -> str:
    if item.kind == "op" and len(item.lines) > 1:
        return f"{item.lines[1]!r} ({item.lines[0]})"
    return item.lines[0] if item.lines else item.id


@dataclass
class _Element:
    """One Graphviz node: id, quoted attributes, cluster, and its box size for our layout."""

    id: str
    attrs: dict[str, str]
    cluster: str | None
    order: int
    width: float  # inches
    height: float


@dataclass
class _Edge:
    src: str
    dst: str
    attrs: dict[str, str]


def _colour(domain: str) -> str:
    if domain in _DOMAIN_COLOURS:
        return _DOMAIN_COLOURS[domain]
    if domain == "ai.onnx":
        return _DOMAIN_COLOURS[""]
    digest = hashlib.sha1(domain.encode("utf-8", "backslashreplace")).digest()[0]
    return _CUSTOM_COLOURS[digest % len(_CUSTOM_COLOURS)]


def _elements(model: _Model, tensors: bool, labelled: bool) -> tuple[list[_Element], list[_Edge]]:
    """Graphviz nodes and edges, with every string attribute already quoted."""
    elements: list[_Element] = []
    edges: list[_Edge] = []
    for item in sorted(model.items.values(), key=lambda i: i.order):
        lines = list(item.lines)
        attrs: dict[str, str] = {}
        tooltip = item.tooltip
        if item.kind == "op":
            attrs.update(
                shape="box", style='"rounded,filled"', fillcolor=f'"{_colour(item.domain)}"'
            )
            errors = [m for m in item.marks if m.severity == "error"]
            if item.marks:
                codes = " ".join(dict.fromkeys(m.code for m in item.marks))
                lines.append(codes)
                fill, line = (_ERROR_FILL, _ERROR_LINE) if errors else (_WARN_FILL, _WARN_LINE)
                attrs.update(
                    fillcolor=f'"{fill}"', color=f'"{line}"', penwidth="2.5", fontcolor=f'"{line}"'
                )
                tooltip = tooltip + "\n" + "\n".join(f"{m.code}: {m.message}" for m in item.marks)
        elif item.kind == "input":
            attrs.update(shape="ellipse", style="filled", fillcolor='"#c9ecc9"', penwidth="1.5")
        elif item.kind == "output":
            attrs.update(shape="ellipse", style="filled", fillcolor='"#fbe3b6"', penwidth="1.5")
        elif item.kind == "init":
            attrs.update(shape="ellipse", style="filled", fillcolor='"#eeeeee"', fontsize="8")
        elif item.kind == "missing":
            attrs.update(
                shape="ellipse",
                style='"dashed,filled"',
                fillcolor=f'"{_ERROR_FILL}"',
                color=f'"{_ERROR_LINE}"',
            )
        elif item.kind == "more":
            attrs.update(shape="note", style="filled", fillcolor='"#ffffff"', color='"#888888"')
        attrs["label"] = dot_quote(*lines)
        attrs["tooltip"] = dot_quote(tooltip, limit=2000)
        width = max(0.9, min(LABEL_CHARS, max(len(_visible(l)) for l in lines)) * 0.075 + 0.3)
        height = 0.22 + 0.17 * len(lines)
        elements.append(_Element(item.id, attrs, item.cluster, item.order, width, height))
    if not tensors:
        for link in model.links:
            attrs = {}
            if labelled and link.tensor:
                attrs["label"] = dot_quote(link.tensor, limit=32)
                attrs["tooltip"] = dot_quote(
                    link.tensor + _shape_suffix(model, link.tensor), limit=2000
                )
            if link.dashed:
                attrs["style"] = "dashed"
            edges.append(_Edge(link.src, link.dst, attrs))
        return elements, edges
    # net_drawer style: each (producer, tensor) pair is an ellipse between producer and consumers.
    tensor_ids: dict[tuple[str, str], str] = {}
    order = len(model.items) + 1
    direct = {"input", "init", "missing", "more"}
    for link in model.links:
        source = model.items.get(link.src)
        target = model.items.get(link.dst)
        if source is None or target is None:
            continue
        if (
            source.kind in direct
            or target.kind in ("output", "more")
            or link.dashed
            or not link.tensor
        ):
            attrs = {"style": "dashed"} if link.dashed else {}
            if link.dashed and link.tensor:
                attrs["label"] = dot_quote(link.tensor, limit=32)
            edges.append(_Edge(link.src, link.dst, attrs))
            continue
        key = (link.src, link.tensor)
        tid = tensor_ids.get(key)
        if tid is None:
            tid = f"t{len(tensor_ids) + 1}"
            tensor_ids[key] = tid
            shape = model.tensor_info.get(link.tensor, "")
            lines = [link.tensor] + ([shape] if shape else [])
            attrs = {
                "shape": "ellipse",
                "fontsize": "9",
                "label": dot_quote(*lines),
                "tooltip": dot_quote(link.tensor + (f": {shape}" if shape else ""), limit=2000),
            }
            width = max(0.8, min(LABEL_CHARS, max(len(_visible(l)) for l in lines)) * 0.065 + 0.3)
            elements.append(
                _Element(tid, attrs, source.cluster, order, width, 0.22 + 0.15 * len(lines))
            )
            order += 1
            edges.append(_Edge(link.src, tid, {}))
        edges.append(_Edge(tid, link.dst, {}))
    elements.sort(key=lambda e: e.order)
    return elements, edges


def _shape_suffix(model: _Model, tensor: str) -> str:
    shape = model.tensor_info.get(tensor)
    return f": {shape}" if shape else ""


def _graph_defaults(options: DrawOptions, title: str) -> dict[str, str]:
    attrs = {
        "rankdir": options.rankdir,
        "fontname": "Helvetica",
        "fontsize": "12",
        "bgcolor": "white",
    }
    if title:
        attrs["label"] = dot_quote(title, limit=120)
        attrs["labelloc"] = "t"
    return attrs


_NODE_DEFAULTS = {"fontname": "Helvetica", "fontsize": "10", "margin": '"0.08,0.03"'}
_EDGE_DEFAULTS = {
    "fontname": "Helvetica",
    "fontsize": "8",
    "color": '"#555555"',
    "arrowsize": "0.6",
}


def _pydot_text(
    elements: list[_Element],
    edges: list[_Edge],
    clusters: Mapping[str, _Cluster],
    options: DrawOptions,
    title: str,
    quick: bool,
) -> str:
    """The normal path: a pydot graph laid out by `dot`."""
    import pydot

    graph = pydot.Dot("onnx", graph_type="digraph", **_graph_defaults(options, title))
    if quick:
        # Bounded crossing minimisation and network simplex: several times faster, nearly as tidy.
        graph.set("nslimit", "2")
        graph.set("nslimit1", "2")
        graph.set("mclimit", "0.5")
        graph.set("searchsize", "30")
        graph.set("remincross", "false")
    graph.set_node_defaults(**_NODE_DEFAULTS)
    graph.set_edge_defaults(**_EDGE_DEFAULTS)
    # pydot's stubs type add_subgraph/Node/Edge more narrowly than pydot accepts.
    subgraphs: dict[str, Any] = {}
    for cid, cluster in clusters.items():
        subgraphs[cid] = pydot.Cluster(
            cid.removeprefix("cluster_"),
            label=dot_quote(cluster.label, limit=80),
            style='"rounded,dashed"',
            color='"#7a7a7a"',
            fontsize="10",
        )
    for cid, cluster in clusters.items():
        parent = subgraphs.get(cluster.parent) if cluster.parent else None
        (parent or graph).add_subgraph(subgraphs[cid])
    for element in elements:
        container = subgraphs.get(element.cluster) if element.cluster else None
        attrs: dict[str, Any] = dict(element.attrs)
        (container or graph).add_node(pydot.Node(element.id, **attrs))
    for edge in edges:
        edge_attrs: dict[str, Any] = dict(edge.attrs)
        graph.add_edge(pydot.Edge(edge.src, edge.dst, **edge_attrs))
    return graph.to_string()


# -- our layered layout for big graphs ---------------------------------------------------------

_X_GAP = 0.35  # inches between boxes in a layer
_Y_GAP = 0.45  # inches between layers


def _layers(elements: list[_Element], edges: list[_Edge]) -> dict[str, int]:
    """Longest-path layering in model order; edges that point backwards (cycles) are ignored."""
    index = {e.id: k for k, e in enumerate(elements)}
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        if edge.src in index and edge.dst in index and edge.src != edge.dst:
            preds[edge.dst].append(edge.src)
            succs[edge.src].append(edge.dst)
    # Kahn's algorithm; on a cycle, release the earliest waiting element.
    indegree = {e.id: len(preds[e.id]) for e in elements}
    ready = deque(e.id for e in elements if indegree[e.id] == 0)
    layer: dict[str, int] = {}
    done: set[str] = set()
    waiting = [e.id for e in elements]
    position = 0
    while len(done) < len(elements):
        if not ready:
            while waiting[position] in done:
                position += 1
            ready.append(waiting[position])
        current = ready.popleft()
        if current in done:
            continue
        done.add(current)
        layer[current] = max((layer[p] + 1 for p in preds[current] if p in layer), default=0)
        for nxt in succs[current]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0 and nxt not in done:
                ready.append(nxt)
    # Pull sources (inputs, weights) down next to their first consumer instead of layer 0.
    for element in elements:
        name = element.id
        if not preds[name] and succs[name]:
            layer[name] = max(0, min(layer[s] for s in succs[name]) - 1)
    return layer


def _cluster_spans(
    elements: list[_Element], layer: Mapping[str, int], clusters: Mapping[str, _Cluster]
) -> list[tuple[int, int]]:
    """The first and last layer of each top-level cluster (a body must not straddle two columns)."""
    spans: dict[str, list[int]] = {}
    for element in elements:
        cluster = element.cluster
        while cluster and cluster in clusters and clusters[cluster].parent:
            cluster = clusters[cluster].parent
        if cluster:
            span = spans.setdefault(cluster, [layer[element.id], layer[element.id]])
            span[0] = min(span[0], layer[element.id])
            span[1] = max(span[1], layer[element.id])
    return [(a, b) for a, b in spans.values()]


def _fold(n_layers: int, per_column: int, spans: list[tuple[int, int]]) -> list[list[int]]:
    """Split layers into columns of about `per_column`, never inside a cluster's span."""
    inside = [False] * (n_layers + 1)  # inside[k]: a break before layer k would split a cluster
    for first, last in spans:
        for k in range(first + 1, last + 1):
            inside[k] = True
    columns: list[list[int]] = []
    start = 0
    while start < n_layers:
        end = min(start + per_column, n_layers)
        while end < n_layers and inside[end]:
            end += 1
        columns.append(list(range(start, end)))
        start = end
    return columns


def _layered_text(
    elements: list[_Element],
    edges: list[_Edge],
    clusters: Mapping[str, _Cluster],
    options: DrawOptions,
    title: str,
) -> tuple[str, tuple[float, float]]:
    """DOT text with positions for `neato -n2`, written directly (pydot objects cost seconds)."""
    layer = _layers(elements, edges)
    by_layer: dict[int, list[_Element]] = defaultdict(list)
    for element in elements:
        by_layer[layer[element.id]].append(element)
    n_layers = max(by_layer) + 1 if by_layer else 1
    preds: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        preds[edge.dst].append(edge.src)
    # Within a layer: barycentre of the predecessors' slots, then cluster, then model order.
    slot: dict[str, float] = {}
    for level in range(n_layers):
        row = by_layer.get(level, [])

        def key(e: _Element) -> tuple[float, str, int]:
            known = [slot[p] for p in preds[e.id] if p in slot]
            return (sum(known) / len(known) if known else float(e.order), e.cluster or "", e.order)

        row.sort(key=key)
        for k, element in enumerate(row):
            slot[element.id] = float(k)
        by_layer[level] = row
    # "Across" is the direction within a layer, "along" the direction of the flow.
    lr = options.rankdir == "LR"

    def across_size(e: _Element) -> float:
        return e.height if lr else e.width

    def along_size(e: _Element) -> float:
        return e.width if lr else e.height

    gap_across, gap_along = (0.2, 0.6) if lr else (_X_GAP, _Y_GAP)
    span = {
        lv: sum(across_size(e) for e in row) + gap_across * max(len(row) - 1, 0)
        for lv, row in by_layer.items()
    }
    depth = {lv: max(along_size(e) for e in row) for lv, row in by_layer.items()}
    spans = _cluster_spans(elements, layer, clusters)

    def extent(per_band: int) -> tuple[list[list[int]], float, float]:
        """The bands for `per_band` layers each, and the picture's width and height (inches)."""
        folded = _fold(n_layers, per_band, spans)
        across = sum(max((span.get(lv, 0.0) for lv in b), default=0.0) + 1.2 for b in folded)
        along = max(sum(depth.get(lv, 0.4) + gap_along for lv in b) for b in folded)
        return folded, (along if lr else across), (across if lr else along)

    # Fold a long chain into bands so that the picture is about 16:10, not a 20,000-layer strip.
    low, high = 8, max(8, n_layers)
    while low < high:
        middle = (low + high) // 2
        _, width, height = extent(middle)
        # TB: longer bands make the picture narrower; LR: wider. Seek the first at 16:10.
        if (width / height > 1.6) if not lr else (width / height < 1.6):
            low = middle + 1
        else:
            high = middle
    bands, _, _ = extent(low)
    pos: dict[str, tuple[float, float]] = {}  # (across, along) centre, inches
    across_total = 0.0
    along_total = 0.0
    for band in bands:
        band_span = max((span.get(lv, 0.0) for lv in band), default=0.0)
        along = 0.0
        for lv in band:
            row = by_layer.get(lv, [])
            start = across_total + (band_span - span.get(lv, 0.0)) / 2
            row_depth = depth.get(lv, 0.4)
            for element in row:
                pos[element.id] = (start + across_size(element) / 2, along + row_depth / 2)
                start += across_size(element) + gap_across
            along += row_depth + gap_along
        along_total = max(along_total, along)
        across_total += band_span + 1.2  # gap between bands
    lines = ["digraph onnx {"]
    graph_attrs = _graph_defaults(options, title)
    graph_attrs.pop("rankdir")
    graph_attrs.update(splines="false", outputorder="edgesfirst", overlap="true")
    lines.append("graph [" + " ".join(f"{k}={v}" for k, v in graph_attrs.items()) + "];")
    lines.append(
        "node [" + " ".join(f"{k}={v}" for k, v in _NODE_DEFAULTS.items()) + " fixedsize=true];"
    )
    lines.append("edge [" + " ".join(f"{k}={v}" for k, v in _EDGE_DEFAULTS.items()) + "];")
    points = 72.0

    def xy(element_id: str) -> tuple[float, float]:
        a, b = pos[element_id]
        if lr:
            return b * points, (across_total - a) * points
        return a * points, (along_total - b) * points  # Graphviz's y axis points up

    members: dict[str, list[_Element]] = defaultdict(list)
    for element in elements:
        owner = element.cluster
        while owner:
            members[owner].append(element)
            owner = clusters[owner].parent if owner in clusters else None
    for cid, cluster in clusters.items():
        inside = members.get(cid)
        if not inside:
            continue
        xs, ys = [], []
        for element in inside:
            x, y = xy(element.id)
            w, h = element.width * points / 2, element.height * points / 2
            xs += [x - w, x + w]
            ys += [y - h, y + h]
        pad = 8.0
        bb = f"{min(xs) - pad:.1f},{min(ys) - pad:.1f},{max(xs) + pad:.1f},{max(ys) + pad + 12:.1f}"
        lines.append(
            f'subgraph {cid} {{ graph [bb="{bb}" label={dot_quote(cluster.label, limit=80)} '
            'style="rounded,dashed" color="#7a7a7a" fontsize=10]; }'
        )
    for element in elements:
        x, y = xy(element.id)
        w, h = element.width, element.height
        attrs = " ".join(f"{k}={v}" for k, v in element.attrs.items())
        lines.append(f'{element.id} [{attrs} width={w:.2f} height={h:.2f} pos="{x:.1f},{y:.1f}"];')
    for edge in edges:
        attrs = " ".join(f"{k}={v}" for k, v in edge.attrs.items())
        lines.append(f"{edge.src} -> {edge.dst}" + (f" [{attrs}];" if attrs else ";"))
    lines.append("}")
    size = (along_total, across_total) if lr else (across_total, along_total)
    return "\n".join(lines) + "\n", size


# -- rendering ---------------------------------------------------------------------------------


def find_graphviz(program: str = "dot") -> str | None:
    """The Graphviz program (`dot`, `neato`) on PATH, or None."""
    return shutil.which(program)


def render(
    drawing: Drawing, fmt: str, out: Path, *, timeout: float = 300.0, force: bool = True,
    protected: tuple[Path, ...] = (),
) -> None:
    """Run Graphviz on the drawing and write `out` (svg or png) by the rules of onnxdoctor.outputs.

    Raises:
        GraphvizMissing: the program is not on PATH.
        GraphvizError: Graphviz failed or ran past `timeout` seconds.
    """
    program, *flags = drawing.engine
    binary = find_graphviz(program)
    if binary is None:
        raise GraphvizMissing(program)
    args = [binary, *flags, f"-T{fmt}"]
    if fmt == "png":
        args += _png_size_flags(drawing)
    out = Path(out)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    args += ["-o", tmp_name]
    try:
        try:
            proc = subprocess.run(
                args,
                input=drawing.dot_text.encode("utf-8", "backslashreplace"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
                start_new_session=True,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GraphvizError(
                f"Graphviz `{program}` did not finish within {timeout:.0f} s; "
                "draw less (--focus NODE --radius K, --max-nodes N) or use --svg"
            ) from None
        if proc.returncode != 0:
            message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            first = next((m for m in message if m.strip()), f"exit status {proc.returncode}")
            raise GraphvizError(f"Graphviz `{program}` failed: {first}")
        # mkstemp creates the file 0600; the output should get the usual permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_name, 0o666 & ~umask)
        install(Path(tmp_name), out, force=force, what="-o", protected=protected)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def _png_size_flags(drawing: Drawing) -> list[str]:
    """Bound a PNG: Graphviz scales the drawing down to fit `size` (inches) at `dpi`.

    The layered layout's size is known: scale it to about PNG_MAX_PIXELS at PNG_DPI. A `dot`
    layout (at most DOT_LAYOUT_LIMIT nodes) is only known after layout: draw it sharper, at 96
    dpi, and let `size` cap each side at PNG_SMALL_SIDE pixels.
    """
    if drawing.size_inches is None:
        side = PNG_SMALL_SIDE / 96
        return ["-Gdpi=96", f"-Gsize={side:.1f},{side:.1f}"]
    width, height = drawing.size_inches
    area = max(width * height, 1e-6) * PNG_DPI * PNG_DPI
    scale = min(1.0, math.sqrt(PNG_MAX_PIXELS / area))
    w_in = min(width * scale, PNG_MAX_SIDE / PNG_DPI) + 0.5
    h_in = min(height * scale, PNG_MAX_SIDE / PNG_DPI) + 0.5
    return [f"-Gdpi={PNG_DPI}", f"-Gsize={w_in:.1f},{h_in:.1f}"]
