"""Pure classification: stage outcomes -> findings with stable codes.

The worker reports what happened (exception type chain, messages, facts); this module decides
what it means. Order of evidence: an explicit code the worker could determine itself (protocol
violations, parity), then the exception type chain, then the normalized message.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, NamedTuple

from onnxdoctor.analysis.normalize import first_line, normalize_message, running_node
from onnxdoctor.analysis.sources import source_lines
from onnxdoctor.codes import catch_all, get_code
from onnxdoctor.model import (
    DynamicShapesKeys,
    ErrorInfo,
    Finding,
    IrTooNew,
    Severity,
    Stage,
    StageOutcome,
    Status,
)
from onnxdoctor.protocol import (
    FUNCTION_SYMBOLIC,
    REGISTERED_SYMBOLIC,
    provenance_table,
)

_DYNAMIC_SHAPES_KEYS = re.compile(
    r"top-level keys must be the arg names (\[[^\]]*\]) of `inputs`, but here they are (\[[^\]]*\])"
)
# torch ends the sentence right after the name ("... namespace ns::op. If you are ..."): a name
# may contain dots (ns::op.overload) but never ends with one.
# The TorchScript exporter's peephole pass, after every op converted: a pack or unpack not paired.
# torch.export's "conflicts between user-specified ranges and inferred ranges": each dim declared
# dynamic that tracing found static, with its size.
_INFERRED_STATIC = re.compile(r"tracing inferred a static shape of (\d+) for dimension inputs\['(\w+)'\]\.shape\[(\d+)\]")
_UNPAIRED_PACKING = re.compile(r"Cannot export individual pack_padded_sequence or pad_packed_sequence")
# The tracer's check that each output depends on the inputs; torch prints the output's whole value
# between "Output N (" and ") of traced region".
_NO_DATA_DEPENDENCE = re.compile(r"[Oo]utput (\d+) \(.*\) of traced region did not have observable data dependence",
                                 re.DOTALL)
# torch.jit's input flattening: an example input that is an object, not tensors or containers.
_OBJECT_INPUT = re.compile(r"supported as JIT inputs/outputs.*received an input of unsupported type: ([\w.]+\w)", re.DOTALL)
_UNRECOGNIZED_NS = re.compile(r"unrecognized namespace ([A-Za-z_][\w.]*::[A-Za-z_](?:[\w.]*\w)?)")
_TS_UNSUPPORTED = re.compile(
    r"Exporting the operator '?([\w.]+::[\w.]+)'? to ONNX opset version (\d+) is not supported"
)
_TS_ADDED_IN = re.compile(r"Support for this operator was added in version (\d+)")
# A symbolic's SymbolicValueError: its reason, then "[Caused by the value ..." and the graph.
_SYMBOLIC_VALUE_ERROR = re.compile(r"(.+?)\s*(?:\[Caused by the value|$)", re.DOTALL)
# A TorchScript symbolic refusing one variant of its op by raising OnnxExporterError: "ONNX does
# not support include_self=False for scatter_reduce" (torch.onnx's symbolic_opset16).
_TS_VARIANT_REFUSED = re.compile(r"ONNX does not support (.+?) for ([A-Za-z_]\w*)")
# The TorchScript exporter's symbolics give up on calls they cannot map: "Unsupported: ONNX export of
# operator adaptive_max_pool2d, output size that are not factor of input size", "... of operator
# Sort, Out parameter is not supported", "... of cumsum in opset 9. Please try opset version 11".
_TS_SYMBOLIC_UNSUPPORTED = re.compile(
    r"Unsupported: ONNX export of (?:operator )?([A-Za-z_](?:[\w.:]*\w)?)(?:,\s*([^.\n]*))?"
)
_TS_TRY_OPSET = re.compile(r"in opset (\d+)\. Please try opset version (\d+)")
# The TorchScript exporter's words when a node is left without a symbolic's output.
_COULD_NOT_EXPORT = re.compile(r"Couldn't export operator ([\w.]+::[\w.]+)")
# An autograd.Function the TorchScript exporter could neither inline nor export: its class name.
COULD_NOT_EXPORT_PYTHON = re.compile(r"Couldn't export Python operator (\w+)")
# The JIT's alias analysis meeting an aten call with argument types no schema has (Tensor * bool).
_NO_SCHEMA_FOR = re.compile(r"We don't have an op for ((?:aten|prim)::\w+) but it isn't a special case")
# A torch function refusing an argument's Python type while the exporter traces ("scaled_dot_product_
# attention(): argument 'is_causal' must be bool, not Tensor"): the function is the aten op.
# Also the parser's words for a call no overload takes ("upsample_bicubic2d() received an invalid
# combination of arguments - got (Tensor, NoneType, bool, tuple)": traced sizes as a tuple of
# tensors, transformers#26790).
_ARGUMENT_TYPE = re.compile(r"\b([a-z_][a-z0-9_]*)\(\)(?: received an invalid combination of arguments|"
                            r": argument '\w+' (?:\(position \d+\) )?must be )")
# The dynamo exporter's translation of an aten op (an onnxscript function named aten_<op>[_<overload>])
# raised while building its nodes: "Error when calling function 'TracedOnnxFunction(<function aten_roll".
_TRANSLATION_RAISED = re.compile(r"Error when calling function '(?:Traced)?OnnxFunction\(<function aten_(\w+?)"
                                 r"(?:_(?:vec|tensor|scalar|int|dim|self|other|default))? at ")
# The FX node whose translation failed, as the dynamo exporter's ConversionError names it.
_TRANSLATING_NODE = re.compile(r"Error when translating node %\S+ : .*?call_function\[target=torch\.ops\.(aten|prims)\.(\w+)\.\w+\]")
_NOT_SUPPORTED_OP = re.compile(r"'?((?:aten|prims)::\w+)'? (?:is|are) not supported")
_NO_ONNX_FUNCTION = re.compile(r"No ONNX function found for <OpOverload\(op='([\w.]+)', overload='(\w+)'\)>")
_NO_ONNX_FUNCTION_PLAIN = re.compile(r"No ONNX function found for ([\w.]+::[\w.]+|[\w]+\.[\w]+\.[\w]+)")
# A higher-order op the registry has no function for, named by its Python object
# ("<torch._higher_order_ops.flex_attention.FlexAttentionHOP object at 0x...>"): the op's name by
# its class where the two differ from the module's name, else the module's (cond, while_loop, scan).
_NO_ONNX_FUNCTION_HOP = re.compile(r"No ONNX function found for <torch\._higher_order_ops\.(\w+)\.(\w+) object at")
_HOP_NAMES = {"FlexAttentionBackwardHOP": "flex_attention_backward", "MapImpl": "map_impl",
              "WithEffects": "with_effects", "AutoFunctionalized": "auto_functionalized",
              "AutoFunctionalizedV2": "auto_functionalized_v2", "WrapWithSetGradEnabled": "wrap_with_set_grad_enabled",
              "WrapWithAutocast": "wrap_with_autocast", "InvokeSubgraphHOP": "invoke_subgraph"}
# A Python builtin applied to a symbolic size (round(h / scale)): the dynamo exporter's registry has
# functions for aten ops only.
_NO_ONNX_FUNCTION_BUILTIN = re.compile(r"No ONNX function found for <built-in function (\w+)>")
# A torch function on symbolic scalars (math.sqrt(h) becomes torch._sym_sqrt): the node's target
# names its module.
_NO_ONNX_FUNCTION_PYTHON = re.compile(r"No ONNX function found for <function (\w+) at 0x[0-9a-f]+>"
                                      r"(?:.*?target=(\w+)\.\1\b)?", re.DOTALL)
# torch.export's fake tensors stop at an op whose output is data (torch.equal, Tensor.tolist) or
# whose output's shape is (torch.linalg.lstsq, nonzero outside an export-aware op); the rewrite
# family's call route answers only such a stop (analysis/fixes/rewrite.py).
STOPPED_AT_OP = re.compile(r"(?:DataDependentOutput|DynamicOutputShape)Exception(?:'>)?: (\w+)\.(\w+)\.\w+")
# torch.vmap (torch.func) over an op with no batching rule (an LSTM in a stacked ensemble, pytorch#105982).
_NO_BATCHING_RULE = re.compile(r"Batching rule not implemented for (\w+)::(\w+)")
_NO_OP_REGISTERED = re.compile(r"No Op registered for ([\w.]+) with domain_version of (\d+)")
NOT_REGISTERED_RT = re.compile(r"([\w.]*):([\w.]+)\((-?\d+)\) is not a registered function/op")
NO_IMPLEMENTATION = re.compile(
    r"Could not find an implementation for ([\w.]+)\((\d+)\) node with name '([^']*)'"
)
_IR_VERSION = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")
_OPSET_RT = re.compile(
    r"(?:[Oo]pset (\d+) is under development|ONNX Runtime only \*guarantees\* support for models stamped "
    r"with official released onnx opset versions\. Opset (\d+)|opset (\d+) .*not supported|"
    r"domain_version of (\d+) is not supported)"
)
_OPSET_RANGE = re.compile(r"Unsupported ONNX opset version: (\d+)|Unsupported onnx_opset_version: (\d+)|opset_version.*must be .*between|"
                          r"ONNX opset version (\d+) is not supported|opset version (\d+) is not supported by")

_UNKNOWN_OUTPUT = re.compile(r"Found <class '([\w.]+)'> in output, which is not a known type")
# torch.export's fake tensors met an op with no fake kernel (torch.library op without register_fake).
_NO_FAKE_KERNEL = re.compile(r"([\w.]+::[\w.]+): attempted to run this operator with Meta tensors"
                             # a torch.library.custom_op without register_fake says it this way
                             r"|There was no fake impl registered for <CustomOpDef\(([\w.]+::[\w.]+)\)>")
# Namespaces of torch's own ops: every other one is an extension's or the user's.
TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "quantized", "_quantized", "quantized_decomposed",
                              "profiler", "higher_order", "onnx", "_c10d_functional", "c10d"})
# torch.export meeting a quantized module's packed weights (torch.classes.quantized.*PackedParamsBase).
PACKED_WEIGHTS = re.compile(r"PackedParamsBase|torch\._C\.ScriptObject|__obj_flatten__")
# A Python number among forward()'s outputs passes torch.export (it becomes a constant in the
# graph's return) and then breaks the ONNX translation of that return node, with no word of outputs.
_CONSTANT_OUTPUT = re.compile(r"Error when translating node return \((.*)\)")
_CONSTANT_OUTPUT_TYPE = re.compile(r"'(int|float|bool|str|complex|SymInt|SymFloat|SymBool)' object has no attribute")
_CAPTURE_TYPES = (
    "torch._dynamo.exc.UserError",
    "torch._dynamo.exc.Unsupported",
    "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode",
    "torch._dynamo.exc.TorchRuntimeError",
    "torch.export.",
)
_CAPTURE_TEXT = (
    "Could not guard on data-dependent expression",
    "data-dependent",
    "Failed to export the model with torch.export",
    "Dynamic control flow is not supported",
    "Could not extract specialized integer from data-dependent",
)
from onnxdoctor.analysis.cautions import caution_findings, number_reads
from onnxdoctor.analysis.findings import (
    error_evidence,
    finding_from_record,
    library_frame,
    make_finding,
    source_from_text,
    with_node_facts,
)

# The ONNX-style names torch's symbolics use in their refusals, for the aten op they serve (the
# worker reads the real op from the registry; this covers text seen without the worker's facts).
_SYMBOLIC_SPELLINGS = {"GridSample": "grid_sampler", "TopK": "topk", "LSTM": "lstm", "Sort": "sort",
                       "Unfold": "unfold"}


def aten_name(name: str) -> str:
    """An op as the TorchScript symbolics spell it (`Sort`, `linalg.matrix_norm`) -> `aten::...`."""
    if "::" in name:
        return name
    name = name.split(" with ", 1)[0].strip()  # "GridSample with 5D volumetric input"
    if name in _SYMBOLIC_SPELLINGS:
        return "aten::" + _SYMBOLIC_SPELLINGS[name]
    name = name.replace(".", "_")
    return "aten::" + (name.lower() if name[:1].isupper() else name)


def extract_op(text: str) -> str | None:
    """The qualified op a failure message names, e.g. "mynamespace::myselu" or "aten::gelu"."""
    for pattern in (_NO_FAKE_KERNEL, _UNRECOGNIZED_NS, _TS_UNSUPPORTED, _NOT_SUPPORTED_OP, _COULD_NOT_EXPORT,
                    COULD_NOT_EXPORT_PYTHON, _NO_SCHEMA_FOR):
        match = pattern.search(text)
        if match:
            return next(g for g in match.groups() if g)  # a pattern may have alternatives
    match = _TS_SYMBOLIC_UNSUPPORTED.search(text)
    if match:
        return aten_name(match.group(1))
    match = _NO_ONNX_FUNCTION.search(text)
    if match:
        namespace, _, name = match.group(1).partition(".")
        return f"{namespace}::{name}"
    match = _NO_ONNX_FUNCTION_PLAIN.search(text)
    if match:
        raw = match.group(1)
        if "::" in raw:
            return raw
        namespace, name, _overload = raw.split(".")
        return f"{namespace}::{name}"
    match = _NO_ONNX_FUNCTION_HOP.search(text)
    if match:
        return f"higher_order::{_HOP_NAMES.get(match.group(2), match.group(1))}"
    match = _NO_ONNX_FUNCTION_BUILTIN.search(text)
    if match:
        return f"builtins::{match.group(1)}"
    match = _NO_ONNX_FUNCTION_PYTHON.search(text)
    if match:
        return f"{match.group(2)}::{match.group(1)}" if match.group(2) else match.group(1)
    match = STOPPED_AT_OP.search(text)
    if match:
        return f"{match.group(1)}::{match.group(2)}"
    match = _NO_OP_REGISTERED.search(text)
    if match:
        return match.group(1)
    match = NOT_REGISTERED_RT.search(text)
    if match:
        return f"{match.group(1)}::{match.group(2)}" if match.group(1) else match.group(2)
    match = NO_IMPLEMENTATION.search(text)
    if match:
        return match.group(1)
    match = _ARGUMENT_TYPE.search(text)
    if match:
        return f"aten::{match.group(1)}"
    match = _TRANSLATING_NODE.search(text)
    if match:  # the node's own target: the function's name drops a leading underscore (_grouped_mm)
        return f"{match.group(1)}::{match.group(2)}"
    match = _TRANSLATION_RAISED.search(text)
    if match:
        return f"aten::{match.group(1)}"
    match = _SYMBOLIC_OUTPUTS.search(text)
    if match:
        return aten_name(match.group(1))
    match = _OUTPUT_TYPE.search(text)
    if match:
        return match.group(1)
    match = _LEADING_NODE_KIND.search(text) or SYMBOLIC_METHOD_TYPE_ERROR.search(text)
    if match:
        return match.group(1)
    return None


# A JIT pass's error that starts with the node kind it could not handle ("RuntimeError:
# prim::TupleIndex not matched to tuple construct", mlcommons/inference#637's scripted RNN-T).
_LEADING_NODE_KIND = re.compile(r"^(?:\w+(?:Error|Exception): )?((?:prim|aten|onnx)::\w+) (?!\()",
                                re.MULTILINE)


# A symbolic whose outputs do not match the node's, named by the node's kind without its
# namespace ("symbolic for __getitem__ produced an incorrect number of outputs", einops#355's
# scripted `dict.items()` loop).
_SYMBOLIC_OUTPUTS = re.compile(r"symbolic for (\w+) produced an incorrect number of outputs")
SYMBOLIC_OUTPUT_COUNT = re.compile(r"symbolic for (\w+) produced an incorrect number of outputs \(expected (\d+), "
                                   r"but got (\d+)\)")
# A traced call returning a Python number, which no graph value can hold (xformers' attention op
# returns (Tensor, Tensor, int, int)).
_OUTPUT_TYPE = re.compile(r"unsupported output type: \w+, from operator: (\w+::\w+)")
# The TorchScript exporter's note on a TypeError raised by an autograd.Function's `symbolic` or by
# the call into it (torchscript_exporter.utils._run_symbolic_method): the Function's class.
SYMBOLIC_METHOD_TYPE_ERROR = re.compile(r"\(occurred when translating (\w+)\)")
# The call itself did not fit the signature: `symbolic()` takes the arguments apply() was given.
_SYMBOLIC_ARITY = re.compile(r"(\w+)\.symbolic\(\) (missing \d+ required positional arguments?: .+?|takes \d+ "
                            r"positional arguments? but \d+ (?:were|was) given|got an unexpected keyword argument '\w+')"
                            r"(?: \(occurred|$)", re.MULTILINE)


# torch names the FX node it was running when an error came from inside an op (a decomposition,
# a fake kernel): "While executing %view_27 : ... target=torch.ops.aten.view.default".
_EXECUTING_NODE = re.compile(r"While executing %\S+ : .*?target=torch\.ops\.(\w+)\.(\w+)")


def executing_op(text: str) -> str | None:
    """The op of the FX node torch was executing when it failed ("aten::view"), if it says."""
    match = _EXECUTING_NODE.search(text)
    return f"{match.group(1)}::{match.group(2)}" if match else None


def classify(stages: Iterable[StageOutcome], *, base_dir: str | None = None) -> list[Finding]:
    """Findings for one pipeline run: the first failure, then warnings that bite later."""
    stages = list(stages)
    findings: list[Finding] = []
    by_stage = {s.stage: s for s in stages}
    for outcome in stages:
        if outcome.status in (Status.PASSED, Status.SKIPPED):
            continue
        if outcome.status in (Status.CRASHED, Status.TIMED_OUT):
            break  # the worker died: the supervisor's tool finding (OD901/OD902/OD903) says how
        findings.extend(_classify_failure(outcome, by_stage, base_dir))
        break
    findings.extend(caution_findings(stages, base_dir))
    return with_node_facts(_dedupe(findings), by_stage)


class _Failure(NamedTuple):
    """A failed stage as the stage's own classifier reads it."""

    outcome: StageOutcome
    text: str  # the error's whole text, causes included
    evidence: tuple[str, ...]
    base_dir: str | None
    by_stage: dict[Stage, StageOutcome]


def _classify_failure(
    outcome: StageOutcome, by_stage: dict[Stage, StageOutcome], base_dir: str | None
) -> list[Finding]:
    facts = outcome.facts
    error = outcome.error
    text = error.all_text() if error else ""
    evidence = error_evidence(error, base_dir)
    hint = facts.get("code")
    if outcome.stage is Stage.CHECK and facts.get("findings"):
        found = [finding_from_record(r, base_dir) for r in facts["findings"]]
        return _blame_user_symbolic(found, by_stage) + found
    if hint and outcome.stage is Stage.PARITY:
        return [_parity_finding(str(hint), outcome, by_stage, evidence, base_dir)]
    if hint:
        code = str(hint)
        message = first_line(normalize_message(error.message if error else "", base_dir=base_dir)) or get_code(code).summary
        if code == "OD104" and error and error.chain_messages:
            evidence = error_evidence(error, base_dir)
        if code == "OD104" and facts.get("extension_mismatches"):
            # Not the script's fault: a compiled companion built for another torch failed to load.
            code, message = "OD099", "; ".join(str(m) for m in facts["extension_mismatches"])
        if code == "OD405" and facts.get("library"):
            # The user's own library path, as given: never shortened to <tmp>/ like a library's.
            message = f"custom-op library {facts['library']} {message}"
        # forward() stopped by torch.vmap at an op it has no batching rule for: that op.
        batched = _NO_BATCHING_RULE.search(text) if code == "OD108" else None
        return [
            make_finding(
                code,
                outcome.stage,
                message,
                op=(f"{batched.group(1)}::{batched.group(2)}" if batched else None) or facts.get("op"),
                node=facts.get("node"),
                source=facts.get("source"),
                evidence=evidence,
            )
        ]
    classifier = {
        Stage.EXPORT: _classify_export,
        Stage.ORT_LOAD: _classify_ort_load,
    }.get(outcome.stage)
    if classifier is not None:
        found = classifier(_Failure(outcome, text, evidence, base_dir, by_stage))
        if found:
            return found
    code = catch_all(outcome.stage)
    op, node = facts.get("op") or (extract_op(text) or executing_op(text) if text else None), facts.get("node")
    if outcome.stage is Stage.ORT_RUN:
        code = "OD501"
        running = running_node(text)
        if running:
            op, node = running.group(1), running.group(2)
    message = _headline(error, base_dir)
    if outcome.stage is Stage.EXPORT and error is not None:
        message = _with_place(message, op, library_frame(error))
    found = make_finding(
        code,
        outcome.stage,
        message,
        op=op,
        node=node,
        source=facts.get("source"),
        evidence=evidence,
    )
    # The ONNX node the file writer refused (a type ONNX has no name for), beside the torch op;
    # the graph node a named Python function is (prim::PythonOp).
    if facts.get("onnx_op"):
        found = replace(found, onnx_op=str(facts["onnx_op"]))
    if facts.get("torch_op") and facts["torch_op"] != found.op:
        found = replace(found, torch_op=str(facts["torch_op"]))
        if facts["torch_op"] == "prim::PythonOp":
            found = replace(found, message=f"{found.message}: {op} runs as Python in the graph (a prim::PythonOp node: "
                                           "a torch.jit.ignore function or an autograd.Function), which the exporter "
                                           "cannot write")
        elif facts["torch_op"] in (facts.get("inner_ops") or ()):
            found = replace(found, message=f"{found.message}: autograd.Function {op} stays Python in the graph, and "
                                           f"its forward calls {facts['torch_op']}, an extension op with no ONNX export")
    return [found]


# torch.onnx wraps the real error in a preamble about which of its steps failed.
_TORCH_PREAMBLE = re.compile(r"^Failed to .*?This is step \d/\d")


def _headline(error: ErrorInfo | None, base_dir: str | None) -> str:
    """One line that says what went wrong: the innermost cause, when torch's preamble wraps it."""
    if error is None:
        return "failed"
    for text in (error.message, *reversed(error.chain_messages)):
        line = first_line(normalize_message(text, base_dir=base_dir))
        if line and not _TORCH_PREAMBLE.match(line):
            return line if text is error.message else f"{line} (torch.onnx: {_preamble(error.message)})"
    return first_line(normalize_message(error.message, base_dir=base_dir))


def _with_place(headline: str, op: str | None, frame: str | None) -> str:
    """The headline with the op and the library line it broke at, ahead of torch's preamble."""
    where = frame.split(", in ", 1)[0] if frame else None
    place = " at ".join(part for part in (op, where) if part)
    if not place:
        return headline
    cause, marker, preamble = headline.partition(" (torch.onnx: ")
    return f"{cause} [{place}]" + (f"{marker}{preamble}" if marker else "")


def _preamble(message: str) -> str:
    match = re.search(r"Failed to (.*?)\.", message)
    return f"failed to {match.group(1)}" if match else "export failed"


def _also_unsupported(op: str, listed: Any) -> str:
    """The other ops the worker found without an ONNX function, as a clause ("" when none)."""
    others = [u for u in listed or () if isinstance(u, dict) and u.get("op") != op]
    if not others:
        return ""
    also = ", ".join(f"{u['op']}" + (f" ({u['source']})" if u.get("source") else "") for u in others[:8])
    more = f" and {len(others) - 8} more" if len(others) > 8 else ""
    return f"; neither do {also}{more}, further on in the model"


def _outputs_message(text: str) -> str | None:
    """OD211's message when forward() returns something that cannot be an ONNX output."""
    unknown = _UNKNOWN_OUTPUT.search(text)
    if unknown:
        kind = unknown.group(1)
        return (f"forward() returns {_article(kind.rsplit('.', 1)[-1])} ({kind}), which torch.export cannot flatten "
                "into ONNX outputs: only tensors and lists, tuples and dicts of them can be outputs")
    returned = _CONSTANT_OUTPUT.search(text)
    constant = _CONSTANT_OUTPUT_TYPE.search(text)
    if returned and constant:
        return (f"forward() returns a Python {constant.group(1)} among its outputs (return {returned.group(1)}), "
                "which the dynamo exporter cannot write as an ONNX output: only tensors and lists, tuples "
                "and dicts of them can be outputs")
    return None


def _classify_export(failure: _Failure) -> list[Finding]:
    inlined = failure.outcome.facts.get("not_inlined")
    if inlined and _COULD_NOT_EXPORT.search(failure.text):
        # torch's error names an op after an autograd.Function it could not inline; why its forward
        # could not stand in (printed to stderr: the op inside it) is the failure.
        first = inlined[0]
        if _TS_SYMBOLIC_UNSUPPORTED.search(first["reason"]) or _TS_UNSUPPORTED.search(first["reason"]):
            facts = {k: v for k, v in failure.outcome.facts.items() if k not in ("op", "not_inlined")}
            inner = _classify_export(failure._replace(outcome=replace(failure.outcome, facts=facts),
                                                      text=f"{first['reason']}\n{failure.text}"))
            if inner:
                return [replace(f, message=f"{f.message} (inside autograd.Function {first['function']}, which the "
                                           "TorchScript exporter could not inline)") for f in inner]
    outcome, text, evidence, base_dir, _ = failure
    facts = outcome.facts
    error = outcome.error
    assert error is not None
    op = facts.get("op") or extract_op(text)
    source = facts.get("source") or source_from_text(text, base_dir)
    opset = facts.get("requested_opset")
    chain = " ".join(error.chain)

    def make(code: str, message: str, **extra: Any) -> list[Finding]:
        return [
            make_finding(code, Stage.EXPORT, message, op=extra.get("op", op), node=None,
                     source=extra.get("source", source), opset=extra.get("opset", opset), evidence=evidence,
                     detail=extra.get("detail"))
        ]

    def refused(by: str, what: str, code: str, message: str, registrations: Any = None) -> list[Finding]:
        """A built-in symbolic's refusal of `what`: OD201 where a later opset registers another
        symbolic for the op (which may take the call), else `code` with `message`. `registrations`:
        the op's opsets where they are not the failure's own (`symbolic_registrations`)."""
        known = facts.get("symbolic_registrations") if registrations is None else registrations
        newer = [v for v in known or [] if isinstance(opset, int) and v > opset]
        if newer:
            return make("OD201", f"the TorchScript exporter's symbolic for {by} at opset {opset} refuses {what}; "
                                 f"opset {newer[0]} registers another symbolic for it", op=by)
        return make(code, message, op=by)

    refusal = next(iter(facts.get("not_inlined") or ()), {})
    if str(refusal.get("op", "")).startswith("aten::") and not facts.get("inner_ops") and _COULD_NOT_EXPORT.search(text):
        # A built-in symbolic refused an op of the Function's forward in its own words ("bitwise
        # AND for non-boolean input values"): that op, not the one torch's error names after.
        # (An extension op it met is the Function's own failure, named below with the Function.)
        inner, reason = str(refusal["op"]), str(refusal["reason"]).rstrip(". ")
        inside = f" (inside autograd.Function {refusal['function']}, which the TorchScript exporter could not inline)"
        return refused(inner, f"this call ({reason}){inside}", "OD299",
                       f"the TorchScript exporter's symbolic for {inner} refuses this call: {reason}{inside}",
                       registrations=refusal.get("registrations") or [])
    shapeless = facts.get("shapeless_function")
    if facts.get("inner_ops") and shapeless and not COULD_NOT_EXPORT_PYTHON.search(text):
        # A symbolic after the Function refused the shapeless value its node leaves (the worker's
        # shapeless_function_facts): the Function is what stopped the export.
        reason = _SYMBOLIC_VALUE_ERROR.match(error.message)
        refusal = first_line(normalize_message(reason.group(1) if reason else error.message, base_dir=base_dir))
        message = (f"autograd.Function {shapeless} cannot be exported: its forward calls {facts['inner_ops'][0]}, "
                   "which has no ONNX export, so the TorchScript exporter left it as a node of unknown shape "
                   f"and the next op's symbolic refused it ({refusal})")
        return [replace(make("OD299", message, op=shapeless)[0], torch_op=str(facts["inner_ops"][0]))]
    match = _NO_FAKE_KERNEL.search(text)
    if match:
        name = match.group(1) or match.group(2)
        if name.split("::", 1)[0] in TORCH_NAMESPACES:
            # torch's own op (aten::int_repr on a quantized tensor, aten::to_mkldnn): not the user's
            # custom op, and not one they can register a fake kernel for.
            return make("OD212", f"torch's op {name} has no fake (meta) kernel for this call, so "
                                 "torch.export cannot trace it (the op itself runs)", op=name)
        return make("OD212", f"custom op {name} has no fake (meta) kernel, so torch.export cannot "
                             "trace it (the dynamo exporter needs one; the op itself runs)", op=name)
    match = _NO_DATA_DEPENDENCE.search(text)
    sites = number_reads(outcome.warnings, base_dir) if match else []
    if match and sites and not facts.get("data_sites"):
        # A number read with `.item()` while traced is a constant of the trace: an output built
        # from such numbers (a decoded tag path returned as a list) depends on no input.
        lines = ", ".join(line for line, _op in sites[:3])
        return make("OD299", f"output {match.group(1)} of forward() (counted from 1) does not depend on the inputs "
                             f"in the TorchScript trace, likely because forward() reads tensors into Python numbers "
                             f"(.item(), int(), float()) at {lines}, which the tracer keeps as constants; return "
                             "tensors instead (the indices themselves, torch.stack of them)",
                    op=sites[0][1], source=sites[0][0])
    if match:
        sites = facts.get("data_sites") or []
        return make("OD299", f"output {match.group(1)} of forward() (counted from 1) does not depend on the inputs "
                             "in the TorchScript trace: it is computed where the tracer cannot follow (`.data`, NumPy, a tensor "
                             "rebuilt from Python numbers)"
                             + (f"; forward() uses `.data` at {', '.join(map(str, sites[:3]))}" if sites else ""),
                    op=None)
    if _UNPAIRED_PACKING.search(text):
        return make("OD299", "the TorchScript exporter keeps pack_padded_sequence and pad_packed_sequence "
                             "(prim::PackPadded, prim::PadPacked) only as a pair around one recurrent layer, "
                             "and here one stands alone (the packed data used or rebuilt between them)",
                    op="prim::PackPadded")
    match = _OBJECT_INPUT.search(text)
    if match:
        load = failure.by_stage.get(Stage.LOAD)
        held = [str(o.get("class")) for o in (load.facts.get("object_inputs") or ())] if load else []
        if load is not None and "object_inputs" in load.facts and match.group(1) not in held:
            # torch says "input" for what forward() returns as well; the example held no such object.
            kind = "a NumPy array (numpy.ndarray)" if match.group(1) == "numpy.ndarray" else f"{_article(match.group(1))} object"
            return make("OD299", f"forward() returns {kind}, and the TorchScript exporter takes only "
                                 "tensors and tuples, lists and dicts of them as outputs (return its tensors)",
                        op=None, source=None)
        return make("OD299", f"an example input is or holds {_article(match.group(1))} object, and the TorchScript "
                             "exporter takes only tensors and tuples, lists and dicts of them as inputs",
                    op=None, source=None)
    match = _UNRECOGNIZED_NS.search(text)
    if match:
        return make("OD203", f"custom op {match.group(1)} has no ONNX export mapping (TorchScript exporter)")
    match = _TS_UNSUPPORTED.search(text)
    if match:
        op, at = match.group(1), int(match.group(2))
        added = _TS_ADDED_IN.search(text)
        if added:
            return make("OD201", f"{op} is not supported at opset {at}; support starts at opset {added.group(1)}",
                        op=op, opset=at)
        return make("OD202", f"{op} has no ONNX export in the TorchScript exporter at any opset", op=op, opset=at)
    match = _TS_SYMBOLIC_UNSUPPORTED.search(text)
    if match:
        # The worker names the op from the registry (torch spells it "GridSample" in the text).
        op = facts.get("op") or aten_name(match.group(1))
        later = _TS_TRY_OPSET.search(text)
        if later:
            return make("OD201", f"{op} is not supported at opset {later.group(1)}; support starts at opset "
                                 f"{later.group(2)}", op=op, opset=int(later.group(1)))
        reason = (match.group(2) or "").strip()
        qualifier = re.match(r" ((?:with|for) [^.\n]*)", text[match.end(1):])
        if not reason and qualifier:  # "GridSample with 5D volumetric input", "convolution for kernel of unknown shape"
            reason = f"{match.group(1)} {qualifier.group(1)}"
        if facts.get("symbolic_refuses_always"):
            # torch registers the op only to refuse it (aten::_standard_gamma): unsupported at any opset.
            return make("OD202", f"{op} has no ONNX export in the TorchScript exporter at any opset (its "
                                 "registered symbolic only refuses it)", op=op)
        return refused(op, f"this call ({reason or 'unsupported'})", "OD299",
                       f"the TorchScript exporter's symbolic for {op} refuses this call" + (f": {reason}" if reason else ""))
    reason_match = _SYMBOLIC_VALUE_ERROR.match(error.message) if error.type.endswith("SymbolicValueError") else None
    if reason_match and facts.get("symbolic_registrations") is not None and op and op == facts.get("refusing_symbolic"):
        # A built-in symbolic refused the call with its own words ("step!=1 is currently not
        # supported", Slice before opset 10); torch appends the whole graph after them.
        reason = reason_match.group(1).strip()
        return refused(op, f"this call ({reason})", "OD299",
                       f"the TorchScript exporter's symbolic for {op} refuses this call: {reason}")
    match = _TS_VARIANT_REFUSED.search(text)
    if match and (facts.get("op") or "").split("::", 1)[0] in ("aten", ""):
        op = facts.get("op") or aten_name(match.group(2))
        return refused(op, match.group(1), "OD202", f"the TorchScript exporter's symbolic for {op} refuses "
                                                     f"{match.group(1)} at every opset (it maps no ONNX op to that variant)")
    match = (_NO_ONNX_FUNCTION.search(text) or _NO_ONNX_FUNCTION_PLAIN.search(text)
             or _NO_ONNX_FUNCTION_HOP.search(text))
    if match and op:
        namespace = op.split("::", 1)[0]
        if namespace not in ("aten", "prims", "quantized", "_operator", "higher_order"):
            return make("OD203", f"custom op {op} has no ONNX export mapping (dynamo exporter)")
        return make("OD202", f"{op} has no ONNX function in the dynamo exporter's registry"
                             + _also_unsupported(op, facts.get("unsupported_ops")))
    if _OPSET_RANGE.search(text):
        found = make("OD209", first_line(normalize_message(error.message, base_dir=base_dir)))
        return [replace(found[0], severity=Severity.ERROR)]  # here the export itself failed
    outputs = _outputs_message(text)
    if outputs:
        return make("OD211", outputs, op=None, source=None if _UNKNOWN_OUTPUT.search(text) else source)
    capture = any(t in chain for t in _CAPTURE_TYPES) or any(t in text for t in _CAPTURE_TEXT)
    if capture:
        # "conflicts between user-specified ranges and inferred ranges": a dim declared dynamic
        # that tracing found static (torch.onnx's own dynamic_axes conversion can put it there).
        if ("Constraints violated" in text or "dynamic_shapes" in text or "user-specified dim hint" in text) \
                and "data-dependent" not in text:
            keys = _DYNAMIC_SHAPES_KEYS.search(text)
            if keys:
                return make("OD208", f"dynamic_shapes is keyed by {keys.group(2)}, but forward()'s "
                                     f"arguments are {keys.group(1)}", detail=_shape_keys(keys))
            static = _INFERRED_STATIC.findall(text)
            if static:
                dims = ", ".join(f"{name} dim {dim} ({size})" for size, name, dim in dict.fromkeys(static))
                return make("OD208", f"declared dynamic, but static in the model as traced: {dims}; torch.export "
                                     "refuses a dynamic dim the model fixes (a dynamic_axes entry on the wrong "
                                     "input, or a size the model's own code fixes)")
            return make("OD208", _capture_message(text, base_dir, "dynamic_shapes do not match the model"))
        detail = _capture_message(text, base_dir, "")
        if "Exporting a ScriptModule is not supported" in text:
            return make("OD204", "torch.export takes eager modules only, and the model is a ScriptModule "
                                 "(torch.jit.script or torch.jit.load)")
        if PACKED_WEIGHTS.search(text):
            # A quantized module's packed weights (a ScriptObject): nothing about control flow.
            return make("OD204", "torch.export cannot trace a quantized module's packed weights "
                                 f"(a torch ScriptObject){' for ' + op if op else ''}"
                                 + (f": {detail}" if detail else ""))
        origin = facts.get("unbacked_origin") if "data-dependent" in text else None
        if "data-dependent" in text:
            message = ("torch.export cannot capture Python control flow or conversions on tensor values "
                       "(if/while on a tensor, .item(), int(tensor))")
        else:
            message = "torch.export could not capture the model"
        asked = _condition_op(source, base_dir) if "data-dependent" in text else None
        if asked and not (isinstance(origin, dict) and origin.get("op") not in (None, "", "aten::item")):
            # `if entropy < threshold:` made the tensor a Python bool: its comparison is the op
            # the branch reads (torch.cond or torch.where takes it as a tensor).
            message += f"; the branch at {source} reads the tensor result of {asked} as a Python bool"
            return [replace(make("OD204", message + (f": {detail}" if detail else ""))[0], torch_op=asked)]
        if isinstance(origin, dict) and origin.get("op"):
            # The guard's line asked about the value; the op whose result it is is what to change
            # (a rewrite of it, or the code that reads it back into Python).
            at = f" at {origin['source']}" if origin.get("source") else ""
            message += f"; {origin['symbol']} is the data-dependent result of {origin['op']}{at}"
            return [replace(make("OD204", message + (f": {detail}" if detail else ""))[0], torch_op=origin["op"])]
        higher = _HIGHER_ORDER.search(text) and _higher_order_call(source, base_dir)
        if higher:
            # A branch of torch.cond (or a while_loop body) that torch.export could not capture
            # whole: the higher-order op is what the graph break is in.
            reason = _HIGHER_ORDER_REASON.search(text)
            message = (f"torch.export could not capture the branches of {higher} at {source}"
                       + (f": {reason.group(1).strip()}" if reason else ""))
            return make("OD204", message, op=higher)
        return make("OD204", message + (f": {detail}" if detail else ""))
    python_op = COULD_NOT_EXPORT_PYTHON.search(text)
    if facts.get("inner_ops") and (python_op or _COULD_NOT_EXPORT.search(text)):
        # The finding's op is the Function (what the exporter named, or whose inlined forward it
        # stopped in) or the torch op it named where no Function is known; what stopped the
        # export is the extension op the Function's forward calls.
        inner = str(facts["inner_ops"][0])
        function = str(facts.get("inner_function") or "")
        if python_op is None and function:
            # The exporter named a torch op of the Function's inlined forward (`aten::to` of a
            # `.int()` beside the kernel): the Function is what the user wrote and what its
            # fixes (the kernel bridge, the op's own body) answer.
            message = (f"autograd.Function {function} cannot be exported: the TorchScript exporter inlined its "
                       f"forward and stopped at {op} beside the extension op {inner}, which has no ONNX export")
            return [replace(make("OD299", message, op=function)[0], torch_op=inner)]
        message = (f"autograd.Function {python_op.group(1)} cannot be exported: its forward calls {inner}, which "
                   "has no ONNX export (the TorchScript exporter could not inline it)" if python_op else
                   f"{op} cannot be exported inside an autograd.Function whose forward also calls the extension "
                   f"op {inner}: export that op (or the Function) another way")
        return [replace(make("OD299", message)[0], torch_op=inner)]
    enclosing = facts.get("enclosing_function")
    if enclosing and op and _COULD_NOT_EXPORT.search(text):
        # A torch op with no export inside a Function's forward (`torch.from_numpy` after a NumPy
        # kernel): the Function is what the user wrote; the op is where the exporter stopped.
        message = (f"autograd.Function {enclosing} cannot be exported: the TorchScript exporter inlined its "
                   f"forward and stopped at {op}, which has no ONNX export")
        return [replace(make("OD299", message, op=str(enclosing))[0], torch_op=op)]
    counted = facts.get("symbolic_outputs")
    if isinstance(counted, dict) and op and counted.get("registered"):
        return make("OD205", f"the symbolic registered for {op} returns {counted.get('got')} value(s) where {op} "
                             f"returns {counted.get('expected')}: write g.op(..., outputs={counted.get('expected')}) "
                             "and return every output it gives")
    if isinstance(counted, dict) and op:
        return make("OD205", f"{op}.symbolic returns {counted.get('got')} value(s) where {op}.forward returns "
                             f"{counted.get('expected')}: write g.op(..., outputs={counted.get('expected')}) and "
                             "return every output it gives")
    bad = facts.get("symbolic_attribute")
    if isinstance(bad, dict) or facts.get("symbolic_frame") or _bad_symbolic(text, error):
        headline = _attribute_headline(bad, op) if isinstance(bad, dict) else _arity_headline(text)
        found = make("OD205", headline or first_line(normalize_message(error.message, base_dir=base_dir)))
        node_op = bad.get("node_op") if isinstance(bad, dict) else None
        # The node the symbolic was writing (mmcv::MMCVDeformConv2d), beside the Function or op it is for.
        return [replace(f, onnx_op=str(node_op)) for f in found] if node_op and node_op != op else found
    return []


_SUFFIX_OF = {"float": "f", "int": "i", "str": "s", "bool": "i"}


def _arity_headline(text: str) -> str | None:
    """OD205's headline when the exporter's call into an autograd.Function's `symbolic` did not fit
    its signature (open-mmlab/mmcv#611: apply() left forward()'s defaulted arguments out)."""
    match = _SYMBOLIC_ARITY.search(text)
    if match is None:
        return None
    return (f"{match.group(1)}.symbolic() {match.group(2)}: the exporter calls symbolic(g, ...) with exactly "
            f"the arguments {match.group(1)}.apply() was given, and forward()'s defaults are not among them; "
            "give symbolic() the same parameters and defaults as forward() (after ctx)")


def _attribute_headline(bad: dict[str, Any], op: str | None) -> str | None:
    """OD205's headline when g.op got an attribute its suffix cannot take: the argument by name,
    and the change that fixes it (torch's own message is a pybind signature dump)."""
    keyword, function = str(bad.get("keyword", "")), str(bad.get("function", "")).split(" ")[-1]
    if not keyword or not function:
        return None
    whose = ("your symbolic()" if function == "symbolic" else f"your symbolic {function}()") + (f" for {op}" if op else "")
    parameter = bad.get("parameter")
    if bad.get("parse_args") and parameter:
        descriptors = ", ".join(f'"{d}"' for d in bad["parse_args"])
        also = [str(name) for name in bad.get("also") or ()]
        named = f"`{parameter}`" + (f" (and {', '.join(f'`{n}`' for n in also)})" if also else "")
        return (f"{whose} passes {named} to g.op as {keyword}{' and more attributes' if also else ''}, but the "
                f"TorchScript exporter hands {'them' if also else f'`{parameter}`'} to a symbolic as "
                f"{'graph values' if also else 'a graph value'}, not {'Python numbers' if also else bad.get('wants')}: "
                f"decorate the symbolic with @parse_args({descriptors}) (torch.onnx.symbolic_helper) so it "
                f"receives {'them as such' if also else bad.get('wants')}")
    value = bad.get("value")
    given = str(bad.get("given", "")).removeprefix("a ")
    right = _SUFFIX_OF.get(given)
    if bad.get("unsuffixed"):
        named = f"{keyword}_{right}={value!r}" if right else f"{keyword}_i / _f / _s / _t"
        return (f"{whose} writes {keyword}={value!r} with no type suffix: g.op names each attribute with its "
                f"type ({named})")
    fix = f"; write {bad.get('attribute')}_{right}={value!r}" if right and right != bad.get("suffix") else ""
    return (f"{whose} writes {keyword}={value!r}: the _{bad.get('suffix')} suffix wants {bad.get('wants')}, "
            f"and {value!r} is {bad.get('given')}{fix}")


def _parity_finding(
    code: str,
    outcome: StageOutcome,
    by_stage: dict[Stage, StageOutcome],
    evidence: tuple[str, ...],
    base_dir: str | None,
) -> Finding:
    """A parity finding located at the first diverging node when that could be found."""
    facts = outcome.facts
    message = outcome.error.message if outcome.error else get_code(code).summary
    rows = [
        f"output {r['index']}: torch {r['torch_dtype']}{r['torch_shape']} vs ort {r['ort_dtype']}{r['ort_shape']}"
        + (f", max abs {r['max_abs_diff']:.3g}, max rel {r['max_rel_diff']:.3g}" if "max_abs_diff" in r else "")
        for r in facts.get("outputs", [])
    ]
    op = node = None
    diverging = facts.get("diverging")
    # A model that keeps state between calls (worker/stateful.py): the line that writes it.
    source = diverging.get("source") if diverging else facts.get("source") if facts.get("stateful") else None
    if diverging:
        node = diverging.get("node")
        module = (f", the output of module {diverging['module']!r} ({diverging.get('module_class')})"
                  if diverging.get("module") else f", in module {diverging['scope']}" if diverging.get("scope") else "")
        mapped = f" for {diverging['torch_op']}" if diverging.get("torch_op") else ""
        written = f", written by your symbolic {diverging['symbolic']}{mapped}" if diverging.get("symbolic") else ""
        op, verdict = _diverging_op(diverging)
        figures = (f"max abs {diverging['max_abs_diff']:.3g}, max rel {diverging['max_rel_diff']:.3g}"
                   if isinstance(diverging.get("max_abs_diff"), (int, float))
                   and isinstance(diverging.get("max_rel_diff"), (int, float))
                   else {"OD603": "its shape differs", "OD604": "its dtype differs"}.get(
                       str(diverging.get("code")), "it differs"))
        placed = (f"node {node}, {diverging.get('op')}{module}{written}" if node else
                  "a constant the exporter computed while exporting and folded into the file, from "
                  + ", ".join(diverging.get("folded") or ()) if diverging.get("folded") else "no node in the file")
        message += f"; the first value that differs is {diverging['value']!r} ({placed}): {figures}{verdict}"
        if diverging.get("runtime_matches_reference") is False and diverging.get("departing_node"):
            node = diverging["departing_node"]  # the node inside the group the runtime computes otherwise
        drawing = _random_input(diverging, facts)
        if drawing is not None:
            # The first value that differs reads a random op's draw, which the search cannot
            # compare: the draw is where the outputs part (MC dropout kept on, onnx#4855).
            node, op = drawing["node"], drawing["op"]
            message = re.sub(r"; some of its inputs come from nodes the search could not compare[^;]*, so the "
                             r"difference may arise there", "", message)
            why = " (a dropout told to drop draws a new mask each time)" if op == "Dropout" else ""
            message += (f"; its input comes from {node} ({op}), which draws random numbers on every run{why}, "
                        "so the difference arises there")
    if facts.get("diverging_skipped"):
        message += f"; the first diverging value was not searched for: {facts['diverging_skipped']}"
    load, export = by_stage.get(Stage.LOAD), by_stage.get(Stage.EXPORT)
    modes = (load.facts.get("mode_sensitive_modules") if load and load.facts.get("training") else None) or []
    if modes and code == "OD601":
        shown = ", ".join(modes[:3]) + (", ..." if len(modes) > 3 else "")
        message += (f"; the model is in training mode and {len(modes)} module(s) depend on it ({shown}): "
                    "dropout and batch statistics explain this difference (OD206); compare in eval mode")
        if op is None:
            # The node those modules export to, the first named (`down.1 (BatchNorm2d)`).
            kind = next((m.rsplit("(", 1)[-1].rstrip(")") for m in modes if "(" in m), "")
            op = "BatchNormalization" if "Norm" in kind and "Batch" in kind else "Dropout" if "Dropout" in kind else None
    table = provenance_table(export.facts) if export else {}
    row = table.get(node) if node else None
    if row is not None:
        source = source or row.source or None
        if row.emitter in (REGISTERED_SYMBOLIC, FUNCTION_SYMBOLIC) and not diverging.get("symbolic"):
            message += f"; node {node} was written by your symbolic {row.function} for {row.torch_op}"
    symbolics = (load.facts.get("custom_symbolics") if load else None) or {}
    if symbolics and export and export.facts.get("exporter") == "torchscript":
        if not diverging:
            op = next(iter(symbolics)) if len(symbolics) == 1 else None
            # The user's line that calls the op whose symbolic wrote nodes (the export recorded it).
            written = [r for r in table.values() if r.emitter == REGISTERED_SYMBOLIC and r.torch_op == op and r.source]
            source = source or (written[0].source if written else None)
        if not (diverging and diverging.get("symbolic")):
            message += f"; the model holds nodes emitted by your own symbolic(s) for {', '.join(symbolics)}: check them first"
    functions = [f for f in facts.get("traced_functions") or () if isinstance(f, dict) and f.get("name")]
    function = None
    # A node whose inputs agree and which ONNX Runtime computes as the reference does, yet differs:
    # its input was changed after PyTorch computed it (a Function's forward writing its output in
    # place through numpy or an extension kernel, which the trace recorded as it was).
    unexplained = bool(diverging) and (diverging.get("inputs_agree") is True and diverging.get("runtime_matches_reference") is True
                   and not diverging.get("symbolic") and not diverging.get("random"))
    if functions and (not diverging or diverging.get("inputs_agree") is False or (unexplained and len(functions) == 1)):
        # The difference shows downstream of values the search could not compare, and the trace
        # holds a Function the exporter inlined: what its forward computed outside PyTorch is
        # frozen into the graph (analysis/fixes/function_kernel.py gives it a node and a kernel).
        shown = ", ".join(f["name"] for f in functions)
        if unexplained:
            # Not the node's export: the value it reads changed after the trace recorded it.
            message = re.sub(r": the export of \S+ means something other than what PyTorch computes",
                             ", yet it differs: the value it reads was changed after PyTorch computed it", message)
        message += (f"; the trace holds {shown} (torch.autograd.Function with no symbolic): the exporter "
                    "inlined the ops its forward ran, and anything it computed outside PyTorch (numpy, a "
                    "compiled extension, writing its output in place) is frozen into the graph")
        if len(functions) == 1:
            function = functions[0]
            # The line that applies the Function, rather than the node the difference shows at.
            op, source = function["name"], function.get("source") or source
    found = make_finding(code, Stage.PARITY, normalize_message(message, base_dir=base_dir, limit=700), op=op,
                         node=node, source=source, evidence=tuple(rows) + evidence[:1])
    if function is not None:
        return replace(found, torch_op="prim::PythonOp")
    if diverging and not (diverging.get("runtime_matches_reference") is False and diverging.get("departing_node")):
        # The search's own names for the node, which a TorchScript trace knows before any table does.
        found = replace(found, onnx_op=diverging.get("op") or None, torch_op=diverging.get("torch_op") or None)
    return found


def _random_input(diverging: dict[str, Any], facts: dict[str, Any]) -> dict[str, str] | None:
    """The input node of the first differing value that is one of the graph's random ops, where
    the outputs were compared in distribution and differ."""
    drawn = facts.get("random") if isinstance(facts.get("random"), dict) else {}
    ops = set(drawn.get("ops") or ())
    if not ops or drawn.get("matched") is not False:
        return None
    return next((i for i in diverging.get("unchecked_inputs") or () if isinstance(i, dict) and i.get("op") in ops
                 and i.get("node")), None)


def _diverging_op(diverging: dict[str, Any]) -> tuple[str | None, str]:
    """The op a mismatch names, and what the search learnt about why that node differs.

    The torch op the node was exported from is the user's handle on it (the line calls it, a
    rewrite replaces it), unless the node is the runtime's doing: a random op (no two runs draw
    the same numbers) or a node ONNX Runtime computes unlike ONNX's reference implementation.
    A node written by the user's own symbolic keeps its ONNX op: the symbolic is what to read.
    """
    onnx_op, torch_op = diverging.get("op"), diverging.get("torch_op") or ""
    if diverging.get("random") and diverging.get("in_distribution") is False and torch_op:
        drawn = ", ".join(diverging["random"])
        return (torch_op,
                (f"; {drawn} (exported from {torch_op}) draws random numbers, and over many runs they are not "
                 "distributed as PyTorch's either: ONNX Runtime samples something else here"))
    if diverging.get("random"):
        drawn = ", ".join(diverging["random"])
        behind = f" (exported from {torch_op})" if torch_op else ""
        return (drawn,
                (f"; {drawn}{behind} draws random numbers in ONNX Runtime that PyTorch's generator never draws: "
                 "outputs that depend on it cannot match (draw them outside the model and pass them in as an input)"))
    if diverging.get("runtime_matches_reference") is False:
        onnx_op = diverging.get("departing_op") or onnx_op
        return onnx_op, (f"; on the same inputs ONNX's reference implementation computes this {onnx_op} "
                         "otherwise than ONNX Runtime does: the runtime, not the export, departs from the "
                         "ONNX specification here")
    if diverging.get("folded_input") and torch_op:
        # The node is right; a constant the exporter computed from the parameters is not.
        return torch_op, (f"; its input {diverging['folded_input']!r} is a constant the exporter computed from "
                          f"{torch_op} while exporting (constant folding) and stored, and it differs from "
                          f"what PyTorch's {torch_op} computes: the export of {torch_op} is what differs")
    if diverging.get("dropped_in_place") and torch_op:
        return torch_op, (f"; its inputs agree with the values PyTorch computed before {torch_op} wrote into one "
                          f"of them in place (through a view), and the file has no node for that {torch_op}: "
                          f"the exporter dropped the write; use the out-of-place form (x = x.masked_fill(...)) "
                          f"on the tensor itself")
    through = f" (exported from {torch_op})" if torch_op and not diverging.get("symbolic") else ""
    unchecked = [u for u in diverging.get("unchecked_inputs") or () if isinstance(u, dict) and u.get("op")]
    if diverging.get("moved_by"):
        # The node that differs first only moves values; its one input the search could not compare
        # is named instead (the worker's parity.first_diverging_traced).
        return torch_op or diverging.get("op"), (
            f"{through}; the first node that differs after it, {diverging['moved_by']}, only moves values: "
            "the difference arises here, at a value the search could not compare")
    if diverging.get("inputs_agree") is False:
        shown = ", ".join(f"{u['node']} ({u['op']})" for u in unchecked[:3])
        through += ("; some of its inputs come from nodes the search could not compare"
                    + (f" ({shown})" if shown else "") + ", so the difference may arise there")
    if diverging.get("runtime_matches_reference") is True and diverging.get("max_abs_diff") == float("inf"):
        # NaN or infinity on one side only: inputs equal within the tolerance can still differ
        # where it matters (a 1e-15 epsilon folded away turns x / (0 + eps) into 0 / 0).
        through += ("; a NaN or an infinity first appears here on one side only, though its inputs agree with "
                    "PyTorch within the tolerance: a difference below it (an epsilon the exporter dropped or "
                    "folded, float rounding) meets a division, log or exp that turns it into NaN or infinity")
    elif diverging.get("runtime_matches_reference") is True:
        written = ", ".join(diverging.get("group_ops") or [str(onnx_op)])
        through += (f"; its inputs agree with PyTorch and ONNX Runtime computes {written} as ONNX's reference "
                    f"implementation does: the export of {torch_op or 'this code'} means something other than "
                    "what PyTorch computes")
    if torch_op and not torch_op.startswith("prim::") and not diverging.get("symbolic"):
        return torch_op, through
    return onnx_op, through


def _blame_user_symbolic(found: list[Finding], by_stage: dict[Stage, StageOutcome]) -> list[Finding]:
    """A schema error in a TorchScript export whose script registered symbolics: likely theirs."""
    load, export = by_stage.get(Stage.LOAD), by_stage.get(Stage.EXPORT)
    symbolics = load.facts.get("custom_symbolics") if load else None
    if not symbolics or not export or export.facts.get("exporter") != "torchscript":
        return []
    first = next((f for f in found if f.severity is Severity.ERROR and f.code in ("OD303", "OD301", "OD304")), None)
    if first is None:
        return []
    op = next(iter(symbolics)) if len(symbolics) == 1 else None
    names = ", ".join(symbolics)
    return [
        make_finding(
            "OD205",
            Stage.EXPORT,
            f"the node {first.node or first.op} breaks its schema ({first.code}); it was emitted by a "
            f"symbolic function registered in your script ({names})",
            op=op,
            node=first.node,
            opset=first.opset,
            evidence=(first.message, *first.evidence),
        )
    ]


def _bad_symbolic(text: str, error: ErrorInfo) -> bool:
    """A TorchScript symbolic called `g.op` wrongly: the messages torch gives for exactly that.

    Words such as "symbolic" alone also occur in unrelated errors ("symbolic_trace", "symbolic
    shapes", FX tracing a dynamo-optimized function); those go to the stage's catch-all.
    """
    markers = (
        "is not a valid attribute",
        "Invalid attribute specifier",
        "Incompatible attribute kind",
        "_jit_pass_onnx_graph_shape_type_inference",
        "g.op(",
        "incompatible function arguments",
    )
    return (any(m in text for m in markers) and "torch.onnx" in (error.traceback_tail + " ".join(error.chain))
            # Only the TorchScript exporter's call into a Function's symbolic writes this note.
            or SYMBOLIC_METHOD_TYPE_ERROR.search(text) is not None)


def _capture_message(text: str, base_dir: str | None, default: str) -> str:
    for line in text.splitlines():
        line = re.sub(r"^<class '[\w.]+'>: ", "", line.strip())
        if any(key in line for key in ("Could not guard", "data-dependent", "Constraints violated", "Unsupported")):
            return normalize_message(line, base_dir=base_dir, limit=200)
    return default


def _classify_ort_load(failure: _Failure) -> list[Finding]:
    outcome, text, evidence, base_dir, by_stage = failure
    facts = outcome.facts
    found: list[Finding] = []
    match = NOT_REGISTERED_RT.search(text)
    if match:
        domain, op_type = match.group(1), match.group(2)
        # The worker read the op off the model's node (a domain may hold what the pattern cannot).
        op = str(facts.get("op") or (f"{domain}::{op_type}" if domain else op_type))
        message = f"ONNX Runtime has no kernel for {op}: register a custom-op library or kernel"
        aten = [str(a) for a in facts.get("aten_operators") or ()]
        if aten:
            # Written by operator_export_type=ONNX_ATEN_FALLBACK: no kernel library is the answer.
            message = (f"the model holds ATen fallback nodes ({', '.join(f'aten::{a}' for a in aten)}), written "
                       "by an export with ONNX_ATEN_FALLBACK: ONNX Runtime has no kernel for them")
        found.append(make_finding("OD401", Stage.ORT_LOAD, message, op=op, node=facts.get("node"), evidence=evidence))
    match = NO_IMPLEMENTATION.search(text) if not found else None
    if match:
        op_type, version, node = match.group(1), int(match.group(2)), match.group(3)
        types = facts.get("node_types") or {}
        listed = _kernel_type_summary(facts.get("kernels") or [], version)
        detail = f"; inputs are {', '.join(sorted(set(types.values())))}" if types else ""
        message = f"ONNX Runtime (CPU) has no {op_type}({version}) kernel for these types{detail}"
        if listed:
            message += f"; its kernel table lists {listed}"
        elif "kernels" in facts and not facts["kernels"]:
            message = (f"ONNX Runtime (CPU) has no {op_type}({version}) kernel for any type{detail}: "
                       "its CPU kernel table lists none (another execution provider may have one)")
        ev = evidence + tuple(f"kernel: {k}" for k in _kernel_lines(facts.get("kernels") or []))
        # The worker qualifies a node of another domain (com.microsoft::Rfft) the message names bare.
        qualified = str(facts.get("op") or op_type)
        op = qualified if qualified.endswith(f"::{op_type}") else op_type
        message = message.replace(f"no {op_type}(", f"no {op}(", 1)
        if facts.get("expanded_into") == op_type and facts.get("op"):
            # The graph's node has no kernel for its type and ran as its function body, whose
            # op ONNX Runtime names: the node the user can change is the graph's.
            message = (f"ONNX Runtime (CPU) has no {facts['op']} kernel for these types{detail}, and its function "
                       f"body's {op_type}({version}) has none either" + (f" (that lists {listed})" if listed else ""))
            op, node, version = str(facts["op"]), facts.get("node") or "", None
        found.append(make_finding("OD402", Stage.ORT_LOAD, message, op=op, node=node or None, opset=version,
                                  evidence=ev))
    match = _IR_VERSION.search(text) if not found else None
    if match:
        found.append(make_finding("OD403", Stage.ORT_LOAD,
                              f"the model's IR version {match.group(1)} is newer than this ONNX Runtime "
                              f"supports (max {match.group(2)})", evidence=evidence,
                              detail=IrTooNew(int(match.group(1)), int(match.group(2)))))
    match = _OPSET_RT.search(text) if not found else None
    if match:
        opset = next((int(g) for g in match.groups() if g), None)
        found.append(make_finding("OD404", Stage.ORT_LOAD,
                              f"opset {opset} is newer than this ONNX Runtime supports", opset=opset,
                              evidence=evidence))
    if not found:
        error = outcome.error
        op, node = facts.get("op"), facts.get("node")
        named = _LOAD_NODE.search(text)
        if named and not op:
            # "Node (/encoder/Where) Op (Where) [ShapeInferenceError] Incompatible dimensions"
            node, op = named.group(1), named.group(2)
        spec = _IN_NODE.search(text)
        if spec and not op:
            # The graph check's node spec: 'In Node, ("/layer/Gelu", Gelu, "com.microsoft", -1) :
            # ... Error Unrecognized attribute: approximate for operator Gelu' (onnxruntime#13279).
            node, domain = node or spec.group(1) or None, spec.group(3)
            op = f"{domain}::{spec.group(2)}" if domain not in ("", "ai.onnx") else spec.group(2)
        prepack = _PREPACK.search(text)
        if prepack and not op:
            # A kernel refusing its initializers while the session prepacks them ("MatMulNBits
            # PrePack: zero_points initializer shape {512,1} does not match ...").
            op = prepack.group(1)
        found.append(make_finding(catch_all(Stage.ORT_LOAD), Stage.ORT_LOAD,
                              first_line(normalize_message(error.message if error else "failed", base_dir=base_dir)),
                              op=op, node=node, evidence=evidence))
    check = by_stage.get(Stage.CHECK)
    checker_too_old = check is not None and any(
        "higher than the checker's" in r.get("message", "") for r in check.facts.get("findings", [])
    )
    checker_passed = check is not None and check.status is Status.PASSED and not checker_too_old
    if checker_passed and found[0].code == "OD401":
        # OD406 would add nothing: a custom domain is legal ONNX, only the kernel is missing.
        found[0] = replace(found[0], message=found[0].message + " (onnx.checker passes it: the model is "
                           "valid ONNX, only the runtime lacks the kernel)")
    elif checker_passed:
        first = found[0]
        found.append(make_finding("OD406", Stage.ORT_LOAD,
                              f"onnx.checker passed this model, but ONNX Runtime refuses it ({first.code})",
                              op=first.op, node=first.node, opset=first.opset))
    return found


# ONNX Runtime's load errors that name the node and its op, and a kernel's prepacking error.
_LOAD_NODE = re.compile(r"Node \(([^)]*)\) Op \((\w+)\)")
_IN_NODE = re.compile(r'In Node, \("([^"]*)", (\w+), "([^"]*)"')
_PREPACK = re.compile(r"\b([A-Z]\w+) PrePack:")


def _kernel_type_summary(kernels: list[dict[str, Any]], version: int) -> str:
    for kernel in kernels:
        if kernel.get("since", 0) <= version <= kernel.get("until", 10**6):
            types = kernel.get("types") or {}
            if types:
                first = min(types)
                return f"{first} in {{{', '.join(t.replace('tensor(', '').rstrip(')') for t in types[first])}}}"
    return ""


def _kernel_lines(kernels: list[dict[str, Any]]) -> list[str]:
    lines = []
    for kernel in kernels[:8]:
        types = "; ".join(f"{k}: {', '.join(v)}" for k, v in sorted((kernel.get('types') or {}).items()))
        lines.append(f"{kernel.get('domain')} opset {kernel.get('since')}-{kernel.get('until')}: {types}")
    return lines


def _shape_keys(match: re.Match[str]) -> DynamicShapesKeys | None:
    """torch's two key lists (`['x', 'y']`), read as data."""
    try:
        wanted, given = ast.literal_eval(match.group(1)), ast.literal_eval(match.group(2))
    except (ValueError, SyntaxError):
        return None
    if not all(isinstance(k, str) for k in (*wanted, *given)):
        return None
    return DynamicShapesKeys(tuple(wanted), tuple(given))


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[str, str | None, str | None]] = set()
    result: list[Finding] = []
    # One finding for a refusal repeated at several nodes of one op (the version converter's
    # Split at every C2f block): the same message but for the node's name; the others are listed.
    alike: dict[tuple[str, str | None, str], list[Finding]] = {}
    for finding in findings:
        key = (finding.code, finding.op, finding.node)
        if key in seen:
            continue
        seen.add(key)
        if finding.node:
            same = alike.setdefault((finding.code, finding.op, finding.message.replace(finding.node, "\0")), [])
            same.append(finding)
            if len(same) > 1:
                continue
        result.append(finding)
    for group in alike.values():
        if len(group) > 1:
            more = [f.node for f in group[1:]]
            shown = ", ".join(more[:5]) + (f" and {len(more) - 5} more" if len(more) > 5 else "")
            first = group[0]
            result[result.index(first)] = replace(
                first, message=f"{first.message} (the same at {len(more)} more node{'s' if len(more) > 1 else ''}: {shown})")
    errors = [f for f in result if f.severity is Severity.ERROR]
    others = [f for f in result if f.severity is not Severity.ERROR]
    return errors + others


_COMPARISONS = {ast.Lt: "aten::lt", ast.Gt: "aten::gt", ast.LtE: "aten::le", ast.GtE: "aten::ge",
                ast.Eq: "aten::eq", ast.NotEq: "aten::ne"}
_BRANCH = re.compile(r"^\s*(?:if|elif|while|assert)\s+(.+?):?\s*$")


# torch.export's refusal of a higher-order op whose functions did not trace whole, and its reason.
_HIGHER_ORDER = re.compile(r"UncapturedHigherOrderOpError|higher order op(?:erator)?")
_HIGHER_ORDER_REASON = re.compile(r"Got graph break/error:\s*\n\s*(.+)")
_HIGHER_ORDER_CALLS = {"cond": "higher_order::cond", "while_loop": "higher_order::while_loop",
                       "map": "higher_order::map", "scan": "higher_order::scan"}


def _article(name: str) -> str:
    """`a Batch`, `an Instances`: the article English reads before the class name."""
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _higher_order_call(source: str | None, base_dir: str | None) -> str | None:
    """The higher-order op (`higher_order::cond`) the user's line calls, read off the line and
    the lines after it (a call spread over several); None where it calls none."""
    lines = source_lines(source, base_dir, count=3)
    called = re.search(r"\b(?:torch\.|control_flow\.)?(cond|while_loop|map|scan)\s*\(", " ".join(lines))
    return _HIGHER_ORDER_CALLS[called.group(1)] if called and ("torch." in called.group(0) or called.group(1) != "map") else None


def _condition_op(source: str | None, base_dir: str | None) -> str | None:
    """The aten op a branch's condition ends in, read off the user's line (`if entropy <
    threshold:` is aten::lt, `if mask.any():` aten::any); None for anything else."""
    lines = source_lines(source, base_dir)
    try:
        branch = _BRANCH.match(lines[0]) if lines else None
        node = ast.parse(branch.group(1), mode="eval").body if branch else None
    except (SyntaxError, ValueError):
        return None
    if node is not None and any(isinstance(c, ast.Call) and (
            (isinstance(c.func, ast.Attribute) and c.func.attr in ("item", "tolist"))
            or (isinstance(c.func, ast.Name) and c.func.id in ("int", "float", "bool"))) for c in ast.walk(node)):
        return None  # `x.sum().item() > 3` compares Python numbers: .item() is where the value left
    while isinstance(node, (ast.UnaryOp, ast.BoolOp)):
        node = node.operand if isinstance(node, ast.UnaryOp) else node.values[0]
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _COMPARISONS.get(type(node.ops[0]))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("any", "all"):
        return f"aten::{node.func.attr}"
    return None
