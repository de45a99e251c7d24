"""Run chosen lines of the model's code rewritten while exporting: `if <tensor>:` statements as
selections (recipe.EagerExport.where_branches), `len(tensor)` as `tensor.shape[0]`
(recipe.EagerExport.len_sites), `int(size)` as the size tensor (slice_sites, size_sites).

The function holding each statement is compiled again from its source with the statement
rewritten by onnxdoctor.branches (both sides computed, each name selected), and put where the
model finds it (its class, or the script's globals) until the export returns. The new code keeps
the file's name and line numbers, so the export's provenance and warnings still point at the
user's lines.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
import types
from collections.abc import Callable
from typing import Any

from onnxdoctor.branches import (
    SIZE_MATH,
    select_branch,
    size_int_calls,
    size_math_calls,
    slice_int_calls,
)
from onnxdoctor.worker.loader import LoadedModel

# The name the rewritten code calls to select; bound in the function's globals while exporting.
SELECT = "__onnxdoctor_select__"
# The name the rewritten len() calls call (`length`).
LENGTH = "__onnxdoctor_len__"
# The name the rewritten slice-bound int() calls call (`as_bound`).
BOUND = "__onnxdoctor_bound__"
# The name the rewritten size int() calls call (`as_size`).
SIZE = "__onnxdoctor_size__"
# The name the numpy and math functions inside those calls become (`size_math`).
MATH = "__onnxdoctor_math__"


def select_branches(loaded: LoadedModel, sites: tuple[tuple[str, int], ...], undo: list[Callable[[], None]]) -> None:
    """Rewrite each site's `if` as a selection until `undo` runs.

    Raises:
        RuntimeError: a site is not an assignment-only `if` in a function the model reaches.
    """
    _rewrite_sites(loaded, sites, undo, _selections)


def sized_lengths(loaded: LoadedModel, sites: tuple[tuple[str, int], ...], undo: list[Callable[[], None]]) -> None:
    """Make each `len(...)` call on the sites' lines read a tensor's length as `tensor.shape[0]`
    (which the TorchScript tracer keeps as a traced size; `len()` it records as a number) until
    `undo` runs.

    Raises:
        RuntimeError: a site is not in a function the model reaches, or holds no len() call.
    """
    _rewrite_sites(loaded, sites, undo, _lengths)


def slice_bounds(loaded: LoadedModel, sites: tuple[tuple[str, int], ...], undo: list[Callable[[], None]]) -> None:
    """Make each slice bound `int(x)` on the sites' lines give a tensor `x` itself, as an integer
    tensor (which the TorchScript tracer keeps as a traced bound; int() it records as a number)
    until `undo` runs.

    Raises:
        RuntimeError: a site is not in a function the model reaches, or holds no such bound.
    """
    _rewrite_sites(loaded, sites, undo, _slice_ints)


def traced_sizes(loaded: LoadedModel, sites: tuple[tuple[str, int], ...], undo: list[Callable[[], None]]) -> None:
    """Make each size `int(x)` on the sites' lines (branches.size_int_calls) give a tensor `x` as an
    integer tensor, truncated as int() does (which the TorchScript tracer keeps as a traced size;
    int() it records as a number) until `undo` runs.

    Raises:
        RuntimeError: a site is not in a function the model reaches, or holds no such call.
    """
    _rewrite_sites(loaded, sites, undo, _size_ints)


def _rewrite_sites(loaded: LoadedModel, sites: tuple[tuple[str, int], ...], undo: list[Callable[[], None]],
                   edit: Callable[[ast.FunctionDef | ast.AsyncFunctionDef, int], bool]) -> None:
    """Each function holding a site compiled again with `edit` at its sites, installed until `undo`."""
    # Keyed by the owner's identity: a module-level function's owner is the script's globals, a dict.
    by_function: dict[tuple[int, str], tuple[tuple[Any, str, types.FunctionType], list[int]]] = {}
    for name, line in sites:
        found = _function_at(loaded, name, int(line))
        if found is None:
            raise RuntimeError(f"no function of the model holds line {name}:{line}")
        by_function.setdefault((id(found[0]), found[1]), (found, []))[1].append(int(line))
    for (owner, attribute, function), lines in by_function.values():
        replacement = _rewritten(function, owner, lines, edit)
        _install(owner, attribute, replacement, undo)
        undo.append(lambda globals_=function.__globals__: [globals_.pop(n, None) for n in _helpers()])


def _helpers() -> dict[str, Callable[..., Any]]:
    """The functions rewritten code calls, by the names it calls them."""
    return {SELECT: select, LENGTH: length, BOUND: as_bound, SIZE: as_size, MATH: size_math}


def length(value: Any) -> Any:
    """`len(value)`, as the traced size `value.shape[0]` where value is a tensor with dims."""
    import torch

    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value.shape[0]
    return len(value)


def as_bound(value: Any) -> Any:
    """`int(value)` for a slice bound: a one-element tensor stays a tensor (as int64), which the
    tracer records as a traced bound; anything else is int()."""
    import torch

    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.reshape(()).to(torch.int64)
    return int(value)


def as_size(value: Any) -> Any:
    """`int(value)` for a size: a one-element tensor stays a tensor (int64, truncated toward zero
    as int() truncates), which the tracer records as a traced size; anything else is int()."""
    import torch

    if isinstance(value, torch.Tensor) and value.numel() == 1:
        # A cast to int64 truncates toward zero, in torch and in ONNX Runtime's Cast (the
        # TorchScript exporter has no symbolic for aten::trunc).
        return value.reshape(()).to(torch.int64)
    return int(value)


def size_math(module: str, name: str) -> Callable[..., Any]:
    """numpy's or math's `name` (`np.ceil`), as torch's function of that name (branches.SIZE_MATH)
    where a value is a tensor (a traced size), which the tracer keeps traced; the module's own
    function for plain numbers."""
    import importlib

    import torch

    original = getattr(importlib.import_module("numpy" if module in ("np", "numpy") else "math"), name)

    def call(*args: Any) -> Any:
        tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if tensor is None:
            return original(*args)
        dtype = tensor.dtype if tensor.is_floating_point() else torch.get_default_dtype()
        return getattr(torch, SIZE_MATH[name])(*(torch.as_tensor(a).to(dtype) for a in args))
    return call


def _size_ints(definition: ast.FunctionDef | ast.AsyncFunctionDef, line: int) -> bool:
    """The size `int(...)` calls that start on `line`, made calls to SIZE, and the numpy and math
    functions inside them calls to MATH's."""
    calls = size_int_calls(definition, line)
    for math_call in size_math_calls(calls):
        module, name = math_call.func.value.id, math_call.func.attr  # type: ignore[attr-defined]
        math_call.func = ast.copy_location(
            ast.Call(ast.Name(MATH, ast.Load()), [ast.Constant(module), ast.Constant(name)], []), math_call.func)
    for call in calls:
        call.func = ast.copy_location(ast.Name(SIZE, ast.Load()), call.func)
    return bool(calls)


def _slice_ints(definition: ast.FunctionDef | ast.AsyncFunctionDef, line: int) -> bool:
    """The slice-bound `int(...)` calls that start on `line`, made calls to BOUND."""
    calls = slice_int_calls(definition, line)
    for call in calls:
        call.func = ast.copy_location(ast.Name(BOUND, ast.Load()), call.func)
    return bool(calls)


def _lengths(definition: ast.FunctionDef | ast.AsyncFunctionDef, line: int) -> bool:
    """The `len(...)` calls that start on `line`, made calls to LENGTH; whether there was one."""
    calls = [node for node in ast.walk(definition) if isinstance(node, ast.Call) and node.lineno == line
             and isinstance(node.func, ast.Name) and node.func.id == "len" and len(node.args) == 1]
    for call in calls:
        call.func = ast.copy_location(ast.Name(LENGTH, ast.Load()), call.func)
    return bool(calls)


def _selections(definition: ast.FunctionDef | ast.AsyncFunctionDef, line: int) -> bool:
    return select_branch(definition, line, SELECT) is not None


def select(condition: Any, if_true: Any, if_false: Any) -> Any:
    """`if_true if condition else if_false`, as a tensor op where the condition is a tensor."""
    import torch

    if not isinstance(condition, torch.Tensor):
        return if_true if condition else if_false
    if isinstance(if_true, (tuple, list)) and isinstance(if_false, (tuple, list)) and len(if_true) == len(if_false):
        return type(if_true)(select(condition, a, b) for a, b in zip(if_true, if_false))
    if isinstance(if_true, dict) and isinstance(if_false, dict) and if_true.keys() == if_false.keys():
        return {key: select(condition, value, if_false[key]) for key, value in if_true.items()}
    if if_true is if_false:
        return if_true
    plain = (bool, int, float)
    if not all(isinstance(v, (torch.Tensor, *plain)) for v in (if_true, if_false)):
        # None, strings, modules: no tensor can hold the choice; the example's side, as traced.
        return if_true if condition else if_false
    if isinstance(if_true, plain) and isinstance(if_false, plain) and if_true == if_false:
        return if_true
    return torch.where(condition.reshape(()) if condition.numel() == 1 else condition, if_true, if_false)


def _function_at(loaded: LoadedModel, name: str, line: int) -> tuple[Any, str, types.FunctionType] | None:
    """(owner, attribute, function) of the innermost function defined in file `name` whose lines
    hold `line`: the script's functions and classes, and the classes of the model's modules."""
    owners: list[Any] = [loaded.namespace]
    owners += [value for value in loaded.namespace.values() if isinstance(value, type)]
    model = loaded.model
    if hasattr(model, "modules"):
        owners += [type(module) for module in model.modules()]
    best: tuple[Any, str, types.FunctionType] | None = None
    seen: set[int] = set()
    for owner in owners:
        items = owner.items() if isinstance(owner, dict) else (
            (key, value) for klass in owner.__mro__ for key, value in vars(klass).items())
        for attribute, value in list(items):
            function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            # A decorated method (`@torch.no_grad()`) is a wrapper; its code is the wrapped one's.
            function = inspect.unwrap(function) if callable(function) else function
            if not isinstance(function, types.FunctionType) or id(function) in seen:
                continue
            seen.add(id(function))
            code = function.__code__
            if os.path.basename(code.co_filename) != name:
                continue
            lines = [n for _s, _e, n in code.co_lines() if n is not None]
            if lines and code.co_firstlineno <= line <= max(lines):
                holder = owner if isinstance(owner, dict) else next(
                    k for k in owner.__mro__ if vars(k).get(attribute) is value)
                if best is None or code.co_firstlineno > best[2].__code__.co_firstlineno:
                    best = (holder, attribute, function)
    return best


def _rewritten(function: types.FunctionType, owner: Any, lines: list[int],
               edit: Callable[[ast.FunctionDef | ast.AsyncFunctionDef, int], bool]) -> Any:
    """`function` compiled again with `edit` applied at each of `lines` (the `if` statements as
    selections, the len() calls as sizes), decorators applied again, as the class body did."""
    source, start = inspect.getsourcelines(function)
    tree = ast.parse(textwrap.dedent("".join(source)))
    ast.increment_lineno(tree, start - 1)
    definition = tree.body[0]
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise RuntimeError(f"cannot read the source of {function.__qualname__}")  # noqa: TRY004 (one error type for the step)
    # Last line first: an `if` that returns takes the rest of its block into its selection, and a
    # site there must be rewritten before it moves (its statements keep their lines).
    for line in sorted(lines, reverse=True):
        if not edit(definition, line):
            raise RuntimeError(f"line {line} of {function.__qualname__} holds nothing to rewrite "
                               f"({edit.__name__.strip('_')})")
    free = function.__code__.co_freevars
    if set(free) - {"__class__"}:
        raise RuntimeError(f"{function.__qualname__} reads variables of an enclosing function")
    # Inside a class of the owner's name: zero-argument super() gets its __class__ cell and
    # private names are mangled as in the original.
    klass = owner.__name__ if isinstance(owner, type) else None
    module = ast.Module(body=[ast.ClassDef(klass, [], [], [definition], [])] if klass else [definition],
                        type_ignores=[])
    if klass:
        holder = module.body[0]
        holder.lineno, holder.end_lineno = definition.lineno, definition.end_lineno
        holder.col_offset, holder.end_col_offset = 0, 0
        ast.fix_missing_locations(module)
    code = compile(module, function.__code__.co_filename, "exec")
    namespace: dict[str, Any] = {}
    globals_ = function.__globals__
    globals_.update(_helpers())
    exec(code, globals_, namespace)  # noqa: S102 (the user's own function, compiled again)
    made = vars(namespace[klass])[definition.name] if klass else namespace[definition.name]
    target = inspect.unwrap(made.__func__ if isinstance(made, (staticmethod, classmethod)) else made)
    if klass and "__class__" in target.__code__.co_freevars:
        target.__closure__[target.__code__.co_freevars.index("__class__")].cell_contents = owner
    return made


def _install(owner: Any, attribute: str, replacement: Any, undo: list[Callable[[], None]]) -> None:
    if isinstance(owner, dict):
        original = owner[attribute]
        owner[attribute] = replacement
        undo.append(lambda: owner.__setitem__(attribute, original))
        return
    original = vars(owner)[attribute]
    setattr(owner, attribute, replacement)
    undo.append(lambda: setattr(owner, attribute, original))
