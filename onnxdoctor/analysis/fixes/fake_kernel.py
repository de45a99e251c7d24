"""A generated fake (meta) kernel for a custom op that has none (OD212).

torch.export traces with fake tensors, so an op defined with `torch.library.Library(ns, "DEF")`
and a CPU kernel, but no `register_fake`, stops the dynamo exporter although the op runs. The
worker records what the real kernel returns on the example inputs (shapes and dtypes of every
call); the fake kernel describes that: `torch.empty_like(x)` when a result has an argument's
shape, a fixed shape otherwise (flagged in the snippet). Registering it gets the export past
torch.export; the op then still needs an ONNX mapping (OD203), which the fix search continues
with (a custom-domain node and kernel, or the op's own body).
"""

from __future__ import annotations

from typing import Any

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import ExportCode, Recipe, UseExporter

CODES = ("OD212",)


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Register a fake kernel generated from the op's schema and its observed calls."""
    if ctx.target_kind != "script" or not ctx.op or "::" not in ctx.op:
        return []
    arguments = ctx.schema_arguments
    calls = [c for c in ctx.export_facts.get("op_calls") or () if isinstance(c, dict)]
    if not arguments or not calls:
        return []
    code = fake_kernel_code(ctx.op, [a.name for a in arguments], calls)
    if code is None:
        return []
    static = "new_empty(" in code
    return [
        Fix(
            kind="fake_kernel",
            title=f"Register a fake (meta) kernel for {ctx.op} so torch.export can trace it",
            snippet=code,
            applicability=Applicability.UNSAFE if static else Applicability.SAFE,
            cost=("the fake kernel states a fixed output shape seen on the example inputs: make it a "
                  "function of the inputs if it varies" if static else
                  "none at run time; the op still needs an ONNX mapping (tried next)"),
            # Registering a fake kernel is process-wide and cannot be undone: a worker of its own.
            recipe=Recipe("fake_kernel", (UseExporter("dynamo"), ExportCode(code)), isolated=True),
        )
    ]


def fake_kernel_code(op: str, names: list[str], calls: list[dict[str, Any]]) -> str | None:
    """The register_fake snippet; None when the calls disagree on how results follow the arguments."""
    results = [_result_expression(call, names) for call in calls]
    if not results or any(r is None for r in results) or len({tuple(r) for r in results}) != 1:  # type: ignore[arg-type]
        return None
    expressions = results[0]
    assert expressions is not None
    body = expressions[0] if len(expressions) == 1 else "(" + ", ".join(expressions) + ")"
    function = op.split("::", 1)[1].replace(".", "_")
    static = any("new_empty(" in e for e in expressions)
    note = ("    # A fixed shape, seen on the example inputs: make it a function of the arguments if it varies.\n"
            if static else
            "    # Shapes and dtypes as the real kernel returned them on the example inputs.\n")
    return (
        "import torch\n\n\n"
        f"@torch.library.register_fake({op!r})\n"
        f"def _{function}_fake({', '.join(names)}):\n"
        f"{note}"
        f"    return {body}\n"
    )


def _result_expression(call: dict[str, Any], names: list[str]) -> list[str] | None:
    args = call.get("args") or []
    tensors = [(names[i], a) for i, a in enumerate(args[: len(names)]) if isinstance(a, dict) and "shape" in a]
    if not tensors:
        return None
    expressions = []
    for result in call.get("results") or []:
        if not isinstance(result, dict) or "shape" not in result:
            return None
        same = next((n for n, a in tensors if a["shape"] == result["shape"]), None)
        dtype = result["dtype"]
        if same is not None:
            of = dict(tensors)[same]
            expressions.append(f"torch.empty_like({same})" if of["dtype"] == dtype
                               else f"torch.empty_like({same}, dtype=torch.{dtype})")
        else:
            expressions.append(f"{tensors[0][0]}.new_empty({list(result['shape'])!r}, dtype=torch.{dtype})")
    return expressions or None
