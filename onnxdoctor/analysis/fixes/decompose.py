"""Decompose a torch.library custom op into standard ONNX ops through its own Python body.

`ExportedProgram.run_decompositions({op: body})` replaces the op by what its Python body traces
to; the exported model then needs no runtime kernel. Often the best fix. The worker runs the
snippet itself (in the script's globals) and exports the `program` it builds.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import ExportCode, Recipe, UseExporter

CODES = ("OD203",)


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Decompose a custom op into standard ONNX ops through its own Python implementation."""
    schema = ctx.op_facts.get("schema") or {}
    if not ctx.op or ctx.op.startswith("aten::") or not schema.get("python_impl"):
        return []
    overload = f"torch.ops.{ctx.namespace}.{ctx.op_name}.default"
    impl = schema.get("python_impl_name")
    # The torch.library op object is not its body: decomposing the op into itself recurses.
    body = f"{impl}._init_fn" if impl else f"torch._library.custom_ops.OPDEFS[{ctx.op!r}]._init_fn"
    program_code = (
        "import torch\n\n"
        "program = torch.export.export(model, example_inputs)\n"
        f"# Replace {ctx.op} by what its own Python body traces to (standard ops only);\n"
        "# `_init_fn` is the function you decorated with @torch.library.custom_op: a private\n"
        "# attribute, the only way torch gives to that Python body (pass the function itself if you\n"
        "# keep a reference to it before decorating).\n"
        f"program = program.run_decompositions({{{overload}: {body}}})\n"
    )
    return [
        Fix(
            kind="decompose",
            title=f"Decompose {ctx.op} into standard ONNX ops (run_decompositions with its Python body)",
            snippet=program_code + "torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)\n",
            applicability=Applicability.SAFE,
            cost="none at run time: no custom kernel; the graph holds the op's body instead of one node",
            recipe=Recipe("decompose", (UseExporter("dynamo"), ExportCode(program_code, program="program"))),
        )
    ]
