"""Which Python code produced each ONNX node, recorded while the export runs.

TorchScript exporter: every symbolic builds nodes through `GraphContext.op`; for the duration of
the export that call is wrapped to note the emitting function (torch's own symbolic, one the
user registered for a torch op, or an autograd.Function's `symbolic`), how its parameters became
the node's inputs and attributes, and the torch op being converted. The exporter's naming pass
(`_jit_pass_onnx_assign_scoped_names_for_node_and_value`) is wrapped too: the graph it names is
the one written, and each of its nodes carries the user's stack (sourceRange) and module scope.

Dynamo exporter: torch writes `pkg.torch.onnx.stack_trace`, `fx_node`, `class_hierarchy` and
`name_scopes` into each node's metadata_props; they are read from the file.

Best effort throughout: what cannot be recorded is left out; the export itself is never changed.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from onnxdoctor.protocol import (
    DYNAMO_TRANSLATION,
    FUNCTION_SYMBOLIC,
    ONNX_OPS_SYMBOLIC,
    REGISTERED_SYMBOLIC,
    TORCH_SYMBOLIC,
    NodeArgument,
    NodeProvenance,
)
from onnxdoctor.worker.facts import scalar_dtype, selecting_index, torch_scalar
from onnxdoctor.worker.tracebacks import torchscript_user_line

# Rows kept per export: every custom-domain node, then the others up to this many.
ROW_LIMIT = 5000

# torch's attribute keyword pattern in g.op (`limit_f`, `axes_i`, `mode_s`).
_ATTRIBUTE_KEY = re.compile(r"^(.+)_([ifstgz]|ty)$")
_TRAMPOLINES = ("_run_symbolic_function", "_run_symbolic_method")


@dataclass
class _Emission:
    kind: str
    emitter: str
    torch_op: str = ""
    function: str = ""
    function_class: str = ""
    arguments: tuple[NodeArgument, ...] = ()
    input_types: tuple[str, ...] = ()
    call: int = -1
    trampoline: Any = None  # the frame of torch's call into the symbolic (dropped once numbered)
    scalar_types: tuple[str, ...] = ()  # torch's spelling of each output's type, as written


@dataclass
class TorchScriptRecorder:
    """What the wrapped calls saw during one TorchScript export."""

    target: Path
    emissions: list[_Emission] = field(default_factory=list)
    final: list[dict[str, Any]] = field(default_factory=list)
    # The g.op call that raised, when an attribute's value does not fit its suffix (OD205).
    failure: dict[str, Any] | None = None
    # The symbolic call being recorded (torch's trampoline frame) and how many each emitter had.
    _frame: Any = None
    _calls: dict[str, int] = field(default_factory=dict)
    # The op whose result the tracer turned into a Python bool, by the line asking ("model.py:48":
    # "aten::any" for `if not mask.any():`): the value a frozen branch reads.
    branch_values: dict[str, str] = field(default_factory=dict)
    # The lines whose branch compares sizes (`if seq_len != d_seq_len * ds:`), in the order met:
    # a size the tracer froze there, the sizes fixes read one way (analysis/fixes/control_flow.py).
    size_branches: list[str] = field(default_factory=list)
    # The branch lines that leave a bounded loop early (`if done.all(): break` in a `for ... in
    # range(n)`): read as never taken, the graph runs every step (recipe.PrefixParity).
    loop_exits: list[str] = field(default_factory=list)
    # Branch sites whose condition decides how often a loop runs (controls_loop).
    loop_conditions: list[str] = field(default_factory=list)
    # The user's lines that read or assign a tensor's `.data` while traced (BinaryNet's
    # `input.data = input.data.sign()`): the tracer records neither, so what they compute is a
    # constant of the graph or lost (recipe.EagerExport.traced_data).
    data_sites: list[str] = field(default_factory=list)
    # Tensors forward() built from Python data while traced (`torch.tensor([[1.0, 0.0], ...])`),
    # with the user's line and their version counter then: the tracer holds such a tensor as a
    # constant by reference, so writing into it later (`t[0, 0] = 2 / w`) changes the constant
    # too, and the graph applies the write again (kornia's normal_transform_pixel).
    _built: list[tuple[str, Any, int]] = field(default_factory=list)
    # The user's lines that picked a module from an nn.ModuleList with a tensor while traced
    # (`self.norms[style_id](x)`): the tracer reads the index as the example's number, with no
    # warning, and the graph holds that module for every input (recipe.EagerExport.selected_modules).
    module_indices: list[str] = field(default_factory=list)
    # Each symbolic that raised, as (the node's op, the first line of its message): the
    # exporter's C++ side catches a refusal met while inlining an autograd.Function and prints
    # only the message ("bitwise AND for non-boolean input values"), not the op that refused.
    refusals: list[tuple[str, str]] = field(default_factory=list)

    @property
    def written_constants(self) -> list[str]:
        """The user's lines that built a tensor from Python data which forward() then wrote into
        in place, while traced (recipe.EagerExport.cloned_constants)."""
        sites: list[str] = []
        for site, tensor, version in self._built:
            with contextlib.suppress(Exception):
                if tensor._version != version and site not in sites:
                    sites.append(site)
        return sites

    def add(self, emission: _Emission) -> None:
        """Record one g.op call, numbered by the symbolic call it belongs to."""
        frame, emission.trampoline = emission.trampoline, None
        if frame is None or not emission.emitter:
            self.emissions.append(emission)
            return
        key = emission.function_class or emission.torch_op
        if frame is not self._frame:
            self._frame = frame
            self._calls[key] = self._calls.get(key, -1) + 1
        emission.call = self._calls[key]
        self.emissions.append(emission)

    def of_type(self, scalar: str) -> dict[str, str] | None:
        """The torch op behind the first written node with an output of torch's scalar type
        `scalar` (`ComplexDouble`), and the user's line: the file writer refuses such a type
        naming nothing else. A symbolic that wrote the type names the op; a type a pass made
        (constant folding) is named by the torch op that wrote at least two thirds of the other
        nodes of that user line, or not at all."""
        row = next((r for r in self.final if scalar in r.get("scalar_types", ())), None)
        emission = next((e for e in self.emissions if scalar in e.scalar_types and e.torch_op
                         and not e.torch_op.startswith("prim::")), None)
        if emission is not None:
            return {"op": emission.torch_op, "source": row["source"] if row else ""}
        if row is None:
            # No node writes the type: a parameter or a folded constant of it, named by the
            # first node that reads it (a frozen scalar multiplied under autocast).
            reader = next((r for r in self.final if scalar in r.get("input_scalar_types", ())), None)
            if reader is None:
                return None
            read = _align(self.final, self.emissions).get(id(reader))
            op = read.torch_op if read is not None and read.torch_op else reader["kind"].replace("onnx::", "")
            return {"op": op, "source": reader["source"], "node_kind": reader["kind"]}
        if not row["source"]:
            return None
        emitted = _align(self.final, self.emissions)
        ops = [e.torch_op for r in self.final if r["source"] == row["source"]
               for e in [emitted.get(id(r))] if e is not None and e.torch_op and not e.torch_op.startswith("prim::")]
        top = max(set(ops), key=ops.count) if ops else ""
        # Only a clear majority: a line calling several ops names none of them.
        return {"op": top if top and ops.count(top) * 3 >= len(ops) * 2 else "", "source": row["source"]}

    def table(self, model: Any) -> list[NodeProvenance]:
        """One row per node of the written model, its emitter matched by kind and order."""
        by_output = {row["outputs"][0]: row for row in self.final if row["outputs"]}
        emitted = _align(self.final, self.emissions)
        rows: list[NodeProvenance] = []
        for node in model.graph.node:
            row = by_output.get(node.output[0]) if node.output else None
            if row is None:
                continue
            emission = emitted.get(id(row))
            op = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
            record = NodeProvenance(
                node=node.name, op=op, source=row["source"],
                module=row["module"], output_types=tuple(row["output_types"]),
                input_types=tuple(row["input_types"]),
            )
            if emission is not None:
                record = replace(record, emitter=emission.emitter, torch_op=emission.torch_op,
                                 function=emission.function, function_class=emission.function_class,
                                 arguments=emission.arguments, call=emission.call)
            rows.append(record)
        return _bounded(rows)


_WORKER_DIR = os.path.dirname(os.path.abspath(__file__))


def asking_frame() -> Any:
    """The frame that asked a tensor's truth value, from inside a wrapper of Tensor.__bool__:
    the first one outside this package's worker (wrappers may wrap each other)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _WORKER_DIR:
        frame = frame.f_back
    return frame


def leaves_bounded_loop(filename: str, line: int) -> bool:
    """Whether the `if` on `line` of `filename` ends in `break` out of a `for ... in range(...)`
    loop: an early exit from a loop with a fixed number of steps (a decoder stopping once every
    sequence has its end token)."""
    tree = _parsed(filename)
    if tree is None:
        return False
    for loop in ast.walk(tree):
        ranged = (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
                  and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "range")
        if not ranged:
            continue
        for node in _same_loop(loop.body):
            if isinstance(node, ast.If) and node.lineno == line and node.body and isinstance(node.body[-1], ast.Break):
                return True
    return False


def controls_loop(filename: str, line: int) -> bool:
    """Whether the condition on `line` of `filename` decides how often a loop runs: a `while`
    loop's test, or an `if` in a loop's body that leaves it (`break`, `return`). The tracer records
    the example's number of steps; scripted, the loop stays an ONNX Loop."""
    tree = _parsed(filename)
    if tree is None:
        return False
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.While, ast.For)):
            continue
        # A condition spread over several lines asks from the line of its comparison.
        if isinstance(loop, ast.While) and loop.test.lineno <= line <= (loop.test.end_lineno or line):
            return True
        for node in _same_loop(loop.body):
            if isinstance(node, ast.If) and node.test.lineno <= line <= (node.test.end_lineno or line) and any(
                    isinstance(leaf, (ast.Break, ast.Return)) for leaf in _same_loop([*node.body, *node.orelse])):
                return True
    return False


def _same_loop(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a loop's body, nested ifs, withs, trys and matches included, but not
    inner loops or functions (a `break` there leaves something else)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.With)):
            yield from _same_loop(node.body)
            yield from _same_loop(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _same_loop(block)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                yield from _same_loop(case.body)


_PARSED: dict[str, ast.Module | None] = {}


def _parsed(filename: str) -> ast.Module | None:
    """The file's syntax tree (None where it cannot be read), parsed once per process."""
    if filename not in _PARSED:
        try:
            _PARSED[filename] = ast.parse(Path(filename).read_text("utf-8"))
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            _PARSED[filename] = None
    return _PARSED[filename]


def _from_sizes(node: Any, depth: int = 4) -> bool:
    """Whether a traced value is computed from a tensor's size (`140 < boxes.size(0)`), and not
    from a reduction of the data beside it (`(conf < t).float().sum() / (m + n) > 0.9`)."""
    return _has_size(node, depth) and not _reduces_data(node, depth)


_SIZE_OPS = ("aten::size", "prim::NumToTensor", "aten::numel", "aten::dim")
_REDUCTIONS = ("aten::sum", "aten::mean", "aten::max", "aten::min", "aten::amax", "aten::amin", "aten::any",
               "aten::all", "aten::count_nonzero", "aten::prod")


def _has_size(node: Any, depth: int) -> bool:
    if node.kind() in _SIZE_OPS:
        return True
    return depth > 0 and any(_has_size(value.node(), depth - 1) for value in node.inputs())


def _reduces_data(node: Any, depth: int) -> bool:
    if node.kind() in _REDUCTIONS and not any(_has_size(value.node(), depth) for value in node.inputs()):
        return True
    return depth > 0 and any(_reduces_data(value.node(), depth - 1) for value in node.inputs())


def truth_at(original: Callable[[Any], bool], tensor: Any, caller: Any) -> bool:
    """`original(tensor)` (a tensor's own truth value) from a wrapper of Tensor.__bool__, its
    warnings (the tracer's "Converting a tensor to a Python boolean") told at the caller's line,
    as they would be without the wrapper: the line the user wrote is what findings name."""
    return warned_at(caller, original, tensor)


def warned_at(caller: Any, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call(*args, **kwargs)` from a wrapper of a torch function, its warnings (the tracer's
    "torch.tensor results are registered as constants") told at `caller`'s line, as they would be
    without the wrapper."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = call(*args, **kwargs)
    for said in caught:
        warnings.warn_explicit(said.message, said.category, caller.f_code.co_filename, caller.f_lineno,
                               module=caller.f_globals.get("__name__"),
                               registry=caller.f_globals.setdefault("__warningregistry__", {}))
    return value


# The torch functions that build a tensor from Python or NumPy data, which the TorchScript tracer
# holds as a constant (recipe.EagerExport.cloned_constants).
DATA_MAKERS = ("tensor", "as_tensor", "from_numpy")
# onnxdoctor's own files (a fix's patches build tensors while traced too).
_OURS = str(Path(__file__).resolve().parent.parent) + os.sep


@contextlib.contextmanager
def recording_torchscript(target: Path) -> Iterator[TorchScriptRecorder]:
    """Wrap `GraphContext.op`, the naming pass, `Tensor.__bool__` and `Tensor.data` (when no fix
    already answers it) for the duration of one TorchScript export."""
    recorder = TorchScriptRecorder(target)
    try:
        import torch
        from torch.onnx._internal.torchscript_exporter import jit_utils
        from torch.onnx._internal.torchscript_exporter import utils as exporter_utils

        original_op = jit_utils.GraphContext.op
        original_naming = torch._C._jit_pass_onnx_assign_scoped_names_for_node_and_value
        original_convert = exporter_utils._run_symbolic_function
    except (ImportError, AttributeError):  # another torch: no table, the export as usual
        yield recorder
        return

    def convert(graph: Any, block: Any, node: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original_convert(graph, block, node, *args, **kwargs)
        except Exception as exc:
            with contextlib.suppress(Exception):
                recorder.refusals.append((str(node.kind()), str(exc).split("[Caused by", 1)[0].strip()))
            raise

    def op(self: Any, opname: str, *raw_args: Any, outputs: int = 1, **kwargs: Any) -> Any:
        try:
            result = original_op(self, opname, *raw_args, outputs=outputs, **kwargs)
        except Exception:
            with contextlib.suppress(Exception):
                recorder.failure = recorder.failure or _bad_attribute(opname, kwargs, sys._getframe(1))
            raise
        with contextlib.suppress(Exception):
            emission = _emission(self, opname, raw_args, kwargs, sys._getframe(1))
            values = result if isinstance(result, (tuple, list)) else (result,)
            emission.scalar_types = tuple(torch_scalar(v) for v in values)
            recorder.add(emission)
        return result

    def naming(graph: Any) -> Any:
        result = original_naming(graph)
        with contextlib.suppress(Exception):
            recorder.final.extend(_final_nodes(graph.nodes(), target))
        return result

    original_truth = torch.Tensor.__bool__
    # torch's own checks (InstanceNorm's channel count, F.batch_norm's batch size) ask too: they
    # validate sizes and are no branch of the model's that an edit could decide.
    torch_folder = os.path.dirname(torch.__file__) + os.sep

    def truth(self: Any) -> bool:
        caller = asking_frame()  # the line asking (bool() and `if` add no Python frame)
        with contextlib.suppress(Exception):
            ours = not caller.f_code.co_filename.startswith(torch_folder)
            traced = ours and torch._C._get_tracing_state() is not None
            node = torch._C._get_value_trace(self).node() if traced else None
            site = f"{os.path.basename(caller.f_code.co_filename)}:{caller.f_lineno}"
            if node is not None and not _from_sizes(node):
                # (A comparison of sizes, `min(k, len(boxes))`, freezes a number, not a branch.)
                recorder.branch_values.setdefault(site, node.kind())
                if site not in recorder.loop_exits and leaves_bounded_loop(caller.f_code.co_filename,
                                                                           caller.f_lineno):
                    recorder.loop_exits.append(site)
                if site not in recorder.loop_conditions and controls_loop(caller.f_code.co_filename, caller.f_lineno):
                    recorder.loop_conditions.append(site)
            elif node is not None and site not in recorder.size_branches:
                recorder.size_branches.append(site)
        return truth_at(original_truth, self, caller)

    data = torch._C.TensorBase.__dict__["data"]
    folder = target.resolve().parent
    mine: dict[str, bool] = {}  # file name -> in the user's folder (resolved once)

    def noting(frame: Any) -> None:
        """Record the user's line that used `.data`, while traced."""
        with contextlib.suppress(Exception):
            name = frame.f_code.co_filename
            if name not in mine:
                mine[name] = Path(name).resolve().parent == folder
            if torch._C._get_tracing_state() is not None and mine[name]:
                site = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
                if site not in recorder.data_sites:
                    recorder.data_sites.append(site)

    def data_read(self: Any) -> Any:
        noting(sys._getframe(1))
        return data.__get__(self)

    def data_write(self: Any, value: Any) -> None:
        noting(sys._getframe(1))
        data.__set__(self, value)

    def building(make: Callable[..., Any]) -> Callable[..., Any]:
        def built(data: Any, *args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            tensor = warned_at(frame, make, data, *args, **kwargs)
            with contextlib.suppress(Exception):
                # The user's code or a library's (kornia's normal_transform_pixel), not torch's own.
                name = frame.f_code.co_filename
                if (torch._C._get_tracing_state() is not None and not name.startswith((torch_folder, _OURS))
                        and not isinstance(data, torch.Tensor)):
                    site = f"{os.path.basename(name)}:{frame.f_lineno}"
                    recorder._built.append((site, tensor, tensor._version))
            return tensor
        return built

    original_item = torch.nn.ModuleList.__getitem__

    def item(self: Any, idx: Any) -> Any:
        picked = original_item(self, idx)
        with contextlib.suppress(Exception):
            frame = sys._getframe(1)
            name = frame.f_code.co_filename
            # (A fix's selection answers the index: it gives a callable, not the example's module.)
            if (selecting_index(idx) and isinstance(picked, torch.nn.Module) and torch._C._get_tracing_state() is not None
                    and not name.startswith((torch_folder, _OURS))):
                site = f"{os.path.basename(name)}:{frame.f_lineno}"
                if site not in recorder.module_indices:
                    recorder.module_indices.append(site)
        return picked

    makers = {name: getattr(torch, name) for name in DATA_MAKERS}
    for name, make in makers.items():
        setattr(torch, name, building(make))
    torch.nn.ModuleList.__getitem__ = item  # type: ignore[method-assign,assignment]
    exporter_utils._run_symbolic_function = convert
    jit_utils.GraphContext.op = op  # type: ignore[method-assign]
    torch._C._jit_pass_onnx_assign_scoped_names_for_node_and_value = naming
    torch.Tensor.__bool__ = truth  # type: ignore[method-assign]
    shadowed = "data" in torch.Tensor.__dict__  # another patch (a fix's) already answers .data
    if not shadowed:
        torch.Tensor.data = property(data_read, data_write)  # type: ignore[assignment,method-assign]
    try:
        yield recorder
    finally:
        recorder._frame = None
        for name, make in makers.items():
            setattr(torch, name, make)
        torch.nn.ModuleList.__getitem__ = original_item  # type: ignore[method-assign]
        exporter_utils._run_symbolic_function = original_convert
        jit_utils.GraphContext.op = original_op  # type: ignore[method-assign]
        torch._C._jit_pass_onnx_assign_scoped_names_for_node_and_value = original_naming
        torch.Tensor.__bool__ = original_truth  # type: ignore[method-assign]
        if not shadowed:
            del torch.Tensor.data


def dynamo_table(model: Any, target: Path) -> list[NodeProvenance]:
    """One row per node from the metadata the dynamo exporter writes."""
    rows: list[NodeProvenance] = []
    for node in model.graph.node:
        props = {p.key: p.value for p in node.metadata_props}
        fx_node = props.get("pkg.torch.onnx.fx_node", "")
        target_op = _fx_target(fx_node)
        emitter = ONNX_OPS_SYMBOLIC if target_op.startswith("onnx_symbolic::") else DYNAMO_TRANSLATION
        scopes = _literal_list(props.get("pkg.torch.onnx.name_scopes", ""))
        classes = _literal_list(props.get("pkg.torch.onnx.class_hierarchy", ""))
        module = ".".join(s for s in scopes[:-1] if s)
        owner = next((c for c in reversed(classes[:-1]) if c), "")
        op = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        source = _user_line_dynamo(props.get("pkg.torch.onnx.stack_trace", ""), target) or ""
        arguments = ()
        if emitter == ONNX_OPS_SYMBOLIC:
            arguments = tuple(NodeArgument(a.name, attribute=a.name, value=_attribute_value(a))
                              for a in node.attribute)
        rows.append(NodeProvenance(
            node=node.name, op=op, emitter=emitter, torch_op=target_op,
            module=f"{module} ({owner.rsplit('.', 1)[-1]})" if module and owner else module,
            source=source, arguments=arguments,
        ))
    return _bounded(rows)


# ---- TorchScript: what one g.op call tells -----------------------------------------------------------


def _emission(context: Any, opname: str, raw_args: tuple[Any, ...], kwargs: dict[str, Any], frame: Any) -> _Emission:
    """The emitting function of one g.op call, found by walking up to torch's trampoline."""
    kind = opname if "::" in opname else f"onnx::{opname}"
    chain: list[Any] = []
    trampoline = None
    current = frame
    while current is not None and len(chain) < 64:
        if current.f_code.co_name in _TRAMPOLINES and "torch/onnx" in current.f_code.co_filename.replace("\\", "/"):
            trampoline = current
            break
        chain.append(current)
        current = current.f_back
    if trampoline is None or not chain:
        return _Emission(kind, "")
    # The symbolic torch called: the outermost frame below the trampoline that is not a
    # decorator's wrapper (parse_args, quantized_args).
    helpers = [f for f in chain if not f.f_code.co_filename.replace("\\", "/").endswith("symbolic_helper.py")]
    called = helpers[-1] if helpers else chain[-1]
    code = called.f_code
    filename = code.co_filename.replace("\\", "/")
    mine = "/torch/onnx/" not in filename
    function = f"{Path(filename).name}:{code.co_firstlineno} {code.co_name}"
    types = tuple(scalar_dtype(v) for v in raw_args)
    if trampoline.f_code.co_name == "_run_symbolic_method":
        symbolic = trampoline.f_locals.get("symbolic_fn")
        return _Emission(kind, FUNCTION_SYMBOLIC, "prim::PythonOp", function, _function_class(symbolic),
                         _arguments(called, raw_args, kwargs), types, trampoline=trampoline)
    node = trampoline.f_locals.get("node")
    torch_op = str(node.kind()) if node is not None else ""
    if not mine:
        return _Emission(kind, TORCH_SYMBOLIC, torch_op, function, input_types=types, trampoline=trampoline)
    return _Emission(kind, REGISTERED_SYMBOLIC, torch_op, function, arguments=_arguments(called, raw_args, kwargs),
                     input_types=types, trampoline=trampoline)


_WANTS = {"f": ("a float", (float, int)), "i": ("an int", (int,)), "s": ("a string", (str,))}


def _bad_attribute(opname: str, kwargs: dict[str, Any], frame: Any) -> dict[str, Any] | None:
    """The attribute keyword whose value its suffix cannot take, with the symbolic parameter it
    came from and the `parse_args` descriptors that would hand the symbolic Python values."""
    import torch

    code = frame.f_code
    names = code.co_varnames[1: code.co_argcount]
    for key, value in kwargs.items():
        if key not in ("outputs",) and not _ATTRIBUTE_KEY.match(key):
            # No type suffix at all (`remove_center=` for `remove_center_i=`).
            return {"keyword": key, "attribute": key, "suffix": "", "wants": "a type suffix",
                    "given": f"a {type(value).__name__}", "value": _plain(value), "unsuffixed": True,
                    "parameter": next((n for n in names if frame.f_locals.get(n) is value), ""),
                    "node_op": opname, "function": f"{Path(code.co_filename).name}:{code.co_firstlineno} {code.co_name}",
                    "parse_args": []}
    first: dict[str, Any] | None = None
    # Every parameter handed to an attribute as a graph value, with the attribute's suffix: one
    # parse_args line must turn all of them into Python values, not only the first torch names.
    as_values: dict[str, str] = {}
    for key, value in sorted(kwargs.items()):  # the order torch adds attributes in (jit_utils)
        match = _ATTRIBUTE_KEY.match(key)
        if not match or match.group(2) not in _WANTS:
            continue
        suffix = match.group(2)
        want, types = _WANTS[suffix]
        items = value if isinstance(value, (list, tuple)) and suffix != "s" else [value]
        graph_value = any(isinstance(v, torch._C.Value) for v in items)
        wrong = graph_value or not all(isinstance(v, types) and not isinstance(v, bool) or
                                       (suffix == "i" and isinstance(v, bool)) for v in items)
        if not wrong:
            continue
        holding = [n for n in names if frame.f_locals.get(n) is value]  # one value can be several arguments
        parameter = match.group(1) if match.group(1) in holding else (holding[0] if holding else "")
        if graph_value:
            for name in holding:
                as_values.setdefault(name, suffix)
        if first is None:
            given = "a graph value (torch._C.Value)" if graph_value else f"a {type(value).__name__}"
            first = {"keyword": key, "attribute": match.group(1), "suffix": suffix, "wants": want, "given": given,
                     "value": None if graph_value else _plain(value), "parameter": parameter, "node_op": opname,
                     "function": f"{Path(code.co_filename).name}:{code.co_firstlineno} {code.co_name}",
                     "graph_value": graph_value}
    if first is None:
        return None
    descriptors = []
    for name in names:
        local = frame.f_locals.get(name)
        descriptors.append(as_values.get(name) or ("v" if isinstance(local, torch._C.Value)
                                                   else _DESCRIPTOR.get(type(local), "none")))
    others = [name for name in as_values if name != first["parameter"]]
    return {**first, "parse_args": descriptors if first.pop("graph_value") else [], "also": others}


_DESCRIPTOR = {float: "f", int: "i", bool: "b", str: "s"}


def _arguments(frame: Any, raw_args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[NodeArgument, ...]:
    """How the symbolic's parameters (after `g`) became the node's inputs and attributes."""
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    inputs = [_unique(v) for v in raw_args]
    attributes: dict[str, Any] = {}
    for key, value in kwargs.items():
        match = _ATTRIBUTE_KEY.match(key)
        if match and key != "outputs":
            attributes[match.group(1)] = value
    found: list[NodeArgument] = []
    for name in names[1:]:
        value = frame.f_locals.get(name)
        unique = _unique(value)
        if unique is not None:
            found.append(NodeArgument(name, input=inputs.index(unique) if unique in inputs else -1))
            continue
        plain = _plain(value)
        # The attribute it went to: the same name, else the one attribute holding that value.
        attribute = name if name in attributes and _plain(attributes[name]) == plain else ""
        if not attribute:
            holding = [k for k, v in attributes.items() if _plain(v) == plain and plain is not None]
            attribute = holding[0] if len(holding) == 1 else ""
        found.append(NodeArgument(name, attribute=attribute, value=plain))
    return tuple(found)


def _unique(value: Any) -> int | None:
    import torch

    return value.unique() if isinstance(value, torch._C.Value) else None


def _plain(value: Any) -> Any:
    """A constant as JSON data (None for anything else: a tensor, a graph value)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return list(value)
    return None


def _function_class(symbolic: Any) -> str:
    """`module:Qualname` of the autograd.Function whose staticmethod `symbolic` this is."""
    qualname = getattr(symbolic, "__qualname__", "")
    owner = qualname.rsplit(".", 1)[0] if "." in qualname else ""
    return f"{getattr(symbolic, '__module__', '')}:{owner}" if owner and "<locals>" not in owner else ""


def _final_nodes(nodes: Any, target: Path, rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The named graph's nodes (sub-blocks included) as plain data.

    The user's line is read at once (a node's stack text is kilobytes); past ROW_LIMIT standard
    nodes, whose rows are dropped anyway, it is not read at all.
    """
    rows = [] if rows is None else rows
    for node in nodes:
        kind = str(node.kind())
        wanted = len(rows) < ROW_LIMIT or not kind.startswith("onnx::")
        rows.append({
            "kind": kind,
            "outputs": [o.debugName() for o in node.outputs()],
            "source": (torchscript_user_line(str(node.sourceRange()), target) or "") if wanted else "",
            "module": _module_path(node.scopeName()) if wanted else "",
            "input_types": [scalar_dtype(v) for v in node.inputs()] if wanted else [],
            "output_types": [scalar_dtype(v) for v in node.outputs()] if wanted else [],
            # torch's own spelling, kept for the types ONNX has no name for (ComplexDouble): the
            # file writer refuses them after this pass, naming only the type.
            "scalar_types": [torch_scalar(v) for v in node.outputs()] if wanted else [],
            # and of its inputs: a parameter or constant of such a type has no node writing it.
            "input_scalar_types": [torch_scalar(v) for v in node.inputs()] if wanted else [],
        })
        for block in node.blocks():
            _final_nodes(block.nodes(), target, rows)
    return rows


def _module_path(scope: str) -> str:
    """`__main__.Net::/torch.nn.modules.linear.Linear::l` -> `l (Linear)`."""
    parts = [p.split("::", 1) for p in scope.split("/") if "::" in p]
    names = [name for _cls, name in parts if name]
    if not names:
        return ""
    from onnxdoctor.worker.parity import scope_names

    # A Sequential's child repeats its parent's name in the scope ("layers/layers.1"): qualnames.
    return f"{scope_names(names)[-1]} ({parts[-1][0].rsplit('.', 1)[-1]})"


def _align(final: list[dict[str, Any]], emissions: list[_Emission]) -> dict[int, _Emission]:
    """Each final node's emission: custom-domain kinds by their order among that kind (never
    folded away), standard ones in order with the passes' removals skipped."""
    matched: dict[int, _Emission] = {}
    custom: dict[str, list[_Emission]] = {}
    for emission in emissions:
        if not emission.kind.startswith("onnx::"):
            custom.setdefault(emission.kind, []).append(emission)
    standard: list[dict[str, Any]] = []
    for row in final:
        kind = row["kind"]
        if kind.startswith("onnx::"):
            standard.append(row)
            continue
        queue = custom.get(kind)
        if queue:
            matched[id(row)] = queue.pop(0)
    emitted = [e for e in emissions if e.kind.startswith("onnx::")]
    pairs = _common_order([r["kind"] for r in standard], [e.kind for e in emitted])
    if pairs is None:
        pairs = _greedy_order([r["kind"] for r in standard], [e.kind for e in emitted])
    for i, j in pairs:
        matched[id(standard[i])] = emitted[j]
    for i, j in _nearby(standard, emitted, dict(pairs)):
        matched[id(standard[i])] = emitted[j]
    return matched


def _nearby(standard: list[dict[str, Any]], emitted: list[_Emission],
            paired: dict[int, int]) -> list[tuple[int, int]]:
    """Rows the common order left out, each given the closest unused emission of its kind near
    its predecessor's: a pass that moves a node a few places (an Unsqueeze hoisted before the
    Where that reads it) takes it out of the common order without it being any less emitted."""
    used = set(paired.values())
    found: list[tuple[int, int]] = []
    anchor = -1
    for i, row in enumerate(standard):
        if i in paired:
            anchor = paired[i]
            continue
        window = [j for j in range(max(0, anchor - 16), min(len(emitted), anchor + 33))
                  if j not in used and emitted[j].kind == row["kind"]]
        if window:
            j = min(window, key=lambda k: abs(k - (anchor + 1)))
            used.add(j)
            found.append((i, j))
    return found


# Above this many cells the longest common subsequence is not computed (memory: 2 bytes a cell).
_LCS_CELLS = 30_000_000


def _common_order(final: list[str], emitted: list[str]) -> list[tuple[int, int]] | None:
    """The longest common subsequence of the written kinds and the emitted ones, as index pairs.

    The passes after conversion fold constants, fuse BatchNormalization into Conv and drop
    Identity nodes, and add Constants of their own: a node's emission is the same kind in the
    same order, with gaps on both sides. A greedy walk lets one folded Constant claim an emission
    far ahead and leaves every node after it without one; the common subsequence does not.
    None when the table is too large to compute (the greedy walk is used then).
    """
    import numpy as np

    n, m = len(final), len(emitted)
    if n == 0 or m == 0:
        return []
    if n * m > _LCS_CELLS or max(n, m) >= 32767:
        return None
    codes: dict[str, int] = {}
    a = np.array([codes.setdefault(k, len(codes)) for k in final], np.int32)
    b = np.array([codes.setdefault(k, len(codes)) for k in emitted], np.int32)
    # Row i holds the LCS lengths of final[:i+1] against emitted[:j+1]; a row is the running
    # maximum of (the row above, or the diagonal + 1 where the kinds are equal).
    table = np.zeros((n + 1, m + 1), np.int16)
    for i in range(n):
        above = table[i]
        step = above[1:].copy()
        equal = b == a[i]
        step[equal] = above[:-1][equal] + 1
        table[i + 1, 1:] = np.maximum.accumulate(np.maximum(step, above[1:]))
    pairs: list[tuple[int, int]] = []
    i, j = n, m
    while i > 0 and j > 0:
        if a[i - 1] == b[j - 1] and table[i, j] == table[i - 1, j - 1] + 1:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif table[i - 1, j] >= table[i, j - 1]:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


def _greedy_order(final: list[str], emitted: list[str]) -> list[tuple[int, int]]:
    """Each written kind to the next emission of that kind (within 400): for huge graphs only."""
    pairs: list[tuple[int, int]] = []
    position = 0
    for i, kind in enumerate(final):
        for index in range(position, min(len(emitted), position + 400)):
            if emitted[index] == kind:
                pairs.append((i, index))
                position = index + 1
                break
    return pairs


def _user_line_dynamo(trace: str, target: Path) -> str | None:
    from onnxdoctor.worker.tracebacks import user_line_from_trace

    return user_line_from_trace(trace, target) if trace else None


# ---- dynamo metadata ----------------------------------------------------------------------------------

_FX_TARGET = re.compile(r"target=torch\.ops\.([\w]+)\.([\w]+)")
# Python's arithmetic on symbolic sizes (operator.floordiv), named as the exporter's registry does.
_FX_OPERATOR = re.compile(r"target=operator\.(\w+)\b")


def _fx_target(fx_node: str) -> str:
    match = _FX_TARGET.search(fx_node)
    if match:
        return f"{match.group(1)}::{match.group(2)}"
    operator = _FX_OPERATOR.search(fx_node)
    return f"_operator::{operator.group(1)}" if operator else ""


def _literal_list(text: str) -> list[str]:
    import ast

    with contextlib.suppress(ValueError, SyntaxError):
        value = ast.literal_eval(text)
        if isinstance(value, list):
            return [str(v) for v in value]
    return []


def _attribute_value(attribute: Any) -> Any:
    import onnx

    with contextlib.suppress(Exception):
        return _plain(onnx.helper.get_attribute_value(attribute))
    return None


def _bounded(rows: list[NodeProvenance]) -> list[NodeProvenance]:
    if len(rows) <= ROW_LIMIT:
        return rows
    custom = [r for r in rows if "::" in r.op]
    return custom + [r for r in rows if "::" not in r.op][: max(0, ROW_LIMIT - len(custom))]
