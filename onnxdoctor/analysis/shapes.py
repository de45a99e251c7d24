"""The SHAPES stage's records judged: one SizeCheck per checked size, and OD8xx findings.

Pure: the worker's facts in (worker/shapes.py writes them), findings out. Whether a failing size
is an error depends on what the model claimed: a dimension declared dynamic (by the script, or
symbolic in the ONNX input) must hold at other sizes; one nobody declared is a fixed-size export,
which may be what the user wants (a warning).
"""

from __future__ import annotations

import re
from typing import Any

from onnxdoctor.analysis.cautions import number_reads
from onnxdoctor.analysis.findings import make_finding, with_node_facts
from onnxdoctor.analysis.sources import function_span, split_source
from onnxdoctor.model import Finding, FrozenSize, SizeCheck, Stage, StageOutcome, Status
from onnxdoctor.protocol import NodeProvenance, provenance_table

# Larger sizes than any the stage checked are allowed by a generated Dim up to this factor.
_BOUND_FACTOR = 16


def size_checks(outcome: StageOutcome | None) -> tuple[SizeCheck, ...]:
    """The SHAPES stage's sizes, one SizeCheck each (empty when the stage did not run)."""
    if outcome is None or outcome.status is not Status.PASSED:
        return ()
    checks = []
    for entry in outcome.facts.get("sizes") or ():
        if not isinstance(entry, dict) or not isinstance(entry.get("inputs"), dict):
            continue
        inputs = tuple((str(n), tuple(int(v) for v in shape)) for n, shape in entry["inputs"].items())
        diff = entry.get("max_abs_diff")
        checks.append(SizeCheck(inputs, str(entry.get("status", "failed")),
                                float(diff) if isinstance(diff, (int, float)) else None,
                                str(entry["error"]) if entry.get("error") else None))
    return tuple(checks)


def size_label(inputs: dict[str, list[int]] | tuple[tuple[str, tuple[int, ...]], ...]) -> str:
    """`x=4x3x16 mask=4x16 n=scalar`: a size set as one short token per input."""
    items = inputs.items() if isinstance(inputs, dict) else inputs
    return " ".join(f"{n}={'x'.join(str(v) for v in shape) or 'scalar'}" for n, shape in items)


def classify_shapes(shapes: StageOutcome | None, outcomes: list[StageOutcome],
                    base_dir: str | None = None) -> list[Finding]:
    """OD801-OD804 (and OD899) for a SHAPES stage record; [] when every size passed. `base_dir`:
    the model's folder, where the lines the tracer warned about are read."""
    if shapes is None:
        return []
    if shapes.status is not Status.PASSED:
        error = shapes.error.message if shapes.error else shapes.status.value
        return [make_finding("OD899", Stage.SHAPES, f"the check at other input sizes did not complete: {error}"[:400])]
    facts = shapes.facts
    found: list[Finding] = []
    if facts.get("unknown_inputs"):
        names = ", ".join(facts["unknown_inputs"])
        known = ", ".join(facts.get("example") or {})
        found.append(make_finding("OD899", Stage.SHAPES, f"--shapes names no input of the model: {names} (its inputs: {known})"))
    failing = [e for e in facts.get("sizes") or () if isinstance(e, dict) and e.get("status") != "passed"]
    if not failing:
        return found
    by_code: dict[str, list[dict[str, Any]]] = {}
    for entry in failing:
        by_code.setdefault(_code_for(entry, facts), []).append(entry)
    export = next((o for o in outcomes if o.stage is Stage.EXPORT), None)
    for code in sorted(by_code):
        found.append(_finding(code, by_code[code], facts, export, base_dir))
    return with_node_facts(found, {o.stage: o for o in outcomes})


def _declared(facts: dict[str, Any]) -> set[tuple[str, int]]:
    return {(d["input"], int(d["dim"])) for d in facts.get("declared") or () if isinstance(d, dict)}


def _onnx_dynamic(facts: dict[str, Any], name: str, dim: int) -> bool:
    dims = (facts.get("onnx_inputs") or {}).get(name) or []
    return dim < len(dims) and not isinstance(dims[dim], int)


def _inferred(facts: dict[str, Any], name: str, dim: int) -> list[Any] | None:
    value = ((facts.get("inferred_ranges") or {}).get(name) or {}).get(str(dim))
    return value if isinstance(value, list) and len(value) == 2 else None


def _specialised(facts: dict[str, Any], name: str, dim: int) -> bool:
    """A declared dim the dynamo exporter fixed to one value (a guard), or left static."""
    if facts.get("exporter") != "dynamo" or (name, dim) not in _declared(facts):
        return False
    bounds = _inferred(facts, name, dim)
    return (bounds is not None and bounds[0] is not None and bounds[0] == bounds[1]) or not _onnx_dynamic(facts, name, dim)


def _code_for(entry: dict[str, Any], facts: dict[str, Any]) -> str:
    declared = _declared(facts)
    claimed = [(n, d) for n, d in entry.get("varied") or () if (n, d) in declared or _onnx_dynamic(facts, n, d)]
    if not claimed:
        return "OD801"
    if any(_specialised(facts, n, d) for n, d in claimed):
        return "OD804"
    return "OD803" if entry.get("kind") == "mismatch" else "OD802"


def _dim_text(name: str, dim: int, facts: dict[str, Any] | None = None) -> str:
    """`x dim 0 (batch)`, or the name the script declared the dim by (`T`, a spiking model's time
    steps, is dim 0 too)."""
    declared = next((str(d["name"]) for d in (facts or {}).get("declared") or ()
                     if isinstance(d, dict) and d.get("input") == name and d.get("dim") == dim and d.get("name")), None)
    return f"{name} dim {dim}" + (f" ({declared})" if declared else " (batch)" if dim == 0 else "")


def _finding(code: str, entries: list[dict[str, Any]], facts: dict[str, Any], export_outcome: StageOutcome | None,
             base_dir: str | None) -> Finding:
    export = export_outcome.facts if export_outcome else {}
    example = facts.get("example") or {}
    varied = sorted({(n, int(d)) for e in entries for n, d in e.get("varied") or ()})
    sizes = ", ".join(size_label(e["inputs"]) for e in entries)
    frozen = facts.get("frozen_nodes") or []
    node = next((e.get("node") for e in entries if e.get("node")), None)
    op = next((e.get("op") for e in entries if e.get("op")), None)
    if node is None and frozen:
        node, op = frozen[0].get("node"), frozen[0].get("op")
    sources = export.get("node_sources") or {}
    table = provenance_table(export)
    failing = None  # the node that fails, where another is named
    reads: list[tuple[str, str]] = []  # the lines where the tracer read the sizes that node uses
    consumer = (_number_consumer(export_outcome, table, base_dir)
                if code == "OD802" and not frozen and op in _OPERAND_SHAPES else None)
    if consumer is not None and node and consumer[0].node != node and _before(consumer[0].node, node, table):
        # The node that fails on its operands' shapes (an Add of two maps that no longer line up)
        # is downstream of one that sized its input by numbers the tracer read (a Pad's amounts):
        # that one is named. A node failing on its own shape argument (a Reshape) is named itself.
        failing = f"{op} node {node}"
        row, reads = consumer
        node, op = row.node, row.op.split("::")[-1]
    source = sources.get(node) if node else None
    if node and not source and node in table:
        source = table[node].source or None
    lines = [line for line in facts.get("size_code") or () if isinstance(line, dict)]
    lines = [{"source": line, "kind": "int", "text": f"the tracer read a size as a Python number ({read})"}
             for line, read in reads] + lines
    held = next((f.get("value") for f in frozen if f.get("node") == node), None)
    where = f"{op} node {node}" if node else "the graph"
    example_text = ", ".join(f"{n} {shape}" for n, shape in example.items())
    if code == "OD801":
        fixed = ", ".join(f"{n} dim {d} = {example[n][d]}" for n, d in varied if n in example)
        batch = next((example[n][0] for n, d in varied if d == 0 and n in example), None)
        # "only batch 1" where the batch is all that was varied; a page frozen at 1024x1024 too
        # is the example's sizes.
        head = (f"this model takes only batch {batch}" if batch is not None and all(d == 0 for _n, d in varied)
                else "this model takes only its example's sizes")
        message = (f"{head} ({fixed}): ONNX Runtime refuses {sizes}, which PyTorch runs; "
                   "nothing was declared dynamic")
    elif code == "OD804":
        dims = [(n, d) for n, d in varied if _specialised(facts, n, d)]
        parts = []
        for n, d in dims:
            bounds = _inferred(facts, n, d)
            parts.append(f"{_dim_text(n, d, facts)} to {example.get(n, [None] * (d + 1))[d]}"
                         + (f" (torch.export's range {bounds[0]}..{bounds[1]})" if bounds else ""))
        message = (f"declared dynamic, but the dynamo exporter specialised {', '.join(parts)}: a guard at export "
                   f"fixed it; {where} fails at {sizes}")
    elif code == "OD803":
        diff = max((e.get("max_abs_diff") or 0.0) for e in entries)
        ranges = [f"{_dim_text(n, d, facts)} only for {b[0]}..{b[1]}" for n, d in varied
                  if (b := _inferred(facts, n, d)) is not None and b[1] is not None]
        # An output of another shape is what differs, whatever the other outputs' values do (a
        # max abs diff of 6e-8 beside a mask count frozen at 3 says nothing): the shapes are said.
        shaped = next((str(e.get("error")) for e in entries
                       if e.get("error") and (not e.get("max_abs_diff") or " shape " in str(e.get("error")))), None)
        told = f"({shaped})" if shaped else f"(max abs diff {diff:.3g})"
        message = (f"at {sizes} ONNX Runtime runs without an error and differs from PyTorch "
                   f"{told}, though the ONNX input declares the size dynamic"
                   + (f"; it first differs at {where}" if node else ""))
        if ranges:
            message += f"; torch.export kept {', '.join(ranges)} (a guard on the size at export)"
    else:
        dims = ", ".join(_dim_text(n, d, facts) for n, d in varied)
        holds = f" holds the example's size {held}" if held is not None else " was traced at the example's size"
        if failing:
            read_at = ", ".join(line for line, _read in reads[:3])
            holds = f" uses values computed from sizes the tracer read as Python numbers ({read_at}), frozen at the example's"
        message = (f"{dims} is declared dynamic, but {where}{holds}: "
                   + (f"{failing} then fails at {sizes}" if failing else f"it fails at {sizes}")
                   + f" (example: {example_text})")
    evidence = [f"checked: {size_label(e['inputs'])} {e.get('status')}" + (f": {e['error']}" if e.get("error") else "")
                for e in entries][:3]
    evidence += [f"frozen size {f.get('value')} in {f.get('op')} node {f.get('node')}" for f in frozen
                 if f.get("node") != node][:2]
    evidence += [f"{line['source']}: {line['text']}" for line in lines][:3]
    if code == "OD803" and not source:
        branch = next((line for line in lines if line.get("kind") == "branch"), None)
        source = branch["source"] if branch else None
    guard = next((line for line in lines if line.get("kind") in ("int", "len", "numpy", "range", "branch")), None)
    if code == "OD804" and guard is not None:
        # The guard's line (what fixed the size), rather than the node's that then holds it.
        if source and node:
            evidence.append(f"{op} node {node} comes from {source}")
        source = guard["source"]
    if not source and lines:
        source = lines[0]["source"]
    return make_finding(code, Stage.SHAPES, message, op=op, node=node, source=source, evidence=tuple(evidence),
                        detail=_detail(code, varied, facts, entries))


# ONNX ops that fail at run time on their operands' shapes not matching (broadcasting, joining),
# not on a shape argument of their own.
_OPERAND_SHAPES = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Where", "Concat", "Equal", "Greater", "Less",
                             "And", "Or", "Max", "Min", "Sum", "Mean", "MatMul"})
# ONNX ops that resize their input by amounts given to them: with the amounts frozen they return
# another size than eager without failing, and only a later node's operands stop lining up (a
# Reshape or a tensor made from a shape fails, or is the size, itself).
_RESIZING = frozenset({"Pad", "Resize", "Upsample", "Slice", "Tile", "Expand"})


def _before(first: str, then: str, table: dict[str, NodeProvenance]) -> bool:
    """Whether node `first` comes before node `then` in export order (a node the table does not
    hold, such as one ONNX Runtime made, counts as after every node it holds)."""
    order = list(table)
    return first in table and (then not in table or order.index(first) < order.index(then))


def _number_consumer(export: StageOutcome | None, table: dict[str, NodeProvenance],
                     base_dir: str | None) -> tuple[NodeProvenance, list[tuple[str, str]]] | None:
    """The first resizing node, in export order, written from the lines after those where the
    TorchScript tracer warned it read a tensor as a Python number, in the same function (a Pad
    whose amounts come from `int(math.ceil(h / 32) * 32)`), with those reads; None where there is
    none."""
    if export is None or not base_dir or not table:
        return None
    reads = number_reads(export.warnings, base_dir)
    first = split_source(reads[0][0]) if reads else None
    span = function_span(reads[0][0], base_dir) if reads else None
    if first is None or span is None:
        return None
    held = [(line, read) for line, read in reads
            if (at := split_source(line)) is not None and at[0] == first[0] and span[0] <= at[1] <= span[1]]
    last = max(split_source(line)[1] for line, _read in held)  # type: ignore[index]
    rows = list(table.values())
    for row in rows:
        at = split_source(row.source)
        if at is not None and at[0] == first[0] and last <= at[1] <= span[1] \
                and row.op.split("::")[-1] in _RESIZING:
            # The call's result, not the first of the nodes it wrote (F.pad's ConstantOfShape
            # building the amounts, before the Pad).
            same = [r for r in rows if row.call >= 0 and r.call == row.call and r.function == row.function
                    and r.source == row.source]
            return (same[-1] if same else row), held
    return None


def _detail(code: str, varied: list[tuple[str, int]], facts: dict[str, Any],
            entries: list[dict[str, Any]]) -> FrozenSize:
    """What the fix families need: the dims to declare (named, bounded by the sizes seen)."""
    example = facts.get("example") or {}
    declared = {(d["input"], int(d["dim"])): d for d in facts.get("declared") or () if isinstance(d, dict)}
    groups = _groups(facts, varied)
    rows = []
    checked = [e for e in facts.get("sizes") or () if isinstance(e, dict)]
    for members, name in groups:
        seen = [example[n][d] for n, d in members if n in example]
        seen += [e["inputs"][n][d] for e in checked for n, d in members if n in e["inputs"]]
        first = declared.get(members[0])
        low = first.get("min") if first else None
        high = first.get("max") if first else None
        for n, d in members:
            rows.append((n, d, first["name"] if first else name, low if low is not None else 1,
                         high if high is not None else max(seen or [1]) * _BOUND_FACTOR))
    sizes = tuple(tuple((n, tuple(int(v) for v in s)) for n, s in e["inputs"].items()) for e in checked)
    lines = tuple((str(line.get("source", "")), str(line.get("kind", "")), str(line.get("text", "")))
                  for line in facts.get("size_code") or () if isinstance(line, dict))
    return FrozenSize(dims=tuple(rows), sizes=sizes, inputs=tuple(example), lines=lines,
                      exporter=str(facts.get("exporter", "")))


def _groups(facts: dict[str, Any], varied: list[tuple[str, int]]) -> list[tuple[list[tuple[str, int]], str]]:
    """Varied dims grouped as they were varied together (a probe's group, a shared Dim), named."""
    groups: list[tuple[list[tuple[str, int]], str]] = []
    placed: set[tuple[str, int]] = set()
    for probe in facts.get("probes") or ():
        members = [(str(n), int(d)) for n, d in probe.get("dims") or () if (str(n), int(d)) in varied]
        members = [m for m in members if m not in placed]
        if probe.get("accepted") and members:
            groups.append((members, _name_for(members)))
            placed.update(members)
    for member in varied:
        if member not in placed:
            groups.append(([member], _name_for([member])))
            placed.add(member)
    return groups


def _name_for(members: list[tuple[str, int]]) -> str:
    name, dim = members[0]
    if any(d == 0 for _n, d in members):
        return "batch"
    return re.sub(r"\W", "_", f"{name}_{dim}")
