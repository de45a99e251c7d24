"""Building findings: the code table's severity, evidence lines from exception chains, user source lines."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from onnxdoctor.analysis.normalize import normalize_message
from onnxdoctor.codes import get_code
from onnxdoctor.model import (
    ErrorInfo,
    Finding,
    FindingDetail,
    Severity,
    Stage,
    StageOutcome,
)
from onnxdoctor.protocol import NodeProvenance, provenance_table


def make_finding(
    code: str,
    stage: Stage,
    message: str,
    *,
    op: str | None = None,
    node: str | None = None,
    source: str | None = None,
    opset: int | None = None,
    evidence: tuple[str, ...] = (),
    detail: FindingDetail | None = None,
) -> Finding:
    entry = get_code(code)
    return Finding(
        code=code,
        stage=stage,
        severity=entry.severity,
        message=message,
        op=op,
        node=node,
        source=source,
        opset=int(opset) if opset is not None else None,
        evidence=evidence,
        detail=detail,
    )


def error_evidence(error: ErrorInfo | None, base_dir: str | None) -> tuple[str, ...]:
    if error is None:
        return ()
    # The innermost cause names the problem most directly (DispatchError inside ConversionError).
    items: list[str | None] = []
    for kind, message in reversed(list(zip(error.chain[1:], error.chain_messages))):
        items.append(_evidence_line(kind, normalize_message(message, base_dir=base_dir, limit=800)))
    items.append(_evidence_line(error.type, normalize_message(error.message, base_dir=base_dir, limit=1500)))
    found = [item for item in items if item is not None][:4]
    where = library_frame(error)
    if where and found:
        # Second line of the first item, so that the short console view still shows it.
        head, _, rest = found[0].partition("\n")
        found[0] = f"{head}\n  at {where}" + (f"\n{rest}" if rest else "")
    elif where:
        found.append(f"at {where}")
    return tuple(found)


# The worker appends the innermost model-library frame to the traceback tail in Python's own
# traceback format, under this header (onnxdoctor.worker.tracebacks.LIBRARY_FRAME_HEADER).
_LIBRARY_FRAME = re.compile(
    r"The model library's frame it broke in:\n  File \"([^\"]+)\", line (\d+), in ([^\n]+)\n(?:    ([^\n]*))?"
)


def library_frame(error: ErrorInfo) -> str | None:
    """'transformers/models/bert/modeling_bert.py:101, in forward: <line>' when a model library
    (not torch, not the user's files) raised, else None."""
    match = _LIBRARY_FRAME.search(error.traceback_tail)
    if match is None:
        return None
    path, line, function, code = match.groups()
    parts = path.replace("\\", "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            parts = parts[len(parts) - parts[::-1].index(marker):]
            break
    text = f"{'/'.join(parts)}:{line}, in {function.strip()}"
    return f"{text}: {code.strip()[:200]}" if code and code.strip() else text


def _short_type(qualified: str) -> str:
    module, _, name = qualified.rpartition(".")
    return name if module in ("builtins", "") else qualified


def _evidence_line(kind: str, message: str) -> str | None:
    # The worker's own StageFailed carries onnxdoctor's message, already the finding's: evidence is
    # what the libraries said.
    if kind.startswith("onnxdoctor."):
        return None
    return f"{_short_type(kind)}: {message}"


def source_from_text(text: str, base_dir: str | None) -> str | None:
    for match in _SOURCE_RANGE.finditer(text):
        path = match.group(1)
        if "site-packages" in path or "/torch/" in path:
            continue
        return f"{path.rsplit('/', 1)[-1]}:{match.group(2)}"
    return None


_SOURCE_RANGE = re.compile(r"#\s*([\w.\-/]+\.py):(\d+):\d+")


def finding_from_record(record: dict[str, Any], base_dir: str | None) -> Finding:
    code = record["code"]
    return Finding(
        code=code,
        stage=get_code(code).stage,
        severity=Severity(record.get("severity") or get_code(code).severity.value),
        message=normalize_message(record.get("message", ""), base_dir=base_dir, limit=500),
        op=record.get("op"),
        node=record.get("node"),
        source=record.get("source"),
        opset=record.get("opset"),
        evidence=tuple(normalize_message(e, base_dir=base_dir, limit=1500) for e in record.get("evidence", ())),
    )


def with_node_facts(findings: list[Finding], by_stage: dict[Stage, StageOutcome]) -> list[Finding]:
    """Give a finding about an exported node the user's line that produced it (dynamo records it)
    and both names of its op: the ONNX node's and the torch op's it was exported from."""
    export = by_stage.get(Stage.EXPORT)
    sources = (export.facts.get("node_sources") if export else None) or {}
    table = provenance_table(export.facts) if export else {}
    placed = []
    for f in findings:
        if f.node and not f.source and f.node in sources:
            f = replace(f, source=sources[f.node])
        placed.append(replace(f, **_op_names(f, table.get(f.node) if f.node else None)))
    return placed


def _op_names(finding: Finding, row: NodeProvenance | None) -> dict[str, str | None]:
    """`onnx_op` and `torch_op` for a finding, from its node's provenance row where there is one,
    else from `op` where its spelling says which world it is from (a custom domain's `acme::Op`
    could be either, and is left alone)."""
    op = finding.op or ""
    # ONNX Runtime names the kernel it ran, which its graph optimizer may have fused from the
    # node ("running FusedConv node. Name:'/f1/Conv'"): the named node's own row says its op.
    fused = (finding.stage is Stage.ORT_RUN and row is not None and op.startswith("Fused")
             and f"running {op} node" in finding.message)
    if row is not None and op and op not in (row.op, row.torch_op) and _bare(op) != _bare(row.torch_op) and not fused:
        row = None  # the node is where the finding shows, not the op it is about (a Function)
    onnx_op = finding.onnx_op or (row.op if row is not None else None)
    torch_op = finding.torch_op or (row.torch_op if row is not None and row.torch_op else None)
    if onnx_op is None and op and "::" not in op and finding.stage is not Stage.EXPORT:
        onnx_op = op
    if torch_op is None and op.startswith(("aten::", "prim::", "quantized::", "torchvision::")):
        torch_op = op
    return {"onnx_op": onnx_op, "torch_op": _USER_OPS.get(torch_op or "", torch_op)}


# prim ops the exporter's graph passes make out of an op the user called: the tracer records
# `x.chunk(2, dim=1)` as aten::chunk and a ListUnpack, which a pass of the export fuses into
# one prim::ConstantChunk before the symbolics run (so an error names the prim op).
_USER_OPS = {"prim::ConstantChunk": "aten::chunk"}


def _bare(op: str) -> str:
    """`aten::index` for `aten::index.Tensor`: an overload names the same op."""
    return op.split(".", 1)[0] if "::" in op else op
