"""Reading a model into drawable items: ops, tensors, links, subgraph clusters, neighbourhoods."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from onnxdoctor.onnxkit.files import safe_text
from onnxdoctor.onnxkit.walk import NodePath, node_bodies, op_label

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class Mark:
    """A finding drawn on a node."""

    code: str
    severity: str  # "error" | "warning" | "info"
    message: str


@dataclass
class Item:
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
class Link:
    src: str
    dst: str
    tensor: str
    dashed: bool = False


@dataclass
class Cluster:
    id: str
    label: str
    parent: str | None
    owner: str


@dataclass
class Collected:
    items: dict[str, Item]
    links: list[Link]
    clusters: dict[str, Cluster]
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


def collect(model: onnx.ModelProto, with_shapes: bool) -> Collected:
    """Every op, graph input/output, initializer and data link, subgraphs as clusters."""
    collector = _Collector(_shape_table(model) if with_shapes else {})
    scope = collector.interface(model.graph)
    produced = collector.walk(model.graph, (), None, [scope])
    collector.outputs(model.graph, produced, scope)
    return collector.model


class _Collector:
    """Builds a Collected graph by graph; ids are unique across subgraphs."""

    def __init__(self, tensor_info: dict[str, str]) -> None:
        self.model = Collected({}, [], {}, [], tensor_info)
        self.missing: dict[str, str] = {}
        self.counter = 0

    def new_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def add(self, item: Item) -> Item:
        item.order = len(self.model.items)
        self.model.items[item.id] = item
        return item

    def interface(self, main: onnx.GraphProto) -> dict[str, str]:
        """The main graph's inputs and weights: the scope its nodes read from."""
        scope: dict[str, str] = {}
        for value in main.input:
            name = safe_text(value.name)
            if name not in scope:
                item = Item(self.new_id("i"), "input", [name, _type_text(value.type)], describe_value(value))
                scope[name] = self.add(item).id
        for tensor in main.initializer:
            name = safe_text(tensor.name)
            if name in scope:  # an initializer also listed as an input (IR < 4): it is a weight
                self.model.items[scope[name]].kind = "init"
                continue
            shape = self.model.tensor_info.get(name) or _tensor_text(tensor)
            item = Item(self.new_id("w"), "init", [name, shape], f"initializer {name}: {shape}")
            scope[name] = self.add(item).id
        for sparse in main.sparse_initializer:
            name = safe_text(sparse.values.name)
            item = Item(self.new_id("w"), "init", [name, "sparse"], f"sparse initializer {name}")
            scope.setdefault(name, self.add(item).id)
        return scope

    def walk(
        self,
        graph: onnx.GraphProto,
        prefix: NodePath,
        cluster: str | None,
        outer: Sequence[Mapping[str, str]],
    ) -> dict[str, str]:
        """Add a graph's nodes (and their bodies, as clusters); what each output name comes from."""
        local: dict[str, str] = {}
        chain = [local, *outer]
        node_ids: list[str] = []
        for index, node in enumerate(graph.node):
            path = (*prefix, index)
            name = safe_text(node.name)
            label = op_label(node)
            lines = [label] + ([name] if name else [])
            tooltip = f"{label} {name!r}" if name else label
            item = self.add(
                Item(self.new_id("n"), "op", lines, tooltip, cluster, path, safe_text(node.domain))
            )
            self.model.op_ids.append(item.id)
            node_ids.append(item.id)
            for out in node.output:
                out = safe_text(out)
                if out and out not in local:  # a duplicate producer is marked by the checker
                    local[out] = item.id
            for attr_name, body in node_bodies(node):
                self._body(node, item, attr_name, body, path, cluster, chain)
        # Inputs resolve after every producer in this graph is known, so that unsorted graphs
        # and cycles are drawn as they are (the checker marks them).
        for node_id, node in zip(node_ids, graph.node):
            self._link_inputs(node_id, node, chain, cluster)
        return local

    def _body(
        self,
        node: onnx.NodeProto,
        item: Item,
        attr_name: str,
        body: onnx.GraphProto,
        path: NodePath,
        cluster: str | None,
        chain: list[dict[str, str]] | Sequence[Mapping[str, str]],
    ) -> None:
        name = safe_text(node.name)
        cid = self.new_id("cluster_")
        label = f"{node.op_type} {name!r} · {attr_name}" if name else f"{node.op_type} · {attr_name}"
        self.model.clusters[cid] = Cluster(cid, label, cluster, item.id)
        body_scope: dict[str, str] = {safe_text(v.name): item.id for v in body.input}
        for tensor in body.initializer:
            body_scope[safe_text(tensor.name)] = ""  # weights inside a body: not drawn
        produced = self.walk(body, (*path, attr_name), cid, [body_scope, *chain])
        for out in body.output:
            out_name = safe_text(out.name)
            source = produced.get(out_name) or _lookup([body_scope, *chain], out_name)
            if source:
                self.model.links.append(Link(source, item.id, f"{attr_name}: {out_name}", dashed=True))

    def _link_inputs(
        self, node_id: str, node: onnx.NodeProto, chain: Sequence[Mapping[str, str]], cluster: str | None
    ) -> None:
        for inp in node.input:
            inp = safe_text(inp)
            if not inp:
                continue
            source = _lookup(chain, inp)
            if source is None:
                if inp not in self.missing:
                    missing = Item(self.new_id("m"), "missing", [inp, "(not defined)"],
                                    f"{inp} is not defined", cluster)
                    self.missing[inp] = self.add(missing).id
                source = self.missing[inp]
            if source:
                self.model.links.append(Link(source, node_id, inp))

    def outputs(self, main: onnx.GraphProto, produced: dict[str, str], scope: dict[str, str]) -> None:
        """The main graph's outputs, linked to what produces them."""
        for value in main.output:
            name = safe_text(value.name)
            item = self.add(
                Item(self.new_id("o"), "output", [name, _type_text(value.type)], describe_value(value))
            )
            source = produced.get(name) or scope.get(name)
            if source:
                self.model.links.append(Link(source, item.id, name))


def _lookup(chain: Sequence[Mapping[str, str]], name: str) -> str | None:
    for scope in chain:
        if name in scope:
            return scope[name]
    return None


def neighbourhood(model: Collected, focus: str, radius: int,
                  hidden: frozenset[str] = frozenset()) -> set[str] | None:
    """Items within `radius` ops of the named node or tensor; None when the name is unknown.

    Steps go through drawn values only: an item of a `hidden` kind (weights, when they are not
    drawn) is never a way through, or a weight shared by every layer would put every layer one
    step from the focus and draw boxes with no edge between them.
    """
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
        if distance[current] > 0 and model.items[current].kind in hidden:
            continue
        for nxt in adjacent[current]:
            if nxt not in distance:
                distance[nxt] = distance[current] + 1
                queue.append(nxt)
    return set(distance)


def op_names(model: Collected) -> list[str]:
    return [model.items[i].lines[1] for i in model.op_ids if len(model.items[i].lines) > 1]
