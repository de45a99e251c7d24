"""A torch.autograd.Function with no `symbolic` whose forward leaves PyTorch (OD601; OD210 where the
example matched and other inputs differ), or that an export failed inside (OD204, OD299:
torch.export refusing the numpy its forward reads).

The TorchScript exporter traces such a Function through the ops its forward ran. What the forward
computed outside PyTorch (numpy, a compiled extension writing into a buffer it allocated with
`empty_like`) is not an op the tracer sees: the graph keeps the allocation, or a constant, and
the numbers differ. The worker lists the Functions of the trace that have no symbolic
(`traced_functions` in the PARITY record; in the EXPORT record, the one the export failed in).

The route gives the Function a `symbolic` that writes one node of the `onnxdoctor` domain, and an
onnxruntime-extensions Python kernel for that node that calls the Function itself: the numbers are
PyTorch's by construction, and the check says so. A native kernel is then the way to ship it
(`onnxdoctor scaffold`), which this fix names in its cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxdoctor.analysis.fixes._context import EXTENSIONS_TYPES, FixContext
from onnxdoctor.analysis.fixes.custom_domain import SCRIPT_MODULES
from onnxdoctor.model import Applicability, Finding, Fix, Stage
from onnxdoctor.recipe import LoadCode, Recipe, RuntimeKernels, UseExporter

CODES = ("OD601", "OD204", "OD299", "OD210")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """A node and a Python kernel for each traced Function with no symbolic (at most two), and,
    where several froze, one fix giving all of them (up to MAX_FUNCTIONS) theirs: the Functions
    of a mismatching TorchScript export, or the Function an export failed inside."""
    if ctx.target_kind != "script":
        return []
    if finding.code in ("OD601", "OD210"):
        # OD210: the example matched and other inputs did not (what the forward computed outside
        # PyTorch is the example's); the PARITY stage listed the trace's Functions then.
        if ctx.exporter != "torchscript":
            return []
        export = next((o for o in ctx.outcomes if o.stage is Stage.EXPORT), None)
        warned = (*finding.evidence, *(export.warnings if export is not None else ()))
        if finding.code == "OD210" and not any(_OUTSIDE_TORCH in w for w in warned):
            # Frozen by an int() or a branch, not by a forward computing outside PyTorch: a node
            # for a pure-PyTorch Function (a gradient reversal) would change nothing.
            return []
        functions = ctx.parity_facts.get("traced_functions") or []
    else:
        # (A Function defined inside a class is recorded by its qualified name.)
        functions = [f for f in ctx.export_facts.get("traced_functions") or ()
                     if isinstance(f, dict) and str(f.get("name")).rsplit(".", 1)[-1] == finding.op]
    # Why the Function needs a node: the trace froze what its forward computed (a mismatch), or
    # the export stopped inside it.
    why = ("the trace froze what its forward computed outside PyTorch" if finding.code in ("OD601", "OD210")
           else "the export stopped inside its forward")
    fixes = [_kernel_fix(entry, why) for entry in functions[:2] if isinstance(entry, dict)]
    every = [_kernel_parts(entry) for entry in functions[:MAX_FUNCTIONS] if isinstance(entry, dict)]
    if len(every) > 1 and all(parts is not None for parts in every):
        # Several Functions froze (a point-cloud library's sampling, grouping and gathering, each
        # its own Function): a node for one leaves the others frozen, so they go together first.
        fixes.insert(0, _kernels_fix([parts for parts in every if parts is not None]))
    return [f for f in fixes if f is not None]


# The tracer's warnings for values computed outside PyTorch: an array read, a tensor made from it.
_OUTSIDE_TORCH = "NumPy array"

# Functions given nodes at once: more than this many is a library, not a few ops, to port.
MAX_FUNCTIONS = 6


@dataclass(frozen=True)
class _Parts:
    """What one Function's node needs: its symbolic (before the export) and its kernel."""

    qualname: str
    op_type: str
    names: list[str]
    symbolic: str
    kernel: str


def _kernels_fix(every: list[_Parts]) -> Fix:
    named = ", ".join(p.qualname for p in every[:-1]) + f" and {every[-1].qualname}"
    symbolics = "\n".join(p.symbolic for p in every)
    kernels = "\n".join(p.kernel for p in every)
    return Fix(
        kind="function_kernel",
        title=(f"Export {named} each as one onnxdoctor node, computed by an ONNX Runtime kernel that calls it "
               "(onnxruntime-extensions): the trace froze what their forwards computed outside PyTorch"),
        snippet=(f"# Step 1 of 2, before the export: a symbolic for each Function\n{symbolics}\n"
                 "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False)\n\n"
                 f"# Step 2 of 2, where ONNX Runtime runs the model: a kernel for each node\n{kernels}"),
        applicability=Applicability.UNSAFE,
        cost=("Python kernels run the Functions' own code and need torch (and whatever they call) at run "
              "time; the nodes' sizes are the example's; for shipping, write native kernels "
              f"(`onnxdoctor scaffold {every[0].op_type} --namespace onnxdoctor --inputs "
              f"{','.join(every[0].names)}`, and likewise for the others)"),
        recipe=Recipe("function_kernel", (UseExporter("torchscript"), *(LoadCode(p.symbolic) for p in every),
                                          RuntimeKernels(python=kernels, extensions=True)), isolated=True),
    )


def _kernel_fix(entry: dict, why: str) -> Fix | None:
    parts = _kernel_parts(entry)
    if parts is None:
        return None
    qualname, op_type, names, symbolic, kernel = (parts.qualname, parts.op_type, parts.names, parts.symbolic,
                                                  parts.kernel)
    node = f"onnxdoctor::{op_type}"
    snippet = (
        f"# Step 1 of 2, before the export: a symbolic for {qualname}\n{symbolic}\n"
        "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False)\n\n"
        f"# Step 2 of 2, where ONNX Runtime runs the model: a kernel for {node}\n{kernel}"
    )
    return Fix(
        kind="function_kernel",
        title=(f"Export {qualname} as one {node} node, computed by an ONNX Runtime kernel that calls "
               f"{qualname} (onnxruntime-extensions): {why}"),
        snippet=snippet,
        applicability=Applicability.UNSAFE,
        cost=("a Python kernel runs the Function's own code and needs torch (and whatever it calls) at run "
              f"time; the node's sizes are the example's; for shipping, write a native kernel "
              f"(`onnxdoctor scaffold {op_type} --namespace onnxdoctor --inputs {','.join(names)}`)"),
        # The symbolic is set on the class, for the whole process: a worker of its own.
        recipe=Recipe("function_kernel", (UseExporter("torchscript"), LoadCode(symbolic),
                                          RuntimeKernels(python=kernel, extensions=True)), isolated=True),
    )


def _kernel_parts(entry: dict) -> _Parts | None:
    module, _, qualname = str(entry.get("function_class", "")).partition(":")
    inputs, outputs = entry.get("inputs") or [], entry.get("outputs") or []
    arguments = list(entry.get("arguments") or ["T"] * len(inputs))
    # Python constants (a neighbour count, a radius) travel on the node as one literal attribute.
    constants = any(a != "T" for a in arguments)
    types_in = [str(t) for t, _shape in inputs]
    types_out = [str(t) for t, _shape in outputs]
    if not qualname or not outputs or not all(t in EXTENSIONS_TYPES for t in (*types_in, *types_out)):
        return None
    imports = "" if module in SCRIPT_MODULES or not module else f"from {module} import {qualname.split('.')[0]}\n"
    op_type = "".join(c for c in qualname.split(".")[-1] if c.isalnum()) or "Function"
    node = f"onnxdoctor::{op_type}"
    names = [f"input{i}" for i in range(len(inputs))]
    # Applied at other sizes elsewhere in the model: each output's type and rank only.
    unsized = ".with_sizes([None] * {})" if entry.get("sizes_vary") else ""
    typed = "\n".join(
        f"    outs[{i}].setType(torch._C.TensorType.create_from_tensor(torch.empty({list(shape)!r}, "
        f"dtype=torch.{dtype})){unsized.format(len(shape))})"
        for i, (dtype, (_t, shape)) in enumerate(zip(types_out, outputs, strict=True))
    )
    symbolic = (
        "import torch\n"
        f"{imports}\n"
        f"# {qualname}'s forward runs code the TorchScript tracer cannot see (numpy, a compiled\n"
        "# extension's own kernel): the trace froze what it computed. A symbolic makes it one\n"
        f"# {node} node instead, which the kernel below computes by calling {qualname} itself.\n"
        + (f"def _{op_type.lower()}_symbolic(g, *args):\n"
           "    # Tensors are the node's inputs; the constants, in call order, its `call` attribute.\n"
           "    inputs = [a for a in args if isinstance(a, torch._C.Value)]\n"
           "    call = repr([\"T\" if isinstance(a, torch._C.Value) else a for a in args])\n"
           f"    outs = g.op({node!r}, *inputs, call_s=call, outputs={len(outputs)})\n"
           if constants else
           f"def _{op_type.lower()}_symbolic(g, *inputs):\n"
           f"    outs = g.op({node!r}, *inputs, outputs={len(outputs)})\n") +
        "    outs = outs if isinstance(outs, (list, tuple)) else [outs]\n"
        + ("    # The example's types and ranks (its sizes differ between calls): the exporter cannot\n"
           "    # infer a custom node's.\n" if entry.get("sizes_vary") else
           "    # The example's types and sizes: the exporter cannot infer a custom node's.\n")
        + f"{typed}\n"
        "    return outs[0] if len(outs) == 1 else tuple(outs)\n\n\n"
        f"{qualname}.symbolic = staticmethod(_{op_type.lower()}_symbolic)\n"
    )
    result = "result.numpy()" if len(outputs) == 1 else "tuple(r.numpy() for r in result)"
    tensors = ", ".join(f"torch.from_numpy(np.asarray({n}))" for n in names)
    if constants:
        header = (f", attrs={{'call': PyCustomOpDef.dt_string}})\n"
                  f"def onnxdoctor_{op_type}_kernel({', '.join(names)}, **attrs):\n"
                  f"    tensors = iter([{tensors}])\n"
                  "    args = [next(tensors) if a == \"T\" else a for a in ast.literal_eval(attrs[\"call\"])]\n")
        call = f"{qualname}.apply(*args)"
    else:
        header = f")\ndef onnxdoctor_{op_type}_kernel({', '.join(names)}):\n"
        call = f"{qualname}.apply({tensors})"
    kernel = (
        ("import ast\n" if constants else "")
        + "import numpy as np\n"
        "import torch\n"
        "from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op\n"
        f"{imports}\n\n"
        f"@onnx_op(op_type={node!r}, inputs=[{', '.join('PyCustomOpDef.' + EXTENSIONS_TYPES[t] for t in types_in)}], "
        f"outputs=[{', '.join('PyCustomOpDef.' + EXTENSIONS_TYPES[t] for t in types_out)}]"
        + header +
        "    with torch.no_grad():\n"
        f"        result = {call}\n"
        f"    return {result}\n\n\n"
        "# ONNX Runtime finds the kernel through onnxruntime-extensions' library:\n"
        "#   options.register_custom_ops_library(get_library_path())\n"
        "# With this code in your model script, `onnxdoctor diagnose` runs it too when the script sets:\n"
        "custom_op_libraries = [get_library_path()]\n"
    )
    return _Parts(qualname, op_type, names, symbolic, kernel)
