"""One entry of the op-rewrite library (onnxdoctor.rewrites): the op, its exactness, its source."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Exactness(str, Enum):
    """How close a rewrite's numbers are to PyTorch's own kernel."""

    EXACT = "exact"  # the same values, bit for bit, wherever the op is defined
    ROUNDING = "rounding"  # the same formula up to floating-point rounding (another summation order)
    APPROXIMATION = "approximation"  # a polynomial / series approximation with a stated error bound
    # A random op: the same distribution as PyTorch's, other draws (judged over many runs).
    DISTRIBUTION = "distribution"


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
    # The exporters map the op; the rewrite is for where their export computes other numbers
    # (a mismatch), not for an export that fails (a newer opset or the other exporter is the fix).
    mismatch_only: bool = False
    # One entry for several ops of equal standing (bitwise and, or, xor): a fix names the one the
    # failure named. Otherwise the entry's own name (complex values are rewritten as a whole).
    named_by_failure: bool = False
    # A pattern the failure's text must match for the entry to be proposed, where its op's name
    # covers more than the overload it rewrites (`aten::view` is most often a shape view; the
    # entry rewrites the dtype view, which the dynamo exporter names "overload='dtype'").
    when: str = ""
    # Public callables and the source's function standing in for each (torch.linalg.lstsq ->
    # linalg_lstsq), patched in while the model is traced by the TorchScript exporter: for an op
    # torch.export cannot capture at all (no exported program holds it for run_decompositions),
    # and for an unrolled algorithm whose thousands of nodes the tracer writes in a tenth of the
    # dynamo exporter's time (measured: a Jacobi SVD of 8 x 8, 2 s against 22 s unoptimized).
    # Empty: derived from the op's name where a failure shows the capture itself stopped at it.
    calls: tuple[tuple[str, str], ...] = ()
    # torch.export's fake kernel refuses the op (a data-dependent output shape): only `calls` reach it.
    captured: bool = True

    def function_for(self, target: str) -> str:
        """The function the source defines for one of `targets`."""
        if self.functions:
            return self.functions[self.targets.index(target)]
        return self.function

    def public_calls(self) -> tuple[tuple[str, str], ...]:
        """The callables the source's functions stand in for: `calls`, else the ones the op's name
        suggests (torch.linalg.X for linalg_X, torch.special.X for special_X, else torch.X and
        Tensor.X), each for the entry's function."""
        if self.calls:
            return self.calls
        name = self.op.split("::")[-1].split(".")[0]
        for prefix in ("linalg", "special", "fft"):
            if name.startswith(prefix + "_"):
                return ((f"torch.{prefix}.{name[len(prefix) + 1:]}", self.function),)
        return ((f"torch.{name}", self.function), (f"torch.Tensor.{name}", self.function))

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

    def program_code(self, failed: str | None = None) -> str:
        """The part of the snippet that builds the rewritten ExportedProgram `program` (`failed`:
        the op the failure named, see `called_group`)."""
        return (
            "import math\n\nimport torch\n\n\n"
            f"# {self.op} rewritten in ops ONNX has ({self.exactness.value}: {self.error}).\n"
            f"# Limits: {self.limits}\n"
            + self.source.strip("\n")
            + "\n\n\n"
            + decomposing(self.decomposition_table, [self.called_group(failed)])
        )

    def called_group(self, failed: str | None) -> tuple[str, ...]:
        """The targets of which the exported program must call one for the table alone to reach
        the op: where the failure names another of the entry's targets than its own op, those (the
        complex entry's zero padding is met only inside a complex FFT with `n`, which the exporter
        decomposes itself); else all."""
        bare = (failed or "").replace("::", ".").split(".")
        if not failed or "::".join(bare[:2]) == self.op:
            return self.targets  # the entry's own op: any of its overloads (linalg_inv_ex for linalg_inv)
        named = tuple(t for t in self.targets if t.split(".")[:2] == bare[:2])
        return named or self.targets


def decomposing(table: str, groups: list[tuple[str, ...]]) -> str:
    """Code that exports the model and runs `table` (Python source of the rewrite table) as its
    decompositions, building `program`.

    An op reached only inside a composite op the ONNX exporter decomposes itself (the SVD of
    `linalg.matrix_norm(ord='nuc')`) is not in the exported program for a table of its own to
    replace: then the table is laid over torch's default decompositions, which break the
    composite down as the exporter would. `groups`: each rewrite's targets (one must be called).
    """
    sets = ", ".join("{" + ", ".join(f"torch.ops.{t}" for t in group) + "}" for group in groups)
    return (
        "# The script's keyword inputs and dynamic_shapes, where it has them.\n"
        "program = torch.export.export(model, tuple(example_inputs), kwargs=globals().get('example_kwargs') or None,\n"
        "                              dynamic_shapes=globals().get('dynamic_shapes'))\n"
        f"table = {table}\n"
        "# In-place calls (Tensor.uniform_) reach the table as their functional overloads.\n"
        "called = {node.target for p in (program, program.run_decompositions({})) for node in p.graph.nodes}\n"
        f"if any(not called & group for group in ({sets},)):\n"
        "    # An op the rewrite replaces is reached only inside a composite op: decompose that as\n"
        "    # the ONNX exporter would, with the rewrite in the op's place.\n"
        "    full = torch.export.default_decompositions()\n"
        "    full.update(table)\n"
        "    table = full\n"
        "program = program.run_decompositions(table)\n"
    )
