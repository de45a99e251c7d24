"""Rewrite an aten op no exporter maps with the op-rewrite library (onnxdoctor.rewrites).

The snippet defines the library's function for the op and exports
`torch.export.export(model, example_inputs).run_decompositions({op: function})` with the dynamo
exporter; the worker runs that same code (the recipe's prelude) and exports the `program` it
builds, so what is verified is what the user pastes.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import ExportCode, Recipe, UseExporter, UseOpset
from onnxdoctor.rewrites import Exactness, Rewrite, find_rewrites

# Any finding that names an op: no exporter maps it (OD202), not at this opset (OD201), a
# failure only the message names (OD299), or a mismatch located at the nodes exported for it
# (OD601: the library's version of the op gives PyTorch's numbers where the export does not).
CODES = ("OD201", "OD202", "OD299", "OD601")


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
    if finding.code == "OD601":
        rewrites = find_rewrites(_diverging_torch_op(ctx))
        if not rewrites:
            return []
    else:
        symbolic = _symbolic_rewrite(ctx)
        if symbolic is not None:
            return [symbolic]
        if not any(not r.mismatch_only for r in find_rewrites(ctx.op)):
            return []
        # The worker lists every op the exporter has no function for; one program rewrites them all.
        ops = [ctx.op, *(u.get("op") for u in ctx.export_facts.get("unsupported_ops") or () if isinstance(u, dict))]
        rewrites = tuple(dict.fromkeys(r for op in ops for r in find_rewrites(op) if not r.mismatch_only))
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


def _diverging_torch_op(ctx: FixContext) -> str | None:
    """The torch op whose exported nodes a mismatch's search found differing first, if any."""
    for outcome in ctx.outcomes:
        diverging = outcome.facts.get("diverging") if outcome.stage is Stage.PARITY else None
        # A random node whose draws differ only as draws do is no rewrite's business; one whose
        # distribution differs too (the runtime samples something else) is.
        drawn = diverging.get("random") and diverging.get("in_distribution") is not False if isinstance(diverging, dict) else True
        if isinstance(diverging, dict) and not drawn and not diverging.get("symbolic"):
            return diverging.get("torch_op") or None
    return None


# Ops that torch.export cannot trace at all (no fake kernel for quantized tensors), so the
# library's run_decompositions route is closed, but whose TorchScript symbolic is one line:
# op -> (exactness, limits, code registering the symbolic).
_TORCHSCRIPT_SYMBOLICS = {
    "aten::int_repr": (
        Exactness.ROUNDING,
        ("a tensor quantized in the same graph by quantize_per_tensor (written as QuantizeLinear; "
         "what the test covers); off by one at exact ties (x/scale = k + 0.5) when the zero point is "
         "odd: torch rounds x/scale + zero_point half to even, QuantizeLinear rounds x/scale first"),
        ("import torch\n"
        "from torch.onnx._internal.torchscript_exporter import symbolic_helper\n\n\n"
        "def int_repr(g, quantized):\n"
        "    # The exporter carries a quantized tensor as (QuantizeLinear output, scale, zero point):\n"
        "    # its integer values are the QuantizeLinear output itself.\n"
        "    return symbolic_helper._unpack_quantized_tensor(quantized)[0]\n\n\n"
         "torch.onnx.register_custom_op_symbolic('aten::int_repr', int_repr, 10)\n"),
    ),
}


def _symbolic_rewrite(ctx: FixContext) -> Fix | None:
    """A one-line TorchScript symbolic for an op torch.export cannot trace (int_repr)."""
    entry = _TORCHSCRIPT_SYMBOLICS.get(ctx.op or "")
    if entry is None or ctx.exporter != "torchscript":
        return None
    exactness, limits, code = entry
    opset = max(ctx.requested_opset or 13, 10)  # QuantizeLinear's integer output needs opset 10
    return Fix(
        kind="rewrite",
        title=f"Map {ctx.op} in the TorchScript exporter to the QuantizeLinear output it reads ({exactness.value})",
        snippet=code + f"torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False, opset_version={opset})\n",
        applicability=Applicability.SAFE,
        cost=f"{ctx.op}: {limits}",
        # Registering a symbolic is process-wide: a worker of its own.
        recipe=Recipe("rewrite", (UseExporter("torchscript"), UseOpset(opset), ExportCode(code)), isolated=True),
    )
