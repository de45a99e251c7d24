"""Decompose a torch.library custom op into standard ONNX ops through its own Python body.

`ExportedProgram.run_decompositions({op: impl})` replaces the op by what its implementation
traces to; the exported model then needs no runtime kernel. Often the best fix.
"""

from __future__ import annotations

from onnxdoctor.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix

CODES = ("OD203",)


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    schema = ctx.op_facts.get("schema") or {}
    if not ctx.op or ctx.op.startswith("aten::") or not schema.get("python_impl"):
        return []
    overload = f"torch.ops.{ctx.namespace}.{ctx.op_name}.default"
    impl = schema.get("python_impl_name") or f"<the Python function behind {ctx.op}>"
    snippet = (
        "import torch\n\n"
        "program = torch.export.export(model, example_inputs)\n"
        f"# Replace {ctx.op} by what its Python implementation traces to (standard ops only).\n"
        f"program = program.run_decompositions({{{overload}: {impl}}})\n"
        "torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)\n"
    )
    return [
        Fix(
            kind="decompose",
            title=f"Decompose {ctx.op} into standard ONNX ops (run_decompositions with its Python body)",
            snippet=snippet,
            applicability=Applicability.SAFE,
            cost="none at run time: no custom kernel; the graph holds the op's body instead of one node",
            recipe={"kind": "decompose", "exporter": "dynamo", "decompose_ops": [ctx.op]},
        )
    ]
