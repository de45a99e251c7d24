"""Python functions applied to symbolic sizes that the dynamo exporter has no translation for.

With a dimension declared dynamic, `round(h / scale)` or `math.sqrt(h)` stays in the exported
program as a call of `builtins.round` or `torch._sym_sqrt` on a symbolic scalar (pytorch#138852).
The exporter's registry translates the arithmetic and comparisons torch.export leaves there (add,
floordiv, ceil, sym_max, ...) but not these, and stops with "No ONNX function found for <built-in
function round>". Each is one ONNX op on a 0-d tensor, given to the export as its
`custom_translation_table`: ONNX's Round rounds half to even as Python's round does, and the math
functions are the float32 ops the exporter already computes the scalar's other arithmetic in.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import ExportCode, Recipe, UseExporter

CODES = ("OD299",)

# The functions torch.export can leave on a symbolic scalar (torch/fx/experimental/sym_node.py)
# that the exporter's registry lacks, with the ONNX op each is.
UNARY_MATH = {"_sym_sqrt": "Sqrt", "_sym_cos": "Cos", "_sym_cosh": "Cosh", "_sym_sin": "Sin",
              "_sym_sinh": "Sinh", "_sym_tan": "Tan", "_sym_tanh": "Tanh", "_sym_asin": "Asin",
              "_sym_acos": "Acos", "_sym_atan": "Atan"}
HANDLED = ("builtins::round", "torch::_sym_log2", *(f"torch::{name}" for name in UNARY_MATH))

_TRANSLATION = '''\
import builtins

import torch
from onnxscript import opset18 as op

FLOAT, INT64 = 1, 7  # ONNX element types


# round() of a symbolic size: ONNX Round rounds half to even, as Python does; without ndigits
# Python returns an int.
def _round(x, ndigits=None):
    if ndigits is None:
        return op.Cast(op.Round(op.Cast(x, to=FLOAT)), to=INT64)
    scale = op.Constant(value_float=10.0 ** ndigits)
    return op.Div(op.Round(op.Mul(op.Cast(x, to=FLOAT), scale)), scale)


def _log2(x):
    return op.Div(op.Log(op.Cast(x, to=FLOAT)), op.Constant(value_float=0.6931471805599453))


def _unary(onnx_op):
    def translate(x):
        return getattr(op, onnx_op)(op.Cast(x, to=FLOAT))
    return translate


custom_translation_table = {
    builtins.round: _round,
    torch._sym_log2: _log2,
%s
}
'''


def translation_code() -> str:
    """The module-level code defining `custom_translation_table` for every handled function."""
    entries = "\n".join(f"    torch.{name}: _unary({onnx_op!r})," for name, onnx_op in UNARY_MATH.items())
    return _TRANSLATION % entries


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The missing scalar translations, for the dynamo exporter's stop at one of them."""
    if ctx.target_kind != "script" or (finding.op or ctx.op) not in HANDLED:
        return []
    code = translation_code()
    function = (finding.op or ctx.op or "").split("::", 1)[1]
    return [Fix(
        kind="scalar_translation",
        title=f"Translate `{function}` on a symbolic size as an ONNX op (dynamo exporter, "
              "custom_translation_table)",
        snippet=code + "\n"
                "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True,\n"
                "                  dynamic_shapes=dynamic_shapes,\n"
                "                  custom_translation_table=custom_translation_table)\n",
        applicability=Applicability.SAFE,
        cost="none: the size is computed by one more node in the graph; the dynamo exporter",
        recipe=Recipe("scalar_translation", (UseExporter("dynamo"),
                                             ExportCode(code, translation_table="custom_translation_table"))),
    )]
