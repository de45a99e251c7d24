"""Synthetic ONNX models for the graph benchmark and the README example (docs/graph-example.png).

Regenerate the example:

    python bench/synthetic.py model.onnx
    onnxdoctor graph model.onnx --png -o docs/graph-example.png --force
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def synthetic_model(n_nodes: int, width: int = 4, subgraphs: int = 3) -> onnx.ModelProto:
    """A valid opset-17 model with `n_nodes` nodes, If bodies included.

    The main chain cycles MatMul and Add (each with its own small weight, as in a real network),
    Relu and Tanh; every eighth step branches into Sigmoid and merges back with Mul, every 32nd
    step adds a residual connection from 32 steps back, and `subgraphs` If nodes each hold a
    two-node body in both branches.
    """
    rng = np.random.default_rng(0)
    initializers: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []
    current = "x"
    history: list[str] = []
    step = 0
    body_nodes = 4
    budget = n_nodes - 1  # the final Identity
    if_at = {budget * (k + 1) // (subgraphs + 1) for k in range(subgraphs)} if subgraphs else set()
    while True:
        used = len(nodes) + body_nodes * sum(n.op_type == "If" for n in nodes)
        if used >= budget:
            break
        step += 1
        out = f"t{step}"
        if any(used <= at < used + 2 for at in if_at) and budget - used > body_nodes:
            if_at = {at for at in if_at if not used <= at < used + 2}
            cond = f"cond{step}"
            initializers.append(numpy_helper.from_array(np.array(True), cond))
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
                result = helper.make_tensor_value_info(
                    f"{side}{step}_b", TensorProto.FLOAT, [1, width]
                )
                branches.append(helper.make_graph(body, f"{side}_{step}", [], [result]))
            nodes.append(
                helper.make_node(
                    "If",
                    [cond],
                    [out],
                    name=f"if_{step}",
                    then_branch=branches[0],
                    else_branch=branches[1],
                )
            )
        elif step % 32 == 0 and len(history) >= 32 and budget - used >= 1:
            nodes.append(
                helper.make_node("Add", [current, history[-32]], [out], name=f"residual_{step}")
            )
        elif step % 8 == 0 and budget - used >= 2:
            nodes.append(
                helper.make_node("Sigmoid", [current], [f"s{step}"], name=f"sigmoid_{step}")
            )
            nodes.append(helper.make_node("Mul", [current, f"s{step}"], [out], name=f"mul_{step}"))
        elif step % 4 == 0:
            weight = f"W{step}"
            initializers.append(
                numpy_helper.from_array(
                    rng.standard_normal((width, width)).astype(np.float32), weight
                )
            )
            nodes.append(
                helper.make_node("MatMul", [current, weight], [out], name=f"matmul_{step}")
            )
        elif step % 4 == 1:
            bias = f"B{step}"
            initializers.append(numpy_helper.from_array(np.zeros(width, np.float32), bias))
            nodes.append(helper.make_node("Add", [current, bias], [out], name=f"add_{step}"))
        elif step % 4 == 2:
            nodes.append(helper.make_node("Relu", [current], [out], name=f"relu_{step}"))
        else:
            nodes.append(helper.make_node("Tanh", [current], [out], name=f"tanh_{step}"))
        history.append(out)
        current = out
    nodes.append(helper.make_node("Identity", [current], ["y"], name="output"))
    graph = helper.make_graph(
        nodes,
        f"synthetic_{n_nodes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def count_nodes(model: onnx.ModelProto) -> int:
    """Nodes in the model, subgraph bodies included."""
    total = 0
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        total += len(graph.node)
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    stack.append(attr.g)
                stack.extend(attr.graphs)
    return total


def example_model() -> onnx.ModelProto:
    """A small exported-looking model with two problems, drawn for the README.

    `/head/act/Gelu` is not in opset 17 (Gelu arrives in opset 20: OD301), and
    `mynamespace::MYSELU` passes the checker but has no ONNX Runtime kernel (OD401 with --runtime).
    """
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    then_body = helper.make_graph(
        [
            helper.make_node(
                "Softmax", ["/head/act/Gelu_output_0"], ["probs"], name="/head/Softmax", axis=-1
            )
        ],
        "then_branch",
        [],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
    )
    else_body = helper.make_graph(
        [
            helper.make_node(
                "Identity", ["/head/act/Gelu_output_0"], ["logits_out"], name="/head/Identity"
            )
        ],
        "else_branch",
        [],
        [helper.make_tensor_value_info("logits_out", TensorProto.FLOAT, [1, 10])],
    )
    nodes = [
        helper.make_node(
            "Conv",
            ["image", "conv.weight", "conv.bias"],
            ["/features/conv/Conv_output_0"],
            name="/features/conv/Conv",
            pads=[1, 1, 1, 1],
        ),
        helper.make_node(
            "Relu",
            ["/features/conv/Conv_output_0"],
            ["/features/relu/Relu_output_0"],
            name="/features/relu/Relu",
        ),
        helper.make_node(
            "MYSELU",
            ["/features/relu/Relu_output_0"],
            ["/features/act/MYSELU_output_0"],
            name="/features/act/MYSELU",
            domain="mynamespace",
        ),
        helper.make_node(
            "GlobalAveragePool",
            ["/features/act/MYSELU_output_0"],
            ["/pool/GlobalAveragePool_output_0"],
            name="/pool/GlobalAveragePool",
        ),
        helper.make_node(
            "Flatten", ["/pool/GlobalAveragePool_output_0"], ["/Flatten_output_0"], name="/Flatten"
        ),
        helper.make_node(
            "Gemm",
            ["/Flatten_output_0", "fc.weight", "fc.bias"],
            ["/head/fc/Gemm_output_0"],
            name="/head/fc/Gemm",
            transB=1,
        ),
        helper.make_node(
            "Gelu", ["/head/fc/Gemm_output_0"], ["/head/act/Gelu_output_0"], name="/head/act/Gelu"
        ),
        helper.make_node(
            "If",
            ["return_probs"],
            ["output"],
            name="/head/If",
            then_branch=then_body,
            else_branch=else_body,
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "main_graph",
        [
            helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32]),
            helper.make_tensor_value_info("return_probs", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])],
        [
            weight("conv.weight", 8, 3, 3, 3),
            weight("conv.bias", 8),
            weight("fc.weight", 10, 8),
            weight("fc.bias", 10),
        ],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("mynamespace", 1)]
    )


if __name__ == "__main__":
    # python bench/synthetic.py OUT.onnx [N]: the README example, or a synthetic model of N nodes.
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "model.onnx"
    built = synthetic_model(int(sys.argv[2])) if len(sys.argv) > 2 else example_model()
    with open(target, "wb") as handle:
        handle.write(built.SerializeToString())
