"""`dynamic_shapes` corrections for torch.export dim errors (OD208), and a dynamo script's
`dynamic_axes` written as `dynamic_shapes` where torch.onnx's conversion of them fails or puts a
dim on another input (OD204, OD299, OD208).

Two kinds are mechanical and verified: top-level keys that are not forward()'s argument names
(renamed by position), and the Dims torch itself suggests ("Suggested fixes: batch = Dim(...)").
A suggestion that pins a dim to a number makes the model static, which is what the user did not
want: it is shown with the way out (compute the shape from the input), never applied. One pin has
a mechanical way out: a dim pinned to 1 whose example size is 1 (torch.export specialises size-1
dims), exported from the example doubled along it.
"""

from __future__ import annotations

import ast
import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, DynamicShapesKeys, Finding, Fix, Stage
from onnxdoctor.recipe import (
    DeclareDynamic,
    DynamicShapes,
    EagerExport,
    LoadCode,
    Recipe,
    UseExporter,
)

CODES = ("OD208", "OD204", "OD299", "OD802", "OD803")

# torch.onnx's own conversion of dynamic_axes failed or put a dim on another input.
_CONVERSION = re.compile(r"dynamic_axes|dynamic_shapes|user-specified")

_SUGGESTION = re.compile(r"^(\w+) = (.+)$")


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """A key rename, torch's own Dim suggestions, or the way to keep a specialized dim dynamic."""
    if ctx.target_kind != "script":
        return []
    if finding.code in ("OD802", "OD803"):
        # The export ran, and a declared dim the example gives as 1 came out fixed: torch.export
        # specialised it without a suggestion to read (a batch-1 prompt, pytorch#167068).
        widen = _example_of_two(ctx, None) if ctx.exporter == "dynamo" else None
        return [widen] if widen else []
    converted = _from_axes(finding, ctx)
    if finding.code != "OD208":
        return [converted] if converted else []
    return [*([converted] if converted else []), *_corrections(finding, ctx)]


def _corrections(finding: Finding, ctx: FixContext) -> list[Fix]:
    """Corrections of the script's own dynamic_shapes (keys, torch's suggestions, pinned dims)."""
    if isinstance(finding.detail, DynamicShapesKeys):
        keys = finding.detail
        rename = _key_rename(keys)
        fixes = [_rename_fix(rename)] if rename else []
        strays = [key for key in keys.given if key not in keys.wanted]
        if keys.wanted == ("args",) and strays:
            # forward(*args): torch names the parameter `args`; its spec is a tuple, one per tensor.
            fixes.append(_pack_fix(strays))
        missing = [name for name in keys.wanted if name not in keys.given]
        if not strays and missing:
            fixes.append(_missing_fix(missing))
        if fixes:
            return fixes
    suggested = [ln for ln in ctx.export_facts.get("dynamic_shapes_suggested", ()) if _SUGGESTION.match(ln)]
    pinned = [ln for ln in suggested if _is_number(_SUGGESTION.match(ln).group(2))]  # type: ignore[union-attr]
    if suggested and not pinned:
        return [_suggested_fix(suggested)]
    if pinned:
        widen = _example_of_two(ctx, pinned)
        return [*([widen] if widen else []), _keep_dynamic_fix(pinned)]
    return []


# The example doubled along the dims WIDEN names (input position -> dims), for torch.export.
_DOUBLED = (
    "def doubled(x, dims):\n"
    "    for dim in dims:\n"
    "        x = torch.cat([x, x], dim=dim)\n"
    "    return x\n\n\n"
    "example_inputs = tuple(doubled(x, WIDEN.get(i, ())) for i, x in enumerate(example_inputs))\n"
)


def axes_as_shapes(ctx: FixContext, *, widen: bool = False) -> str | None:
    """Code defining `dynamic_shapes` (and clearing `dynamic_axes`) from the script's dynamic_axes:
    each input name paired with the tensor it names, in the example's order and nesting; None
    where the script declares none of its inputs dynamic that way. `widen`: the code also doubles
    `example_inputs` along the declared dims of size 1, which torch.export would fix (for code that
    only captures the model: the reference outputs stay the script's example's)."""
    load = ctx.facts_of(Stage.LOAD)
    settings = load.get("settings") or {}
    axes, names, tree = settings.get("dynamic_axes"), settings.get("input_names"), load.get("input_tree")
    params = load.get("forward_parameters") or []
    if not isinstance(axes, dict) or not isinstance(names, list) or not isinstance(tree, list) or len(tree) != 2:
        return None
    args, kwargs = tree
    if not isinstance(args, list) or not isinstance(kwargs, dict) or len(args) > len(params):
        return None

    shapes = [i.get("shape") or [] if isinstance(i, dict) else [] for i in load.get("inputs") or ()]

    def named(leaf: int) -> list[int]:
        dims = axes.get(names[leaf]) if leaf < len(names) else None
        return sorted(int(d) for d in (dims.keys() if isinstance(dims, dict) else dims or ()))

    # A dim the model ties to a declared one (y + z) must be declared too, or torch.export refuses
    # the declared one: every input's dim at the same position and of the same example size is
    # declared Dim.AUTO, which torch.export keeps dynamic where the model allows and fixes otherwise.
    declared = {(d, shapes[leaf][d]) for leaf in range(len(shapes)) for d in named(leaf) if d < len(shapes[leaf])}
    if not declared:
        return None  # dynamic_axes names none of the inputs: nothing to declare

    def dims_of(leaf: int) -> list[int]:
        shape = shapes[leaf] if leaf < len(shapes) else []
        return sorted(set(named(leaf)) | {d for d, size in declared if d < len(shape) and shape[d] == size})

    def spec(node: object) -> str:
        if isinstance(node, int):
            dims = dims_of(node)
            return "{" + ", ".join(f"{d}: Dim.AUTO" for d in dims) + "}" if dims else "None"
        if isinstance(node, list):
            return "[" + ", ".join(spec(item) for item in node) + "]"
        if isinstance(node, dict):
            return "{" + ", ".join(f"{key!r}: {spec(item)}" for key, item in node.items()) + "}"
        return "None"

    entries = [(params[i], spec(node)) for i, node in enumerate(args)] + [(k, spec(v)) for k, v in kwargs.items()]
    ones = {i: [d for d in dims_of(leaf) if shapes[leaf][d] == 1]
            for i, leaf in enumerate(args) if isinstance(leaf, int) and leaf < len(shapes)} if widen else {}
    ones = {i: dims for i, dims in ones.items() if dims}
    doubling = (
        "\n# torch.export fixes a dim whose example size is 1: the model is captured at the example\n"
        "# doubled along it (the same rows twice).\n"
        f"WIDEN = {ones!r}  # input position -> the dims to double\n\n\n" + _DOUBLED
    ) if ones else ""
    return (
        "from torch.export import Dim\n\n"
        "# dynamic_axes as dynamic_shapes, each input name paired with the tensor it names (a list\n"
        "# argument takes one spec per tensor; torch.onnx's own conversion pairs them otherwise), and\n"
        "# the dims of the same size beside them, which the model may tie to them (AUTO: dynamic where\n"
        "# the model allows).\n"
        "dynamic_shapes = {\n" + "".join(f"    {key!r}: {value},\n" for key, value in entries) + "}\n"
        "dynamic_axes = None  # replaced by dynamic_shapes\n"
        + doubling
    )


def _from_axes(finding: Finding, ctx: FixContext) -> Fix | None:
    """The script's dynamic_axes written as dynamic_shapes by hand, for the dynamo exporter.

    torch.onnx converts dynamic_axes by pairing input_names with forward()'s arguments, which goes
    wrong where an argument is a list or dict of tensors (a name per tensor: the dim lands on
    another input, pytorch/pytorch#140748) or where dynamic_axes names an output that is not one
    (pytorch's conversion then fails outright). Here each name is paired with the tensor it names,
    in the example's order, and the spec follows the example's nesting.
    """
    text = " ".join([finding.message, ctx.export_error, *finding.evidence])
    code = axes_as_shapes(ctx) if ctx.exporter == "dynamo" and _CONVERSION.search(text) else None
    if code is None:
        return None
    return Fix(
        kind="dynamic_shapes",
        title="Declare the dynamic dims as dynamic_shapes, following the example's nesting (torch.onnx's "
              "conversion of dynamic_axes pairs the names otherwise)",
        snippet=code + "torch.onnx.export(model, example_inputs, 'model.onnx', dynamo=True, "
                       "dynamic_shapes=dynamic_shapes)\n",
        applicability=Applicability.SAFE,
        cost="none at run time; Dim.AUTO lets torch.export keep a dim dynamic where the model allows and fix it "
             "where the model does not (the ONNX model then says which)",
        # dynamic_shapes are the dynamo exporter's: a chain may not switch to the other exporter.
        recipe=Recipe("axes_as_shapes", (LoadCode(code), UseExporter("dynamo")), isolated=True),
    )


def _example_of_two(ctx: FixContext, pinned: list[str] | None) -> Fix | None:
    """torch.export specialises a dim whose example size is 1 (it cannot tell 1 from "any size"),
    and torch.onnx then pins it to 1: export with the example doubled along that dim instead.
    `pinned`: torch's suggestions that pin dims to 1 (those dims); None: every declared dim the
    example gives as 1."""
    ones = {m.group(1) for m in map(_SUGGESTION.match, pinned or ()) if m and m.group(2).strip() in ("0", "1")}
    load = ctx.facts_of(Stage.LOAD)
    settings = load.get("settings") or {}
    axes, names = settings.get("dynamic_axes"), settings.get("input_names")
    shapes = [i.get("shape") for i in load.get("inputs") or () if isinstance(i, dict)]
    if (pinned is not None and not ones) or not isinstance(axes, dict) or not isinstance(names, list):
        return None
    widen: dict[int, list[int]] = {}
    found: set[str] = set()
    for name, dims in axes.items():
        if name not in names or names.index(name) >= len(shapes) or not isinstance(dims, dict):
            continue
        position = names.index(name)
        for axis, label in dims.items():
            shape = shapes[position] or []
            if (pinned is None or label in ones) and int(axis) < len(shape) and shape[int(axis)] == 1:
                widen.setdefault(position, []).append(int(axis))
                found.add(str(label))
    if not widen:
        return None
    labels = ", ".join(sorted(found))
    code = (
        "import torch\n\n"
        f"# torch.export cannot keep a dim dynamic whose example size is 1 ({labels}): export with the\n"
        "# example doubled along it (the same rows twice) and the same dynamic axes.\n"
        f"WIDEN = {widen!r}  # input position -> the dims to double\n\n\n" + _DOUBLED
    )
    return Fix(
        kind="dynamic_shapes",
        title=f"Export with an example of size 2 along {labels}: torch.export specialises a size-1 dim",
        snippet=code,
        applicability=Applicability.SAFE,
        cost="none: only the example used for the export changes",
        recipe=Recipe("example_of_two", (LoadCode(code),)),
    )


def _key_rename(keys: DynamicShapesKeys) -> dict[str, str]:
    wanted, given = keys.wanted, keys.given
    # Keys that are already arguments stay; the others pair with the arguments left, in order.
    strays = [key for key in given if key not in wanted]
    free = [name for name in wanted if name not in given]
    if not strays or len(strays) != len(free):
        return {}
    return dict(zip(strays, free, strict=True))


def _rename_fix(rename: dict[str, str]) -> Fix:
    pairs = ", ".join(f"{old!r} -> {new!r}" for old, new in rename.items())
    entries = "".join(f"    {new!r}: ...,  # was {old!r}: the same Dims\n" for old, new in rename.items())
    return Fix(
        kind="dynamic_shapes",
        title=f"Key dynamic_shapes by forward()'s argument names ({pairs})",
        snippet=(
            "# dynamic_shapes keys must be the names of forward()'s arguments\n"
            "# (or give them as a tuple in forward()'s argument order):\n"
            f"dynamic_shapes = {{\n{entries}}}\n"
        ),
        applicability=Applicability.SAFE,
        cost="none",
        recipe=Recipe("dynamic_shapes", (DynamicShapes(rename=tuple(rename.items())),)),
    )


def _pack_fix(strays: list[str]) -> Fix:
    specs = ", ".join(f"dynamic_shapes[{key!r}]" for key in strays)
    return Fix(
        kind="dynamic_shapes",
        title=f"Give forward(*args) its dynamic_shapes as a tuple under 'args' ({', '.join(map(repr, strays))})",
        snippet=(
            "# forward() takes *args: its spec is one entry per positional tensor, in order\n"
            f"dynamic_shapes = {{'args': ({specs},)}}\n"
        ),
        applicability=Applicability.SAFE,
        cost="none",
        recipe=Recipe("dynamic_shapes", (DynamicShapes(pack="args"),)),
    )


def _missing_fix(missing: list[str]) -> Fix:
    entries = "".join(f"dynamic_shapes[{name!r}] = None  # static: every dim fixed\n" for name in missing)
    return Fix(
        kind="dynamic_shapes",
        title=f"Name every argument in dynamic_shapes: {', '.join(map(repr, missing))} as static (None)",
        snippet="# dynamic_shapes needs a key for each of forward()'s arguments; None means static\n" + entries,
        applicability=Applicability.SAFE,
        cost="none: these arguments keep the shapes of the example inputs",
        recipe=Recipe("dynamic_shapes", (DynamicShapes(missing=tuple(missing)),)),
    )


def _suggested_fix(suggested: list[str]) -> Fix:
    if all(re.fullmatch(r"\w+ = [A-Za-z_]\w*", line) for line in suggested):
        cost = "none: the model already needs these dims equal"
    else:
        cost = (
            "the Dims say what the model supports; ONNX cannot check bounds, so sizes outside them "
            "still give wrong answers without an error: keep them out in the code that calls the model"
        )
    return Fix(
        kind="dynamic_shapes",
        title="Use the Dims torch.export suggests",
        snippet="from torch.export import Dim\n\n" + "".join(f"{line}\n" for line in suggested),
        applicability=Applicability.SAFE,
        cost=cost,
        recipe=Recipe("dynamic_shapes", (DynamicShapes(suggested=tuple(suggested)),)),
    )


def _keep_dynamic_fix(pinned: list[str]) -> Fix:
    names = ", ".join(_SUGGESTION.match(ln).group(1) for ln in pinned)  # type: ignore[union-attr]
    return Fix(
        kind="dynamic_shapes",
        title=f"Keep {names} dynamic: compute shapes from the input instead of constants",
        snippet=(
            f"# torch.export's suggestion ({'; '.join(pinned)}) would make the model static.\n"
            "# To keep the dim dynamic, find the code that fixes it to a number and derive it from\n"
            "# the input instead, e.g.:\n"
            "x = x.reshape(x.shape[0], -1)  # not x.reshape(2, 12)\n"
        ),
        applicability=Applicability.DISPLAY_ONLY,
        cost="a change to forward()",
    )


def _is_number(text: str) -> bool:
    try:
        return isinstance(ast.literal_eval(text.strip()), int)
    except (ValueError, SyntaxError):
        return False


# A Dim as the LOAD record writes it: "Dim('time', max=3000)".
_DIM_NAME = re.compile(r"Dim\(\s*'(\w+)'")


def torchscript_declaration(ctx: FixContext) -> DeclareDynamic | None:
    """The script's dynamic_shapes as the TorchScript exporter's dynamic_axes: each forward()
    argument's dims under the ONNX input name at its position (its own name where the script
    gives no input_names, which the declaration then sets); None where it declares none."""
    load = ctx.facts_of(Stage.LOAD)
    settings = load.get("settings") or {}
    spec = settings.get("dynamic_shapes")
    params = list(load.get("forward_parameters") or ())
    names = list(settings.get("input_names") or ())
    entries = spec.items() if isinstance(spec, dict) else enumerate(spec) if isinstance(spec, list) else ()
    rows: list[tuple[str, int, str, int | None, int | None]] = []
    for position, (key, dims) in enumerate(entries):
        index = params.index(key) if key in params else (key if isinstance(key, int) else position)
        name = names[index] if index < len(names) else (params[index] if index < len(params) else str(key))
        for dim, text in (dims.items() if isinstance(dims, dict) else enumerate(dims or ())):
            if text is not None:
                found = _DIM_NAME.search(str(text))
                rows.append((name, int(dim), found.group(1) if found else f"{name}_{dim}", None, None))
    if not rows:
        return None
    # TorchScript names inputs `input.1` where the script names none: the rows' names are set.
    inputs = tuple(names) or tuple(params[:len(load.get("inputs") or params)])
    return DeclareDynamic(dims=tuple(rows), inputs=inputs)


def torchscript_steps(ctx: FixContext, change: EagerExport) -> tuple[EagerExport | UseExporter | DeclareDynamic, ...]:
    """A recipe's steps for a change made while the TorchScript exporter traces: the change, that
    exporter, and the script's dynamic_shapes as its dynamic_axes (without them the fix would
    export, and be judged, at the example's size only)."""
    declare = torchscript_declaration(ctx)
    steps: tuple[EagerExport | UseExporter | DeclareDynamic, ...] = (change, UseExporter("torchscript"))
    return (*steps, declare) if declare is not None else steps
