"""The op-rewrite library: aten ops no exporter maps, rewritten in exportable torch ops.

Each entry is data (the op, the overloads it replaces, its exactness and limits) plus the source
text of a small function that computes the op from ops both ONNX and ONNX Runtime have. The
source is text on purpose: this package is imported by the CLI, which never imports torch; the
worker compiles the text (it is also the snippet the user pastes). A rewrite is applied with
`torch.export.export(model, args).run_decompositions({overload: function})` and the resulting
ExportedProgram is exported with the dynamo exporter.

torch's own decomposition tables were tried first: their entries for these ops lead to prims ops
(prims.prod, prims.erf_inv, prims.lgamma, ...) that no exporter maps either, which is why the ops
fail in the first place. The one exception found, aten::pdist, exports only through the private
`torch._decomp` table (the public `torch.export.default_decompositions()` entry recurses into
aten.pdist when used in run_decompositions), so pdist has its own rewrite here.

Adding a rewrite is adding a `Rewrite(...)` to the family module it belongs to (one module per
op family) and a test case in tests/test_rewrites.py.
"""

from __future__ import annotations

# The entry types live in their own module, which the family modules import: the package imports
# the families to build REWRITES, so they must not import the package back.
from onnxdoctor.rewrites.entry import Exactness, Rewrite


def _load() -> tuple[Rewrite, ...]:
    from onnxdoctor.rewrites import (
        activation,
        angles,
        attention,
        bitwise,
        complex_pairs,
        cumulative,
        distance,
        eig,
        elementwise,
        histogram,
        linalg,
        losses,
        pooling,
        pooling3d,
        quantize,
        reduction,
        resize,
        sampling,
        scatter,
        shift,
        sorting,
        sparse,
        special,
        triangular,
        unique,
        window,
    )

    found: list[Rewrite] = []
    for module in (sorting, cumulative, linalg, special, elementwise, pooling, distance, bitwise, complex_pairs,
                   scatter, unique, histogram, eig, triangular, pooling3d, activation, window, resize,
                   sampling, losses, quantize, sparse, reduction, shift, angles, attention):
        found.extend(module.REWRITES)
    return tuple(found)


REWRITES: tuple[Rewrite, ...] = _load()


def _bare(name: str) -> str:
    """`aten::median.dim` and `aten.median.dim` -> `aten::median`."""
    name = name.strip()
    if "::" not in name and name.count(".") >= 1:
        namespace, _, rest = name.partition(".")
        name = f"{namespace}::{rest}"
    namespace, _, rest = name.partition("::")
    return f"{namespace}::{rest.split('.', 1)[0]}"


def find_rewrites(op: str | None) -> tuple[Rewrite, ...]:
    """The library's rewrites for an op named in a failure (any spelling: aten::x, aten.x.overload)."""
    if not op:
        return ()
    bare = _bare(op)
    if "::" not in op and "." not in op:
        bare = f"aten::{op}"  # TorchScript's "Unsupported: ONNX export of operator cumprod"
    return tuple(r for r in REWRITES if bare in {_bare(n) for n in r.names})


def coverage_markdown() -> str:
    """The library's ops as Markdown bullets, for `explain OD202` (generated from the table)."""
    lines = [
        "",
        (f"onnxdoctor's op-rewrite library covers {len(REWRITES)} ops; `diagnose` tries the rewrite "
         "and verifies it:"),
        "",
    ]
    for rewrite in REWRITES:
        when = " Tried for a mismatch located at this op (the exporters map it)." if rewrite.mismatch_only else ""
        lines.append(f"- `{rewrite.op}` ({rewrite.family}, {rewrite.exactness.value}: {rewrite.error}). "
                     f"Limits: {rewrite.limits}.{when}")
    return "\n".join(lines) + "\n"


__all__ = ["REWRITES", "Exactness", "Rewrite", "coverage_markdown", "find_rewrites"]
