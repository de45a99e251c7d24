"""Frozen data types shared by the pipeline, the classifier, the fixes and the renderers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from onnxdoctor.recipe import Recipe


class Stage(str, Enum):
    """A pipeline stage, in the order the pipeline runs them (TOOL is the tool itself)."""

    LOAD = "load"
    EXPORT = "export"
    CHECK = "check"
    ORT_LOAD = "ort_load"
    ORT_RUN = "ort_run"
    PARITY = "parity"
    # The exported model at other input sizes (after PARITY passed); never part of the ladder, so a
    # size problem is a finding and never a failed export.
    SHAPES = "shapes"
    # A deployment target's own verdict (docs/targets.md); runs after the pipeline, never ends it.
    TARGET = "target"
    TOOL = "tool"


PIPELINE_STAGES: tuple[Stage, ...] = (
    Stage.LOAD,
    Stage.EXPORT,
    Stage.CHECK,
    Stage.ORT_LOAD,
    Stage.ORT_RUN,
    Stage.PARITY,
)
ONNX_FILE_STAGES: tuple[Stage, ...] = (Stage.LOAD, Stage.CHECK, Stage.ORT_LOAD, Stage.ORT_RUN)


class Status(str, Enum):
    """How a stage ended. SKIPPED means not reached (an earlier stage failed)."""

    PASSED = "passed"
    FAILED = "failed"
    CRASHED = "crashed"
    TIMED_OUT = "timed_out"
    SKIPPED = "skipped"


class Severity(str, Enum):
    """How bad a finding is: an error fails the run, a warning bites later, info explains."""
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Applicability(str, Enum):
    """How safe a fix is to apply as written (ruff's fix-safety idea)."""

    SAFE = "safe"
    UNSAFE = "unsafe"
    DISPLAY_ONLY = "display-only"


@dataclass(frozen=True)
class ErrorInfo:
    """An exception as the worker saw it, already reduced to plain data."""

    type: str
    message: str
    chain: tuple[str, ...] = ()  # qualified type names, outermost first
    chain_messages: tuple[str, ...] = ()
    traceback_tail: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ErrorInfo | None:
        """Rebuild the error from its JSON form (the worker's events)."""
        if not data:
            return None
        return cls(
            type=str(data.get("type", "")),
            message=str(data.get("message", "")),
            chain=tuple(data.get("chain", ())),
            chain_messages=tuple(data.get("chain_messages", ())),
            traceback_tail=str(data.get("traceback_tail", "")),
        )

    def all_text(self) -> str:
        """Every message in the chain, joined, for pattern matching."""
        return "\n".join((self.message, *self.chain_messages))


@dataclass(frozen=True)
class StageOutcome:
    """What one stage did: status, time, the error if any, and facts it gathered."""

    stage: Stage
    status: Status
    seconds: float = 0.0
    error: ErrorInfo | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class FixCheck:
    """The result of re-running the pipeline with a fix applied."""

    reached: Stage | None  # last stage that passed; PARITY means fully healthy
    status: Status  # the status of the pipeline run as a whole
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    seconds: float = 0.0
    detail: str = ""
    # The fixed model the re-run exported (in the run's work folder), for --write-fix.
    artifact: str | None = None
    # The stage that failed; None when every stage passed (a fix can still be wrong then: detail).
    failed_at: Stage | None = None
    # The code of the error that remains (OD601, OD210, OD902 ...); None when there is none.
    problem: str | None = None
    # False when a precision-changing rewrite passed every stage but had no reference numbers.
    numbers_checked: bool = True
    # The fixed model against each requested deployment target: (target, verdict) pairs, e.g.
    # ("ort-cpu", "parity"), ("tensorrt", "refuses 2 nodes") (docs/targets.md).
    targets: tuple[tuple[str, str], ...] = ()
    # The input sizes the fixed model passed at besides the example's ("x=4x3x16"), in order.
    sizes: tuple[str, ...] = ()

    @property
    def failure(self) -> str:
        """Where a tried fix failed: the stage, or what was still wrong when every stage passed."""
        if self.status is Status.TIMED_OUT or self.problem == "OD902":
            # Killed at the deadline: nothing is known to be wrong with the fix itself.
            where = f" during {self.failed_at.value}" if self.failed_at is not None else ""
            return f"ran out of time{where} (--timeout)"
        if self.failed_at is not None:
            return f"failed at {self.failed_at.value}"
        if not self.numbers_checked:
            return "every stage passes, numbers not checked"
        if self.problem and self.problem.startswith("OD9"):  # the worker died between stages
            return f"did not complete ({self.problem})"
        return f"every stage passes, but {self.problem}" if self.problem else "did not complete"

    @property
    def works(self) -> bool:
        """The fixed model passed every stage its target has (PARITY for scripts, ORT_RUN for files)."""
        return self.status is Status.PASSED


@dataclass(frozen=True)
class Fix:
    """A candidate remedy: a title, a snippet tailored to the finding, and maybe its check."""

    kind: str
    title: str
    snippet: str = ""
    applicability: Applicability = Applicability.DISPLAY_ONLY
    cost: str = ""
    check: FixCheck | None = None
    # What the worker applies to verify the fix (onnxdoctor.recipe); None: shown, never tried.
    recipe: Recipe | None = None
    # A chain's steps' kinds, in the order they were found (("exporter", "decompose")); () otherwise.
    steps: tuple[str, ...] = ()

    @property
    def verified(self) -> bool | None:
        """None until tried; then whether the fixed model reached parity."""
        return None if self.check is None else self.check.works


@dataclass(frozen=True)
class IrTooNew:
    """OD403's figures: the model's IR version and the newest the runtime reads."""

    model_ir: int
    max_ir: int


@dataclass(frozen=True)
class DynamicShapesKeys:
    """OD208 with mis-keyed dynamic_shapes: forward()'s argument names and the keys given."""

    wanted: tuple[str, ...]
    given: tuple[str, ...]


@dataclass(frozen=True)
class SecondInputs:
    """OD210 checked again at other input sets: which ones (or the one that differs), and the verdict."""

    source: str
    matched: bool
    max_abs_diff: float | None = None
    # Where a difference first arises (a submodule and its op), when it could be traced.
    where: str | None = None
    # Traced again at the differing inputs: True if that export matches there (the recorded
    # branch is the cause), False if it differs too (the frozen value is not), None if not tried.
    frozen_cause: bool | None = None


@dataclass(frozen=True)
class TargetGap:
    """What a deployment target's operator table asks of a node that the model does not give.

    `need`: "op" (the op is absent or marked unsupported), "types" (`have` is not among `allowed`),
    "constant" (an input the table needs constant is computed), "opset" (the table lists the op
    from `opset` on). `model_opset`: the model's default-domain opset.
    """

    target: str
    need: str
    allowed: tuple[str, ...] = ()
    have: tuple[str, ...] = ()
    opset: int | None = None
    model_opset: int | None = None


@dataclass(frozen=True)
class SizeCheck:
    """The exported model at one other set of input sizes, against eager PyTorch.

    `inputs`: (input name, shape) pairs; `status`: "passed", "failed" (a node failed or the numbers
    differ) or "refused" (ONNX Runtime refused the input's shape at the graph's boundary).
    """

    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    status: str
    max_abs_diff: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class FrozenSize:
    """A SHAPES finding's figures for the fix families: the dims to declare dynamic, as
    (input, dim, name, min, max) rows, the size sets checked, and the user's lines that turn a
    size into a Python value, as (source, kind, text)."""

    dims: tuple[tuple[str, int, str, int | None, int | None], ...] = ()
    sizes: tuple[tuple[tuple[str, tuple[int, ...]], ...], ...] = ()
    inputs: tuple[str, ...] = ()
    lines: tuple[tuple[str, str, str], ...] = ()
    exporter: str = ""
    # The dims were not declared at all (ONNX Runtime refused another input's size there): the
    # fix is to declare them, with the same exporter.
    undeclared: bool = False


# What a classifier read from a library's message, kept as data for the fix families.
FindingDetail = IrTooNew | DynamicShapesKeys | SecondInputs | TargetGap | FrozenSize


@dataclass(frozen=True)
class Finding:
    """One classified problem (or warning) with everything known about where it is."""

    code: str
    stage: Stage
    severity: Severity
    message: str
    op: str | None = None
    node: str | None = None
    source: str | None = None
    opset: int | None = None
    evidence: tuple[str, ...] = ()
    fixes: tuple[Fix, ...] = ()
    # Popular advice that does not apply to the installed versions, said plainly.
    notes: tuple[str, ...] = ()
    # Figures the classifier read, for the fix families (never parsed back out of `message`).
    detail: FindingDetail | None = None
    # Both names of the op at fault where the export's provenance knows them: the ONNX node's
    # `domain::op_type` (`TopK`) and the torch op it was exported from (`aten::topk`). `op` is the
    # one the finding is about; these let a reader find it in either world.
    onnx_op: str | None = None
    torch_op: str | None = None

    @property
    def op_label(self) -> str | None:
        """`op` as a reader sees it, with its other name where it has one: `aten::topk (ONNX TopK)`,
        `ScatterND (from aten::_unsafe_index_put)`."""
        if not self.op:
            return None
        if self.onnx_op and self.onnx_op != self.op and self.op == self.torch_op:
            return f"{self.op} (ONNX {self.onnx_op})"
        if self.torch_op and self.torch_op != self.op and not self.torch_op.startswith("prim::"):
            return f"{self.op} (from {self.torch_op})"
        return self.op


@dataclass(frozen=True)
class Diagnosis:
    """The whole result of `diagnose`: per-exporter stage ladders and findings."""

    target: str
    exporter: str | None
    stages: tuple[StageOutcome, ...]
    findings: tuple[Finding, ...]
    versions: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    # One onnxdoctor.targets.TargetResult per requested deployment target (empty: ort-cpu only).
    targets: tuple[Any, ...] = ()
    # The SHAPES stage: one SizeCheck per other input size checked (empty: not run or no sizes).
    shapes: tuple[SizeCheck, ...] = ()

    @property
    def healthy(self) -> bool:
        """True when every stage passed (or was skipped) and no finding is an error."""
        return not any(f.severity is Severity.ERROR for f in self.findings) and all(
            s.status in (Status.PASSED, Status.SKIPPED) for s in self.stages
        )


@dataclass(frozen=True)
class DiagnoseOptions:
    """What `diagnose` should do: the CLI's flags, once, as the library takes them."""

    exporter: str | None = None  # dynamo | torchscript | both | None (script's setting, else torch's)
    opset: int | None = None
    custom_op_libraries: tuple[str, ...] = ()
    atol: float = 1e-4
    rtol: float = 1e-3
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    max_input_bytes: int = 256 * 1024 * 1024  # generated inputs of a .onnx target, all together
    timeout: float = 600.0
    fix: bool = True
    all_fixes: bool = False
    max_fix_checks: int = 4
    # Seconds in which fix checks and the fix-chain search may start new runs (--fix-budget).
    fix_budget: float = 120.0
    # Seconds one fix check may run (--fix-timeout); None: a multiple of the main run's stages.
    fix_timeout: float | None = None
    # Seconds the search for the first diverging value of a mismatch may take (--localize-budget).
    localize_budget: float = 30.0
    skip_check: bool = False  # go from LOAD straight to ORT_LOAD (the caller checked already)
    targets: tuple[str, ...] = ()  # --target names (docs/targets.md); empty: the script's, else ort-cpu
    # Cap on each worker's memory in MB (--max-memory-mb); None: three quarters of physical memory.
    max_memory_mb: int | None = None
    # When the whole command must end (time.monotonic()); None: --timeout from when diagnose starts.
    deadline: float | None = None
    # The file holding the user's model code when the target is a script onnxdoctor generated (the
    # Python API, docs/api.md): findings' source lines point there. None: the target itself.
    source_file: str | None = None
    # The SHAPES stage (--no-shapes: False); `size_sets`: --shapes, each {input name: shape}, the
    # sizes checked instead of the ones the stage chooses (input_shapes above is for .onnx files).
    check_shapes: bool = True
    size_sets: tuple[dict[str, list[int]], ...] = ()


def drawn_in_distribution(stages: Iterable[StageOutcome]) -> str:
    """How a model that draws random numbers matched PyTorch (its PARITY stage compared the
    outputs over many runs, worker/randomness.py); empty for any other model."""
    parity = next((o for o in stages if o.stage is Stage.PARITY and o.status is Status.PASSED), None)
    drawn = parity.facts.get("random") if parity else None
    if not isinstance(drawn, dict) or not drawn.get("matched"):
        return ""
    ops = ", ".join(str(op) for op in drawn.get("ops") or ())
    return (f"it draws random numbers ({ops}), which ONNX Runtime never draws as PyTorch does, so the outputs "
            f"were compared over {drawn.get('runs')} runs each: permutation test p={float(drawn.get('p_value') or 1.0):.2g}")
