"""The `openvino` deployment target: read, compile and run the exported model in OpenVINO.

OpenVINO's ONNX frontend lists every op it cannot convert at once ("No conversion rule found for
operations: com.microsoft.Inverse, my.ns.FooBar"); each becomes one record naming the op and the
nodes that use it. Imported only inside the worker (docs/targets.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import threading
import time
from pathlib import Path
from typing import Any

_NO_RULE = re.compile(r"No conversion rule found for operations:\s*(.+)")
# A known op whose conversion failed: "-- Pad-20 with a message:", then the node and the reason.
_FAILED_OP = re.compile(r"^-- ([\w.]+)-\d+ with a message:")
_FAILED_NODE = re.compile(r"'<Node\(([\w.]+)\): ([^>]*)>'")
# OpenVINO picks bf16 on CPUs that have it; f32 keeps a parity verdict about the conversion, the
# same on every machine (docs/targets.md). The check runs one inference: LATENCY builds one stream
# instead of one per core group, which compiles faster (mlp.py: 80-100 ms against 111-114 ms).
COMPILE_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def unconverted_ops(message: str) -> list[str]:
    """The ops OpenVINO's conversion report names, as written there (`com.microsoft.Inverse`)."""
    ops: list[str] = []
    for line in message.splitlines():
        m = _NO_RULE.search(line)
        if m:
            ops += [o.strip() for o in m.group(1).split(",") if o.strip()]
    return ops


def failed_conversions(message: str) -> list[dict[str, str]]:
    """Ops OpenVINO knows but could not convert, with the node and OpenVINO's reason.

    OpenVINO's report holds one block per op: `-- Pad-20 with a message:`, `While validating ONNX
    node '<Node(Pad): node_pad>': ...`, then the reason (`Unsupported padding mode: [wrap]`).
    An op that failed only because its input comes from a failed op is left out when a cause is
    named.
    """
    found: list[dict[str, str]] = []
    block: dict[str, str] | None = None
    for line in message.splitlines():
        m = _FAILED_OP.match(line.strip())
        if m:
            block = {"op": m.group(1), "node": "", "reason": "", "knock_on": ""}
            found.append(block)
            continue
        if block is None:
            continue
        if not line.strip() or line.strip().startswith(("Summary:", "-- ")):
            block = None
            continue
        if "NotSupportedONNXNode" in line:
            block["knock_on"] = "yes"  # its input comes from an op that failed: not a cause itself
        node = _FAILED_NODE.search(line)
        if node and not block["node"]:
            block["node"] = node.group(2)
        elif not line.startswith(("Exception from", "Check '", "While validating")):
            block["reason"] = (block["reason"] + " " + line.strip()).strip()
    causes = [b for b in found if not b["knock_on"]]
    return [{k: v for k, v in b.items() if k != "knock_on"} for b in (causes or found)]


def _nodes_of(model: Any, reported: str) -> list[dict[str, str]]:
    """Nodes of the ONNX model whose `domain.op_type` (or bare op_type) is `reported`."""
    found = []
    for node in model.graph.node:
        domain = node.domain if node.domain not in ("", "ai.onnx") else ""
        name = f"{domain}.{node.op_type}" if domain else node.op_type
        if reported in (name, node.op_type, f"ai.onnx.{node.op_type}"):
            found.append({"op": f"{domain}::{node.op_type}" if domain else node.op_type, "node": node.name})
    return found or [{"op": reported, "node": ""}]


_IMPORTING: threading.Thread | None = None


def import_in_background() -> None:
    """Start importing OpenVINO (about 0.15 s) while the worker exports and runs ONNX Runtime.

    Called once torch is imported (the export stage), so the two imports share nothing still
    loading; run_openvino waits for it. An import that fails here fails again there, with its error.
    """
    global _IMPORTING
    if _IMPORTING is not None or importlib.util.find_spec("openvino") is None:
        return

    def load() -> None:
        with contextlib.suppress(Exception):
            import openvino  # noqa: F401

    _IMPORTING = threading.Thread(target=load, name="onnxdoctor-openvino-import", daemon=True)
    _IMPORTING.start()


def run_openvino(
    onnx_path: str,
    model: Any,
    feeds: list[Any] | None,
    reference: list[Any] | None,
    atol: float,
    rtol: float,
) -> dict[str, Any]:
    """One OpenVINO check as plain data: the step reached, unconverted ops, parity figures.

    Args:
        onnx_path: the exported (or given) model file, already vetted by the pipeline.
        model: the same model as an onnx.ModelProto, to name the nodes of unconverted ops.
        feeds: numpy inputs in the model's input order; None skips running.
        reference: the outputs to compare with (PyTorch's); None skips the comparison.
    """
    started = time.perf_counter()
    record: dict[str, Any] = {"event": "target", "target": "openvino", "reached": None,
                              "status": "failed", "unconverted": [], "error": ""}
    if _IMPORTING is not None:
        _IMPORTING.join()
    try:
        import openvino as ov
    except Exception as exc:  # not installed, or broken: the target is skipped with a hint
        record.update(status="skipped", error=f"openvino is not importable ({type(exc).__name__}: {exc})")
        return record
    record["version"] = str(getattr(ov, "__version__", ""))
    core = ov.Core()
    try:
        ov_model = core.read_model(str(Path(onnx_path)))
    except Exception as exc:
        text = str(exc)
        ops = unconverted_ops(text)
        record["unconverted"] = [n for op in ops for n in _nodes_of(model, op)]
        record["failed"] = first_failures(model, [_named(model, item) for item in failed_conversions(text)])
        record["error"] = _last_lines(text)
        record["step"] = "read"
        return with_seconds(record, started)
    record["reached"] = "read"
    try:
        # query_model costs as much as compiling (about half of OpenVINO's check, measured) and
        # placed every op of every model tried: it is asked only when compiling fails, where the
        # nodes it does not place help say why.
        compiled = core.compile_model(ov_model, "CPU", COMPILE_CONFIG)
        record["reached"] = "compile"
    except Exception as exc:
        record.update(error=_last_lines(str(exc)), step="compile", error_node=error_node(model, str(exc)))
        with contextlib.suppress(Exception):
            placed = core.query_model(ov_model, "CPU")
            names = {op.get_friendly_name() for op in ov_model.get_ops()
                     if op.get_type_name() not in ("Parameter", "Result", "Constant")}
            record["not_placed"] = sorted(n for n in names if n not in placed)
        return with_seconds(record, started)
    if feeds is None:
        record["status"] = "passed"
        return with_seconds(record, started)
    try:
        results = compiled(list(feeds))
        outputs = [results[o] for o in compiled.outputs]
        record["reached"] = "run"
    except Exception as exc:
        record.update(error=_last_lines(str(exc)), step="run", error_node=error_node(model, str(exc)))
        return with_seconds(record, started)
    if reference is None:
        record["status"] = "passed"
        return with_seconds(record, started)
    from onnxdoctor.worker.parity import compare_outputs

    report = compare_outputs(reference, outputs, atol, rtol)
    record["max_abs_diff"] = report.get("max_abs_diff")
    if report["code"]:
        record.update(step="parity", error=report["message"].replace("ONNX Runtime", "OpenVINO"))
        return with_seconds(record, started)
    record.update(reached="parity", status="passed")
    return with_seconds(record, started)


_NODE_NAME = re.compile(r"node with name '([^']+)'")


def error_node(model: Any, message: str) -> dict[str, str] | None:
    """The ONNX node a compile or run error of the CPU plugin names (`TopK node with name 'x'`)."""
    names = set(_NODE_NAME.findall(message))
    # OpenVINO names a node by its ONNX name, or where it has none by an output's name, with the
    # output's port after a dot (a Multinomial writing the graph output `component`: "Multinomial
    # node with name 'component.0'", openvino#19344). In that order: TorchScript also names
    # outputs `input`, `input.3`, so a name is an output's as it stands before it is a port.
    ported = {name.rpartition(".")[0] for name in names if name.rpartition(".")[2].isdigit()}
    for matches in (lambda node: node.name in names, lambda node: bool(names & set(node.output)),
                    lambda node: bool(ported & set(node.output))):
        for node in model.graph.node:
            if matches(node):
                domain = node.domain if node.domain not in ("", "ai.onnx") else ""
                return {"op": f"{domain}::{node.op_type}" if domain else node.op_type, "node": node.name or node.output[0]}
    return None


def first_failures(model: Any, failed: list[dict[str, str]]) -> list[dict[str, str]]:
    """The failed conversions no other failed node feeds, in graph order.

    OpenVINO converts every node it can and lists each failure; a node downstream of a failed one
    often fails only for that (openvino#37772: a Conv after a `Pad(wrap)` it could not convert
    says "The input data tensor's rank has to be known"), in no message that says so. The
    graph says it: such a node is left out while a node upstream of it failed too."""
    nodes = list(model.graph.node)
    position = {node.name: i for i, node in enumerate(nodes) if node.name}
    producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}

    def node_of(name: str) -> int | None:
        # OpenVINO names a node by its ONNX name, or where it has none by an output's name.
        if not name:
            return None
        return position[name] if name in position else producer.get(name)

    failed_at = {node_of(item.get("node") or "") for item in failed} - {None}

    def fed_by_failure(index: int) -> bool:
        seen: set[int] = set()
        stack = [index]
        while stack:
            for value in nodes[stack.pop()].input:
                upstream = producer.get(value)
                if upstream is None or upstream in seen:
                    continue
                if upstream in failed_at:
                    return True
                seen.add(upstream)
                stack.append(upstream)
        return False

    own = [(item, node_of(item.get("node") or "")) for item in failed]
    first = [(item, index) for item, index in own if index is None or not fed_by_failure(index)]
    return [item for item, _ in sorted(first or own, key=lambda pair: len(nodes) if pair[1] is None else pair[1])]


def _named(model: Any, item: dict[str, str]) -> dict[str, str]:
    """A failed conversion with the op written as onnxdoctor writes ops and the ONNX node's name."""
    nodes = _nodes_of(model, item["op"])
    node = next((n for n in nodes if n["node"] == item["node"]), nodes[0] if len(nodes) == 1 else None)
    if node is None:
        return {"op": nodes[0]["op"], "node": item["node"], "reason": item["reason"]}
    return {**node, "reason": item["reason"]}


def with_seconds(record: dict[str, Any], started: float) -> dict[str, Any]:
    record["seconds"] = round(time.perf_counter() - started, 4)
    return record


def _last_lines(text: str, limit: int = 600) -> str:
    """OpenVINO's message without its C++ check locations, bounded."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("Exception from src", "Check '"))]
    return "\n".join(lines)[-limit:]


def check_state(kind: str, target: Path, state: dict[str, Any], atol: float, rtol: float) -> dict[str, Any] | None:
    """The OpenVINO record for the worker's main run, or None when no ONNX model was produced."""
    found = model_and_inputs(kind, target, state, "openvino")
    if found is None or isinstance(found, dict):
        return found
    path, model, feeds, reference = found
    return run_openvino(path, model, feeds, reference, atol, rtol)


def model_and_inputs(kind: str, target: Path, state: dict[str, Any], name: str) -> (
        tuple[str, Any, list[Any] | None, list[Any] | None] | dict[str, Any] | None):
    """What a second runtime checks: the model's path and proto, the example inputs in the model's
    input order, PyTorch's outputs; a skipped target record; or None without an ONNX model."""
    from onnxdoctor.onnxkit.files import external_refs
    from onnxdoctor.worker.facts import tensor_leaves
    from onnxdoctor.worker.runtime import to_numpy

    model = state.get("onnx_model")
    if model is None:
        return None
    if "onnx_path" in state:
        path = str(state["onnx_path"])
    elif external_refs(model):  # initializers, Constant nodes' tensors and subgraphs alike
        # ONNX Runtime and OpenVINO would read external data themselves; only onnx's vetted loader
        # may (README: reliability), so a file with external data is not handed over.
        return {"event": "target", "target": name, "reached": None, "status": "skipped",
                "unconverted": [], "error": "the model keeps its weights in external data files; "
                "this check runs only on self-contained models"}
    else:
        path = str(target)
    feeds: list[Any] | None = None
    reference: list[Any] | None = None
    if kind == "script" and "loaded" in state:
        loaded = state["loaded"]
        initializers = {t.name for t in model.graph.initializer}
        wanted = len([i for i in model.graph.input if i.name not in initializers])
        feeds = [to_numpy(t) for t in tensor_leaves((loaded.args, loaded.kwargs))][:wanted]
        reference = state.get("torch_outputs")
    return path, model, feeds, reference
