"""PyTorch's own kernel for one aten op, run inside ONNX Runtime: the last resort for an op that
no rewrite, opset or exporter turns into ONNX that runs and agrees.

The op is exported as an `onnxdoctor::aten_<op>_<n>` node (one per call, each with its own types)
whose `call` attribute holds the call's non-tensor arguments as a Python literal, and an
onnxruntime-extensions Python kernel calls the aten overload with them. The model then runs in ONNX
Runtime with the op computed by PyTorch itself, so the numbers agree by construction wherever that
op was the problem (an unsupported op, a symbolic that refuses, a kernel ONNX Runtime lacks for the
type, a translation that rounds differently).

What it costs is stated on every fix: the serving process needs torch and onnxruntime-extensions,
and the op runs in Python. It is a bridge while a rewrite or a native kernel is written
(`onnxdoctor scaffold`), which is why it is proposed after every other family and only for one op.
docs/ARCHITECTURE.md ("Python-kernel bridges") describes the two exporters' halves.
"""

from __future__ import annotations

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import (
    CustomOpsets,
    ExportCode,
    Recipe,
    RuntimeKernels,
    UseExporter,
    UseOpset,
)

# Export-time codes name the aten op itself; the others name an ONNX node, bridged through the
# aten op it was exported from (the finding's torch_op, from the provenance table).
_EXPORT_CODES = ("OD201", "OD202", "OD205", "OD299")
CODES = (*_EXPORT_CODES, "OD301", "OD302", "OD304", "OD402", "OD501", "OD601", "OD603")

# Ops whose results depend on the module's mode: a mismatch there is eval_mode's, and a bridge
# running them in train mode would agree with a model that should not be in train mode.
_MODE_OPS = frozenset({"batch_norm", "native_batch_norm", "_native_batch_norm_legit", "dropout",
                       "native_dropout", "feature_dropout", "alpha_dropout", "instance_norm"})
# Ops that are plumbing rather than math: bridging one would hide where a problem really is.
_PLUMBING = frozenset({"view", "reshape", "_unsafe_view", "expand", "permute", "transpose", "t",
                       "slice", "select", "squeeze", "unsqueeze", "clone", "contiguous", "to",
                       "_to_copy", "copy_", "detach", "alias", "lift_fresh_copy", "size", "sym_size",
                       # A Python number read out of a tensor: no graph value a kernel could give.
                       "item", "_local_scalar_dense"})

_COST = (
    "the op runs as PyTorch code inside ONNX Runtime: the serving process needs torch and "
    "onnxruntime-extensions (register_custom_ops_library(get_library_path())), and the op runs in "
    "Python; a bridge while a rewrite or a native kernel (`onnxdoctor scaffold`) is written"
)


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """The two bridges (dynamo and TorchScript) for the finding's aten op, when it has one."""
    op = bridged_op(finding, ctx)
    if op is None:
        return []
    # The dynamo exporter stops at the first op it cannot translate; the worker lists the rest,
    # and one bridge covers them all (a model is fixed only when every one of them is).
    others = [str(u.get("op")) for u in ctx.export_facts.get("unsupported_ops") or () if isinstance(u, dict)]
    more = {_bridgeable(o, finding.code, ctx) for o in others} - {None, op}
    ops = (op, *sorted(o for o in more if o is not None))
    return [_bridge_fix(ops, "dynamo", ctx.requested_opset), _bridge_fix(ops, "torchscript", ctx.requested_opset)]


def bridged_op(finding: Finding, ctx: FixContext) -> str | None:
    """The aten op (`aten::name`, no overload) a bridge would run, or None."""
    return _bridgeable((ctx.op if finding.code in _EXPORT_CODES else finding.torch_op) or "", finding.code, ctx)


def _bridgeable(candidate: str, code: str, ctx: FixContext) -> str | None:
    """`aten::name` for an op a bridge may run, None for one it must not (see bridged_op)."""
    if not candidate.startswith("aten::"):
        return None
    name = candidate.removeprefix("aten::").split(".", 1)[0]
    if not name or name in _PLUMBING or name.endswith("_"):
        return None  # an in-place op writes into its input: a kernel returning a new tensor is not it
    if name in _MODE_OPS or (code in ("OD601", "OD603") and ctx.training):
        return None
    return f"aten::{name}"


def _named(ops: tuple[str, ...]) -> str:
    return ops[0] if len(ops) == 1 else f"{', '.join(ops[:-1])} and {ops[-1]}"


def _bridge_fix(ops: tuple[str, ...], exporter: str, opset: int | None) -> Fix:
    dynamo = exporter == "dynamo"
    code = _HEADER.format(ops="{" + ", ".join(map(repr, ops)) + "}") + _KERNELS + (_DYNAMO if dynamo else _TORCHSCRIPT)
    if dynamo:
        how, steps = "dynamo export", (ExportCode(code, program="program"),)
        if opset is not None and opset < 18:
            # The custom nodes refuse to be converted down: the model is written at opset 18.
            steps = (UseOpset(18), *steps)
        export = "# export with: torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)\n"
    else:
        how, steps = "TorchScript symbolic", (ExportCode(code), CustomOpsets((("onnxdoctor", 1),)))
        export = ("# export with: torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False,\n"
                  "#                   custom_opsets={'onnxdoctor': 1})\n")
    return Fix(
        kind=f"aten_kernel_{exporter}",
        title=f"Run PyTorch's {_named(ops)} inside ONNX Runtime ({how}, onnxruntime-extensions kernel)",
        snippet=code + "\n" + export + _SESSION,
        applicability=Applicability.UNSAFE,
        cost=_COST + ("" if dynamo else "; the TorchScript exporter is deprecated"),
        # Process-wide: onnxruntime-extensions' kernel table, a registered symbolic (docs/ARCHITECTURE.md).
        recipe=Recipe(f"aten_kernel_{exporter}", (UseExporter(exporter), *steps, RuntimeKernels(extensions=True)),
                      isolated=True),
    )


_HEADER = '''\
import ast
import itertools

import numpy as np
import torch
import onnxruntime_extensions
from onnxruntime_extensions import PyCustomOpDef, onnx_op

# These aten ops are exported as onnxdoctor::aten_<op>_<n> nodes, one per call, and run by
# PyTorch itself inside ONNX Runtime. A node's `call` attribute holds the call's arguments as a
# Python literal, "T" standing for each tensor input in order.
BRIDGED_OPS = {ops}
'''

_KERNELS = '''\
_KERNEL_TYPES = {
    torch.float32: PyCustomOpDef.dt_float, torch.float64: PyCustomOpDef.dt_double,
    torch.float16: PyCustomOpDef.dt_float16, torch.bfloat16: PyCustomOpDef.dt_bfloat16,
    torch.int64: PyCustomOpDef.dt_int64, torch.int32: PyCustomOpDef.dt_int32,
    torch.int16: PyCustomOpDef.dt_int16, torch.int8: PyCustomOpDef.dt_int8,
    torch.uint8: PyCustomOpDef.dt_uint8, torch.bool: PyCustomOpDef.dt_bool,
}
# Node numbers for the whole process, kept on the kernel library's module: onnxruntime-extensions'
# kernel table is process-wide, and a second export in the process (this code run again) must not
# reuse an op type already registered with other types.
_node_numbers = vars(onnxruntime_extensions).setdefault("onnxdoctor_bridge_numbers", itertools.count())


def _filled(literal, tensors):
    """The call's arguments with each "T" replaced by the next tensor input."""
    if literal == "T":
        return torch.from_numpy(np.array(next(tensors)))
    if isinstance(literal, list):
        return [_filled(item, tensors) for item in literal]
    if isinstance(literal, dict) and set(literal) == {"torch.dtype"}:
        return getattr(torch, literal["torch.dtype"])
    if isinstance(literal, dict):
        return {key: _filled(value, tensors) for key, value in literal.items()}
    return literal


def _register_kernel(overload, inputs, outputs, op_type=None):
    """A Python kernel calling `overload` for one node; returns the node's op type."""
    op_type = op_type or f"aten_{overload._schema.name.split('::')[1]}_{next(_node_numbers)}"

    def kernel(*tensors, **attrs):
        call = _filled(ast.literal_eval(attrs["call"]), iter(tensors))
        with torch.no_grad():
            result = overload(*call["args"], **call["kwargs"])
        if isinstance(result, torch.Tensor):
            return result.numpy()
        return tuple(r.numpy() for r in result)

    kernel.__name__ = op_type
    onnx_op(op_type=f"onnxdoctor::{op_type}", inputs=[_KERNEL_TYPES[t] for t in inputs],
            outputs=[_KERNEL_TYPES[t] for t in outputs], attrs={"call": PyCustomOpDef.dt_string})(kernel)
    return op_type


def _node_attributes(overload, inputs, outputs, spec):
    """What a node carries so a serving process can register its kernel from the file alone."""
    return {"call": repr(spec), "overload": f"{overload._schema.name}.{overload._overloadname}",
            "types": ",".join(str(t).removeprefix("torch.") for t in inputs) + "->"
            + ",".join(str(t).removeprefix("torch.") for t in outputs)}


def register_bridged_kernels(path):
    """In the serving process: a kernel for every onnxdoctor::aten_* node of a saved model."""
    import onnx

    for node in onnx.load(path, load_external_data=False).graph.node:
        if node.domain != "onnxdoctor" or not node.op_type.startswith("aten_"):
            continue
        attrs = {a.name: a.s.decode() for a in node.attribute}
        name, _, overload_name = attrs["overload"].partition(".")
        overload = getattr(getattr(torch.ops.aten, name.split("::")[1]), overload_name)
        inputs, _, outputs = attrs["types"].partition("->")
        _register_kernel(overload, [getattr(torch, t) for t in inputs.split(",") if t],
                         [getattr(torch, t) for t in outputs.split(",") if t], node.op_type)
'''

# Where the export's own code starts: the lines before it are all a serving process needs.
SERVING_ENDS = "# ---- the export; the lines above are all a process serving the model needs ----\n"

_DYNAMO = '''

''' + SERVING_ENDS + '''

def _literal(value, tensors):
    """A call argument as a Python literal; tensors go to `tensors` and read "T"."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return "T"
    if isinstance(value, (list, tuple)):
        return [_literal(item, tensors) for item in value]
    if isinstance(value, dict):
        return {key: _literal(item, tensors) for key, item in value.items()}
    if isinstance(value, torch.dtype):
        return {"torch.dtype": str(value).removeprefix("torch.")}  # not a call's own dtype= keyword
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot carry a {type(value).__name__} argument to ONNX Runtime")


def _bridge(overload):
    """`overload` written as an ONNX node run by its own kernel (called while torch.export traces)."""
    def call(*args, **kwargs):
        tensors = []
        spec = {"args": _literal(list(args), tensors), "kwargs": _literal(dict(kwargs), tensors)}
        result = overload(*args, **kwargs)  # fake tensors while exporting: the output types and shapes
        outputs = [result] if isinstance(result, torch.Tensor) else list(result)
        op_type = _register_kernel(overload, [t.dtype for t in tensors], [o.dtype for o in outputs])
        inputs = [t.dtype for t in tensors]
        made = torch.onnx.ops.symbolic_multi_out(
            f"onnxdoctor::{op_type}", tensors,
            attrs=_node_attributes(overload, inputs, [o.dtype for o in outputs], spec),
            dtypes=[o.dtype for o in outputs], shapes=[o.shape for o in outputs], version=1)
        return made[0] if isinstance(result, torch.Tensor) else type(result)(made)
    return call


# The script's keyword inputs and dynamic_shapes, where it has them, for both exports.
settings = {"kwargs": globals().get("example_kwargs") or None, "dynamic_shapes": globals().get("dynamic_shapes")}
exported = torch.export.export(model, tuple(example_inputs), strict=False, **settings)
bridged = exported.module()
for node in bridged.graph.nodes:
    if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.name in BRIDGED_OPS:
        node.target = _bridge(node.target)
bridged.recompile()
program = torch.export.export(bridged, tuple(example_inputs), strict=False, **settings)
'''

_TORCHSCRIPT = '''

''' + SERVING_ENDS + '''
from torch.onnx import register_custom_op_symbolic

_TENSOR_TYPES = ("Tensor", "Optional[Tensor]", "List[Tensor]", "List[Optional[Tensor]]")
_ONNX_TYPES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16,
               "BFloat16": torch.bfloat16, "Long": torch.int64, "Int": torch.int32,
               "Short": torch.int16, "Char": torch.int8, "Byte": torch.uint8, "Bool": torch.bool}


def _constant(value):
    """A traced argument's constant value (the tracer keeps numbers as 0-d tensors)."""
    node = value.node()
    if node.kind() == "prim::ListConstruct":
        return [_constant(item) for item in node.inputs()]
    if node.kind() != "prim::Constant":
        raise ValueError(f"{node.kind()} computes this argument: the bridge carries constants only")
    constant = value.toIValue()
    return constant.tolist() if isinstance(constant, torch.Tensor) else constant


def _fits(kind, constant):
    if kind.startswith("Optional["):
        return constant is None or _fits(kind[9:-1], constant)
    if kind.startswith("List["):
        return isinstance(constant, list) and all(_fits(kind[5:-1], c) for c in constant)
    fits = {"int": int, "SymInt": int, "float": (int, float), "bool": (bool, int), "str": str,
            "number": (int, float), "Scalar": (int, float)}.get(kind)
    return fits is not None and isinstance(constant, fits)


def _traced_call(node):
    """The node's overload and its arguments, non-tensor ones read from the traced constants."""
    for schema in torch._C._jit_get_schemas_for_operator(node.kind()):
        arguments = [a for a in schema.arguments if not a.is_out]
        if len(arguments) != node.inputsSize() or schema.overload_name.endswith("out"):
            continue
        call = []
        for argument, value in zip(arguments, node.inputs()):
            if str(argument.type) in _TENSOR_TYPES:
                call.append(None if value.node().kind() == "prim::Constant" and value.toIValue() is None
                            else "T")
                continue
            try:
                constant = _constant(value)
            except ValueError:
                break
            if not _fits(str(argument.type), constant):
                break
            call.append(constant)
        else:
            overload = getattr(getattr(torch.ops.aten, schema.name.split("::")[1]),
                               schema.overload_name or "default")
            return overload, arguments, call
    raise ValueError(f"no schema of {node.kind()} fits this call's constant arguments")


def bridge_symbolic(g, *args, _outputs=None):
    # `_outputs`: the length of a list result (chunk, split, unbind), which the exporter unpacks.
    node = g.original_node
    overload, arguments, call = _traced_call(node)
    tensors, spec_args, spec_kwargs = [], [], {}
    for argument, value, literal in zip(arguments, args, call):
        if literal == "T" and str(argument.type).startswith("List["):
            items = list(value.node().inputs())  # a tensor list: one input per tensor
            tensors += items
            literal = ["T"] * len(items)
        elif literal == "T":
            tensors.append(value)
        if argument.kwarg_only:
            spec_kwargs[argument.name] = literal
        else:
            spec_args.append(literal)
    inputs = [_ONNX_TYPES[t.type().scalarType()] for t in tensors]
    if _outputs is not None:
        # A list of tensors of the input's type (the list's own type names no dtype: chunk and
        # split give the input's; the bridge offers no list op of another type).
        outputs = [inputs[0] if inputs else torch.float32] * _outputs
    else:
        outputs = [_ONNX_TYPES[o.type().scalarType()] for o in node.outputs()]
    op_type = _register_kernel(overload, inputs, outputs)
    attributes = _node_attributes(overload, inputs, outputs, {"args": spec_args, "kwargs": spec_kwargs})
    made = g.op(f"onnxdoctor::{op_type}", *tensors, **{f"{k}_s": v for k, v in attributes.items()},
                outputs=len(outputs))
    values = [made] if len(outputs) == 1 else list(made)
    if _outputs is not None:
        return values
    for value, original in zip(values, node.outputs()):
        value.setType(original.type())
    return made


# Registered at every opset the TorchScript exporter writes, so it replaces a built-in symbolic
# registered at any of them.
for op in BRIDGED_OPS:
    for opset in range(9, 21):
        register_custom_op_symbolic(op, bridge_symbolic, opset)
'''

_SESSION = (
    "# In ONNX Runtime, in a process that did not export: the lines above the export, then\n"
    "# register_bridged_kernels('model.onnx') gives each onnxdoctor::aten_* node of the file its kernel.\n"
    "#     from onnxruntime_extensions import get_library_path\n"
    "#     options = onnxruntime.SessionOptions()\n"
    "#     options.register_custom_ops_library(get_library_path())\n"
)
