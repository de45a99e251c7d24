"""The one graph walker: every node of a model, subgraphs (If/Loop/Scan bodies) included, with its path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

# A node's place in the model: indices of nodes and names of graph attributes, from the main graph
# down, e.g. (3, "then_branch", 0). Names are not unique (or may be empty); paths are.
NodePath = tuple["int | str", ...]


def safe_text(value: str | bytes) -> str:
    """Return a name as text, even when the file held bytes that are not valid UTF-8.

    Args:
        value: a protobuf string field; upb returns `bytes` for invalid UTF-8.

    Returns:
        The string itself, or the bytes decoded with backslash escapes for the invalid ones.
    """
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return value


def node_bodies(node: onnx.NodeProto) -> list[tuple[str, onnx.GraphProto]]:
    """The subgraphs a node holds (If's branches, Loop's and Scan's bodies), each with its name:
    the attribute's name, with `[k]` for the k-th graph of a graphs-valued attribute.

    The one place that knows how subgraphs hang off a node; every walker goes through it.
    """
    bodies: list[tuple[str, onnx.GraphProto]] = []
    for attr in node.attribute:
        name = safe_text(attr.name)
        if attr.HasField("g"):
            bodies.append((name, attr.g))
        bodies += [(f"{name}[{k}]", sub) for k, sub in enumerate(attr.graphs)]
    return bodies


def walk_nodes(
    graph: onnx.GraphProto, prefix: NodePath = ()
) -> Iterator[tuple[NodePath, onnx.NodeProto]]:
    """Every node of a graph and of its subgraphs, depth first, with its path."""
    stack: list[tuple[NodePath, onnx.GraphProto]] = [(prefix, graph)]
    while stack:
        base, current = stack.pop()
        pending: list[tuple[NodePath, onnx.GraphProto]] = []
        for index, node in enumerate(current.node):
            path = (*base, index)
            yield path, node
            pending += [((*path, name), body) for name, body in node_bodies(node)]
        stack.extend(reversed(pending))


def op_label(node: onnx.NodeProto) -> str:
    """`domain::op_type`, or just `op_type` for the default ONNX domain."""
    domain = safe_text(node.domain)
    op_type = safe_text(node.op_type)
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def nodes_on_cycles(graph: onnx.GraphProto, producer: dict[str, int]) -> dict[int, frozenset[int]]:
    """Map each node that lies on a cycle to its strongly connected component (iterative Tarjan)."""
    edges: list[list[int]] = [[] for _ in graph.node]
    for index, node in enumerate(graph.node):
        for name in node.input:
            source = producer.get(safe_text(name))
            if source is not None:
                edges[source].append(index)
    index_of: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    result: dict[int, frozenset[int]] = {}
    counter = 0
    for root in range(len(edges)):
        if root in index_of:
            continue
        work: list[tuple[int, int]] = [(root, 0)]
        while work:
            vertex, child = work.pop()
            if child == 0:
                index_of[vertex] = low[vertex] = counter
                counter += 1
                stack.append(vertex)
                on_stack.add(vertex)
            recurse = False
            for position in range(child, len(edges[vertex])):
                target = edges[vertex][position]
                if target not in index_of:
                    work.append((vertex, position + 1))
                    work.append((target, 0))
                    recurse = True
                    break
                if target in on_stack:
                    low[vertex] = min(low[vertex], index_of[target])
            if recurse:
                continue
            if low[vertex] == index_of[vertex]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == vertex:
                        break
                if len(component) > 1 or vertex in edges[vertex]:
                    frozen = frozenset(component)
                    for member in component:
                        result[member] = frozen
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[vertex])
    return result
