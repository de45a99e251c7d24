"""A custom-domain node ONNX Runtime has no kernel for (OD401), whatever code wrote it.

The export's provenance table (docs/ARCHITECTURE.md, "Node provenance") says which code wrote the
node: a symbolic registered for a torch op, an autograd.Function's `symbolic` staticmethod, or
torch.onnx.ops.symbolic behind `torch.onnx.is_in_onnx_export()`. The routes, cheapest first:

(a) export the eager code instead of the node (the Function through its forward, the eager
    branch, the custom op's own body): no kernel at all, and whatever that code contains goes on
    to the op-rewrite library as a chain;
(b) an onnxruntime-extensions Python kernel that calls the code that wrote the node, with the
    node's attributes passed to the parameters they came from and types from the export;
(c) a native kernel: `onnxdoctor scaffold` where the math is elementwise, otherwise a plain
    statement that the body is hand-written, with the signature it must have.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from onnxdoctor.analysis.fixes import decompose
from onnxdoctor.analysis.fixes._context import EXTENSIONS_TYPES, FixContext
from onnxdoctor.analysis.fixes.export_branch import eager_branch_fix
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.protocol import (
    FUNCTION_SYMBOLIC,
    ONNX_OPS_SYMBOLIC,
    REGISTERED_SYMBOLIC,
    NodeArgument,
    NodeProvenance,
)
from onnxdoctor.recipe import EagerExport, Recipe, RuntimeKernels, Step, UseExporter, UseOpset

# OD205/OD299: an autograd.Function's own `symbolic` failed during the export (the exporter's call
# into it did not fit its signature, a g.op in it got a graph value for an attribute).
CODES = ("OD401", "OD205", "OD299")

# The run name the worker gives a model script: a Function defined there is reached by its name.
SCRIPT_MODULES = ("__onnxdoctor__", "__main__")



def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Fixes for a custom-domain node without a runtime kernel, by the code that wrote it; for a
    Function whose own symbolic failed during the export, the export through its forward."""
    if finding.code != "OD401":
        return _refused_symbolic(ctx)
    if not ctx.op or "::" not in ctx.op or ctx.op.startswith(("aten::", "org.pytorch.aten::")):
        return []
    facts = next((o.facts for o in ctx.outcomes if o.stage is Stage.ORT_LOAD), {})
    row = NodeProvenance.from_dict(facts.get("provenance"))
    if ctx.target_kind != "script":
        return [_native_kernel(ctx, row, facts, script=False)]
    fixes: list[Fix] = []
    in_script = bool(facts.get("function_in_script"))
    if row is not None and row.emitter == FUNCTION_SYMBOLIC and row.function_class:
        fixes += [_function_forward(ctx, row, in_script), _function_dynamo(ctx, row)]
    if row is not None and row.emitter == ONNX_OPS_SYMBOLIC:
        fixes.append(eager_branch_fix(f"the {ctx.op} node", row.source))
    if row is not None and row.emitter == REGISTERED_SYMBOLIC and row.torch_op.startswith("aten::"):
        fixes += _torch_symbolic(ctx, row, facts)
    if facts.get("torch_op"):
        fixes += _torch_op_body(finding, ctx, facts)
    kernel = _python_kernel(ctx, row, in_script) if row is not None else None
    if kernel is not None:
        fixes.append(kernel)
    elif facts.get("torch_op"):
        fixes += _legacy_kernel(ctx, facts)
    if ctx.export_facts.get("export_branch") and not any(f.kind == "eager_branch" for f in fixes):
        # forward() asked whether it is being exported and was told yes (detectron2's alias(),
        # which writes _caffe2::AliasWithName only then): its eager branch is what PyTorch
        # computes, whatever wrote the node, and the cheapest route to try.
        fixes.insert(0, eager_branch_fix(f"the branch forward() takes for the export (which may write the "
                                         f"{ctx.op} node)", finding.source))
    fixes.append(_native_kernel(ctx, row, facts, script=True))
    return fixes


# ---- (a) the eager code instead of the node -------------------------------------------------------------


def _class_reference(row: NodeProvenance, in_script: bool = False) -> tuple[str, str]:
    """(import line or "", the expression naming the class that defines `symbolic`)."""
    module, _, qualname = row.function_class.partition(":")
    if in_script or module in SCRIPT_MODULES or not module:
        return "", qualname
    top = qualname.split(".")[0]
    return f"from {module} import {top}\n", qualname


def _symbolic_aside(name: str, imports: str, why: str, after: str = "") -> str:
    """Code exporting with the Function `name`'s symbolic set aside (its forward traced)."""
    return (
        "import torch\n"
        f"{imports}\n"
        f"{why}"
        f"saved_symbolic = {name}.__dict__['symbolic']\n"
        f"del {name}.symbolic\n"
        "try:\n"
        "    torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False)\n"
        "finally:\n"
        f"    {name}.symbolic = saved_symbolic{after}\n"
    )


def _function_forward(ctx: FixContext, row: NodeProvenance, in_script: bool) -> Fix:
    imports, name = _class_reference(row, in_script)
    where = f" ({row.function.split(' ')[0]})" if row.function else ""
    snippet = _symbolic_aside(
        name, imports,
        f"# Set {name}'s symbolic{where} aside for the export: the TorchScript exporter then traces\n"
        f"# {name}.forward instead of writing the {ctx.op} node that no runtime has a kernel for.\n",
        f"  # other exports keep writing {ctx.op}")
    return Fix(
        kind="function_forward",
        title=f"Export {name} through its forward instead of its symbolic's {ctx.op} node: no custom kernel needed",
        snippet=snippet,
        applicability=Applicability.SAFE,
        cost=f"none at run time: the graph holds {name}.forward's ops instead of one {ctx.op} node",
        recipe=Recipe("function_forward", (UseExporter("torchscript"), EagerExport(functions=(row.function_class,)))),
    )


def _torch_symbolic(ctx: FixContext, row: NodeProvenance, facts: dict[str, Any]) -> list[Fix]:
    """A symbolic the script registered for one of torch's own ops (mmcv's extra symbolics write
    aten::grid_sampler as mmcv::grid_sampler, open-mmlab/mmagic#1004): the export without it, so
    torch's symbolic writes the op in standard ONNX (at the first opset it has one, where the
    requested opset is older), or the dynamo exporter, which never reads registered symbolics."""
    op = row.torch_op
    dynamo = _dynamo_fix(f"writes {op} itself (symbolics registered for the TorchScript exporter are not read)",
                         f"standard ONNX ops instead of one {ctx.op} node")
    op_facts = facts.get("torch_op_facts") or {}
    built_in = op_facts.get("torchscript_registrations") or []
    if "torchscript_registrations" in op_facts and not built_in:
        return [dynamo]  # torch has no symbolic of its own for the op: nothing to fall back on
    requested = ctx.requested_opset if isinstance(ctx.requested_opset, int) else None
    later = min((v for v in built_in if requested is not None and v > requested), default=None)
    opset = later if later is not None and requested is not None and built_in and requested < min(built_in) else None
    where = f" ({row.function.split(' ')[0]})" if row.function else ""
    name = op.split("::", 1)[1]
    unregister = "".join(f"torch.onnx.unregister_custom_op_symbolic('::{name}', {v})\n"
                         for v in op_facts.get("registered_overrides") or ["opset_version_you_registered_it_for"])
    snippet = (
        "import torch\n\n"
        f"# Your symbolic for {op}{where}, registered with register_custom_op_symbolic, writes\n"
        f"# {ctx.op}, which ONNX Runtime has no kernel for. Without that registration torch's own\n"
        f"# symbolic writes {op} in standard ONNX ops.\n"
        + unregister
        + "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False"
        + (f", opset_version={opset})\n" if opset else ")\n"))
    steps: tuple[Step, ...] = (UseExporter("torchscript"), EagerExport(torch_symbolics=(op,)))
    return [
        Fix(kind="torch_symbolic",
            title=f"Export {op} with torch's own symbolic instead of the registered one that writes {ctx.op}"
                  + (f", at opset {opset} (its first)" if opset else "") + ": no custom kernel needed",
            snippet=snippet,
            applicability=Applicability.SAFE,
            cost=f"none at run time: standard ONNX ops instead of one {ctx.op} node"
                 + (f"; the runtime must support opset {opset}" if opset else ""),
            recipe=Recipe("torch_symbolic", (*steps, UseOpset(opset)) if opset else steps)),
        dynamo,
    ]


def _refused_symbolic(ctx: FixContext) -> list[Fix]:
    """The Function whose `symbolic` raised (torch notes "occurred when translating <Function>" on a
    TypeError there: open-mmlab/mmcv#611's symbolic missing forward()'s defaulted arguments,
    mmdeploy#161's g.op given a traced size for an int attribute, pytorch#48930's symbolic returning
    one output where forward returns four), exported through its forward."""
    name = ctx.op or ""
    refused = (f"(occurred when translating {name})" in ctx.export_error
               # or its output count is not forward's (pytorch#48930: one node for four outputs)
               or isinstance(ctx.export_facts.get("symbolic_outputs"), dict))
    if ctx.target_kind != "script" or not name.isidentifier() or not refused:
        return []
    snippet = _symbolic_aside(
        name, "",
        f"# Set {name}'s symbolic aside for the export: the TorchScript exporter then traces\n"
        f"# {name}.forward, plain torch ops, instead of calling the symbolic that failed.\n")
    return [Fix(
        kind="function_forward",
        title=f"Export {name} through its forward instead of its failing symbolic",
        snippet=snippet,
        applicability=Applicability.SAFE,
        cost=f"the graph holds {name}.forward's ops instead of the custom node the symbolic meant to write "
             "(none where forward calls a compiled extension the exporter cannot trace)",
        recipe=Recipe("function_forward", (UseExporter("torchscript"), EagerExport(functions=(name,)))),
    )]


def _function_dynamo(ctx: FixContext, row: NodeProvenance) -> Fix:
    _imports, name = _class_reference(row)
    return _dynamo_fix(f"traces {name}.forward (a Function's `symbolic` is read only by the TorchScript exporter)",
                       f"the graph holds {name}.forward's ops instead of one {ctx.op} node")


def _dynamo_fix(what: str, instead: str) -> Fix:
    """The dynamo exporter, which reads none of the TorchScript exporter's symbolics: `what` it does
    with the code that wrote the custom node, and what the graph holds `instead` of the node."""
    return Fix(
        kind="function_dynamo",
        title=f"Export with the dynamo exporter, which {what}",
        snippet="torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True)\n",
        applicability=Applicability.SAFE,
        cost=f"none at run time: {instead}",
        recipe=Recipe("function_dynamo", (UseExporter("dynamo"),)),
    )


def _torch_op_body(finding: Finding, ctx: FixContext, facts: dict) -> list[Fix]:
    """The custom op's own Python body, decomposed (dynamo exporter)."""
    behind = _behind(ctx, facts)
    return [
        replace(fix, title=f"Export {behind.op}'s own body instead of the {ctx.op} node "
                           "(dynamo exporter, run_decompositions): no custom kernel needed")
        for fix in decompose.propose(replace(finding, op=behind.op), behind)
    ]


def _behind(ctx: FixContext, facts: dict) -> FixContext:
    return replace(ctx, op=facts["torch_op"], op_facts=facts.get("torch_op_facts") or {},
                   export_facts={**ctx.export_facts, "op_calls": facts.get("torch_op_calls") or []})


# ---- (b) a Python kernel that calls the code that wrote the node ---------------------------------------------


def _python_kernel(ctx: FixContext, row: NodeProvenance, in_script: bool) -> Fix | None:
    """An onnxruntime-extensions kernel calling the Function or the torch op, from the node's own
    inputs and attributes as the export recorded them."""
    if row.emitter == FUNCTION_SYMBOLIC and row.function_class:
        imports, name = _class_reference(row, in_script)
        callee, where = f"{name}.apply", (f"{name} is defined in your script: this code goes there too\n"
                                          if not imports else "")
    elif row.emitter == REGISTERED_SYMBOLIC and "::" in row.torch_op:
        namespace, name = row.torch_op.split("::", 1)
        imports, callee = "", f"torch.ops.{namespace}.{name}"
        where = f"{callee} must exist in this process: import the module that defines it\n"
    else:
        return None
    n_inputs = len(row.input_types)
    names = [f"input{i}" for i in range(n_inputs)]
    for argument in row.arguments:
        if 0 <= argument.input < n_inputs:
            names[argument.input] = argument.name
    attributes: dict[str, tuple[str, str]] = {}
    call: list[str] = []
    for argument in row.arguments:
        expression = _argument_expression(argument, attributes)
        if expression is None:
            return None
        call.append(expression)
    domain, op_type = ctx.op.split("::", 1) if ctx.op else ("custom", "Op")
    inputs = ", ".join(f"PyCustomOpDef.{EXTENSIONS_TYPES.get(t, 'dt_float')}" for t in row.input_types)
    outputs = ", ".join(f"PyCustomOpDef.{EXTENSIONS_TYPES.get(t, 'dt_float')}" for t in row.output_types or ("",))
    attrs = ", ".join(f"{k!r}: PyCustomOpDef.{v}" for k, (v, _name) in attributes.items())
    # Each attribute is read into the parameter it came from (`eps` from the node's `epsilon`).
    reads = "".join(f"    {name} = {_PYTHON_OF[v]}(attrs[{k!r}])\n" for k, (v, name) in attributes.items())
    result = "result.numpy()" if len(row.output_types) <= 1 else "tuple(r.numpy() for r in result)"
    kernel = (
        "import numpy as np\n"
        "import torch\n"
        "from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op\n"
        f"{imports}\n\n"
        f"# {where}"
        f"@onnx_op(op_type={ctx.op!r}, inputs=[{inputs}], outputs=[{outputs}]"
        + (f", attrs={{{attrs}}}" if attrs else "") + ")\n"
        f"def {domain}_{op_type}_kernel({', '.join(names)}{', **attrs' if attrs else ''}):\n"
        + ("    # Float attributes arrive as float32: compare with a tolerance.\n"
           if any(v == "dt_float" for v, _name in attributes.values())
           else "")
        + reads
        + "    with torch.no_grad():\n"
        f"        result = {callee}({', '.join(call)})\n"
        f"    return {result}\n\n\n"
        "# ONNX Runtime finds the kernel through onnxruntime-extensions' library:\n"
        "#   options.register_custom_ops_library(get_library_path())\n"
        "# With this code in your model script, `onnxdoctor diagnose` runs it too when the script sets:\n"
        "custom_op_libraries = [get_library_path()]\n"
    )
    what = callee.removesuffix(".apply") if row.emitter == FUNCTION_SYMBOLIC else row.torch_op
    return Fix(
        kind="runtime_kernel_python",
        title=f"Register an ONNX Runtime kernel for {ctx.op} that calls {what} (onnxruntime-extensions)",
        snippet=kernel,
        applicability=Applicability.UNSAFE,
        cost="a Python kernel runs the PyTorch code (about 100 ns/element) and needs torch at run time; "
             "a native kernel is the way to ship it",
        recipe=Recipe("runtime_kernel_python", (RuntimeKernels(python=kernel, extensions=True),)),
    )


_ATTRIBUTE_TYPES = {float: "dt_float", int: "dt_int64", bool: "dt_int64", str: "dt_string"}
_PYTHON_OF = {"dt_float": "float", "dt_int64": "int", "dt_string": "str"}


def _argument_expression(argument: NodeArgument, attributes: dict[str, tuple[str, str]]) -> str | None:
    """How the kernel passes one parameter: a node input, a node attribute, or the export's constant."""
    if argument.input >= 0:
        return f"torch.from_numpy(np.asarray({argument.name}))"
    if argument.attribute:
        kind = _ATTRIBUTE_TYPES.get(type(argument.value))
        if kind is None:
            return None  # a list attribute: onnxruntime-extensions kernels take scalars and strings
        attributes[argument.attribute] = (kind, argument.name)
        return f"bool({argument.name})" if isinstance(argument.value, bool) else argument.name
    # Not carried by the node: the value the export saw, the same at every call of this node.
    return repr(argument.value)


def _legacy_kernel(ctx: FixContext, facts: dict) -> list[Fix]:
    """Without a provenance row (an older torch): the op's schema, attributes by its argument names."""
    from onnxdoctor.analysis.fixes.custom_op import kernel_snippet

    behind = _behind(ctx, facts)
    arguments = behind.schema_arguments
    if not (arguments and all(a.supported for a in arguments) and any(a.is_tensor for a in arguments)):
        return []
    kernel = kernel_snippet(behind, arguments, (ctx.op or "").split("::", 1)[-1])
    return [Fix(
        kind="runtime_kernel_python",
        title=f"Register an ONNX Runtime kernel for {ctx.op} that calls {behind.op} (onnxruntime-extensions)",
        snippet=kernel,
        applicability=Applicability.UNSAFE,
        cost="a Python kernel runs the PyTorch code (about 100 ns/element) and needs torch at run time",
        recipe=Recipe("runtime_kernel_python", (RuntimeKernels(python=kernel, extensions=True),)),
    )]


# ---- (c) a native kernel ---------------------------------------------------------------------------------------


def _native_kernel(ctx: FixContext, row: NodeProvenance | None, facts: dict, *, script: bool) -> Fix:
    from onnxdoctor.scaffold import scaffold_invocation

    domain, _, op_type = (ctx.op or "").partition("::")
    library = f"path/to/lib{domain}_ops.so"
    if script:
        given = (
            "# Give a native kernel library to the script's run, either in the script:\n"
            f"custom_op_libraries = [{library!r}]\n"
            f"# or on the command line: onnxdoctor diagnose {ctx.target_name} --custom-op-library {library}\n"
            f"# (and in your application: options.register_custom_ops_library({library!r}))\n"
        )
    else:
        given = (
            "# A native library you already have:\n"
            f"onnxdoctor diagnose {ctx.target_name} --custom-op-library {library}\n"
            f"# (and in your application: options.register_custom_ops_library({library!r}))\n"
        )
    inputs = tuple(a.name for a in sorted((a for a in (row.arguments if row else ()) if a.input >= 0),
                                          key=lambda a: a.input)) or ("x",)
    attrs = {a.attribute: ("int" if isinstance(a.value, (bool, int)) else "float", a.value)
             for a in (row.arguments if row else ()) if a.attribute and isinstance(a.value, (int, float))}
    command = scaffold_invocation(op_type, domain, inputs, attrs or None, None)
    elementwise = facts.get("elementwise")
    if elementwise:
        body = (f"\n# Generate one: its math is elementwise, which `scaffold` writes from one expression:\n"
                f"{command} --expr '<the math of {op_type}, e.g. x * limit>'\n")
        cost = "needs the library in every runtime that loads the model"
    else:
        outputs = ", ".join(row.output_types) if row and row.output_types else "unknown"
        typed = [f"{n}: {t or 'unknown'}" for n, t in zip(inputs, row.input_types if row else (), strict=False)]
        signature = f"inputs {', '.join(typed)}" if typed else "inputs unknown"
        attributes = ", ".join(f"{k}: {v[0]}" for k, v in attrs.items()) or "none"
        why = ("it has more than one output or reduces across elements" if elementwise is False
               else "onnxdoctor could not tell whether its math is elementwise")
        body = (f"\n# The kernel body must be written by hand ({why}); `scaffold` writes\n"
                "# an elementwise package, so use it only as the skeleton (build, registration, tests).\n"
                f"# The kernel's signature: {signature}; attributes {attributes}; outputs {outputs}.\n"
                f"{command}\n")
        cost = "a hand-written kernel, in every runtime that loads the model"
    return Fix(
        kind="runtime_kernel",
        title=f"Give ONNX Runtime a native kernel for {ctx.op}",
        snippet=given + body,
        applicability=Applicability.DISPLAY_ONLY,
        cost=cost,
    )
