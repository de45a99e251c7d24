"""Exceptions as plain data, and where in the user's files a failure comes from."""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from onnxdoctor.errors import CodedError
from onnxdoctor.worker.facts import jsonable


class StageFailed(CodedError):
    """A stage found a problem it can describe precisely (a code hint and facts)."""

    def __init__(self, message: str, code: str | None = None, **facts: Any) -> None:
        super().__init__(code, message)
        self.facts = facts


def exception_chain(
    exc: BaseException, *, limit: int = 64, hidden_context: bool = False
) -> list[BaseException]:
    """`exc` and its causes, outermost first, each once.

    `raise ... from None` hides the context from what is reported (`hidden_context` False); the
    searches for the user's line look behind it too, since torch re-raises that way from its own
    frames while the user's frame sits in the hidden context.
    """
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < limit:
        seen.add(id(current))
        chain.append(current)
        hide = current.__suppress_context__ and not hidden_context
        current = current.__cause__ or (None if hide else current.__context__)
    return chain


def error_info(exc: BaseException) -> dict[str, Any]:
    """Reduce an exception and its cause/context chain to plain data."""
    chain: list[str] = []
    messages: list[str] = []
    for current in exception_chain(exc, limit=12):
        chain.append(f"{type(current).__module__}.{type(current).__qualname__}")
        try:
            messages.append(exception_text(current)[:8000])
        except Exception:  # a user exception whose __str__ raises
            messages.append(f"<{type(current).__name__}: message unavailable>")
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])[-5000:]
    frame = library_frame(exc) or _replayed_library_frame(messages)
    if frame is not None:
        # The outer tail is torch's wrapper; a model library's frame (transformers, torchvision)
        # is where the user can look, and it sits deep in a cause the tail does not reach.
        tail += LIBRARY_FRAME_HEADER + "".join(traceback.format_list([frame]))[:900]
    return {
        "type": chain[0],
        "message": messages[0],
        "chain": chain,
        "chain_messages": messages[1:],
        "traceback_tail": tail,
    }


LIBRARY_FRAME_HEADER = "\nThe model library's frame it broke in:\n"
# Frames here are the machinery around a model, never the model's own code.
_NOT_MODEL_LIBRARIES = frozenset({
    "torch", "functorch", "onnx", "onnxscript", "onnx_ir", "onnxruntime", "onnxdoctor", "numpy",
    "sympy", "typing_extensions", "_pytest", "pluggy", "importlib", "runpy", "contextlib", "functools",
    "openvino",
})


def library_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of an installed model library (transformers, timm ...) in the chain.

    Innermost exception first: torch wraps the error raised inside the library in its own, and the
    wrapper's traceback never enters the library. Causes Python would print come before a context
    hidden by `raise ... from None` (torch hides its capture errors that way).
    """
    for hidden in (False, True):
        for current in reversed(exception_chain(exc, hidden_context=hidden)):
            for item in reversed(traceback.extract_tb(current.__traceback__)):
                if _model_library(item.filename):
                    return item
    return None


def torch_nn_functions(exc: BaseException) -> list[str]:
    """The functions of torch.nn's own code the chain passed through, innermost first, as
    "module.function" (`transformer._detect_is_causal_mask`), and of torch.distributions' as
    "distributions.module.function" (`distributions.distribution._validate_sample`): where a
    layer of torch's checked a traced value (fix families that answer one such function read this)."""
    found: list[str] = []
    for hidden in (False, True):
        for current in reversed(exception_chain(exc, hidden_context=hidden)):
            for item in reversed(traceback.extract_tb(current.__traceback__)):
                path = item.filename.replace("\\", "/")
                prefix = "" if "/torch/nn/" in path else "distributions." if "/torch/distributions/" in path else None
                if prefix is not None:
                    name = f"{prefix}{Path(path).stem}.{item.name}"
                    if name not in found:
                        found.append(name)
    return found[:20]


def model_code_frame(exc: BaseException, target: Path) -> traceback.FrameSummary | None:
    """The innermost frame of the model's code in the chain: a file in the user's folder or an
    installed model library, not torch's own (where torch.export met a data-dependent branch:
    `if is_global_attn:` in transformers, `if mask.any():` or `for i in hits:` in model.py)."""
    folder = target.resolve().parent
    for current in reversed(exception_chain(exc, hidden_context=True)):
        for item in reversed(traceback.extract_tb(current.__traceback__)):
            if item.filename.startswith("<"):
                continue
            with contextlib.suppress(OSError, ValueError):
                if _model_library(item.filename) or Path(item.filename).resolve().parent == folder:
                    return item
    return None


# When torch replays a captured graph (the dynamo exporter's decompositions), the Python stack is
# gone; torch prints the failing FX node's recorded stack in the message instead.
_REPLAYED_STACK = re.compile(r"Original traceback:\n(.*?)(?:\nUse tlparse|\n\n|\Z)", re.DOTALL)
_REPLAYED_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n[ \t]*([^\n]*)')


def _replayed_library_frame(messages: list[str]) -> traceback.FrameSummary | None:
    """The innermost model-library frame of the stack torch recorded for a failing FX node."""
    for message in reversed(messages):
        for stack in _REPLAYED_STACK.findall(message):
            for path, line, function, code in reversed(_REPLAYED_FRAME.findall(stack)):
                if _model_library(path):
                    return traceback.FrameSummary(path, int(line), function.strip(), line=code.strip() or None)
    return None


def _model_library(filename: str) -> bool:
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            index = len(parts) - 1 - parts[::-1].index(marker)
            package = parts[index + 1] if index + 1 < len(parts) else ""
            return bool(package) and package.split(".")[0] not in _NOT_MODEL_LIBRARIES
    return False


# An output's value as the tracer prints it into its error ("output 1 (Columns 1 to 10 0.35 ...
# [ torch.FloatTensor{1,25600} ]) of traced region ..."; "(1,.,.) = ..." blocks for more dims):
# thousands of numbers ahead of the point.
_PRINTED_TENSOR = re.compile(r"(output \d+ )\((?:(?!\[ torch\.).)*?\[ torch\.(\w+)\{([\d,]*)\} \]\)",
                             re.DOTALL | re.IGNORECASE)


def exception_text(exc: BaseException) -> str:
    """The exception's message, a tensor printed into it shortened to its type and shape."""
    text = str(exc).strip() or type(exc).__name__
    if "[ torch." in text:
        text = _PRINTED_TENSOR.sub(lambda m: f"{m.group(1)}(a {m.group(2)} of shape ({m.group(3)}))", text)
    return text


def warning_texts(caught: list[warnings.WarningMessage]) -> list[str]:
    texts: list[str] = []
    for item in caught:
        text = f"{item.category.__name__}: {item.message}"
        if item.category.__name__ == "TracerWarning" and item.filename:
            # Where the value was frozen: the user's line, or a library's check (a distribution's).
            text += f" [{item.filename}:{item.lineno}]"
        if text not in texts:
            texts.append(text[:1000])
    return texts[:30]


def source_from_frames(exc: BaseException, target: Path) -> str | None:
    """The user's line from the node the exporter was converting when it failed.

    The TorchScript exporter's frames hold a `node` whose sourceRange() is the Python stack;
    the dynamo exporter's hold an FX `node` whose meta["stack_trace"] is.
    """
    for current in exception_chain(exc, hidden_context=True):
        tb = current.__traceback__
        while tb is not None:
            node = tb.tb_frame.f_locals.get("node")
            trace = ""
            with contextlib.suppress(Exception):
                if hasattr(node, "sourceRange"):
                    trace = str(node.sourceRange())
                elif hasattr(node, "meta"):
                    trace = str(node.meta.get("stack_trace") or "")
            found = user_line_from_trace(trace, target) if trace else None
            if found:
                return found
            tb = tb.tb_next
    return None


def where_in_script(exc: BaseException, target: Path) -> str:
    """'in get_model()' when a function of the script raised, 'while importing' for module code."""
    functions = [
        frame.name
        for frame in traceback.extract_tb(exc.__traceback__)
        if Path(frame.filename).resolve() == target.resolve() and frame.name != "<module>"
    ]
    return f"in {functions[0]}()" if functions else "while importing"


def node_source_lines(model: Any, target: Path, limit: int = 5000) -> dict[str, str]:
    """Node name -> the user's line that produced it, from the stack traces dynamo stores."""
    sources: dict[str, str] = {}
    for node in model.graph.node:
        for prop in node.metadata_props:
            if prop.key == "pkg.torch.onnx.stack_trace" and node.name:
                line = user_line_from_trace(prop.value, target)
                if line:
                    sources[node.name] = line
        if len(sources) >= limit:
            break
    return sources


_FX_TARGET = re.compile(r"target=torch\.ops\.(\w+)\.(\w+)")


def node_torch_op(model: Any, node_name: str) -> str | None:
    """The torch op the dynamo exporter translated into this node ("aten::lstm"), from the
    `pkg.torch.onnx.fx_node` metadata torch 2.13 writes on every node; None without it."""
    for node in model.graph.node:
        if node.name != node_name:
            continue
        for prop in node.metadata_props:
            if prop.key == "pkg.torch.onnx.fx_node":
                match = _FX_TARGET.search(prop.value)
                return f"{match.group(1)}::{match.group(2)}" if match else None
        return None
    return None


def user_line_from_trace(trace: str, target: Path) -> str | None:

    best = None
    for match in re.finditer(r'File "([^"<][^"]*)", line (\d+)', trace):
        path = Path(match.group(1))
        if path.resolve() == target.resolve() or path.parent.resolve() == target.parent.resolve():
            best = f"{path.name}:{match.group(2)}"
    return best


def find_symbolic_frame(exc: BaseException, target: Path) -> dict[str, Any] | None:
    """The user's frame when torch.onnx called into the user's code and it failed there."""
    folder = target.resolve().parent
    called_by_torch_onnx = False
    found = None
    for item in traceback.extract_tb(exc.__traceback__):
        filename = item.filename.replace("\\", "/")
        try:
            inside = Path(item.filename).resolve().parent == folder
        except (OSError, ValueError):
            inside = False
        # torch.onnx calls a symbolic itself; forward() it reaches through nn.Module and the tracer.
        if inside and called_by_torch_onnx:
            found = {"source": f"{Path(item.filename).name}:{item.lineno}", "function": item.name,
                     "line": (item.line or "").strip()}
        called_by_torch_onnx = "/torch/onnx/" in filename
    return found


def find_custom_symbolics(folder: Path) -> dict[str, str]:
    """Ops whose TorchScript symbolic the user's own files registered -> the function's name.

    Libraries register symbolics when imported (torchvision does for nms, roi_align ...): only
    functions defined in a file under the model's folder count as the user's.
    """
    try:
        from torch.onnx._internal.torchscript_exporter import registration
    except ImportError:
        return {}
    found: dict[str, str] = {}
    for name, group in registration.registry._registry.items():
        overrides = getattr(getattr(group, "_functions", None), "_overrides", None)
        if not overrides:
            continue
        function = next(iter(overrides.values()))
        # parse_args / quantized_args wrap the user's function (functools.wraps): its own code is
        # torch's; the file that defines it is the wrapped function's.
        with contextlib.suppress(ValueError):
            function = inspect.unwrap(function)
        code = getattr(function, "__code__", None)
        try:
            where = Path(code.co_filename).resolve() if code is not None else None
        except (OSError, ValueError):
            where = None
        # A virtual environment inside the project folder holds libraries, not the user's code.
        mine = (where is not None and where.is_relative_to(folder)
                and not {"site-packages", "dist-packages"} & set(where.parts))
        if mine:
            found[name] = getattr(function, "__name__", "")
    return dict(sorted(found.items()))


def user_frame(exc: BaseException, target: Path) -> str | None:
    """The innermost frame inside the user's folder, as file:line, searching the cause chain.

    torch re-raises capture errors from its own frames; the user's line is in the original
    exception's traceback, or in the message (`File "model.py", line 5`).
    """
    folder = target.resolve().parent
    for current in exception_chain(exc, hidden_context=True):
        best = None
        for item in traceback.extract_tb(current.__traceback__):
            if _in_folder(item, folder):
                best = f"{Path(item.filename).resolve().name}:{item.lineno}"
        if best is None:
            best = user_line_from_trace(str(current), target)
        if best is not None:
            return best
        if isinstance(current, SyntaxError) and current.lineno:
            return f"{target.name}:{current.lineno}"
    return None


def _in_folder(frame: traceback.FrameSummary, folder: Path) -> bool:
    """Whether a frame's file is in the user's folder ("<string>", "<frozen ...>" are generated code)."""
    if frame.filename.startswith("<"):
        return False
    try:
        return Path(frame.filename).resolve().parent == folder
    except (OSError, ValueError):
        return False


def aten_op(name: str) -> str | None:
    """`aten::name` where the dispatcher knows an op of that name (`interpolate` is Python around
    several, a dunder is an operator's method), else None."""
    import torch

    if not name or name.startswith("__"):
        return None
    return f"aten::{name}" if torch._C._jit_get_schemas_for_operator(f"aten::{name}") else None


def called_op(exc: BaseException, target: Path) -> str | None:
    """The aten op the user's line was calling when `exc` left torch's C++ (`trans._indices()` on a
    sparse constant: "Unsupported value kind: Tensor"), or None.

    Such an error names no op, and a C++ call leaves no frame of its own: the user's frame is the
    last one, and the position Python records for its instruction is the call expression itself.
    A frame after it (a module call, torch's Python) means the error came from deeper code, and
    the name at the user's line would be the wrong op (`self.linear(x)`).
    """
    import ast
    import builtins
    import linecache

    folder = target.resolve().parent
    # The first exception of the chain that passed through the user's code: its last frame must
    # be theirs (an earlier one the model caught is not the failure).
    frames = next((f for f in (traceback.extract_tb(c.__traceback__) for c in exception_chain(exc, hidden_context=True))
                   if any(_in_folder(frame, folder) for frame in f)), None)
    if not frames or not _in_folder(frames[-1], folder):
        return None
    last = frames[-1]
    # Positions (Python 3.11 on) are where the instruction's expression starts and ends.
    columns = (last.lineno, getattr(last, "end_lineno", None), getattr(last, "colno", None), getattr(last, "end_colno", None))
    if any(c is None for c in columns):
        return None
    # Positions are byte offsets into the UTF-8 source lines.
    lines = [linecache.getline(last.filename, n).encode() for n in range(last.lineno, last.end_lineno + 1)]
    if not lines or len(lines) > 20:
        return None
    lines[-1] = lines[-1][:last.end_colno]
    lines[0] = lines[0][last.colno:]
    try:
        call = ast.parse(b"".join(lines).decode().strip(), mode="eval").body
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(call, ast.Call):
        return None
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    # A Python builtin called by its name (`max(a, b)` asking a tensor for a bool) is no aten op,
    # whatever TorchScript calls its own builtin of that name.
    if isinstance(func, ast.Name) and hasattr(builtins, name):
        return None
    return aten_op(name)


def locate_op(loaded: Any, op: str, target: Path) -> dict[str, Any]:
    """Find the op's FX node through torch.export to learn the user's source line and call values."""
    import torch

    program = torch.export.export(loaded.model, loaded.args, kwargs=loaded.kwargs or None, strict=False)
    wanted = op.replace("::", ".")
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        name_of = getattr(node.target, "name", None)
        name = str(name_of() if callable(name_of) else node.target)
        if not (name == op or str(node.target).startswith(wanted) or name.startswith(op + ".")):
            continue
        facts: dict[str, Any] = {"fx_node": node.name}
        trace = node.meta.get("stack_trace") or ""
        source = user_line_from_trace(trace, target)
        if source:
            facts["source"] = source
        facts["call_args"] = [jsonable(a) if not isinstance(a, torch.fx.Node) else "<tensor>" for a in node.args]
        facts["call_kwargs"] = {
            k: (jsonable(v) if not isinstance(v, torch.fx.Node) else "<tensor>") for k, v in node.kwargs.items()
        }
        return facts
    return {}


class StderrText:
    """What a `capturing_stderr` block wrote to file descriptor 2 (set when the block ends)."""

    text: str = ""


@contextlib.contextmanager
def capturing_stderr() -> Iterator[StderrText]:
    """File descriptor 2 read for the block's duration, then written on to where it went before
    (nothing is lost from the worker's stderr). The TorchScript exporter's C++ side says why it
    could not inline an autograd.Function only there ("Unable to inline PythonOp: X due to the
    following exception"), not in the exception it raises later about another op."""
    import faulthandler
    import sys
    import tempfile

    captured = StderrText()
    sys.stderr.flush()
    saved = os.dup(2)
    dumping = faulthandler.is_enabled()
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        if dumping:
            # A native crash ends the process before the block does: its dump (what names the op
            # that crashed, OD901) must reach the real stderr, not the file.
            faulthandler.enable(file=saved, all_threads=False)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            if dumping:
                faulthandler.enable(file=sys.stderr, all_threads=False)
            os.close(saved)
            sink.seek(0)
            data = sink.read(_STDERR_LIMIT)
            captured.text = data.decode("utf-8", errors="replace")
            with contextlib.suppress(OSError):
                os.write(2, data)


# Enough of the exporter's stderr for its inline warnings; the rest is passed on unread.
_STDERR_LIMIT = 1 << 20

# "Unable to inline PythonOp: SparsemaxFunction due to the following exception", then the
# exception's first line ("SymbolicValueError: Unsupported: ONNX export of cumsum in opset 9. ...").
_NOT_INLINED = re.compile(r"Unable to inline PythonOp: (\w+) due to the following exception\s*\n(?:\w+: )?([^\n]+)")


def not_inlined(stderr: str) -> list[dict[str, str]]:
    """The autograd.Functions the TorchScript exporter could not inline, each with the first line
    of the reason it printed (the op inside the Function that stopped it)."""
    seen: dict[str, str] = {}
    for name, reason in _NOT_INLINED.findall(stderr):
        seen.setdefault(name, reason.split("  [Caused by")[0].strip())
    return [{"function": name, "reason": reason} for name, reason in seen.items()]


def unbacked_origins(loaded: Any, target: Path) -> list[dict[str, str]]:
    """For each data-dependent symbol (`u0`) torch.export makes while capturing the model: the op
    whose result it stands for (`aten::nonzero`'s row count, `aten::item`'s value) and the user's
    line that called it. torch's guard error names only the symbol, at the line that asked about
    it; the op that made it is what a rewrite replaces. Costs one torch.export."""
    import inspect

    import torch
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    folder = target.resolve().parent
    found: list[dict[str, str]] = []

    def recorded(create: Any) -> Any:
        def create_and_record(self: Any, *args: Any, **kwargs: Any) -> Any:
            symbol = create(self, *args, **kwargs)
            op, source = "", ""
            frame = inspect.currentframe()
            while frame is not None and not (op and source):
                func = frame.f_locals.get("func")
                if not op and isinstance(func, torch._ops.OpOverload):
                    # The op being faked when the symbol was made (FakeTensorMode's dispatch).
                    name = func.name().split(".", 1)[0]
                    op = "aten::item" if name == "aten::_local_scalar_dense" else name
                if not source:
                    with contextlib.suppress(OSError, ValueError):
                        if Path(frame.f_code.co_filename).resolve().parent == folder:
                            source = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"
                frame = frame.f_back
            found.append({"symbol": str(symbol), "op": op, "source": source})
            return symbol
        return create_and_record

    creators = {name: getattr(ShapeEnv, name) for name in
                ("create_unbacked_symint", "create_unbacked_symfloat", "create_unbacked_symbool")
                if hasattr(ShapeEnv, name)}
    try:
        for name, create in creators.items():
            setattr(ShapeEnv, name, recorded(create))
        with contextlib.suppress(Exception):  # it fails where the export did; the records stay
            torch.export.export(loaded.model, loaded.args, kwargs=loaded.kwargs or None, strict=False)
    finally:
        for name, create in creators.items():
            setattr(ShapeEnv, name, create)
    return found


# One frame of a TorchScript node's stack (its sourceRange): `path(12): forward`.
_TS_FRAME = re.compile(r"^(.+?)\((\d+)\): (\S+)", re.MULTILINE)


def torchscript_user_line(stack: str, target: Path) -> str | None:
    """The innermost frame in the user's folder of a TorchScript stack (`path(12): forward`)."""
    folder = target.resolve().parent
    for path, line, _function in _TS_FRAME.findall(stack):
        with contextlib.suppress(OSError, ValueError):
            if Path(path).resolve().parent == folder:
                return f"{Path(path).name}:{line}"
    return None
