"""What the worker learns about a failure beyond the exception: the op, its schema, its calls.

Best effort throughout: a fact that cannot be gathered is left out, never an error of its own.
"""

from __future__ import annotations

import contextlib
import re
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from onnxdoctor.analysis.classify import COULD_NOT_EXPORT_PYTHON
from onnxdoctor.protocol import FUNCTION_SYMBOLIC, REGISTERED_SYMBOLIC
from onnxdoctor.worker.tracebacks import (
    called_op,
    error_info,
    exception_chain,
    exception_text,
    find_custom_symbolics,
    find_symbolic_frame,
    locate_op,
    model_code_frame,
    source_from_frames,
    torch_nn_functions,
    user_frame,
)

_DEFINED_AT = re.compile(r"node defined in (?:File \")?([^\"(\n]+?)\"?(?:\((\d+)\)|, line (\d+))")
# The first data-dependent symbol a guard asked about: "... data-dependent expression Eq(u0, 1)"
# (u: an int, zuf: a float, zub: a bool).
_UNBACKED_SYMBOL = re.compile(r"data-dependent expression[^\n]*?\b((?:u|zuf|zub)\d+)\b")
_CALL = re.compile(r"(?:\btorch\.|\.)([a-z_][a-z0-9_]*)\(")


def constant_consumer(message: str, target: Path) -> tuple[str, int] | None:
    """The aten op called on the user's line that a constant's error points at ("node defined in
    model.py(50)"), read from the script, and the line: `torch.randn(x.shape, generator=g)` gives
    aten::randn."""
    import torch

    where = _DEFINED_AT.search(message)
    if where is None or Path(where.group(1).strip()).name != target.name:
        return None
    number = int(where.group(2) or where.group(3))
    lines = target.read_text("utf-8", errors="replace").splitlines()
    if not 0 < number <= len(lines):
        return None
    for name in _CALL.findall(lines[number - 1]):
        if hasattr(torch.ops.aten, name):
            return f"aten::{name}", number
    return None


def export_failure_facts(exc: BaseException, loaded: Any, dynamo: bool, target: Path, *, gather: bool) -> dict[str, Any]:
    """Op, node, source line and registry facts for an export failure (best effort).

    `gather`: also the costly facts about aten ops (the registries, every unsupported op), which
    the first run needs for its findings and fix runs do not.
    """
    from onnxdoctor.analysis.classify import (
        SYMBOLIC_METHOD_TYPE_ERROR,
        SYMBOLIC_OUTPUT_COUNT,
        extract_op,
    )

    info = error_info(exc)
    programs: tuple[Any, Any, Any] | None = None  # the decomposed program, made once for its readers
    op = extract_op("\n".join([info["message"], *info["chain_messages"]]))
    facts: dict[str, Any] = {"source": user_frame(exc, target)}
    if op in (None, "prim::Constant") and "has kind 'prim::Constant'" in info["message"]:
        # A Python object the tracer kept as a constant (a torch.Generator, a device) that no
        # symbolic can write: the op the user's line passes it to is the one to name.
        with contextlib.suppress(Exception):
            consumer = constant_consumer(info["message"], target)
            if consumer is not None:
                op, line = consumer
                facts["constant_source"] = f"{target.name}:{line}"
    symbolic = find_symbolic_frame(exc, target)
    if symbolic:
        # The failure happened inside the user's own symbolic function, called by torch.onnx.
        facts["symbolic_frame"] = symbolic
        facts["source"] = symbolic["source"]
        owners = [op for op, fn in find_custom_symbolics(target.resolve().parent).items()
                  if fn == symbolic["function"]]
        if owners and not op:
            # An autograd.Function's symbolic is registered under an empty namespace ("::DCNv3Function").
            op = owners[0].removeprefix("::")
            facts["op"] = op
    if not dynamo and not symbolic and ("Unsupported: ONNX export of" in info["message"]
                                        or info["type"].endswith("SymbolicValueError")):
        # torch's built-in symbolic refused the call and spelt the op its own way ("GridSample"):
        # the registry names the op, and says whether a later opset registers another symbolic.
        with contextlib.suppress(Exception):
            from onnxdoctor.worker.registry import (
                refuses_always,
                refusing_symbolic,
                torchscript_registrations,
            )

            refused = refusing_symbolic(exc)
            if refused and "Unsupported: ONNX export of" not in info["message"]:
                # A SymbolicValueError: only the registrations of an aten op's symbolic are wanted;
                # the op is named as before (prim::Constant given a Generator names the op the
                # line passes it to, a dunder alias such as aten::__or_ the op it stands for).
                if refused.startswith("aten::"):
                    facts["symbolic_registrations"] = torchscript_registrations(refused)
                    facts["refusing_symbolic"] = refused
                refused = None
            if refused:
                op = refused
                facts["symbolic_registrations"] = torchscript_registrations(refused)
                facts["symbolic_refuses_always"] = refuses_always(refused)
    text = "\n".join([info["message"], *info["chain_messages"]])
    with contextlib.suppress(Exception):
        facts["torch_nn_functions"] = torch_nn_functions(exc)
    if not op and not dynamo:
        with contextlib.suppress(Exception):
            from onnxdoctor.worker.registry import converting_node_op

            op = converting_node_op(exc, text)
    if not op and not dynamo:
        with contextlib.suppress(Exception):
            op = called_op(exc, target)
    if not op and not dynamo and loaded is not None and (
            "was not in the map" in text or "attribute 'Subgraph' is undefined" in text
            or ("INTERNAL ASSERT FAILED" in text and "/jit/passes/" in text)):
        # A graph pass crashed without naming a node (the pass over autograd Functions asking a
        # node for the subgraph an aborted Function call never recorded; dead-code elimination
        # meeting a Function that returns its input changed in place); the graph's Functions
        # are the suspects.
        with contextlib.suppress(Exception):
            from onnxdoctor.worker.registry import traced_python_ops

            functions = traced_python_ops(loaded)
            if len(functions) == 1:
                op = functions[0]
                facts["torch_op"] = "prim::PythonOp"  # the node it is in the graph
                # A Function around a compiled extension op (StyleGAN2's upfirdn2d): that op is
                # what its forward cannot be exported without.
                inner = function_inner_ops(loaded, name=op)
                if inner:
                    facts["inner_ops"], facts["torch_op"] = inner, inner[0]
    if not op and ("ScriptObject" in text or "PackedParams" in text) and loaded is not None:
        # A quantized module's packed weights stopped the exporter before any op was named.
        with contextlib.suppress(Exception):
            from onnxdoctor.worker.registry import quantized_module_op

            op = quantized_module_op(loaded.model, text)
    if not op:
        # Any failure inside a TorchScript symbolic: the torch op torch was converting names it.
        op = _converting(exc)
    if not op and loaded is not None:
        # The failing line of the user's applies an autograd.Function (`_NewEmptyTensorOp.apply(x,
        # shape)` in maskrcnn-benchmark's empty-input Conv2d): the Function is what failed, not
        # the module around the call.
        with contextlib.suppress(Exception):
            op = _applied_function(exc, loaded, target)
    if not op:
        # The trace stopped inside a torch.nn.functional wrapper, whose Python checks ran on traced
        # values (F.max_unpool2d's output-size check): the functional's own aten op is what failed;
        # likewise inside a torch.nn module's own code (nn.Unflatten's check of its sizes).
        with contextlib.suppress(Exception):
            op = functional_frame_op(exc) or module_frame_op(exc)
    if not op:
        # The export stopped inside an autograd.Function (its forward reading tensors as numpy, the
        # tracer failing on the Function itself, as on checkpoint's): the Function is what to fix.
        with contextlib.suppress(Exception):
            op = function_frame_op(exc)
            if op and loaded is not None:
                # Traced through its forward, the Function can be one node with a kernel that
                # calls it (the function_kernel fix family): what it takes and returns.
                facts["traced_functions"] = _traced_function(loaded, target, op)
    if not op and (isinstance(exc, IndexError) or (isinstance(exc, RuntimeError) and _OP_ARGUMENT.search(str(exc)))):
        # An op's own check of its arguments, raised by the op the user's line calls with no
        # Python frame of torch's between (`input_char.unsqueeze(1)` on a 0-d tensor the tracer
        # made of a size): that op. (The tracer's own refusals on such a line name no op.)
        with contextlib.suppress(Exception):
            op = op_on_raising_line(exc, target)
            if op:
                last = traceback.extract_tb(exc.__traceback__)[-1]
                facts["source"] = f"{Path(last.filename).name}:{last.lineno}"
    python_op = COULD_NOT_EXPORT_PYTHON.search(text)
    if python_op and not dynamo and loaded is not None:
        # The exporter could not inline the Function because its forward calls an op it cannot
        # export (a compiled extension's `natten::na2d_qk`); torch says which only on stderr.
        with contextlib.suppress(Exception):
            inner = function_inner_ops(loaded, name=python_op.group(1))
            if inner:
                facts["inner_ops"] = inner
        # The Function, traced through its forward, as one node whose kernel calls it (the
        # function_kernel fix family: mmcv's _DynamicScatter, whose voxel count is the data's).
        if "traced_functions" not in facts:
            with contextlib.suppress(Exception):
                facts["traced_functions"] = _traced_function(loaded, target, python_op.group(1))
    if dynamo and "data-dependent" in text:
        # The line whose branch asked for a data-dependent truth value (`if is_global_attn:`).
        with contextlib.suppress(Exception):
            frame = model_code_frame(exc, target)
            if frame is not None:
                facts["guard_site"] = f"{Path(frame.filename).name}:{frame.lineno}"
                facts["guard_code"] = (frame.line or "").strip()
        symbol = _UNBACKED_SYMBOL.search(text)
        if symbol and loaded is not None and gather:
            # torch names the symbol (u0), not the op whose result it is (nonzero's row count).
            # The first run only: it exports the model as the script gives it, so a fix's
            # patches (another numbering of the symbols) would name the wrong op.
            with contextlib.suppress(Exception):
                from onnxdoctor.worker.tracebacks import unbacked_origins

                origin = next((o for o in unbacked_origins(loaded, target)
                               if o["symbol"] == symbol.group(1) and o["op"]), None)
                if origin is not None:
                    facts["unbacked_origin"] = origin
    if op:
        facts["op"] = op
    counted = SYMBOLIC_OUTPUT_COUNT.search(text)
    registered = [name for name in find_custom_symbolics(target.resolve().parent)
                  if counted and name.split("::", 1)[-1] == counted.group(1)] if counted else []
    if counted and registered and not (loaded is not None and _is_function(loaded.namespace.get(counted.group(1)))):
        # A symbolic the script registered for an op of its own (an extension's fbgemm op, torch
        # names it without its namespace): the count is the op's outputs against the node's.
        op = facts["op"] = registered[0]
        facts["symbolic_outputs"] = {"expected": int(counted.group(2)), "got": int(counted.group(3)),
                                     "registered": True}
    elif counted and loaded is not None and _is_function(loaded.namespace.get(counted.group(1))):
        # The count torch checks is the Function's: its forward's outputs against what its own
        # symbolic returned (pytorch#48930: one TRT::BatchedNMS_TRT node for four outputs).
        op = facts["op"] = counted.group(1)
        facts["symbolic_outputs"] = {"expected": int(counted.group(2)), "got": int(counted.group(3))}
        with contextlib.suppress(Exception):
            facts["source"] = _symbolic_definition(loaded, op, target)
    if op and not symbolic and not facts.get("symbolic_outputs"):
        located = facts.get("constant_source") or facts.get("source") or source_from_frames(exc, target)
        if not located and "Defined at:" in text:
            # No frame holds the node (an op of a Function's inlined forward, `aten::size` of
            # `x.shape[0]`): the exporter's own message carries the node's stack, innermost first.
            located = _defined_at(text.split("Defined at:", 1)[1], target)
        if not located and loaded is not None and SYMBOLIC_METHOD_TYPE_ERROR.search(text):
            # The call into a Function's symbolic failed before any line of it ran: its `def`.
            with contextlib.suppress(Exception):
                located = _symbolic_definition(loaded, op, target)
        if located:
            facts["source"] = located
        else:  # costs a torch.export: only when the exporter's own frames did not tell
            with contextlib.suppress(Exception):
                facts.update(locate_op(loaded, op, target))
        if not dynamo and "Couldn't export operator" in text and loaded is not None:
            # A torch op the exporter stopped at inside a Function whose forward also calls an
            # extension op (`input.new_empty(0)` beside `fused_bias_act`, pytorch#116182): the
            # Function is exported through its inlined forward, and the extension op is what it
            # cannot be exported without.
            with contextlib.suppress(Exception):
                inner = function_inner_ops(loaded, line=facts.get("source"))
                if inner:
                    facts["inner_ops"] = inner
                    # The Function itself: what the user wrote, named in the finding; traced
                    # through its forward, one node whose kernel calls it (function_kernel).
                    facts["inner_function"] = function_owners(line=facts.get("source"))[0].__name__
                    if "traced_functions" not in facts:
                        facts["traced_functions"] = _traced_function(loaded, target, facts["inner_function"])
            if "inner_ops" not in facts and "Defined at:" in text:
                # No extension op, but the node's stack passes through a Function's forward (a
                # `torch.from_numpy` in a helper that forward calls, graspness#12): the Function
                # is what the user wrote, and what its fixes (its forward as a kernel) answer.
                with contextlib.suppress(Exception):
                    owner = _enclosing_function(text.split("Defined at:", 1)[1], target)
                    if owner:
                        facts["enclosing_function"] = owner
                        facts["traced_functions"] = _traced_function(loaded, target, owner)
        if op.startswith("prims::") and dynamo:
            # The dynamo exporter names the prims op a decomposition wrote; the user's line calls
            # the aten op (checked on that line: several ops decompose to some prims ops).
            with contextlib.suppress(Exception):
                called = _called_on_line(op, facts.get("source"), target)
                if called:
                    facts["prims_op"], op = op, called
                    facts["op"] = op
            if "prims_op" not in facts and loaded is not None:
                # Several aten ops decompose to this prims op (prod: prod, cumprod, ...) or the
                # line does not name one: the decomposed graph records which op each node came from.
                with contextlib.suppress(Exception):
                    from onnxdoctor.worker.registry import decomposed_origin, decomposed_programs

                    programs = decomposed_programs(loaded)  # unsupported_ops below reads them too
                    origin = decomposed_origin(loaded, op, target, programs)
                    if origin:
                        facts["prims_op"], op = op, origin["op"]
                        facts["op"] = op
                        if origin.get("source"):
                            facts["source"] = origin["source"]
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

                facts["unsupported_ops"] = [row for row in unsupported_ops(loaded, target, programs)
                                            if row.get("op") != facts.get("prims_op")]  # the same call
    return facts


def _called_on_line(prims_op: str, source: str | None, target: Path) -> str | None:
    """The aten op whose decomposition writes `prims_op`, when the user's line calls it by name."""
    from onnxdoctor.worker.registry import aten_of_prims

    called = aten_of_prims(prims_op)
    name, _, line = (source or "").rpartition(":")
    if called is None or not line.isdigit() or Path(name).name != target.name:
        return None
    lines = target.read_text("utf-8", errors="replace").splitlines()
    text = lines[int(line) - 1] if 0 < int(line) <= len(lines) else ""
    function = called.split("::", 1)[1].removeprefix("special_")
    return called if re.search(rf"\b{re.escape(function)}\s*\(", text) else None


# An aten op's checks of its arguments (what it raises, not the tracer).
_OP_ARGUMENT = re.compile(r"Dimension out of range|is invalid for input of size|must match the size|"
                          r"Sizes of tensors must match|out of bounds|expected .{0,40}dim")
# Names TorchScript registers for list, dict and string methods too: a call of one on the line
# is as likely Python's own.
_PYTHON_METHODS = frozenset({"pop", "append", "get", "index", "split", "format", "items", "copy", "keys",
                             "values", "extend", "insert", "remove", "count", "join", "update"})


def op_on_raising_line(exc: BaseException, target: Path) -> str | None:
    """`aten::NAME` when the exception's innermost frame is a line of the model's folder that
    calls exactly one aten op by name (a Tensor method or a `torch.` function): C++ raised it
    from that call. None where the line calls none or several, or torch's Python ran last."""
    import ast

    import torch

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    if Path(last.filename).resolve().parent != target.resolve().parent or not last.lineno:
        return None
    lines = Path(last.filename).read_text("utf-8", errors="replace").splitlines()
    text = lines[last.lineno - 1].strip() if last.lineno <= len(lines) else ""
    if text.startswith(("if ", "elif ", "while ")) and text.endswith(":"):
        text = text.removeprefix("el") + " pass"  # a condition: parsed as a statement of its own
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner, name = node.func.value, node.func.attr
            if isinstance(owner, ast.Name) and owner.id in ("F", "nn", "self", "np", "math"):
                return None  # a functional, a module or another library: not an aten call here
            if hasattr(torch.ops.aten, name) and not name.startswith("_") and name not in _PYTHON_METHODS:
                called.add(name)
    return f"aten::{called.pop()}" if len(called) == 1 else None


FUNCTIONAL_FILES = ("torch/nn/functional.py", "torch/functional.py")
# Functionals whose aten op has another name, where aten's op of their own name is another op
# (aten::unfold is Tensor.unfold, a sliding window along one dim; F.unfold calls aten::im2col).
FUNCTIONAL_OPS = {"unfold": "im2col", "fold": "col2im"}


def functional_frame_op(exc: BaseException) -> str | None:
    """`aten::NAME` when the exception (or what caused it) was raised inside the functional NAME
    of torch/nn/functional.py or torch/functional.py, called from outside them (its private
    helpers are passed over), and aten has an op of that name; None otherwise."""
    import torch

    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        frames = traceback.extract_tb(link.__traceback__)
        inside = [i for i, f in enumerate(frames) if f.filename.replace("\\", "/").endswith(FUNCTIONAL_FILES)]
        if inside:
            run = [inside[-1]]  # the innermost run of functional frames, outermost first
            while run[0] - 1 in inside:
                run.insert(0, run[0] - 1)
            for index in run:
                name = FUNCTIONAL_OPS.get(frames[index].name, frames[index].name)
                if not name.startswith("_") and hasattr(torch.ops.aten, name):
                    return f"aten::{name}"
            return None
        link = link.__cause__ or link.__context__
    return None


def module_frame_op(exc: BaseException) -> str | None:
    """`aten::name` when the exception was raised inside a torch.nn module's own code (its
    constructor's or forward's checks on traced values: `nn.Unflatten(1, x.shape[2:])` under the
    tracer, whose sizes are tensors) and aten has an op of the class's name in lower case; the
    innermost such module. None otherwise."""
    import torch

    for link in exception_chain(exc, hidden_context=True):
        for frame, _line in reversed(list(traceback.walk_tb(link.__traceback__))):
            if "/torch/nn/modules/" not in frame.f_code.co_filename.replace("\\", "/"):
                continue
            owner = frame.f_locals.get("self")
            name = type(owner).__name__.lower() if isinstance(owner, torch.nn.Module) else ""
            if name and hasattr(torch.ops.aten, name):
                return f"aten::{name}"
    return None


def function_frame_op(exc: BaseException) -> str | None:
    """The autograd.Function (its class name) innermost in the traceback of `exc` or what caused
    it: a frame running its forward, or a frame whose line calls its apply; None when none."""
    import linecache

    import torch

    def function_named(name: str, frame: Any) -> str | None:
        found = frame.f_locals.get(name, frame.f_globals.get(name))
        if isinstance(found, type) and issubclass(found, torch.autograd.Function) and found is not torch.autograd.Function:
            return found.__name__
        return None

    for link in exception_chain(exc, hidden_context=True):
        for frame, line in reversed(list(traceback.walk_tb(link.__traceback__))):
            owner, _, method = getattr(frame.f_code, "co_qualname", "").rpartition(".")
            if method == "forward" and owner and "<" not in owner:
                named = function_named(owner.split(".")[0], frame)
                if named:
                    return named
            call = _APPLY.search(linecache.getline(frame.f_code.co_filename, line))
            if call:
                named = function_named(call.group(1), frame)
                if named:
                    return named
    return None


# A symbolic refusing a value whose shape or rank the graph does not know.
_UNKNOWN_SHAPE = re.compile(r"of unknown shape|unknown rank|for unknown channel|input size not accessible")


def shapeless_function_facts(exc: BaseException, inlined: list[dict[str, str]], loaded: Any,
                             facts: dict[str, Any]) -> dict[str, Any]:
    """Where a symbolic refused a value of unknown shape and an autograd.Function could not be
    inlined: the Function (`shapeless_function`) and the extension ops its forward calls
    (`inner_ops`). Its node carries no output shape, so the first symbolic after it that needs
    one stops the export there (GPEN's FusedLeakyReLUFunction before a modulated convolution,
    yangxy/GPEN#66): the Function is the failure, not the convolution."""
    if "inner_ops" in facts or not _UNKNOWN_SHAPE.search(exception_text(exc)):
        return {}
    name = inlined[0]["function"]
    with contextlib.suppress(Exception):
        inner = function_inner_ops(loaded, name=name)
        if inner:
            return {"shapeless_function": name, "inner_ops": inner}
    return {}


_STACK_FRAME = re.compile(r"^\s*(.+?\.py)\((\d+)\): ", re.MULTILINE)


def _script_frames(stack: str, target: Path) -> Iterator[str]:
    """The `file.py:N` lines of a node's stack (innermost first) in the script's folder."""
    folder = target.resolve().parent
    for match in _STACK_FRAME.finditer(stack):
        path = Path(match.group(1))
        with contextlib.suppress(OSError, ValueError):
            if path.resolve().parent == folder:
                yield f"{path.name}:{match.group(2)}"


def _defined_at(stack: str, target: Path) -> str | None:
    """The innermost `file.py(N): function` line of a node's stack in the script's folder, as
    `file.py:N`."""
    return next(_script_frames(stack, target), None)


def _enclosing_function(stack: str, target: Path) -> str | None:
    """The autograd.Function whose forward is on a node's stack (innermost first), by the frames
    in the script's folder; None where none is."""
    return next((owners[0].__name__ for line in _script_frames(stack, target)
                 if (owners := function_owners(line=line))), None)


def function_owners(name: str | None = None, line: str | None = None) -> list[type]:
    """The autograd.Function classes named `name`, or whose forward holds `line` (`file.py:N`)."""
    import inspect

    import torch

    def holds(cls: type) -> bool:
        file, _, number = (line or "").rpartition(":")
        code = getattr(cls.forward, "__code__", None)
        if code is None or Path(code.co_filename).name != Path(file).name:  # torch's own Functions, cheaply
            return False
        with contextlib.suppress(OSError, TypeError, ValueError):
            lines, first = inspect.getsourcelines(cls.forward)
            return first <= int(number) < first + len(lines)
        return False

    def subclasses(cls: type) -> Iterator[type]:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    return [c for c in dict.fromkeys(subclasses(torch.autograd.Function))
            if c.__name__ == name or (line and holds(c))]


def _traced_function(loaded: Any, target: Path | None, name: str) -> list[dict[str, Any]]:
    """The trace's Functions (parity.traced_functions) whose class is `name`, as an error names
    it: the class name, the last part of a nested Function's qualified name."""
    from onnxdoctor.worker.parity import traced_functions

    return [f for f in traced_functions(loaded, target) if str(f["name"]).rsplit(".", 1)[-1] == name]


def function_inner_ops(loaded: Any, name: str | None = None, line: str | None = None) -> list[str]:
    """The ops outside torch's namespaces that an autograd.Function dispatches during one eager
    forward of the model, in order of first call: the Function named `name` (its class name),
    or the one whose forward holds `line` (`file.py:N`)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from onnxdoctor.analysis.classify import TORCH_NAMESPACES
    from onnxdoctor.worker.fixkit import reference_call
    from onnxdoctor.worker.parity import watching_forwards

    owners = function_owners(name, line)
    if not owners:
        return []
    running: list[type] = []
    found: list[str] = []

    def inside(owner: type, _inputs: tuple[Any, ...], run: Callable[[], Any]) -> Any:
        running.append(owner)
        try:
            return run()
        finally:
            running.pop()

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            namespace = getattr(func, "namespace", "")
            qualified = f"{namespace}::{func._opname}"
            if running and namespace and namespace not in TORCH_NAMESPACES and qualified not in found:
                found.append(qualified)
            return func(*args, **(kwargs or {}))

    with watching_forwards(owners, inside), torch.no_grad(), Watch():
        reference_call(loaded)
    return found


# `Name.apply(`: a line calling an autograd.Function.
_APPLY = re.compile(r"\b([A-Za-z_]\w*)\.apply\(")


def _converting(exc: BaseException) -> str | None:
    """The torch op (`aten::unfold`) whose TorchScript symbolic was running when `exc` was raised."""
    from onnxdoctor.worker.registry import nodes_being_converted

    for node in nodes_being_converted(exc, whole_chain=True):
        with contextlib.suppress(Exception):
            kind = str(node.kind())
            if "::" in kind and not kind.startswith(("prim::", "onnx::")):
                return kind.rstrip("_")
    return None


def torch_op_behind(node_op: str | None, state: dict[str, Any], node: str | None = None) -> dict[str, Any]:
    """The code that wrote a custom-domain node ONNX Runtime has no kernel for, from the export's
    provenance table: the torch op a registered symbolic maps (with its schema and real calls),
    the autograd.Function whose `symbolic` wrote it, or torch.onnx.ops.symbolic in forward().

    Without a table row (an older torch), the script's symbolics are matched by namespace and
    name (case aside), or the one symbolic of that namespace.
    """
    if not node_op or "::" not in node_op or state.get("loaded") is None:
        return {}
    table = state.get("provenance") or []
    row = next((r for r in table if node and r.node == node), None) or next(
        (r for r in table if r.op == node_op and r.emitter), None)
    facts: dict[str, Any] = {}
    behind = None
    if row is not None and row.emitter:
        facts["provenance"] = row.to_dict()
        if row.emitter == REGISTERED_SYMBOLIC and "::" in row.torch_op:
            behind = row.torch_op
        if row.emitter in (REGISTERED_SYMBOLIC, FUNCTION_SYMBOLIC):
            with contextlib.suppress(Exception):
                facts["elementwise"] = _elementwise(row, state)
        if row.emitter == FUNCTION_SYMBOLIC:
            with contextlib.suppress(Exception):
                facts["function_forward"] = _function_forward(row, state)
            # Defined in the script (reached by name there) or in an importable module.
            facts["function_in_script"] = row.function_class.partition(":")[0] in (
                "__onnxdoctor__", "__main__", state["loaded"].namespace.get("__name__"))
    else:
        domain, op_type = node_op.split("::", 1)
        symbolics = [op for op in state.get("load_facts", {}).get("custom_symbolics", {})
                     if op.split("::", 1)[0] == domain]
        named = [op for op in symbolics if op.split("::", 1)[1].lower() == op_type.lower()]
        behind = named[0] if named else (symbolics[0] if len(symbolics) == 1 else None)
    if behind is None:
        return facts
    from onnxdoctor.worker.registry import observe_calls, op_facts

    facts.update({"torch_op": behind, "torch_op_facts": op_facts(behind, state.get("exporter") or "torchscript")})
    with contextlib.suppress(Exception):
        facts["torch_op_calls"] = observe_calls(state["loaded"], behind)
    return facts


def _function_forward(row: Any, state: dict[str, Any]) -> str:
    """`file.py:12` of the Function's forward (where the eager math a kernel calls lives)."""
    from onnxdoctor.worker.loader import function_class

    code = function_class(row.function_class, state["loaded"]).forward.__code__
    return f"{Path(code.co_filename).name}:{code.co_firstlineno}"


def _elementwise(row: Any, state: dict[str, Any]) -> bool:
    """Whether the code behind the node computes elementwise: one output, and every aten op its
    eager body traces to (at the export's input types, small shapes) is pointwise."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    if len(row.output_types) != 1:
        return False
    if row.emitter == FUNCTION_SYMBOLIC:
        from onnxdoctor.worker.loader import function_class

        function = function_class(row.function_class, state["loaded"]).apply
    else:
        from torch._library import custom_ops

        definition = custom_ops.OPDEFS.get(row.torch_op)
        if definition is None:
            raise LookupError("no Python body to trace (a compiled op)")
        function = definition._init_fn
    arguments: list[Any] = []
    for argument in row.arguments:
        if argument.input >= 0:
            dtype = getattr(torch, row.input_types[argument.input] or "float32", torch.float32) \
                if argument.input < len(row.input_types) else torch.float32
            arguments.append(torch.rand(2, 3).to(dtype))
        else:
            arguments.append(argument.value)
    graph = make_fx(function)(*arguments)
    targets = [n.target for n in graph.graph.nodes if n.op == "call_function"]
    return bool(targets) and all(
        torch.Tag.pointwise in getattr(t, "tags", ()) or "aten::_to_copy" in str(t) for t in targets)


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


_APPLY = re.compile(r"\b([A-Za-z_]\w*)\.apply\(")


def _is_function(value: Any) -> bool:
    import torch

    return isinstance(value, type) and issubclass(value, torch.autograd.Function)


def _symbolic_definition(loaded: Any, name: str, target: Path) -> str | None:
    """`file.py:58` of the `symbolic` staticmethod of the script's autograd.Function `name`, where
    that file is in the model's folder."""
    import inspect

    function = loaded.namespace.get(name)
    symbolic = getattr(function, "symbolic", None)
    if symbolic is None:
        return None
    path = Path(inspect.getsourcefile(symbolic) or "")
    if path.resolve().parent != target.resolve().parent:
        return None
    lines, start = inspect.getsourcelines(symbolic)
    offset = next((i for i, line in enumerate(lines) if line.lstrip().startswith("def ")), 0)  # past decorators
    return f"{path.name}:{start + offset}"


def _applied_function(exc: BaseException, loaded: Any, target: Path) -> str | None:
    """The autograd.Function the innermost line of the model's code applies, if it applies one."""
    import torch

    frame = model_code_frame(exc, target)
    match = _APPLY.search(frame.line or "") if frame is not None else None
    found = loaded.namespace.get(match.group(1)) if match else None
    if isinstance(found, type) and issubclass(found, torch.autograd.Function):
        return found.__name__
    return None
