"""What the worker learns about a failure beyond the exception: the op, its schema, its calls.

Best effort throughout: a fact that cannot be gathered is left out, never an error of its own.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from onnxdoctor.worker.tracebacks import (
    _custom_symbolics,
    _locate_op,
    _source_from_frames,
    _symbolic_frame,
    _user_frame,
    error_info,
)


def export_failure_facts(exc: BaseException, loaded: Any, dynamo: bool, target: Path, *, gather: bool) -> dict[str, Any]:
    """Op, node, source line and registry facts for an export failure (best effort).

    `gather`: also the costly facts about aten ops (the registries, every unsupported op), which
    the first run needs for its findings and fix runs do not.
    """
    from onnxdoctor.analysis.classify import extract_op

    info = error_info(exc)
    op = extract_op("\n".join([info["message"], *info["chain_messages"]]))
    facts: dict[str, Any] = {"source": _user_frame(exc, target)}
    symbolic = _symbolic_frame(exc, target)
    if symbolic:
        # The failure happened inside the user's own symbolic function, called by torch.onnx.
        facts["symbolic_frame"] = symbolic
        facts["source"] = symbolic["source"]
        owners = [op for op, fn in _custom_symbolics(target.resolve().parent).items()
                  if fn == symbolic["function"]]
        if owners and not op:
            op = owners[0]
            facts["op"] = op
    if not dynamo and not symbolic and "Unsupported: ONNX export of" in info["message"]:
        # torch's built-in symbolic refused the call and spelt the op its own way ("GridSample"):
        # the registry names the op, and says whether a later opset registers another symbolic.
        with contextlib.suppress(Exception):
            from onnxdoctor.worker.registry import refusing_symbolic, torchscript_registrations

            refused = refusing_symbolic(exc)
            if refused:
                op = refused
                facts["symbolic_registrations"] = torchscript_registrations(refused)
    text = "\n".join([info["message"], *info["chain_messages"]])
    if not op and not dynamo:
        with contextlib.suppress(Exception):
            from onnxdoctor.worker.registry import converting_node_op

            op = converting_node_op(exc, text)
    if not op and not dynamo and "was not in the map" in text and loaded is not None:
        # A graph pass crashed without naming a node; the graph's autograd Functions are the suspects.
        with contextlib.suppress(Exception):
            from onnxdoctor.worker.registry import traced_python_ops

            functions = traced_python_ops(loaded)
            if len(functions) == 1:
                op = functions[0]
    if not op and ("ScriptObject" in text or "PackedParams" in text) and loaded is not None:
        # A quantized module's packed weights stopped the exporter before any op was named.
        with contextlib.suppress(Exception):
            from onnxdoctor.worker.registry import quantized_module_op

            op = quantized_module_op(loaded.model, text)
    if op:
        facts["op"] = op
    if op and not symbolic:
        located = _source_from_frames(exc, target)
        if located:
            facts["source"] = located
        else:  # costs a torch.export: only when the exporter's own frames did not tell
            with contextlib.suppress(Exception):
                facts.update(_locate_op(loaded, op, target))
        custom = op.split("::", 1)[0] not in ("aten", "prims")
        # A custom op's facts are its schema (cheap): fix runs need them too, to continue a chain.
        if gather or custom:
            with contextlib.suppress(Exception):
                from onnxdoctor.worker.registry import op_facts

                facts["op_facts"] = op_facts(op, "dynamo" if dynamo else "torchscript")
        if gather and not dynamo and not custom and facts.get("op_facts", {}).get("torchscript_opsets"):
            # The opset fix must cover every op of the graph, not only the first that failed.
            with contextlib.suppress(Exception):
                from onnxdoctor.worker.registry import graph_opset_floor

                facts["op_facts"]["graph_opset_floor"] = graph_opset_floor(loaded)
        if custom:
            # What the op takes and returns, from its real calls: the generated fake kernel and the
            # generated mappings' types (an op returning int64 indices is not typed float) use it.
            with contextlib.suppress(Exception):
                from onnxdoctor.worker.registry import observe_calls

                facts["op_calls"] = observe_calls(loaded, op)
        if gather and dynamo and not custom:
            # The exporter stops at the first op it cannot translate: list them all.
            with contextlib.suppress(Exception):
                from onnxdoctor.worker.registry import unsupported_ops

                facts["unsupported_ops"] = unsupported_ops(loaded, target)
    return facts


def torch_op_behind(node_op: str | None, state: dict[str, Any]) -> dict[str, Any]:
    """The script's torch op whose symbolic wrote a custom-domain node, with its schema.

    A node `mynamespace::MYSELU` with no runtime kernel came from a symbolic the script
    registered for a torch op; knowing that op lets the fixes export its body instead, or
    call it from a runtime kernel. Matched by namespace and name (case aside), or the one
    symbolic of that namespace.
    """
    if not node_op or "::" not in node_op or state.get("loaded") is None:
        return {}
    domain, op_type = node_op.split("::", 1)
    symbolics = [op for op in state.get("load_facts", {}).get("custom_symbolics", {})
                 if op.split("::", 1)[0] == domain]
    named = [op for op in symbolics if op.split("::", 1)[1].lower() == op_type.lower()]
    behind = named[0] if named else (symbolics[0] if len(symbolics) == 1 else None)
    if behind is None:
        return {}
    from onnxdoctor.worker.registry import observe_calls, op_facts

    facts = {"torch_op": behind, "torch_op_facts": op_facts(behind, state.get("exporter") or "torchscript")}
    with contextlib.suppress(Exception):
        facts["torch_op_calls"] = observe_calls(state["loaded"], behind)
    return facts


# What torch says when a companion library's compiled ops did not load (built for another torch,
# or a CUDA build beside a CPU torch): its Python part then fails on its first op registration.
_OPS_DID_NOT_LOAD = re.compile(r"operator (\w+)::\w+ does not exist|Couldn't load custom C\+\+ ops")


def extension_build_facts(info: dict[str, Any]) -> dict[str, Any]:
    """For a script that failed importing a compiled companion (torchvision, torchaudio): which
    package, its build against torch's, and how to install a matching one ({} otherwise)."""
    text = "\n".join([info.get("message", ""), *info.get("chain_messages", [])])
    if not _OPS_DID_NOT_LOAD.search(text):
        return {}
    import torch

    from onnxdoctor.envinfo import extension_mismatches, extension_versions

    mismatches = extension_mismatches(torch.__version__, extension_versions())
    return {"extension_mismatches": [m["message"] for m in mismatches]} if mismatches else {}
