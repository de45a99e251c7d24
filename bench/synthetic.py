"""Synthetic ONNX models for the graph benchmark: chains with branches, weights, a few If bodies."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def synthetic_model(n_nodes: int, width: int = 16, subgraphs: int = 3) -> onnx.ModelProto:
    """A valid opset-17 model with about `n_nodes` nodes (subgraph bodies included).

    The main chain alternates MatMul (with an initializer), Add, Relu and Tanh; every eighth step
    branches into Sigmoid and merges back with Mul (net_drawer's worst case: many short edges);
    `subgraphs` If nodes each hold a small body in both branches.
    """
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((width, width)).astype(np.float32), "W")
    bias = numpy_helper.from_array(np.zeros(width, np.float32), "B")
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes: list[onnx.NodeProto] = []
    current = "x"
    step = 0
    if_every = max(n_nodes // (subgraphs + 1), 1) if subgraphs else None
    while len(nodes) < n_nodes:
        step += 1
        out = f"t{step}"
        kind = step % 4
        if if_every and step % if_every == 0 and sum(n.op_type == "If" for n in nodes) < subgraphs:
            branches = []
            for side in ("then", "else"):
                body = [
                    helper.make_node(
                        "Relu", [current], [f"{side}{step}_a"], name=f"{side}_relu_{step}"
                    ),
                    helper.make_node(
                        "Neg", [f"{side}{step}_a"], [f"{side}{step}_b"], name=f"{side}_neg_{step}"
                    ),
                ]
                branches.append(
                    helper.make_graph(
                        body,
                        f"{side}_{step}",
                        [],
                        [
                            helper.make_tensor_value_info(
                                f"{side}{step}_b", TensorProto.FLOAT, [1, width]
                            )
                        ],
                    )
                )
            nodes.append(
                helper.make_node(
                    "If",
                    ["cond"],
                    [out],
                    name=f"if_{step}",
                    then_branch=branches[0],
                    else_branch=branches[1],
                )
            )
            nodes.extend([])  # bodies count below through their nodes
            current = out
            continue
        if step % 8 == 0:
            nodes.append(
                helper.make_node("Sigmoid", [current], [f"s{step}"], name=f"sigmoid_{step}")
            )
            nodes.append(helper.make_node("Mul", [current, f"s{step}"], [out], name=f"mul_{step}"))
        elif kind == 0:
            nodes.append(helper.make_node("MatMul", [current, "W"], [out], name=f"matmul_{step}"))
        elif kind == 1:
            nodes.append(helper.make_node("Add", [current, "B"], [out], name=f"add_{step}"))
        elif kind == 2:
            nodes.append(helper.make_node("Relu", [current], [out], name=f"relu_{step}"))
        else:
            nodes.append(helper.make_node("Tanh", [current], [out], name=f"tanh_{step}"))
        current = out
    nodes.append(helper.make_node("Identity", [current], ["y"], name="output"))
    graph = helper.make_graph(
        nodes,
        f"synthetic_{n_nodes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        [weight, bias, cond],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
