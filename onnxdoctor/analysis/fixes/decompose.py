"""Decompose a custom op into standard ONNX ops through its own Python body.

`ExportedProgram.run_decompositions({op: body})` replaces the op by what its Python body traces
to; the exported model then needs no runtime kernel. Often the best fix. The worker runs the
snippet itself (in the script's globals) and exports the `program` it builds.

The ops of `torch.onnx.ops` (attention, rotary_embedding, ...) are exported as one ONNX node
each, but eager PyTorch runs their reference implementation, which can mean something else than
the runtime's kernel (torch 2.13's attention lays its causal mask from the top left even with a
past cache; the ONNX spec and ONNX Runtime offset it by the past's length) or need a kernel the
runtime lacks. `torch.onnx.ops.aten_decompositions()` maps each to that reference implementation:
the export then computes what PyTorch does, in standard ops.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import ExportCode, Recipe, UseExporter

CODES = ("OD203", "OD303", "OD304", "OD402", "OD403", "OD404", "OD501", "OD601", "OD603")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Decompose a custom op into standard ONNX ops through its own Python implementation."""
    if (finding.torch_op or "").startswith("onnx::") or (finding.op or "").startswith("onnx::"):
        return _onnx_ops(finding)
    if finding.code not in ("OD203", "OD401"):  # OD401: the custom node's op, asked by custom_domain
        return []
    schema = ctx.op_facts.get("schema") or {}
    if not ctx.op or ctx.op.startswith("aten::") or not schema.get("python_impl"):
        return []
    overload = f"torch.ops.{ctx.namespace}.{ctx.op_name}.default"
    impl = schema.get("python_impl_name")
    # The torch.library op object is not its body: decomposing the op into itself recurses.
    # The function's name in the script is the op object where custom_op decorated it, and the
    # plain function where the script called custom_op(name, function) and kept the result apart.
    body = (f"torch._library.custom_ops.OPDEFS[{ctx.op!r}]._init_fn" if not impl
            else f"{impl}._init_fn" if schema.get("python_impl_decorated", True) else impl)
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


def _onnx_ops(finding: Finding) -> list[Fix]:
    """A torch.onnx.ops op whose node the runtime refuses or computes otherwise: export its
    PyTorch reference implementation instead of the node."""
    op = finding.torch_op if (finding.torch_op or "").startswith("onnx::") else finding.op
    name = (op or "").removeprefix("onnx::").split(".")[0]
    program_code = (
        "import torch\n\n"
        "program = torch.export.export(model, example_inputs)\n"
        f"# torch.onnx.ops' {name} (and its siblings) become the reference implementation eager PyTorch\n"
        "# runs, in standard ops, instead of one ONNX node each.\n"
        "program = program.run_decompositions(torch.onnx.ops.aten_decompositions())\n"
    )
    return [
        Fix(
            kind="decompose",
            title=f"Export torch.onnx.ops' {name} as the reference implementation PyTorch runs "
                  "(run_decompositions(torch.onnx.ops.aten_decompositions()))",
            snippet=program_code + "torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)\n",
            applicability=Applicability.SAFE,
            cost=f"the graph holds standard ops instead of one {name} node: the runtime's fused kernel is not "
                 "used, and the result is what eager PyTorch computes, which may differ from the ONNX "
                 f"spec's {name} (check which one your model was trained with)",
            recipe=Recipe("decompose", (UseExporter("dynamo"), ExportCode(program_code, program="program"))),
        )
    ]
