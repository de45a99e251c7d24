"""Write the standalone repro script of `onnxdoctor reduce model.py` (docs/reduce.md).

The repro holds the source of what the failing submodule needs from the user's script — its
classes, the functions and custom ops they use, the imports — found by following names through
the script's top-level statements (ast), never by importing the script. It follows the
model-script protocol (README, "Model scripts"): `get_model()` builds the submodule and its inputs.
"""

from __future__ import annotations

import ast
from pathlib import Path

from onnxdoctor.protocol import ReduceOutcome, ReproSpec
from onnxdoctor.safetext import comment_safe, printable

# Names the protocol reads from a script: the repro defines its own, never the user's.
PROTOCOL_NAMES = frozenset({"get_model", "get_inputs", "get_inputs2", "model", "example_inputs", "opset_version",
                            "dynamo", "input_names", "output_names", "dynamic_shapes", "custom_op_libraries",
                            "targets"})


# What every repro imports itself: the script's own copies of these lines are left out.
OWN_IMPORTS = frozenset({"import torch", "from pathlib import Path", "from __future__ import annotations"})


def _defines(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _uses(node: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in _uses(node)


def _mentions(node: ast.stmt, strings: tuple[str, ...]) -> bool:
    """Whether a statement holds one of `strings` as a string constant (or a schema starting so):
    how a custom op's definition names it (`custom_op("ns::name", ...)`, `define("ns::name(...)")`)."""
    texts = [i.value for i in ast.walk(node) if isinstance(i, ast.Constant) and isinstance(i.value, str)]
    return any(t == s or t.startswith((s + "(", s + ".")) for t in texts for s in strings)


def needed_source(source: str, roots: tuple[str, ...], strings: tuple[str, ...] = ()) -> str:
    """The script's top-level statements that `roots` (class or function names) need, in order.

    A statement is kept when it names one of `strings` (a custom op's qualified name), when it
    defines a needed name (which makes the names it uses needed), or when it is a bare call or a
    decorated function that uses a needed name (a registration: `register_fake`,
    `register_custom_op_symbolic(...)`). The protocol's own names and the main guard are left out.
    """
    tree = ast.parse(source)
    body = [s for s in tree.body if not _is_main_guard(s) and not (_defines(s) & PROTOCOL_NAMES)]
    needed = {r.split(".")[0] for r in roots}
    keep: set[int] = set()
    for index, statement in enumerate(body):
        if strings and _mentions(statement, strings):
            keep.add(index)
            needed |= _uses(statement) | _defines(statement)
    changed = True
    while changed:
        changed = False
        for index, statement in enumerate(body):
            if index in keep:
                continue
            defines = _defines(statement)
            decorators = getattr(statement, "decorator_list", [])
            registers = (isinstance(statement, ast.Expr) and bool(_uses(statement) & needed)) or any(
                {n.id for n in ast.walk(d) if isinstance(n, ast.Name)} & needed for d in decorators
                if isinstance(d, ast.Attribute | ast.Call))
            if (defines & needed) or registers:
                keep.add(index)
                needed |= _uses(statement)  # decorators and bases too (ast.walk covers them)
                changed = True
    lines = source.splitlines()
    parts = []
    for statement in (body[i] for i in sorted(keep)):
        if isinstance(statement, ast.ImportFrom) and statement.module == "__future__":
            continue  # the repro has its own, first
        first = min([statement.lineno, *(d.lineno for d in getattr(statement, "decorator_list", []))])
        text = "\n".join(lines[first - 1 : statement.end_lineno])
        if text.strip() not in OWN_IMPORTS:
            parts.append(text)
    return "\n\n".join(dict.fromkeys(parts))


def _tensor(shape: tuple[int, ...], dtype: str) -> str:
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    if dtype.startswith(("float", "bfloat", "complex")):
        return f"torch.randn(({dims}), dtype=torch.{dtype})"
    if dtype == "bool":
        return f"torch.randint(0, 2, ({dims})).bool()"
    return f"torch.randint(0, 4, ({dims}), dtype=torch.{dtype})"


def repro_text(spec: ReproSpec, outcome: ReduceOutcome, command: str, *, with_values: bool,
               op_alone: bool = False) -> str:
    """The repro script. `with_values`: load the captured weights and inputs from the .pt beside
    it; `op_alone`: a module that calls just the failing custom op (spec.op) with its arguments."""
    source = Path(spec.script).read_text("utf-8")
    body = needed_source(source, () if op_alone else spec.classes, (spec.op,) if op_alone else ())
    header = [
        f'"""Standalone repro written by `{comment_safe(command)}`.',
        "",
        f"Original failure: {outcome.code} at {outcome.stage}" + (f" ({comment_safe(outcome.op)})" if outcome.op else ""),
        f"    {comment_safe(printable(outcome.message, one_line=True)[:300])}",
        f"Reduced: {comment_safe(outcome.what_before)} -> {comment_safe(outcome.what_after)}",
        "",
        "Run it: onnxdoctor diagnose THIS_FILE.py  (or python THIS_FILE.py to export it)",
        '"""',
    ]
    if op_alone:
        return _op_alone_text(spec, header, body)
    build = [f"    model = {spec.call}", f"    model.train({spec.training})"]
    build += [f"    model.get_submodule({name!r}).train({mode})" for name, mode in spec.modes]
    if with_values:
        build += ["    saved = torch.load(Path(__file__).with_suffix('.pt'), weights_only=True)",
                  "    model.load_state_dict(saved['state_dict'])",
                  "    inputs = tuple(saved['args'])",
                  "    kwargs = dict(saved['kwargs'])"]
    else:
        build += [f"    inputs = ({''.join(_tensor(s, d) + ', ' for s, d in spec.inputs)})",
                  "    kwargs = {" + ", ".join(f"{k!r}: {_tensor(s, d)}" for k, s, d in spec.kwarg_inputs) + "}"]
    build += ["    return model, inputs, kwargs"]
    settings = []
    if spec.opset is not None:
        settings.append(f"opset_version = {spec.opset}")
    if spec.dynamo is not None:
        settings.append(f"dynamo = {spec.dynamo}")
    main = ["if __name__ == '__main__':",
            "    model, inputs, kwargs = get_model()",
            "    torch.onnx.export(model, inputs, Path(__file__).with_suffix('.onnx'), kwargs=kwargs"
            + (f", opset_version={spec.opset}" if spec.opset is not None else "")
            + (f", dynamo={spec.dynamo}" if spec.dynamo is not None else "") + ")"]
    imports = "from __future__ import annotations\n\nfrom pathlib import Path\n\nimport torch"
    builder = spec.call.partition("(")[0]
    if "." in builder and builder.split(".")[0] not in spec.classes:  # a library's module, not the script's
        imports += f"\nimport {builder.rpartition('.')[0]}"
    parts = ["\n".join(header), imports, body, "\n".join(settings),
             "def get_model():\n    torch.manual_seed(0)\n" + "\n".join(build), "\n".join(main)]
    return "\n\n\n".join(p for p in parts if p.strip()) + "\n"


def _op_alone_text(spec: ReproSpec, header: list[str], body: str) -> str:
    """The repro as a module whose forward calls just the failing custom op."""
    namespace, _sep, name = spec.op.partition("::")
    tensors = [a for a in spec.op_args if a[0] == "tensor"]
    arguments, position = [], 0
    for item in spec.op_args:
        if item[0] == "tensor":
            arguments.append(f"inputs[{position}]")
            position += 1
        else:
            arguments.append(str(item[1]))
    op_text = f"getattr(getattr(torch.ops, {namespace!r}), {name!r})"
    module = "\n".join([
        "class OpAlone(torch.nn.Module):",
        f'    """Calls just {comment_safe(spec.op)}, with the arguments the failing submodule gave it."""',
        "",
        "    def forward(self, *inputs):",
        f"        return {op_text}({', '.join(arguments)})",
    ])
    settings = "\n".join([*([f"opset_version = {spec.opset}"] if spec.opset is not None else []),
                          *([f"dynamo = {spec.dynamo}"] if spec.dynamo is not None else [])])
    build = "\n".join([
        "def get_model():",
        "    torch.manual_seed(0)",
        f"    inputs = ({''.join(_tensor(tuple(t[1]), str(t[2])) + ', ' for t in tensors)})",
        "    return OpAlone(), inputs, {}",
    ])
    main = "\n".join([
        "if __name__ == '__main__':",
        "    model, inputs, kwargs = get_model()",
        "    torch.onnx.export(model, inputs, Path(__file__).with_suffix('.onnx')"
        + (f", opset_version={spec.opset}" if spec.opset is not None else "")
        + (f", dynamo={spec.dynamo}" if spec.dynamo is not None else "") + ")",
    ])
    imports = "from __future__ import annotations\n\nfrom pathlib import Path\n\nimport torch"
    parts = ["\n".join(header), imports, body, module, settings, build, main]
    return "\n\n\n".join(p for p in parts if p.strip()) + "\n"
