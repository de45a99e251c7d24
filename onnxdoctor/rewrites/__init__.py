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

from dataclasses import dataclass
from enum import Enum


class Exactness(str, Enum):
    """How close a rewrite's numbers are to PyTorch's own kernel."""

    EXACT = "exact"  # the same values, bit for bit, wherever the op is defined
    ROUNDING = "rounding"  # the same formula up to floating-point rounding (another summation order)
    APPROXIMATION = "approximation"  # a polynomial / series approximation with a stated error bound


@dataclass(frozen=True)
class Rewrite:
    """One op of the library: what it replaces, how exact it is, and the function doing it."""

    op: str  # the aten op as users and torch's messages name it, e.g. "aten::cumprod"
    family: str
    # torch.ops overloads the function replaces in an ExportedProgram, e.g. "aten.cumprod.default".
    targets: tuple[str, ...]
    function: str  # the name the source defines
    source: str  # a self-contained function definition (uses only `torch` and `math`)
    exactness: Exactness
    error: str  # the error bound, or what differs (rounding, tie order)
    limits: str  # shapes, dtypes, sizes, values it does not handle
    # Other names export failures report for this op (dynamo names the prims op the aten
    # decomposition produced, e.g. prims::erf_inv for aten::erfinv).
    reported_as: tuple[str, ...] = ()
    # The function for each target, where they differ (an `_ex` overload returns extra outputs).
    functions: tuple[str, ...] = ()

    def function_for(self, target: str) -> str:
        """The function the source defines for one of `targets`."""
        if self.functions:
            return self.functions[self.targets.index(target)]
        return self.function

    @property
    def names(self) -> tuple[str, ...]:
        """Every qualified name that identifies this op in a failure message."""
        targets = tuple("::".join(t.split(".")[:2]) for t in self.targets)
        return tuple(dict.fromkeys((self.op, *targets, *self.reported_as)))

    @property
    def decomposition_table(self) -> str:
        """The `run_decompositions` argument, as Python source."""
        return "{" + ", ".join(f"torch.ops.{t}: {self.function_for(t)}" for t in self.targets) + "}"

    def snippet(self) -> str:
        """Paste-able code: the function, then the export through run_decompositions."""
        return (
            self.program_code()
            + "torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)\n"
        )

    def program_code(self) -> str:
        """The part of the snippet that builds the rewritten ExportedProgram `program`."""
        return (
            "import math\n\nimport torch\n\n\n"
            f"# {self.op} rewritten in ops ONNX has ({self.exactness.value}: {self.error}).\n"
            f"# Limits: {self.limits}\n"
            + self.source.strip("\n")
            + "\n\n\n"
            "program = torch.export.export(model, example_inputs)\n"
            f"program = program.run_decompositions({self.decomposition_table})\n"
        )


def _load() -> tuple[Rewrite, ...]:
    from onnxdoctor.rewrites import (
        bitwise,
        cumulative,
        distance,
        elementwise,
        linalg,
        pooling,
        recurrent,
        sorting,
        special,
    )

    found: list[Rewrite] = []
    for module in (sorting, cumulative, linalg, special, elementwise, pooling, distance, bitwise,
                   recurrent):
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
        lines.append(f"- `{rewrite.op}` ({rewrite.family}, {rewrite.exactness.value}: {rewrite.error}). "
                     f"Limits: {rewrite.limits}.")
    return "\n".join(lines) + "\n"


__all__ = ["REWRITES", "Exactness", "Rewrite", "coverage_markdown", "find_rewrites"]
