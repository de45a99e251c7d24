"""Cut an ONNX graph into smaller standalone models, and search for the smallest that still fails.

The candidates of `onnxdoctor reduce model.onnx` (docs/reduce.md): a set of nodes kept from the
original graph, whose inputs from outside the set become graph inputs (or initializers holding
values a run of the part before computed), and whose chosen tensors become graph outputs. The
search is Polygraphy's `debug reduce` idea: bisect for the node that fails, bisect for where the
part that feeds it can start, then drop what is left one node at a time. Judging a candidate
(running it) is the caller's: this module needs no runtime.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import onnx
from onnx import helper, numpy_helper

from onnxdoctor.onnxkit.walk import node_bodies, walk_nodes

# A candidate: the indices of the nodes kept (into graph.node) and the tensors that are its outputs.
Candidate = tuple[frozenset[int], tuple[str, ...]]


class OutOfBudget(Exception):
    """Raised by a judge when the search's time is spent; the search keeps its best so far."""


def outer_inputs(node: onnx.NodeProto) -> list[str]:
    """The tensors a node reads: its inputs, then the outer-scope names its subgraphs use."""
    names = [n for n in node.input if n]
    defined: set[str] = set()
    used: list[str] = []
    for _name, body in node_bodies(node):
        defined |= {i.name for i in body.input} | {t.name for t in body.initializer}
        for _path, inner in walk_nodes(body):
            defined |= {o for o in inner.output if o}
            for _sub, sub_body in node_bodies(inner):
                defined |= {i.name for i in sub_body.input} | {t.name for t in sub_body.initializer}
            used += [n for n in inner.input if n]
    return names + [n for n in dict.fromkeys(used) if n not in defined and n not in names]


def producers(graph: onnx.GraphProto) -> dict[str, int]:
    """Each tensor's producing node (index into graph.node)."""
    return {out: index for index, node in enumerate(graph.node) for out in node.output if out}


def ancestors(graph: onnx.GraphProto, index: int, within: Iterable[int] | None = None) -> frozenset[int]:
    """The node and every node it depends on (only through nodes in `within`, when given)."""
    made = producers(graph)
    allowed = None if within is None else set(within) | {index}
    seen = {index}
    stack = [index]
    while stack:
        for name in outer_inputs(graph.node[stack.pop()]):
            source = made.get(name)
            if source is not None and source not in seen and (allowed is None or source in allowed):
                seen.add(source)
                stack.append(source)
    return frozenset(seen)


def dangling_outputs(graph: onnx.GraphProto, keep: Iterable[int]) -> tuple[str, ...]:
    """The outputs of the kept nodes that no kept node reads (a prefix's outputs)."""
    kept = sorted(keep)
    read = {name for i in kept for name in outer_inputs(graph.node[i])}
    return tuple(o for i in kept for o in graph.node[i].output if o and o not in read)


def value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every tensor's type: declared, inferred by shape inference, else guessed.

    A tensor shape inference cannot type (the output of a custom-domain node) is given the type
    of its node's first typed input, the guess that holds for elementwise custom ops; a candidate
    whose boundary needs a type must declare one, or the checker refuses it.
    """
    graph = model.graph
    types: dict[str, onnx.TypeProto] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
        infos = [*inferred.value_info, *inferred.output]
    except Exception:  # noqa: BLE001 - an invalid model: only what it declares
        infos = []
    for info in [*graph.input, *graph.value_info, *graph.output, *infos]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types.setdefault(info.name, info.type)
    for tensor in graph.initializer:
        types.setdefault(tensor.name, helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    for node in graph.node:
        known = next((types[i] for i in node.input if i in types), None)
        for out in node.output:
            if out and out not in types and known is not None:
                types[out] = known
    return types


def _value_info(name: str, types: dict[str, onnx.TypeProto]) -> onnx.ValueInfoProto:
    info = onnx.ValueInfoProto()
    info.name = name
    if name in types:
        info.type.CopyFrom(types[name])
    else:  # the checker will say so: a candidate that cannot be typed does not fail the same way
        info.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return info


def boundary(graph: onnx.GraphProto, keep: Iterable[int]) -> list[str]:
    """The tensors the kept nodes read that no kept node makes and no initializer holds."""
    kept = sorted(keep)
    made = {o for i in kept for o in graph.node[i].output if o}
    held = {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}
    needed = dict.fromkeys(n for i in kept for n in outer_inputs(graph.node[i]))
    return [n for n in needed if n not in made and n not in held]


def cut(
    model: onnx.ModelProto,
    keep: Iterable[int],
    outputs: Sequence[str],
    types: dict[str, onnx.TypeProto],
    *,
    values: dict[str, Any] | None = None,
    inputs_first: Sequence[str] = (),
) -> onnx.ModelProto:
    """A standalone model of the kept nodes (in their original order).

    Args:
        model: the original model (weights in memory).
        keep: indices into model.graph.node.
        outputs: the tensors that become graph outputs.
        types: every tensor's type (`value_types`).
        values: boundary tensors to hold as initializers with these numpy values instead of
            graph inputs (values a run of the part before computed).
        inputs_first: graph inputs kept first and in this order even when no kept node reads
            them (the original inputs, so that random inputs come out the same).
    """
    values = values or {}
    graph = model.graph
    kept = sorted(keep)
    needed = {n for i in kept for n in outer_inputs(graph.node[i])}
    edge = boundary(graph, kept)
    inputs = list(dict.fromkeys([*inputs_first, *(n for n in edge if n not in values)]))
    initializers = [t for t in graph.initializer if t.name in needed]
    initializers += [numpy_helper.from_array(values[n], n) for n in edge if n in values]
    sparse = [t for t in graph.sparse_initializer if t.values.name in needed]
    new_graph = helper.make_graph(
        [copy.deepcopy(graph.node[i]) for i in kept],
        graph.name or "reduced",
        [_value_info(n, types) for n in inputs],
        [_value_info(n, types) for n in outputs],
        initializer=initializers,
        sparse_initializer=sparse,
    )
    result = onnx.ModelProto()
    result.ir_version = model.ir_version
    result.opset_import.extend(model.opset_import)
    result.functions.extend(model.functions)
    result.producer_name = "onnxdoctor reduce"
    result.graph.CopyFrom(new_graph)
    return result


def outputs_of(graph: onnx.GraphProto, index: int) -> tuple[str, ...]:
    """A node's outputs (the optional ones left unnamed are not outputs)."""
    return tuple(o for o in graph.node[index].output if o)


def smallest_failing(
    graph: onnx.GraphProto,
    fails: Callable[[frozenset[int], tuple[str, ...]], bool],
    failing: int | None = None,
) -> tuple[frozenset[int], int | None]:
    """The smallest set of nodes found that still fails the same way, and the failing node.

    `fails(keep, outputs)` runs a candidate and says whether it fails as the original does; it
    may raise OutOfBudget, and the best set found so far is returned then. `failing` is the node
    the original failure names, when it names one (the first bisection is then skipped).
    """
    count = len(graph.node)
    best: frozenset[int] = frozenset(range(count))
    try:
        if failing is None:
            # Bisect the prefix: the shortest one that fails ends with the failing node.
            low, high = 0, count - 1
            while low < high:
                middle = (low + high) // 2
                prefix = frozenset(range(middle + 1))
                if fails(prefix, dangling_outputs(graph, prefix)):
                    high = middle
                    best = prefix
                else:
                    low = middle + 1
            failing = low
        outs = outputs_of(graph, failing)
        alone = frozenset({failing})
        if fails(alone, outs):
            return alone, failing
        feeding = ancestors(graph, failing)
        if fails(feeding, outs):
            best = feeding
        else:  # the failure needs more than what feeds the node (a whole prefix)
            best = frozenset(i for i in best if i <= failing) | alone
            feeding = best
        # Bisect where the part feeding the node can start.
        starts = sorted(feeding)
        low, high = 0, len(starts) - 1  # starts[low] is known to fail; starts[high] is the node alone
        while high - low > 1:
            middle = (low + high) // 2
            trial = ancestors(graph, failing, within=[i for i in feeding if i >= starts[middle]])
            if fails(trial, outs):
                low, best = middle, trial
            else:
                high = middle
        # Then one node at a time: what the node still fails without.
        for index in sorted(best - alone):
            if index not in best:
                continue
            trial = ancestors(graph, failing, within=best - {index})
            if trial != best and fails(trial, outs):
                best = trial
    except OutOfBudget:
        pass
    return best, failing
