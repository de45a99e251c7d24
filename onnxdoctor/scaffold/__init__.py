"""Custom-op package generator: `onnxdoctor scaffold`, and the command line a fix can suggest."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

__all__ = ["REFERENCE_PACKAGE", "scaffold_invocation"]

# The bundled reference fix, relative to the repository root: `onnxdoctor scaffold MYSELU` output.
REFERENCE_PACKAGE = "kernels/myselu"


def scaffold_invocation(
    op_type: str,
    namespace: str,
    inputs: Sequence[str] = ("x",),
    attrs: Mapping[str, tuple[str, float]] | None = None,
    expr: str | None = None,
) -> str:
    """The `onnxdoctor scaffold` command line that generates a package for one custom op.

    Args:
        op_type: the ONNX op type (the torch op is its lowercase, e.g. MYSELU -> ns::myselu).
        namespace: the torch.library namespace, which is also the ONNX domain.
        inputs: tensor input names, in order.
        attrs: attribute name -> (type "float" or "int", default).
        expr: the elementwise math, when known; without it the package's kernels are the identity
            with marked places to write the math (and its tests say so).
    """
    parts = ["onnxdoctor", "scaffold", op_type]
    if namespace != "mynamespace":
        parts += ["--namespace", namespace]
    if expr is not None:
        parts += ["--expr", expr]
    for name, (type_, default) in (attrs or {}).items():
        value = repr(int(default)) if type_ == "int" else repr(float(default))
        parts += ["--attr", f"{name}:{type_}={value}"]
    if tuple(inputs) != ("x",):
        parts += ["--inputs", ",".join(inputs)]
    return " ".join(shlex.quote(p) for p in parts)
