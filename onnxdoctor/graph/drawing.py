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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnxdoctor.graph.collect import (
    Cluster,
    Collected,
    Item,
    Link,
    Mark,
    collect,
    neighbourhood,
    op_names,
)
from onnxdoctor.graph.elements import (
    DEFAULT_MAX_NODES,
    EDGE_DEFAULTS,
    LABEL_CHARS,
    NODE_DEFAULTS,
    PNG_DOT_OPS,
    DrawOptions,
    Edge,
    Element,
    dot_quote,
    graph_defaults,
    visible,
)
from onnxdoctor.graph.layered import layered_text
from onnxdoctor.onnxkit.walk import NodePath, walk_nodes

if TYPE_CHECKING:
    import onnx

__all__ = [
    "DEFAULT_MAX_NODES",
    "DOT_LAYOUT_LIMIT",
    "DrawOptions",
    "Drawing",
    "Mark",
    "build_drawing",
    "dot_quote",
]

# Above this many Graphviz nodes (or 3x as many edges), `dot` gets too slow (measured): above it,
# the layered layout.
DOT_LAYOUT_LIMIT = 800
# Above this many ops, edges lose their tensor-name labels (they would only clutter).
EDGE_LABEL_LIMIT = 300

_DOMAIN_COLOURS = {
    "": "#dbe9f6",
    "ai.onnx.ml": "#d9f2d9",
    "com.microsoft": "#e6dcf5",
    "org.pytorch.aten": "#fde2c4",
}
_CUSTOM_COLOURS = ("#fff2b3", "#d4f1f4", "#f9d9ea", "#e2efc6", "#f1e0c5", "#dcdcf5")
_ERROR_FILL, _ERROR_LINE = "#f8c9c9", "#c00000"
_WARN_FILL, _WARN_LINE = "#fde9c8", "#d98200"


@dataclass
class Drawing:
    """A graph ready for Graphviz, and what was (not) drawn."""

    dot_text: str
    layout: str  # "dot" or "layered"
    total_ops: int
    drawn_ops: int
    notes: list[str] = field(default_factory=list)
    size_inches: tuple[float, float] | None = None  # known for the layered layout
    columns: int = 1  # bands the layered layout folded the graph into

    @property
    def engine(self) -> tuple[str, ...]:
        """The Graphviz program and its layout flags."""
        return ("dot",) if self.layout == "dot" else ("neato", "-n2")


# -- escaping ---------------------------------------------------------------------------------


# -- the model as items and links -------------------------------------------------------------


# -- selection: focus and the node budget ------------------------------------------------------


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
        marks: findings to draw, keyed by node path (see `onnxdoctor.onnxkit.walk.walk_nodes`).
        options: what to draw and how.
        title: a label for the whole picture (the model's file name).

    Returns:
        The drawing: DOT text, the layout used, and notes on anything not drawn.

    Raises:
        LookupError: `options.focus` names no node or tensor (the message suggests close names).
    """
    total_ops = sum(1 for _ in walk_nodes(model.graph))
    with_shapes = total_ops <= EDGE_LABEL_LIMIT or options.tensors
    collected = collect(model, with_shapes)
    for item in collected.items.values():
        if item.path is not None and item.path in marks:
            item.marks = list(marks[item.path])
    notes: list[str] = []
    keep = _focus(collected, options, total_ops, notes)
    keep = _cut_to_max_nodes(collected, options, keep, notes)
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
        layout = "dot" if small and not (options.png and drawn_ops > PNG_DOT_OPS) else "layered"
    if layout == "dot":
        text = _pydot_text(
            elements, edges, collected.clusters, options, title, quick=len(elements) > 300
        )
        return Drawing(text, "dot", total_ops, drawn_ops, notes)

    text, size, columns = layered_text(elements, edges, collected.clusters, options, title)
    return Drawing(text, "layered", total_ops, drawn_ops, notes, size, columns)


def _focus(collected: Collected, options: DrawOptions, total_ops: int, notes: list[str]) -> set[str] | None:
    """The items within --radius of --focus (None: no focus, everything)."""
    keep: set[str] | None = None
    if options.focus is not None:
        hidden = frozenset() if options.initializers else frozenset({"init"})
        keep = neighbourhood(collected, options.focus, options.radius, hidden)
        if keep is None:
            import difflib

            names = op_names(collected) + sorted({link.tensor for link in collected.links})
            close = difflib.get_close_matches(options.focus, names, n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise LookupError(f"no node or tensor named {options.focus!r} in the model{hint}")
        kept_ops = sum(1 for i in keep if collected.items[i].kind == "op")
        notes.append(
            f"focus: {kept_ops} of {total_ops} nodes within {options.radius} step(s) "
            f"of {options.focus!r}"
        )
    return keep


def _cut_to_max_nodes(
    collected: Collected, options: DrawOptions, keep: set[str] | None, notes: list[str]
) -> set[str] | None:
    """Keep the first --max-nodes ops; the rest become one "more" box, with a note."""
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
        more = Item(
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
                redirected.append(Link(link.src, "more", "", dashed=True))
        seen_pairs: set[tuple[str, str]] = set()
        for link in redirected:
            if (link.src, link.dst) not in seen_pairs:
                seen_pairs.add((link.src, link.dst))
                collected.links.append(link)
    return keep


def _fold_boxes(collected: Collected, limit: int, notes: list[str]) -> None:
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
        box = Item(f"folded{kind}", "more", [f"… {count} more {words.get(kind, kind)} not drawn"],
                    "folded by --max-nodes")
        box.order = len(collected.items) + len(counts)
        collected.items[box.id] = box
    kind_of = {item.id: item.kind for item in folded}
    links: list[Link] = []
    seen: set[tuple[str, str]] = set()
    for link in collected.links:
        src = f"folded{kind_of[link.src]}" if link.src in gone else link.src
        dst = f"folded{kind_of[link.dst]}" if link.dst in gone else link.dst
        if src != link.src or dst != link.dst:
            if (src, dst) in seen:
                continue
            seen.add((src, dst))
            link = Link(src, dst, "", dashed=True)
        links.append(link)
    collected.links = links
    for key in gone:
        del collected.items[key]
    summary = ", ".join(f"{count} {words.get(kind, kind)}" for kind, count in counts.items())
    notes.append(f"folded {summary} into one box each (more boxes than --max-nodes {limit})")


def _item_name(item: Item) -> str:
    if item.kind == "op" and len(item.lines) > 1:
        return f"{item.lines[1]!r} ({item.lines[0]})"
    return item.lines[0] if item.lines else item.id


def _colour(domain: str) -> str:
    if domain in _DOMAIN_COLOURS:
        return _DOMAIN_COLOURS[domain]
    if domain == "ai.onnx":
        return _DOMAIN_COLOURS[""]
    digest = hashlib.sha1(domain.encode("utf-8", "backslashreplace")).digest()[0]
    return _CUSTOM_COLOURS[digest % len(_CUSTOM_COLOURS)]


def _elements(model: Collected, tensors: bool, labelled: bool) -> tuple[list[Element], list[Edge]]:
    """Graphviz nodes and edges, with every string attribute already quoted."""
    elements = [_element(item) for item in sorted(model.items.values(), key=lambda i: i.order)]
    if not tensors:
        return elements, [_edge(model, link, labelled) for link in model.links]
    return _with_tensor_nodes(model, elements)


_BOX_STYLES: dict[str, dict[str, str]] = {
    "op": {"shape": "box", "style": '"rounded,filled"'},
    "input": {"shape": "ellipse", "style": "filled", "fillcolor": '"#c9ecc9"', "penwidth": "1.5"},
    "output": {"shape": "ellipse", "style": "filled", "fillcolor": '"#fbe3b6"', "penwidth": "1.5"},
    "init": {"shape": "ellipse", "style": "filled", "fillcolor": '"#eeeeee"', "fontsize": "8"},
    "missing": {"shape": "ellipse", "style": '"dashed,filled"', "fillcolor": f'"{_ERROR_FILL}"',
                "color": f'"{_ERROR_LINE}"'},
    "more": {"shape": "note", "style": "filled", "fillcolor": '"#ffffff"', "color": '"#888888"'},
}


def _element(item: Item) -> Element:
    """One box: its style by kind, marks in red or orange with their codes, a size that fits."""
    lines = list(item.lines)
    attrs = dict(_BOX_STYLES.get(item.kind, {}))
    tooltip = item.tooltip
    if item.kind == "op":
        attrs["fillcolor"] = f'"{_colour(item.domain)}"'
        if item.marks:
            errors = [m for m in item.marks if m.severity == "error"]
            lines.append(" ".join(dict.fromkeys(m.code for m in item.marks)))
            fill, line = (_ERROR_FILL, _ERROR_LINE) if errors else (_WARN_FILL, _WARN_LINE)
            attrs.update(fillcolor=f'"{fill}"', color=f'"{line}"', penwidth="2.5", fontcolor=f'"{line}"')
            tooltip = tooltip + "\n" + "\n".join(f"{m.code}: {m.message}" for m in item.marks)
    attrs["label"] = dot_quote(*lines)
    attrs["tooltip"] = dot_quote(tooltip, limit=2000)
    width = max(0.9, min(LABEL_CHARS, max(len(visible(l)) for l in lines)) * 0.075 + 0.3)
    height = 0.22 + 0.17 * len(lines)
    return Element(item.id, attrs, item.cluster, item.order, width, height)


def _edge(model: Collected, link: Link, labelled: bool) -> Edge:
    attrs = {}
    if labelled and link.tensor:
        attrs["label"] = dot_quote(link.tensor, limit=32)
        attrs["tooltip"] = dot_quote(link.tensor + _shape_suffix(model, link.tensor), limit=2000)
    if link.dashed:
        attrs["style"] = "dashed"
    return Edge(link.src, link.dst, attrs)


def _with_tensor_nodes(model: Collected, elements: list[Element]) -> tuple[list[Element], list[Edge]]:
    """net_drawer style: each (producer, tensor) pair is an ellipse between producer and consumers."""
    edges: list[Edge] = []
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
            edges.append(Edge(link.src, link.dst, attrs))
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
            width = max(0.8, min(LABEL_CHARS, max(len(visible(l)) for l in lines)) * 0.065 + 0.3)
            elements.append(
                Element(tid, attrs, source.cluster, order, width, 0.22 + 0.15 * len(lines))
            )
            order += 1
            edges.append(Edge(link.src, tid, {}))
        edges.append(Edge(tid, link.dst, {}))
    elements.sort(key=lambda e: e.order)
    return elements, edges


def _shape_suffix(model: Collected, tensor: str) -> str:
    shape = model.tensor_info.get(tensor)
    return f": {shape}" if shape else ""


def _pydot_text(
    elements: list[Element],
    edges: list[Edge],
    clusters: Mapping[str, Cluster],
    options: DrawOptions,
    title: str,
    quick: bool,
) -> str:
    """The normal path: a pydot graph laid out by `dot`."""
    import pydot

    graph = pydot.Dot("onnx", graph_type="digraph", **graph_defaults(options, title))
    if quick:
        # Bounded crossing minimisation and network simplex: several times faster, nearly as tidy.
        graph.set("nslimit", "2")
        graph.set("nslimit1", "2")
        graph.set("mclimit", "0.5")
        graph.set("searchsize", "30")
        graph.set("remincross", "false")
    graph.set_node_defaults(**NODE_DEFAULTS)
    graph.set_edge_defaults(**EDGE_DEFAULTS)
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


# -- rendering ---------------------------------------------------------------------------------


