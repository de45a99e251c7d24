"""Plain records of what a deployment target said about a model (no runtime imports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from onnxdoctor.model import Finding


class NodeStatus(str, Enum):
    """A static table's verdict on one node."""

    SUPPORTED = "supported"
    PARTLY = "partly"  # the op is listed, but the node violates one of its restrictions
    UNSUPPORTED = "unsupported"
    UNKNOWN = "unknown"  # the table cannot tell (types or shapes not known, wording not checkable)
    # The target's provider has no kernel for the node; ONNX Runtime runs it on its CPU provider
    # instead, so the model still runs, split between devices (ort-cuda, docs/targets.md).
    FALLBACK = "fallback"


@dataclass(frozen=True)
class NodeVerdict:
    """One node's verdict with its reason (the table row's own words where it has them)."""

    node: str
    op: str  # "Relu", or "com.microsoft::Inverse" for a non-default domain
    status: NodeStatus
    reason: str = ""
    source: str | None = None
    # What the node lacks, as data for the target-driven fixes ("op", "types", "constant",
    # "opset"; None when nothing mechanical answers it), with the table's allowed types or opset.
    need: str | None = None
    allowed: tuple[str, ...] = ()
    have: tuple[str, ...] = ()
    opset: int | None = None


@dataclass(frozen=True)
class TargetResult:
    """One target's verdict on one exported model.

    Attributes:
        target: the target's name (`openvino`, `tensorrt`, ...).
        kind: "runtime" (a real run) or "table" (a static verdict from a published table: not a run).
        reached: the last step that passed: for a runtime "read", "query", "compile", "run",
            "parity"; for a table "table" when no node is unsupported; None when nothing passed.
        status: "passed", "failed", "skipped" (runtime missing, nothing to check) or "static".
        counts: node counts per NodeStatus value (tables), or {"unsupported": n} for runtimes.
        findings: OD7xx findings, each naming the target.
        note: one line for the reader (how to install, the table's source and version).
    """

    target: str
    kind: str
    reached: str | None
    status: str
    counts: dict[str, int] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    verdicts: tuple[NodeVerdict, ...] = ()
    note: str = ""
    seconds: float = 0.0
    max_abs_diff: float | None = None
    # What the check added to the run's wall time (OpenVINO runs beside ONNX Runtime's stages).
    added_seconds: float | None = None
    # A static table's document: repository, path, revision and date (tables.source_line).
    document: str = ""
