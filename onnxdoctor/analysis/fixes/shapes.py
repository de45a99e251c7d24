"""Fixes for sizes the export froze (OD801-OD804): declare the dims, switch exporter, rewrite the line.

Each recipe carries the size sets the main run checked (`DeclareDynamic.sizes`): the fixed model
is verified at the example's size (PARITY) and at every one of them (SHAPES), and its FixCheck
lists the sizes it passed at.
"""

from __future__ import annotations

import re
from typing import Any

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.analysis.fixes.per_sample import per_sample_fix, walks_the_batch
from onnxdoctor.model import Applicability, Finding, Fix, FrozenSize, Stage
from onnxdoctor.recipe import (
    DeclareDynamic,
    EagerExport,
    LoadCode,
    Recipe,
    StrictCapture,
    UseExporter,
)

CODES = ("OD801", "OD802", "OD803", "OD804")

SCRIPT_FORWARD = "model = torch.jit.script(model)  # the branch on the size becomes an ONNX If\n"


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Declared dims (dynamic_shapes / dynamic_axes), the other exporter, the user's line rewritten."""
    detail = finding.detail
    if not isinstance(detail, FrozenSize) or ctx.target_kind != "script":
        return []
    exporter = detail.exporter or ctx.exporter or "dynamo"
    load = ctx.facts_of(Stage.LOAD)
    params = tuple(load.get("forward_parameters") or ())
    axes = (load.get("settings") or {}).get("dynamic_axes")
    axes = axes if isinstance(axes, dict) else None
    declare = DeclareDynamic(dims=detail.dims, sizes=detail.sizes, inputs=detail.inputs)
    fixes: list[Fix] = []
    if (finding.code == "OD801" or detail.undeclared) and detail.dims:
        fixes.append(Fix(
            kind="declare_dynamic",
            title=("Declare the dimensions dynamic: dynamic_shapes with named Dims" if exporter == "dynamo"
                   else "Declare the dimensions dynamic: dynamic_axes"),
            snippet=declaration_snippet(detail, exporter, params, axes),
            applicability=Applicability.SAFE,
            cost="none at run time; the bounds are from the sizes seen here, widen them to what you deploy",
            recipe=Recipe("declare_dynamic", (declare, UseExporter(exporter))),
        ))
    if finding.code == "OD803" and detail.dims and any(kind == "branch" for _s, kind, _t in detail.lines):
        # A scripted forward keeps a branch on a size as an ONNX If that reads the input's shape
        # at run time; a trace or torch.export records the branch the example took.
        fixes.append(Fix(
            kind="script_branch",
            title="Script forward so the branch on the size stays a branch (an ONNX If): torch.jit.script",
            snippet=("scripted = torch.jit.script(model)  # the branch on the size becomes an ONNX If\n"
                     + declaration_snippet(detail, "torchscript", axes=axes).replace("torch.onnx.export(model,",
                                                                          "torch.onnx.export(scripted,")),
            applicability=Applicability.SAFE,
            cost=("TorchScript (torch.jit.script and the TorchScript exporter) is deprecated; forward must be "
                  "scriptable (type annotations, no unsupported Python)"),
            recipe=Recipe("script_branch", (LoadCode(SCRIPT_FORWARD), declare, UseExporter("torchscript")),
                          isolated=True),
        ))
    if finding.code in ("OD802", "OD803", "OD804") and detail.dims:
        other = "torchscript" if exporter == "dynamo" else "dynamo"
        fixes.append(Fix(
            kind="exporter",
            title=f"Use the {other} exporter with the same dimensions declared dynamic",
            snippet=declaration_snippet(detail, other, params, axes),
            applicability=Applicability.SAFE,
            cost=("the TorchScript exporter is deprecated and traces: a size it turns into a number is frozen too"
                  if other == "torchscript" else
                  "the dynamo exporter keeps x.shape[0] symbolic, but a size turned into a Python int is fixed "
                  "by a guard there too"),
            recipe=Recipe("exporter", (UseExporter(other), declare)),
        ))
        fixes.append(_strict_capture(detail, declare, params, axes))
        # The samples run one by one: after the fixes that keep the batched graph (where forward()
        # walks the batch in Python, the per_sample family proposes it first instead).
        looped = None if walks_the_batch(finding) else per_sample_fix(finding, ctx)
        if looped is not None:
            fixes.append(looped)
        if load.get("builds_tensors", True):  # the model's code puts values in tensors somewhere
            fixes.append(_symbolic_sizes(detail, declare, params, axes))
    pools = global_pool_fix(finding, ctx)
    if pools is not None:
        fixes.append(pools)
    rewrite = rewrite_snippet(detail)
    if rewrite:
        branch = all(kind == "branch" for _s, kind, _t in detail.lines)
        edits = code_edits(detail)
        fixes.append(Fix(
            kind="rewrite_size",
            title=("Put both branches in the graph: torch.cond on the size (or torch.where)" if branch else
                   "Keep the size symbolic in your code (x.shape[0] without int(), view(-1, ...), torch.arange)"),
            snippet=rewrite,
            applicability=Applicability.SAFE if edits else Applicability.DISPLAY_ONLY,
            cost="none; the export then computes the size from the input (a Shape node) instead of storing it",
            # Verified by applying the same rewrite to forward() in the fix's own worker (a class
            # patch: process-wide state, hence isolated), at the example and every checked size.
            recipe=Recipe("rewrite_size", (LoadCode(_patch_code(edits)), declare, UseExporter(exporter)),
                          isolated=True) if edits else None,
        ))
    return fixes


SIZES_AS_TENSORS = """\
# torch.as_tensor / torch.tensor of sizes read off a shape store the example's numbers, and
# reading them back (for h, w in shapes_tensor) asks torch.export for data it cannot know.
# Build the tensor from the sizes with torch ops and keep iterating the Python list:
def sizes_tensor(sizes):  # e.g. [(h, w) for each level], each h, w from x.shape
    return torch.stack([torch.stack([torch.scalar_tensor(s, dtype=torch.long) for s in row]) for row in sizes])

# torch.linspace(a, b, n) with n from a shape: its count is fixed to the example's; instead
#     a + torch.arange(n, dtype=torch.float32) * ((b - a) / max(n - 1, 1))
"""


def _symbolic_sizes(detail: FrozenSize, declare: DeclareDynamic, params: tuple[str, ...],
                    axes: dict[str, Any] | None) -> Fix:
    """The dynamo exporter with tensors of sizes built from the symbolic sizes (recipe.EagerExport.
    symbolic_sizes): Deformable-DETR's `torch.as_tensor(spatial_shapes)` read back in a loop."""
    return Fix(
        kind="symbolic_sizes",
        title=("Keep sizes symbolic where they become tensors (torch.as_tensor of shapes, linspace of a size), "
               "dynamo exporter with the dimensions declared dynamic"),
        snippet=SIZES_AS_TENSORS + "\n" + declaration_snippet(detail, "dynamo", params, axes),
        applicability=Applicability.SAFE,
        cost="none at run time; the graph computes the sizes from the input's shape (Shape, Gather, Range nodes)",
        # Verified with the same construction patched in for the export (class-level patches of
        # torch.Tensor: process-wide, hence isolated), at the example and every checked size.
        recipe=Recipe("symbolic_sizes", (EagerExport(symbolic_sizes=True), UseExporter("dynamo"), declare),
                      isolated=True),
    )


def _strict_capture(detail: FrozenSize, declare: DeclareDynamic, params: tuple[str, ...],
                    axes: dict[str, Any] | None) -> Fix:
    """The dynamo exporter on a program torch.export captured strictly (TorchDynamo): `len(x)`
    and Python arithmetic on a size stay symbolic, where the default capture fixes the dim."""
    declared = declaration_snippet(detail, "dynamo", params, axes)
    default = "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True, dynamic_shapes=dynamic_shapes)"
    strict = ("program = torch.export.export(model, tuple(example_inputs), dynamic_shapes=dynamic_shapes, strict=True)\n"
              "torch.onnx.export(program, example_inputs, 'model.onnx', dynamo=True)")
    return Fix(
        kind="strict_capture",
        title="Use the dynamo exporter on torch.export's strict capture, with the dimensions declared dynamic",
        snippet=declared.replace(default, strict) if default in declared else declared + strict + "\n",
        applicability=Applicability.SAFE,
        cost=("none at run time; strict capture traces forward's bytecode (TorchDynamo), which keeps len(x) and "
              "arithmetic on sizes symbolic but refuses some Python the default capture runs"),
        recipe=Recipe("strict_capture", (UseExporter("dynamo"), StrictCapture(), declare)),
    )


def code_edits(detail: FrozenSize) -> list[tuple[int, str, str]]:
    """The snippet's rewrites that are code (not advice in a comment), as (line, old, new) rows
    for `worker.sizepatch.rewrite_forward`: `int()` and `len()` of a size, `view(-1, ...)`."""
    edits = []
    for source, kind, text in detail.lines:
        line = source.rsplit(":", 1)[-1]
        if kind not in ("int", "len", "view") or not line.isdigit():
            continue
        new = _rewritten(kind, text)
        if new != text:
            edits.append((int(line), text, new))
    return edits


def _patch_code(edits: list[tuple[int, str, str]]) -> str:
    rows = "".join(f"    ({line}, {old!r}, {new!r}),\n" for line, old, new in edits)
    return ("from onnxdoctor.worker.sizepatch import rewrite_forward\n\n"
            "# Your forward() with these lines rewritten (the fix's snippet), applied to its class:\n"
            f"rewrite_forward(model, [\n{rows}])\n")


def declaration_snippet(detail: FrozenSize, exporter: str, params: tuple[str, ...] = (),
                        axes: dict[str, Any] | None = None) -> str:
    """The `dynamic_shapes` (named Dims with bounds) or `dynamic_axes` that declares the dims.

    `params`: forward()'s argument names, which key `dynamic_shapes` where the dims are named by
    the ONNX inputs (a TorchScript export's `input_names`), matched by position; `axes`: the
    script's own `dynamic_axes`, which the TorchScript declaration keeps (the fix adds to them)."""
    by_input: dict[str, list[tuple[int, str]]] = {}
    bounds: dict[str, tuple[int | None, int | None]] = {}
    if exporter != "dynamo":
        for name, dims in (axes or {}).items():
            pairs = dims.items() if isinstance(dims, dict) else ((d, f"{name}_{d}") for d in dims)
            by_input[name] = [(int(d), str(label)) for d, label in pairs]
    to_param = {name: params[i] for i, name in enumerate(detail.inputs) if i < len(params) and name not in params}
    for name, dim, label, low, high in detail.dims:
        if exporter == "dynamo":
            name = to_param.get(name, name)
        if (dim, label) not in by_input.get(name, []):
            by_input.setdefault(name, []).append((dim, label))
        bounds.setdefault(label, (low, high))
    if exporter == "dynamo":
        lines = ["from torch.export import Dim", ""]
        for label, (low, high) in bounds.items():
            args = ", ".join(f"{k}={v}" for k, v in (("min", low), ("max", high)) if v is not None)
            lines.append(f"{_identifier(label)} = Dim({label!r}{', ' + args if args else ''})")
        spec = ", ".join(f"{name!r}: {{{', '.join(f'{d}: {_identifier(label)}' for d, label in dims)}}}"
                         for name, dims in by_input.items())
        lines += [f"dynamic_shapes = {{{spec}}}",
                  "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True, dynamic_shapes=dynamic_shapes)"]
        return "\n".join(lines) + "\n"
    spec = ", ".join(f"{name!r}: {{{', '.join(f'{d}: {label!r}' for d, label in dims)}}}"
                     for name, dims in by_input.items())
    names = list(detail.inputs) or list(by_input)
    return (f"dynamic_axes = {{{spec}}}\n"
            f"torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=False,\n"
            f"                  input_names={names!r}, dynamic_axes=dynamic_axes)\n")


def _identifier(label: str) -> str:
    name = re.sub(r"\W", "_", label)
    return name if name and not name[0].isdigit() else f"d_{name}"


_INT_OF_SIZE = re.compile(r"\bint\(\s*([\w.]+\s*(?:\.shape\s*\[\s*-?\d+\s*\]|\.size\(\s*-?\d*\s*\)))\s*\)")
_LEN = re.compile(r"\blen\(\s*([\w.]+)\s*\)")
_RANGE = re.compile(r"\brange\(")
_VIEW_FIRST = re.compile(r"\.(view|reshape)\(\s*([A-Za-z_]\w*|\d+)\s*,")


def rewrite_snippet(detail: FrozenSize) -> str:
    """The user's lines that freeze a size, each with its rewrite, as a diff-like snippet."""
    out: list[str] = []
    for source, kind, text in detail.lines:
        if kind in ("range", "numpy", "branch"):
            text = text.split("  #", 1)[0].rstrip()
        new = _rewritten(kind, text)
        if kind == "range":
            new = _RANGE.sub("torch.arange(", text) + "  # and vectorise the loop body over it"
        elif kind == "numpy":
            new = text + "  # compute this with torch ops on x.shape, not numpy/math"
        elif kind == "branch":
            new = text + "  # torch.cond(pred, true_fn, false_fn, (x,)) or torch.where: both branches in the graph"
        if new == text:
            continue
        out += [f"# {source}", f"-    {text}", f"+    {new}"]
    return "\n".join(out) + "\n" if out else ""


def _rewritten(kind: str, text: str) -> str:
    """A line that turns a size into a Python value, with the size kept symbolic (unchanged when
    the kind is not one that code can rewrite)."""
    if kind == "int":
        return _INT_OF_SIZE.sub(r"\1", text)
    if kind == "len":
        return _LEN.sub(r"\1.shape[0]", text)
    if kind == "view":
        return _VIEW_FIRST.sub(_minus_one, text, count=1)
    return text


def _minus_one(match: re.Match[str]) -> str:
    return f".{match.group(1)}(-1,"


_POOLS = ("AveragePool", "MaxPool")
_POOL_OPS = ("aten::max_pool2d", "aten::max_pool1d", "aten::avg_pool2d", "aten::avg_pool1d")


def pool_kernel_refused(finding: Finding, ctx: FixContext) -> bool:
    """A pool whose kernel the trace holds as a value (a size declared dynamic) stopped the export:
    "Failed to export a node ... because it is not constant" in the pool's symbolic (mmocr#317,
    ultralytics#16391)."""
    return finding.code == "OD299" and (finding.op or "") in _POOL_OPS and "not constant" in ctx.export_error


def global_pool_fix(finding: Finding, ctx: FixContext) -> Fix | None:
    """A traced pool whose kernel was read from the input's size: a mean/amax over the dims.

    For a size finding (OD802/OD803) or a frozen value (OD210) of a TorchScript export holding an
    AveragePool/MaxPool node, or a pool's symbolic refusing a kernel that is not a constant (OD299).
    A kernel that covers some dims and is 1 in the others (`(x.size(2), 1)`) reduces those dims."""
    export = ctx.facts_of(Stage.EXPORT)
    ops = {str(t).rsplit("::", 1)[-1] for t in export.get("op_types") or ()}
    refused = pool_kernel_refused(finding, ctx)
    if ctx.target_kind != "script" or ctx.exporter != "torchscript" or not (ops & set(_POOLS) or refused):
        return None
    return Fix(
        kind="global_pool",
        title="Pool over the whole input with a mean (or amax) instead of a kernel read from its size",
        snippet=(
            "# before:  F.avg_pool2d(x, [int(s) for s in x.size()[2:]])   # the trace stores the kernel\n"
            "x = x.mean(dim=(-2, -1), keepdim=True)        # or F.adaptive_avg_pool2d(x, 1)\n"
            "# and for max pooling over the whole map:\n"
            "x = x.amax(dim=(-2, -1), keepdim=True)        # or F.adaptive_max_pool2d(x, 1)\n"
        ),
        applicability=Applicability.SAFE,
        cost=("an edit to forward(); checked by exporting with every pool whose kernel covers its input "
              "computed that way, at the example and at other sizes and inputs"),
        recipe=Recipe("global_pool", (EagerExport(global_pools=True), UseExporter("torchscript")), isolated=True),
    )
