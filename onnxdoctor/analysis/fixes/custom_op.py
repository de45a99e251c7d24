"""Custom-domain export mapping plus an ONNX Runtime kernel, generated from the op's own schema.

For `ns::name(Tensor x, float beta=1.0) -> Tensor` this writes a TorchScript symbolic (with the
right `_f/_i/_s` suffixes), a dynamo `custom_translation_table` entry (an onnxscript function
with full annotations), and an onnxruntime-extensions Python kernel that calls the op's own
PyTorch implementation, so the wiring (domain, name, arity, attributes, types) is proven with
numbers. The Python kernel proves wiring, not speed: `onnxdoctor scaffold` writes native ones.

A custom-domain node ONNX Runtime has no kernel for (OD401) is custom_domain's.
"""

from __future__ import annotations

import shlex

from onnxdoctor.analysis.fixes._context import EXTENSIONS_TYPES, FixContext, OpArgument
from onnxdoctor.model import Applicability, Finding, Fix
from onnxdoctor.recipe import CustomOpsets, ExportCode, Recipe, RuntimeKernels, UseExporter

CODES = ("OD203",)


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Custom-domain export mappings for both exporters, with a Python kernel that proves them."""
    if not ctx.op or "::" not in ctx.op or ctx.op.startswith("aten::"):
        return []
    arguments = ctx.schema_arguments
    if not arguments or not all(a.supported for a in arguments) or not any(a.is_tensor for a in arguments):
        return [_unknown_schema(ctx)]
    kernel = kernel_snippet(ctx, arguments)
    scaffold = scaffold_command(ctx, arguments)
    cost = (
        "needs a kernel for the custom domain in every runtime that loads the model; the Python "
        f"kernel here proves the wiring (about 100 ns/element); `{scaffold}` writes native CPU "
        "and CUDA kernels (the reference MYSELU package is kernels/myselu/ in the onnxdoctor repository)"
    )
    dynamo_code = dynamo_snippet(ctx, arguments)
    torchscript_code = torchscript_snippet(ctx, arguments)
    return [
        Fix(
            kind="custom_op_dynamo",
            title=f"Export {ctx.op} as {ctx.namespace}::{ctx.onnx_op_type} (dynamo custom_translation_table) "
            "+ an ONNX Runtime kernel",
            snippet=dynamo_code + "\n\n# ONNX Runtime side\n" + kernel
            + "\n\n# export with: torch.onnx.export(model, args, 'model.onnx', dynamo=True,\n"
            "#                   custom_translation_table=custom_translation_table)\n",
            applicability=Applicability.UNSAFE,
            cost=cost,
            recipe=Recipe("custom_op_dynamo", (
                UseExporter("dynamo"),
                ExportCode(dynamo_code, translation_table="custom_translation_table"),
                RuntimeKernels(python=kernel, extensions=True),
            )),
        ),
        Fix(
            kind="custom_op_torchscript",
            title=f"Export {ctx.op} as {ctx.namespace}::{ctx.onnx_op_type} (TorchScript symbolic) "
            "+ an ONNX Runtime kernel",
            snippet=torchscript_code + "\n\n# ONNX Runtime side\n" + kernel
            + f"\n\n# export with: torch.onnx.export(model, args, 'model.onnx', dynamo=False,\n"
            f"#                   custom_opsets={{'{ctx.namespace}': 1}})\n",
            applicability=Applicability.UNSAFE,
            cost=cost + "; the TorchScript exporter is deprecated",
            recipe=Recipe("custom_op_torchscript", (
                UseExporter("torchscript"),
                ExportCode(torchscript_code),
                CustomOpsets(((ctx.namespace, 1),)),
                RuntimeKernels(python=kernel, extensions=True),
            ), isolated=True),  # registering a symbolic is process-wide (docs/ARCHITECTURE.md)
        ),
    ]


def notes(finding: Finding, ctx: FixContext) -> list[str]:
    """Popular advice about custom-op export that does not apply to this finding."""
    if finding.code != "OD203":
        return []
    return [
        (
            "`torch.onnx.register_custom_op_symbolic` only affects the TorchScript exporter "
            "(dynamo=False); the default dynamo exporter needs `custom_translation_table` or "
            "`torch.onnx.ops.symbolic`."
        ),
        "Downgrading torch does not help: no torch version exports an op it has no mapping for.",
    ]


def scaffold_command(ctx: FixContext, arguments: list[OpArgument]) -> str:
    """The `onnxdoctor scaffold` line for this op's own signature (inputs and attributes)."""
    from onnxdoctor.scaffold import scaffold_invocation

    inputs = tuple(a.name for a in arguments if a.is_tensor) or ("x",)
    attrs = {
        a.name: ("int" if a.onnx_suffix == "i" else "float", a.default if a.has_default else 0)
        for a in arguments
        if not a.is_tensor and a.onnx_suffix in ("f", "i")
    }
    command = scaffold_invocation(ctx.onnx_op_type, ctx.namespace, inputs, attrs or None, None)
    return command + " --expr '<your op's math>'"


def _python_signature(arguments: list[OpArgument], tensor_types: list[str]) -> str:
    parts = []
    types = iter(tensor_types)
    for argument in arguments:
        if argument.is_tensor:
            parts.append(f"{argument.name}: {next(types, 'FLOAT')}")
        elif argument.has_default:
            parts.append(f"{argument.name}: {argument.python_annotation} = {argument.default!r}")
        else:
            parts.append(f"{argument.name}: {argument.python_annotation}")
    return ", ".join(parts)


def dynamo_snippet(ctx: FixContext, arguments: list[OpArgument]) -> str:
    """An onnxscript function emitting `ns::OPTYPE` with the op's attributes, in a translation table."""
    tensors = [a.name for a in arguments if a.is_tensor]
    attributes = [a.name for a in arguments if not a.is_tensor]
    call = ", ".join(tensors + [f"{a}={a}" for a in attributes])
    arg_types, result_types = ctx.observed_dtypes
    inputs = [_ONNXSCRIPT_TYPES.get(t, "FLOAT") for t in _padded(arg_types, len(tensors))]
    results = [_ONNXSCRIPT_TYPES.get(t, "FLOAT") for t in _padded(result_types, ctx.n_outputs)]
    returns = results[0] if ctx.n_outputs == 1 else f"tuple[{', '.join(results)}]"
    function = f"{ctx.op_name}_to_onnx"
    return (
        "import onnxscript\n"
        "import torch\n"
        f"from onnxscript import {', '.join(sorted({*inputs, *results}))}\n"
        + ("from typing import Sequence\n" if any("Sequence" in a.python_annotation for a in arguments) else "")
        + f"\n{ctx.namespace} = onnxscript.values.Opset({ctx.namespace!r}, 1)\n\n\n"
        f"@onnxscript.script({ctx.namespace})\n"
        f"def {function}({_python_signature(arguments, inputs)}) -> {returns}:\n"
        f"    # Full annotations, return type included: without them the export fails with\n"
        f"    # \"The number of values and replacements must match\".\n"
        + _dynamo_body(ctx, call) +
        "\n\n"
        f"custom_translation_table = {{torch.ops.{ctx.namespace}.{ctx.op_name}.default: {function}}}\n"
    )


def _dynamo_body(ctx: FixContext, call: str) -> str:
    if ctx.n_outputs == 1:
        return f"    return {ctx.namespace}.{ctx.onnx_op_type}({call})\n"
    names = ", ".join(f"out{i}" for i in range(ctx.n_outputs))
    return f"    {names} = {ctx.namespace}.{ctx.onnx_op_type}({call})\n    return {names}\n"


def torchscript_snippet(ctx: FixContext, arguments: list[OpArgument]) -> str:
    """A symbolic registered with register_custom_op_symbolic, attribute suffixes from the schema."""
    descriptors = ", ".join(repr(a.parse_args_code) for a in arguments)
    names = ", ".join(a.name for a in arguments)
    tensors = [a.name for a in arguments if a.is_tensor]
    attributes = [f"{a.name}_{a.onnx_suffix}={a.name}" for a in arguments if not a.is_tensor]
    call = ", ".join([repr(f"{ctx.namespace}::{ctx.onnx_op_type}"), *tensors, *attributes])
    outputs = f", outputs={ctx.n_outputs}" if ctx.n_outputs > 1 else ""
    arg_types, result_types = ctx.observed_dtypes
    set_type = ""
    if tensors and ctx.n_outputs == 1:
        # The node's type is the first input's unless the op returns another dtype (int64 indices).
        changed = result_types and arg_types and result_types[0] != arg_types[0]
        set_type = (f".setType({tensors[0]}.type().with_dtype(torch.{result_types[0]}))" if changed
                    else f".setType({tensors[0]}.type())")
    return (
        "import torch\n"
        "from torch.onnx import register_custom_op_symbolic, symbolic_helper\n\n\n"
        f"@symbolic_helper.parse_args({descriptors})\n"
        f"def {ctx.op_name}_symbolic(g, {names}):\n"
        f"    return g.op({call}{outputs}){set_type}\n\n\n"
        f"# Register once per process, before torch.onnx.export(..., dynamo=False).\n"
        f"register_custom_op_symbolic({ctx.op!r}, {ctx.op_name}_symbolic, 1)\n"
    )


def kernel_snippet(ctx: FixContext, arguments: list[OpArgument], node_op_type: str | None = None) -> str:
    """An onnxruntime-extensions Python kernel that calls the op's PyTorch implementation.

    `node_op_type`: the custom node's op type when it is not the op's name in capitals.
    """
    tensors = [a for a in arguments if a.is_tensor]
    attributes = [a for a in arguments if not a.is_tensor and a.extensions_type]
    attrs = ", ".join(f"{a.name!r}: PyCustomOpDef.{a.extensions_type}" for a in attributes)
    reads = "".join(
        f"    {a.name} = {a.python_annotation if a.python_annotation in ('float', 'int', 'str') else 'float'}"
        # A required attribute is always on the node (the mapping writes it): no made-up default.
        + (f"(attrs.get({a.name!r}, {a.default!r}))\n" if a.has_default else f"(attrs[{a.name!r}])\n")
        for a in attributes
    )
    # The op is called with its arguments in schema order (tensors and attributes interleaved).
    call = ", ".join(
        f"torch.from_numpy(np.asarray({a.name}))" if a.is_tensor else a.name
        for a in arguments
        if a.is_tensor or a.extensions_type
    )
    arg_types, result_types = ctx.observed_dtypes
    inputs = ", ".join(f"PyCustomOpDef.{EXTENSIONS_TYPES.get(t, 'dt_float')}" for t in _padded(arg_types, len(tensors)))
    outputs = ", ".join(f"PyCustomOpDef.{EXTENSIONS_TYPES.get(t, 'dt_float')}"
                        for t in _padded(result_types, ctx.n_outputs))
    result = "result.numpy()" if ctx.n_outputs == 1 else "tuple(r.numpy() for r in result)"
    return (
        "import numpy as np\n"
        "import torch\n"
        "from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op\n\n\n"
        f"@onnx_op(op_type={f'{ctx.namespace}::{node_op_type or ctx.onnx_op_type}'!r}, inputs=[{inputs}], "
        f"outputs=[{outputs}]"
        + (f", attrs={{{attrs}}}" if attrs else "")
        + ")\n"
        f"def {ctx.op_name}_kernel({', '.join(t.name for t in tensors)}, **attrs):\n"
        "    # Float attributes arrive with 6 significant digits: compare with a tolerance.\n"
        f"{reads}"
        f"    result = torch.ops.{ctx.namespace}.{ctx.op_name}({call})\n"
        f"    return {result}\n\n\n"
        f"# torch.ops.{ctx.namespace}.{ctx.op_name} must exist in this process: import the module that defines it.\n"
        "# In ONNX Runtime: options = onnxruntime.SessionOptions()\n"
        "#                  options.register_custom_ops_library(get_library_path())\n"
    )


# torch dtype names -> onnxscript tensor types and onnxruntime-extensions kernel types.
_ONNXSCRIPT_TYPES = {"float32": "FLOAT", "float64": "DOUBLE", "float16": "FLOAT16", "bfloat16": "BFLOAT16",
                     "int64": "INT64", "int32": "INT32", "int16": "INT16", "int8": "INT8", "uint8": "UINT8",
                     "bool": "BOOL"}


def _padded(types: list[str], count: int) -> list[str]:
    """`count` dtypes: the observed ones, float32 for any the worker did not see."""
    return [*types[:count], *["float32"] * max(0, count - len(types))]


def _unknown_schema(ctx: FixContext) -> Fix:
    return Fix(
        kind="custom_op_manual",
        title=f"Map {ctx.op} to a custom-domain node and give ONNX Runtime a kernel",
        snippet=(
            f"onnxdoctor scaffold {shlex.quote(ctx.onnx_op_type)} --namespace {shlex.quote(ctx.namespace)}\n"
            "# writes the torch op, both export mappings, ONNX Runtime kernels and a parity test\n"
        ),
        applicability=Applicability.DISPLAY_ONLY,
        cost="the op's schema could not be read, so this fix was not generated or verified",
    )
