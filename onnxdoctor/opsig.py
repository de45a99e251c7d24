"""How a torch op's scalar argument types become ONNX attributes: one table for the fix snippets
and the scaffold, so a generated symbolic and a generated package never disagree."""

from __future__ import annotations

# torch schema type -> the attribute suffix of TorchScript's `g.op(..., name_<suffix>=value)`.
ATTRIBUTE_SUFFIXES: dict[str, str] = {
    "float": "f", "Scalar": "f",
    "int": "i", "SymInt": "i", "bool": "i",
    "str": "s",
}


def attribute_suffix(type_name: str) -> str:
    """`f`, `i`, `s`, or `t` (a tensor attribute) for a torch schema type such as `float?` or `int[]`."""
    return ATTRIBUTE_SUFFIXES.get(type_name.rstrip("?").replace("[]", ""), "t")
