"""Rewrite an aten op no exporter maps with the op-rewrite library (onnxdoctor.rewrites).

The snippet defines the library's function for the op and exports
`torch.export.export(model, example_inputs).run_decompositions({op: function})` with the dynamo
exporter; the worker runs that same code (the recipe's prelude) and exports the `program` it
builds, so what is verified is what the user pastes.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import ExportCode, Recipe, UseExporter
from onnxdoctor.rewrites import Exactness, Rewrite, find_rewrites

# Any finding that names an op: no exporter maps it (OD202), not at this opset (OD201), or a
# failure only the message names (OD299).
CODES = ("OD201", "OD202", "OD299")


def program_code(rewrites: tuple[Rewrite, ...]) -> str:
    """Code that builds `program`, the model's ExportedProgram with every given op rewritten."""
    if len(rewrites) == 1:
        return rewrites[0].program_code()
    header = "import math\n\nimport torch\n\n\n"
    parts, table = [], []
    for rewrite in rewrites:
        parts.append(
            f"# {rewrite.op} rewritten in ops ONNX has ({rewrite.exactness.value}: {rewrite.error}).\n"
            f"# Limits: {rewrite.limits}\n" + rewrite.source.strip("\n")
        )
        table.extend(f"torch.ops.{t}: {rewrite.function_for(t)}" for t in rewrite.targets)
    return (
        header + "\n\n\n".join(parts) + "\n\n\n"
        "program = torch.export.export(model, example_inputs)\n"
        "program = program.run_decompositions({" + ", ".join(table) + "})\n"
    )


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The library's rewrite of the op, exported through run_decompositions (dynamo exporter)."""
    if ctx.target_kind != "script":
        return []
    # The worker lists every op the exporter has no function for; one program rewrites them all.
    ops = [ctx.op, *(u.get("op") for u in ctx.export_facts.get("unsupported_ops") or () if isinstance(u, dict))]
    rewrites = tuple(dict.fromkeys(r for op in ops for r in find_rewrites(op)))
    if not find_rewrites(ctx.op):
        return []
    code = program_code(rewrites)
    worst = max((r.exactness for r in rewrites), key=list(Exactness).index)
    names = ", ".join(dict.fromkeys(r.op.split(".")[0] for r in rewrites))
    return [
        Fix(
            kind="rewrite",
            title=f"Rewrite {names} in exportable torch ops (op-rewrite library, {worst.value})",
            snippet=code + "torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)\n",
            # An approximation changes the numbers (within its stated bound): the user decides.
            applicability=Applicability.UNSAFE if worst is Exactness.APPROXIMATION else Applicability.SAFE,
            cost="; ".join(f"{r.op}: {r.limits}" for r in rewrites),
            recipe=Recipe("rewrite", (UseExporter("dynamo"), ExportCode(code, program="program"))),
        )
    ]

