"""What the exporters' own registries and ONNX's schemas say about an op (runs in the worker).

Answers "at which opsets can this aten op be exported?" without exporting once per opset.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

TORCHSCRIPT_OPSETS = range(7, 21)


def _torchscript_registry() -> Any:
    """The TorchScript exporter's symbolic registry, with every opset module imported."""
    from torch.onnx._internal.torchscript_exporter import registration

    for version in TORCHSCRIPT_OPSETS:  # registration happens as the modules import
        with contextlib.suppress(ImportError):
            importlib.import_module(f"torch.onnx._internal.torchscript_exporter.symbolic_opset{version}")
    return registration.registry


def torchscript_registrations(op: str) -> list[int]:
    """The opsets at which torch registers a (new) symbolic for `op`: grid_sampler -> [16, 20].

    An opset between two registrations uses the lower one's function, so a call the symbolic of
    opset 16 refuses is refused up to 19, and the next candidate is 20, not 17.
    """
    group = _torchscript_registry().get_function_group(op)
    if group is None:
        return []
    base = getattr(getattr(group, "_functions", None), "_base", None) or {}
    return sorted(v for v in base if isinstance(v, int))


def registered_symbolics(op: str) -> dict[int, Any]:
    """The symbolics registered with `register_custom_op_symbolic` for `op` (replacing torch's own
    there), by opset."""
    group = _torchscript_registry().get_function_group(op)
    overrides = getattr(getattr(group, "_functions", None), "_overrides", None) or {}
    return {v: f for v, f in overrides.items() if isinstance(v, int)}


def registered_overrides(op: str) -> list[int]:
    """The opsets `op`'s registered symbolics are at: what `unregister_custom_op_symbolic` takes."""
    return sorted(registered_symbolics(op))


def refuses_always(op: str) -> bool:
    """Whether every symbolic torch registers for `op` is a bare refusal: a body that only
    returns or raises `_onnx_unsupported(...)` (aten::_standard_gamma), so no opset and no
    argument exports it, which is an unsupported op rather than a call one symbolic refuses."""
    import ast
    import inspect
    import textwrap

    group = _torchscript_registry().get_function_group(op)
    base = getattr(getattr(group, "_functions", None), "_base", None) or {}
    if not base:
        return False
    for function in base.values():
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(function))))
        except (OSError, TypeError, SyntaxError):
            return False
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Raise)):
            return False
        call = body[0].value if isinstance(body[0], ast.Return) else body[0].exc
        name = call.func.attr if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) else (
            call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else "")
        if name != "_onnx_unsupported":
            return False
    return True


def refusing_symbolic(exc: BaseException) -> str | None:
    """The op whose built-in TorchScript symbolic raised `exc` ("aten::grid_sampler"), found by
    matching the traceback's frames against the registered functions' code.

    torch's refusals spell the op their own way ("GridSample with 5D volumetric input", "Sort"):
    the registry is the reliable name.
    """
    import inspect
    import traceback

    codes = [frame.f_code for frame, _line in traceback.walk_tb(exc.__traceback__)
             if "torchscript_exporter" in frame.f_code.co_filename.replace("\\", "/")]
    if not codes:
        return None
    registry = _torchscript_registry()
    owners: dict[Any, set[str]] = {}
    for name, group in registry._registry.items():
        base = getattr(getattr(group, "_functions", None), "_base", None) or {}
        for function in base.values():
            with contextlib.suppress(Exception):
                owners.setdefault(inspect.unwrap(function).__code__, set()).add(name)
    converting: str | None = None
    with contextlib.suppress(Exception):
        converting = converting_node_op(exc, "")
    # The node being converted, where a symbolic on the stack is registered for it: what the
    # user's code called, also where its symbolic hands the node to another registered one
    # (aten::pad's to constant_pad_nd), or where one factory-made function serves several ops
    # (torch's adaptive pools share one body).
    if converting and any(converting in owners.get(code, ()) for code in codes):
        return converting
    for code in reversed(codes):  # innermost first: a helper called by the symbolic is not it
        names = owners.get(code)
        if names:
            return next(iter(names)) if len(names) == 1 else None
    return None


# The traced graph spells Python's operators as dunders; users and torch's docs name the op.
DUNDER_OPS = {"aten::__and__": "aten::bitwise_and", "aten::__or__": "aten::bitwise_or",
               "aten::__xor__": "aten::bitwise_xor", "aten::__lshift__": "aten::bitwise_left_shift",
               "aten::__rshift__": "aten::bitwise_right_shift", "aten::__not__": "aten::bitwise_not"}


def nodes_being_converted(exc: BaseException, *, whole_chain: bool = False) -> list[Any]:
    """The traced graph nodes the TorchScript exporter was converting when `exc` was raised: the
    `node` of each `_run_symbolic_function(graph, block, node, ...)` frame, outermost first, in
    `exc`'s traceback (and its causes' and contexts' with `whole_chain`)."""
    import traceback

    from onnxdoctor.worker.tracebacks import exception_chain

    errors = exception_chain(exc, hidden_context=True) if whole_chain else [exc]
    return [frame.f_locals["node"] for error in errors
            for frame, _line in traceback.walk_tb(error.__traceback__)
            if frame.f_code.co_name == "_run_symbolic_function" and "node" in frame.f_locals]


def converting_node_op(exc: BaseException, text: str) -> str | None:
    """The torch op the TorchScript exporter was converting when `exc` was raised, if it was.

    The exporter converts the traced graph node by node (`_run_symbolic_function(graph, block,
    node, ...)`); its frame holds the node. Where the message blames the node's input rather
    than the node (a complex value reaching `abs`; "expected the output of `%permute ...` to be
    a quantized tensor" raised while converting `dequantize`), the op that produced that input
    is the one to name.
    """
    nodes = nodes_being_converted(exc)
    if not nodes:
        return None
    node = nodes[-1]  # the innermost: a block's node is converted inside its If/Loop's
    inputs = list(node.inputs())
    blamed = None
    if "Complex" in text and "unexpected tensor scalar type" in text:
        # The traced graph's types are often erased by then ("Tensor"): then the first input an
        # op produced (not a constant or a graph input) is the complex one.
        blamed = (next((v for v in inputs if "Complex" in str(v.type())), None)
                  or next((v for v in inputs if not v.node().kind().startswith("prim::")), None))
    elif "to be a quantized tensor" in text and inputs:
        blamed = inputs[0]
    kind = (blamed.node() if blamed is not None else node).kind()
    if kind == "onnx::Placeholder":
        # The exporter's stand-in for an op it converts later (index_put and the indexing ops it
        # meets while converting a block): the op is in its `name` attribute.
        with contextlib.suppress(Exception):
            name = str((blamed.node() if blamed is not None else node).s("name"))
            return name if "::" in name else f"aten::{name.rstrip('_')}"
    if kind == "prim::Constant" and blamed is None:
        # A constant the exporter cannot write (a quantized weight whose quantizer it cannot
        # read, "cannot call qscheme on UnknownQuantizer"): the op it feeds is the one to name.
        users = [use.user.kind() for output in node.outputs() for use in output.uses()]
        kind = next((k for k in users if not k.startswith("prim::")), kind)
    return DUNDER_OPS.get(kind, kind)


def quantized_module_op(model: Any, text: str) -> str | None:
    """The quantized op behind a packed-params failure, from the model's quantized modules.

    Packed weights (`Conv2dPackedParamsBase`, a `torch._C.ScriptObject`) stop both exporters
    before any op is named; the module holding them is the op the user must deal with:
    dynamic LSTM/GRU -> aten::quantized_lstm/gru, Conv2d -> quantized::conv2d, Linear ->
    quantized::linear (quantized::linear_dynamic for a dynamic one).
    """
    names: list[tuple[str, str]] = []
    for module in model.modules():
        where = type(module).__module__
        if not where.startswith(("torch.ao.nn.quantized", "torch.nn.quantized")):
            continue
        kind = type(module).__name__
        dynamic = ".dynamic" in where
        if kind in ("LSTM", "GRU"):
            names.append((kind, f"aten::quantized_{kind.lower()}"))
        elif kind.startswith(("Conv", "Linear")):  # the modules that hold packed weights
            op = kind.lower().replace("transpose", "_transpose")
            names.append((kind, f"quantized::{op}{'_dynamic' if dynamic else ''}"))
    if not names:
        return None
    for kind, op in names:  # "Conv2dPackedParamsBase" says which module's weights stopped it
        if f"{kind}PackedParams" in text:
            return op
    return names[0][1]


def traced_python_ops(loaded: Any) -> list[str]:
    """The `torch.autograd.Function`s of the traced graph (`prim::PythonOp`), in graph order.

    A graph pass that crashes on one ("Argument passed to at() was not in the map." from the
    peephole pass, on a Function whose symbolic returns a list attribute) names no node: the
    Functions in the graph are the candidates.
    """
    from torch.onnx._internal.torchscript_exporter import utils

    if loaded.kwargs:
        return []
    graph, _params, _out, _module = utils._create_jit_graph(loaded.model, tuple(loaded.args))
    found: list[str] = []

    def walk(block: Any) -> None:
        for node in block.nodes():
            if node.kind() == "prim::PythonOp" and node.pyname() not in found:
                found.append(node.pyname())
            for inner in node.blocks():
                walk(inner)

    walk(graph)
    return found


def graph_opset_floor(loaded: Any) -> dict[str, Any]:
    """The lowest opset at which every aten op of the traced graph has a TorchScript symbolic.

    The exporter stops at the first op it cannot map, so an opset chosen for that op alone can
    fail on the next one (unflatten needs 13, scaled_dot_product_attention 14): one trace lists
    them all. {"opset": N, "op": the op that needs N} or {} when nothing is known.
    """
    from torch.onnx._internal.torchscript_exporter import utils

    if loaded.kwargs:
        return {}
    graph, _params, _out, _module = utils._create_jit_graph(loaded.model, tuple(loaded.args))

    def kinds(block: Any) -> Any:
        for node in block.nodes():
            yield node.kind()
            for inner in node.blocks():
                yield from kinds(inner)

    floor: dict[str, Any] = {}
    for kind in sorted(set(kinds(graph))):
        if not kind.startswith("aten::"):
            continue
        versions = torchscript_opsets(kind)
        if versions and versions[0] > floor.get("opset", 0):
            floor = {"opset": versions[0], "op": kind}
    return floor


def torchscript_opsets(op: str) -> list[int]:
    """Opsets at which the TorchScript exporter has a symbolic for `op` (e.g. "aten::grid_sampler").

    A symbolic registered at opset N serves every opset >= N until the next registration, so the
    answer is every opset from the lowest registration up to the exporter's maximum.
    """
    group = _torchscript_registry().get_function_group(op)
    if group is None:
        return []
    return [v for v in TORCHSCRIPT_OPSETS if group.get(v) is not None]


def custom_op_schema(op: str) -> dict[str, Any] | None:
    """The schema of a torch.library op: argument names, types, defaults; number of returns."""
    import torch
    from torch._library import custom_ops

    namespace, _, name = op.partition("::")
    packet = getattr(getattr(torch.ops, namespace, None), name, None)
    if packet is None:
        return None
    overload = getattr(packet, "default", None) or getattr(packet, packet.overloads()[0])
    schema = overload._schema
    arguments = []
    for argument in schema.arguments:
        entry: dict[str, Any] = {"name": argument.name, "type": _schema_type(argument.type)}
        if argument.has_default_value():
            default = argument.default_value
            entry["default"] = default if isinstance(default, (int, float, bool, str)) or default is None else repr(default)
        arguments.append(entry)
    return {
        "schema": str(schema),
        "arguments": arguments,
        "returns": [_schema_type(r.type) for r in schema.returns],
        "python_impl": op in custom_ops.OPDEFS,
        "python_impl_name": getattr(getattr(custom_ops.OPDEFS.get(op), "_init_fn", None), "__name__", None),
        # Whether that name, in the function's own module, is the op (custom_op as a decorator)
        # or the plain function (custom_op(name, function), the op kept under another name).
        "python_impl_decorated": _decorated(custom_ops.OPDEFS.get(op)),
        "has_fake": op in custom_ops.OPDEFS and custom_ops.OPDEFS[op]._abstract_fn is not None,
    }


def _decorated(definition: Any) -> bool:
    function = getattr(definition, "_init_fn", None)
    return function is not None and getattr(function, "__globals__", {}).get(function.__name__) is definition


def _schema_type(kind: Any) -> str:
    """A schema type in schema spelling: `float?`, `int[]`, `Scalar`, `Tensor` (str() says
    `Optional[float]`, `List[int]`, `number`)."""
    import torch

    if isinstance(kind, torch.OptionalType):
        return _schema_type(kind.getElementType()) + "?"
    if isinstance(kind, torch.ListType):
        return _schema_type(kind.getElementType()) + "[]"
    return {"number": "Scalar"}.get(str(kind), str(kind))


def op_facts(op: str, exporter: str) -> dict[str, Any]:
    """Everything the fix proposals need to know about a failing op (cheap parts only)."""
    facts: dict[str, Any] = {"op": op}
    if not op.startswith("aten::"):
        # A custom op is in neither exporter's registry (that is the failure): skip the costly
        # registry builds and read what the fixes need, its schema.
        with contextlib.suppress(Exception):
            facts["schema"] = custom_op_schema(op)
        return facts
    if exporter == "torchscript":  # the opset fix is a TorchScript-exporter fix (dynamo writes 18+)
        with contextlib.suppress(Exception):
            facts["torchscript_opsets"] = torchscript_opsets(op)
            facts["torchscript_registrations"] = torchscript_registrations(op)
            facts["registered_overrides"] = registered_overrides(op)
    return facts


def unsupported_ops(loaded: Any, target: Any, programs: tuple[Any, Any, Any] | None = None) -> list[dict[str, Any]]:
    """Every op of the model the dynamo exporter has no ONNX function for, in graph order.

    The exporter stops at the first op it cannot translate; tracing the model once more and
    decomposing it the way the exporter does (its ONNX-friendly decomposition table) lists the
    rest, so one run names them all. Each entry: the op and, where the trace has it, the user's
    source line. `programs`: decomposed_programs(loaded), where the caller has made them already.
    """
    import torch

    from onnxdoctor.worker.tracebacks import user_line_from_trace

    _captured, program, registry = programs or decomposed_programs(loaded)
    found: dict[str, dict[str, Any]] = {}
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if registry.is_registered(node.target):
            continue
        name = _op_name(node)
        if name not in found:
            source = user_line_from_trace(node.meta.get("stack_trace") or "", target)
            found[name] = {"op": name, "source": source}
    return list(found.values())


def decomposed_programs(loaded: Any) -> tuple[Any, Any, Any]:
    """The model as torch.export captures it, and decomposed the way the dynamo exporter
    decomposes it (its ONNX-friendly table), with the exporter's registry."""
    import torch
    from torch.onnx._internal.exporter import _decomp, _registration

    registry = _registration.ONNXRegistry.from_torchlib()
    program = torch.export.export(loaded.model, loaded.args, kwargs=loaded.kwargs or None, strict=False)
    table = _decomp.create_onnx_friendly_decomposition_table(set(_decomp.get_onnx_implemented_overloads(registry)))
    return program, program.run_decompositions(table), registry


def decomposed_origin(loaded: Any, op: str, target: Any,
                      programs: tuple[Any, Any, Any] | None = None) -> dict[str, Any]:
    """The aten op whose decomposition wrote `op` (a prims op the dynamo exporter stopped at:
    `prims::prod` from `torch.cumprod`) and the user's line that calls it, from the decomposed
    graph's own record of each node's original op; {} when the graph has no such node. The first
    such node in graph order answers, as the exporter stops at the first it cannot translate.
    `programs`: decomposed_programs(loaded), where the caller has made them already."""
    from onnxdoctor.worker.tracebacks import user_line_from_trace

    captured, program, _registry = programs or decomposed_programs(loaded)
    origin = next((original.name().split(".")[0] for node in program.graph.nodes
                   if node.op == "call_function" and (original := node.meta.get("original_aten")) is not None
                   and _op_name(node) == op and original.name().split(".")[0] != op), None)
    if origin is None:
        return {}
    # The decomposed nodes keep forward()'s frame only; the captured graph's node of the original
    # op has the whole trace, down to the line that calls it.
    traces = (node.meta.get("stack_trace") or "" for node in captured.graph.nodes
              if node.op == "call_function" and _op_name(node) == origin)
    source = next((line for trace in traces if (line := user_line_from_trace(trace, target))), None)
    return {"op": origin, **({"source": source} if source else {})}


def _op_name(node: Any) -> str | None:
    """An FX node's op as `namespace::name` (None for a node that calls no op overload)."""
    name_of = getattr(node.target, "name", None)
    return name_of().split(".")[0] if callable(name_of) else None


def observe_calls(loaded: Any, op: str, limit: int = 4) -> list[dict[str, Any]]:
    """The op's calls in one eager forward pass: each argument's and result's shape and dtype.

    An op without a fake (meta) kernel cannot be traced, but it runs: what its real kernel
    returns on the example inputs is what a generated fake kernel must describe.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    def describe(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
        if isinstance(value, (int, float, bool, str)) or value is None:
            return value
        if isinstance(value, (list, tuple)):
            return [describe(v) for v in value]
        return repr(value)

    calls: list[dict[str, Any]] = []
    wanted = op.replace("::", ".")

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            if str(func.overloadpacket).replace("::", ".") == wanted and len(calls) < limit:
                results = result if isinstance(result, (list, tuple)) else [result]
                calls.append({"args": [describe(a) for a in args], "results": [describe(r) for r in results]})
            return result

    with torch.no_grad(), Recorder():
        loaded.model(*loaded.args, **(loaded.kwargs or {}))
    return calls


def aten_of_prims(op: str) -> str | None:
    """The aten op whose decomposition wrote the prims op the dynamo exporter stopped at
    (`prims::erf_inv` for `torch.erfinv`, `prims::bessel_i0` for `torch.i0`): the op the user's
    code calls. torch's references (torch._refs) are where each aten op becomes prims ops; a prims
    op that one reference alone calls names that reference's op. None when none or several do."""
    import inspect
    import re

    import torch
    import torch._refs
    import torch._refs.special

    namespace, _, name = op.partition("::")
    if namespace != "prims" or not name:
        return None
    callers: set[str] = set()
    calls = re.compile(rf"\bprims\.{re.escape(name)}\b")
    for module, prefix in ((torch._refs, ""), (torch._refs.special, "special_")):
        text = inspect.getsource(module)
        # A reference is a top-level function, or a name bound to a factory called with the prim.
        for match in re.finditer(r"^def (\w+)\(.*?(?=^def |^\w+ = |\Z)", text, re.DOTALL | re.MULTILINE):
            if calls.search(match.group(0)):
                callers.add(prefix + match.group(1))
        for match in re.finditer(rf"^(\w+) = _make_\w+\(\s*prims\.{re.escape(name)}\b", text, re.MULTILINE):
            callers.add(prefix + match.group(1))
    callers = {c for c in callers if not c.startswith("_") and hasattr(torch.ops.aten, c)}
    return f"aten::{callers.pop()}" if len(callers) == 1 else None
