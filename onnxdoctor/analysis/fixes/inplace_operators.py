"""Augmented bitwise assignments the TorchScript exporter has no symbolic for.

`mask |= hits` records aten::__ior_ (and `&=`, `^=`, `<<=`, `>>=` their own), which the TorchScript
exporter refuses at every opset ("Exporting the operator 'aten::__ior_' ... is not supported"),
though it maps `|` and follows in-place writes made with `copy_`. Exported with each such operator
computed out of place and copied into its tensor (recipe.EagerExport.inplace_operators), views and
other names of the tensor see the result as in PyTorch.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import EagerExport, Recipe, UseExporter

CODES = ("OD202", "OD299")

# aten's names for the augmented operators, and the operator each assigns.
OPERATORS = {"aten::__ior_": "|", "aten::__iand_": "&", "aten::__ixor_": "^",
             "aten::__ilshift_": "<<", "aten::__irshift_": ">>"}


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The export with `x op= y` computed as `x.copy_(x op y)`."""
    symbol = OPERATORS.get(ctx.op or "")
    if symbol is None or ctx.target_kind != "script":
        return []
    where = f" at {finding.source}" if finding.source else ""
    return [Fix(
        kind="inplace_operator",
        title=f"Write `x {symbol}= y`{where} as `x = x {symbol} y` (or `x.copy_(x {symbol} y)` where a view of x "
              "must see it): the TorchScript exporter maps the operator, not its augmented form",
        snippet=(f"# before:  special_tokens_mask {symbol}= input_ids == token\n"
                 f"special_tokens_mask = special_tokens_mask {symbol} (input_ids == token)\n"
                 f"# where another name or a view of the tensor must see the change:\n"
                 f"special_tokens_mask.copy_(special_tokens_mask {symbol} (input_ids == token))\n"),
        applicability=Applicability.SAFE,
        cost="none at run time: the same values, computed out of place",
        recipe=Recipe("inplace_operator", (EagerExport(inplace_operators=True), UseExporter("torchscript"))),
    )]
