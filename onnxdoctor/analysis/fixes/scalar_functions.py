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

# OD299: a function with no translation; OD80x/OD210/OD601/OD603: sizes computed wrong at run time.
CODES = ("OD299", "OD210", "OD601", "OD603", "OD802", "OD803", "OD804")

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


# Python's floor division of sizes: the exporter's registry writes it as ONNX's integer Div, which
# truncates toward zero ("floor_divide only for positive inputs", onnxscript's torch_lib), so the
# common ceil `-(-n // k)` is one short wherever k does not divide n.
_FLOOR_DIVISION = '''\
import operator

from onnxscript import opset18 as op

INT64 = 7  # the ONNX element type of sizes


def _floordiv(a, b):
    quotient = op.Div(a, b)
    zero = op.Constant(value_int=0)
    inexact = op.Not(op.Equal(op.Mul(quotient, b), a))
    negative = op.Xor(op.Less(a, zero), op.Less(b, zero))
    return op.Sub(quotient, op.Cast(op.And(inexact, negative), to=INT64))


custom_translation_table = {operator.floordiv: _floordiv}
'''


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The missing scalar translations, for the dynamo exporter's stop at one of them; Python's
    floor division of sizes, where a dynamo export that divides sizes is wrong at run time."""
    if finding.code != "OD299":
        return _floor_division(ctx)
    if ctx.target_kind != "script" or (finding.op or ctx.op) not in HANDLED:
        return []
    function = (finding.op or ctx.op or "").split("::", 1)[1]
    return [_translation_fix(
        "scalar_translation",
        f"Translate `{function}` on a symbolic size as an ONNX op (dynamo exporter, custom_translation_table)",
        translation_code(), "none: the size is computed by one more node in the graph; the dynamo exporter")]


def _translation_fix(kind: str, title: str, code: str, cost: str) -> Fix:
    """Export with the dynamo exporter and the `custom_translation_table` that `code` defines."""
    return Fix(
        kind="scalar_translation",
        title=title,
        snippet=code + "\n"
                "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True,\n"
                "                  dynamic_shapes=dynamic_shapes,\n"
                "                  custom_translation_table=custom_translation_table)\n",
        applicability=Applicability.SAFE,
        cost=cost,
        recipe=Recipe(kind, (UseExporter("dynamo"), ExportCode(code, translation_table="custom_translation_table"))),
    )


def _floor_division(ctx: FixContext) -> list[Fix]:
    """Floor division translated with Python's rounding, for a dynamo export that divides sizes."""
    rows = ctx.export_facts.get("provenance") or []
    divides = any(isinstance(r, dict) and r.get("torch_op") == "_operator::floordiv" for r in rows)
    if ctx.target_kind != "script" or ctx.exporter != "dynamo" or not divides:
        return []
    return [_translation_fix(
        "floor_division",
        "Translate floor division of sizes with Python's rounding (the dynamo exporter's integer Div truncates a "
        "negative quotient: -(-n // k) is one short)",
        _FLOOR_DIVISION, "five more nodes per floor division of sizes; the dynamo exporter")]
