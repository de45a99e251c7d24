"""`if <tensor>:` statements rewritten as both sides computed and a selection (torch.where).

The TorchScript tracer records the side the example took and torch.export refuses to guess it
(docs/ARCHITECTURE.md, "Branches as selections"). Where both sides only assign names (`if seq_len >
limit: factors = long else: factors = short`), computing both and selecting each name with
`torch.where(condition, if_true, if_false)` is the same function for every input, and both exporters
capture it. This module is plain `ast` (no torch): the analysis uses it to write the edit the user
makes, the worker to run that edit for the export.

Only statements that assign plain names qualify (`x = ...`, `a, b = ...`, `x += ...`, `pass`, nested
`if`/`elif` of the same kind): a side that raises, loops, calls for its effect or writes an
attribute or an item is not a selection of values. A side that returns is one where every path of
the `if` and the rest of its block ends in a `return` of a value: the returns become assignments to
one result, the rest the `else`, and that result alone is selected and returned.
"""

from __future__ import annotations

import ast
import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Selection:
    """One `if` rewritten: `statements` replace it; `names` are the names it selects."""

    statements: tuple[ast.stmt, ...]
    names: tuple[str, ...]
    condition: str  # the test as written


def select_branch(function: ast.FunctionDef | ast.AsyncFunctionDef, line: int, select: str) -> Selection | None:
    """Rewrite the `if` statement at `line` (the file's numbering) of `function` in place, the
    selections written as calls to `select(condition, if_true, if_false)`; None (and `function`
    untouched) when there is no such statement or a side does more than assign names."""
    taken = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(function) if isinstance(a, ast.arg)}
    for owner, field, index, statement in _statements(function):
        if isinstance(statement, ast.If) and statement.lineno == line:
            rewriter = _Rewriter(taken, select)
            body = getattr(owner, field)
            returned = _returning(statement, body[index + 1:], rewriter)
            if returned:
                rewriter.only = returned[1]
            rewritten = rewriter.rewrite(returned[0] if returned else statement)
            if rewritten is None:
                return None
            if returned:
                # The rest of the block became the `else`: the selection replaces both, and returns.
                statements = [*rewritten[0], ast.copy_location(ast.Return(ast.Name(returned[1], ast.Load())), statement)]
                body[index:] = statements
                return Selection(tuple(statements), rewritten[1], ast.unparse(statement.test))
            body[index:index + 1] = rewritten[0]
            return Selection(tuple(rewritten[0]), rewritten[1], ast.unparse(statement.test))
    return None


def _returning(statement: ast.If, rest: list[ast.stmt], rewriter: _Rewriter) -> tuple[ast.If, str] | None:
    """An `if` that returns, as one assigning a fresh result name on each side, and that name:

        if c:                         if c:
            ...; return a       ->        ...; result = a
        ...; return b                 else:
                                          ...; result = b

    (the block's rest after the `if` becomes its `else`: DynamicDet's router, VDIGPKU/DynamicDet#5,
    returns early for an easy image). Also `if c: return a else: return b`, and further early
    returns in the rest, each the same way. None where a path does not end in one `return` of a
    value, or returns from inside a loop, a `with` or a `try`."""
    if not any(isinstance(n, ast.Return) for n in ast.walk(statement)):
        return None
    result = rewriter.fresh("result")
    converted = _assigning_returns([statement, *rest], result)
    if converted is None or len(converted) != 1 or not isinstance(converted[0], ast.If):
        return None
    rewriter.temporaries.discard(result)  # the name the selection gives: selected like a user's
    return converted[0], result


def _assigning_returns(block: list[ast.stmt], result: str) -> list[ast.stmt] | None:
    """`block`, which must end every path in a `return` of a value, with each return an assignment
    to `result` and each `if` that returns holding the rest of the block as its `else`."""
    out: list[ast.stmt] = []
    for index, statement in enumerate(block):
        if isinstance(statement, ast.Return):
            if statement.value is None or index != len(block) - 1:
                return None
            out.append(ast.copy_location(ast.Assign([ast.Name(result, ast.Store())], statement.value), statement))
            return out
        returns = any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) for n in ast.walk(statement))
        if isinstance(statement, ast.If) and returns:
            rest = block[index + 1:]
            if statement.orelse and rest:
                return None
            body = _assigning_returns(statement.body, result)
            other = _assigning_returns(statement.orelse or rest, result)
            if body is None or other is None:
                return None
            out.append(ast.copy_location(ast.If(statement.test, body, other), statement))
            return out
        if returns:
            return None  # a return inside a loop, a `with` or a `try`
        out.append(statement)
    return None  # a path that ends without a return


def _statements(node: ast.AST):  # type: ignore[no-untyped-def]
    """(owner, field, index, statement) for every statement under `node`, nested ones included,
    not entering nested function or class definitions."""
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(node, field, None)
        if not isinstance(block, list):
            continue
        for index, statement in enumerate(block):
            if isinstance(statement, ast.stmt):
                yield node, field, index, statement
                if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    yield from _statements(statement)
            elif isinstance(statement, ast.ExceptHandler):
                yield from _statements(statement)


class _Rewriter:
    """Turns one assignment-only `if` into plain assignments with fresh names for each side."""

    def __init__(self, taken: set[str], select: str) -> None:
        self.taken = set(taken)
        self.select = select
        self.temporaries: set[str] = set()  # names this rewrite made up: never selected themselves
        # A returned result, the one name the selections give (nested `if`s' too): nothing else
        # the sides assign is read after the function returns it.
        self.only: str | None = None

    def fresh(self, base: str) -> str:
        name, count = base, 1
        while name in self.taken:
            count += 1
            name = f"{base}_{count}"
        self.taken.add(name)
        self.temporaries.add(name)
        return name

    def rewrite(self, node: ast.If) -> tuple[list[ast.stmt], tuple[str, ...]] | None:
        """The `if` as plain statements and selections, and the names selected."""
        condition = self.fresh("condition")
        out: list[ast.stmt] = [ast.Assign([ast.Name(condition, ast.Store())], copy.deepcopy(node.test))]
        sides = []
        for body, label in ((node.body, "if_true"), (node.orelse, "if_false")):
            side = self._side(body, label)
            if side is None:
                return None
            out += side[0]
            sides.append(side[1])
        names = tuple(dict.fromkeys([*sides[0], *sides[1]]))
        if self.only is not None:
            names = tuple(name for name in names if name == self.only)
        if not names:
            return None
        for name in names:
            pick = [ast.Name(sides[0].get(name, name), ast.Load()), ast.Name(sides[1].get(name, name), ast.Load())]
            call = ast.Call(_dotted(self.select), [ast.Name(condition, ast.Load()), *pick], [])
            out.append(ast.Assign([ast.Name(name, ast.Store())], call))
        for statement in out:
            ast.copy_location(statement, node)
            ast.fix_missing_locations(statement)
        return out, names

    def _side(self, body: list[ast.stmt], label: str) -> tuple[list[ast.stmt], dict[str, str]] | None:
        """A side's statements with its names renamed (name -> `name_if_true`), and that map."""
        renamed: dict[str, str] = {}
        out: list[ast.stmt] = []
        for statement in body:
            if isinstance(statement, ast.Pass):
                continue
            if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                continue  # a docstring-like string or an Ellipsis
            if isinstance(statement, ast.If):
                nested = self.rewrite(statement)
                if nested is None:
                    return None
                statements = nested[0]
            else:
                statements = [statement]
            for item in statements:
                converted = self._assignment(item, renamed, label)
                if converted is None:
                    return None
                out.append(converted)
        return out, renamed

    def _assignment(self, statement: ast.stmt, renamed: dict[str, str], label: str) -> ast.stmt | None:
        if isinstance(statement, ast.AugAssign) and isinstance(statement.target, ast.Name):
            value: ast.expr = ast.BinOp(ast.Name(statement.target.id, ast.Load()), statement.op, statement.value)
            targets: list[ast.expr] = [ast.Name(statement.target.id, ast.Store())]
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
            value, targets = statement.value, [statement.target]
        elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            value, targets = statement.value, statement.targets
        else:
            return None
        names = _target_names(targets[0])
        if names is not None:
            names = [name for name in names if name not in self.temporaries]  # a nested if's own
        if names is None or any(isinstance(n, (ast.NamedExpr, ast.Lambda, ast.Yield, ast.YieldFrom, ast.Await))
                                for n in ast.walk(value)):
            return None
        value = _Loads(renamed).visit(copy.deepcopy(value))
        for name in names:
            if name not in renamed:
                renamed[name] = self.fresh(f"{name}_{label}")
        target = _Stores(renamed).visit(copy.deepcopy(targets[0]))
        return ast.copy_location(ast.Assign([target], value), statement)


def _target_names(target: ast.expr) -> list[str] | None:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        names: list[str] = []
        for element in target.elts:
            inner = _target_names(element)
            if inner is None:
                return None
            names += inner
        return names
    return None


class _Loads(ast.NodeTransformer):
    def __init__(self, renamed: dict[str, str]) -> None:
        self.renamed = renamed

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if isinstance(node.ctx, ast.Load) and node.id in self.renamed:
            return ast.copy_location(ast.Name(self.renamed[node.id], ast.Load()), node)
        return node

    # A comprehension's own loop variables are not the side's names.
    def _scoped(self, node: ast.AST) -> ast.AST:
        own = {n.id for g in getattr(node, "generators", ()) for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        outer = self.renamed
        self.renamed = {k: v for k, v in outer.items() if k not in own}
        try:
            return self.generic_visit(node)
        finally:
            self.renamed = outer

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _scoped


class _Stores(ast.NodeTransformer):
    def __init__(self, renamed: dict[str, str]) -> None:
        self.renamed = renamed

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.copy_location(ast.Name(self.renamed.get(node.id, node.id), ast.Store()), node)


def _dotted(name: str) -> ast.expr:
    parts = name.split(".")
    node: ast.expr = ast.Name(parts[0], ast.Load())
    for part in parts[1:]:
        node = ast.Attribute(node, part, ast.Load())
    return node


def edit_text(source: str, line: int) -> str | None:
    """The edit for the user: the `if` statement at `line` of the file `source`, and the lines that
    replace it with torch.where; None where it is not an assignment-only `if` inside a function."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0):
            original = next(((o, f, i, s) for o, f, i, s in _statements(node) if isinstance(s, ast.If) and s.lineno == line),
                            None)
            if original is None:
                continue
            owner, field, index, statement = original
            block = list(getattr(owner, field))
            selection = select_branch(node, line, "torch.where")
            if selection is None:
                return None
            # An `if` that returns takes the rest of its block into the selection: shown too.
            returns = isinstance(selection.statements[-1], ast.Return)
            before = "\n".join(ast.unparse(s) for s in (block[index:] if returns else [statement]))
            after = "\n".join(ast.unparse(s) for s in selection.statements)
            if returns and any(isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple) for n in ast.walk(statement)):
                after += ("\n# (torch.where takes tensors: for a tuple, select each item, tuple(torch.where(c, a, b)"
                          " for a, b in zip(if_true, if_false)))")
            return "# before:\n" + _commented(before) + "\n# after (both sides computed, each name selected):\n" + after + "\n"
    return None


def _commented(text: str) -> str:
    return "\n".join(f"#   {line}" for line in text.splitlines())


def outermost_right_first(calls: list[ast.Call]) -> list[ast.Call]:
    """The calls not inside another's span, rightmost first: the order a one-line text edit by
    their offsets takes them in. A call inside another's argument is left as written in the
    shown line (the worker's own rewrite, on the tree, takes both)."""
    kept = [c for c in calls if not any(o is not c and o.col_offset <= c.col_offset and c.end_col_offset <= o.end_col_offset
                                        for o in calls)]
    return sorted(kept, key=lambda c: -c.col_offset)


def slice_int_calls(tree: ast.AST, line: int) -> list[ast.Call]:
    """The `int(x)` calls that start on `line` and are a slice's bound (`masks[..., :int(h)]`):
    the TorchScript tracer records int() of a tensor as the example's number, and a slice takes
    the tensor itself as a traced bound."""
    bounds = [bound for node in ast.walk(tree) if isinstance(node, ast.Slice)
              for bound in (node.lower, node.upper, node.step) if bound is not None]
    return [bound for bound in bounds if isinstance(bound, ast.Call) and bound.lineno == line
            and isinstance(bound.func, ast.Name) and bound.func.id == "int" and len(bound.args) == 1
            and not bound.keywords]


# Calls that take sizes (x.view(n, -1), torch.zeros(n, c)): an int() given to one directly is a size.
# (Not split: Tensor.split takes int() of its size itself.)
_SIZE_TAKERS = frozenset({"view", "reshape", "expand", "repeat", "new_zeros", "new_ones", "new_full", "new_empty",
                          "zeros", "ones", "full", "empty", "unflatten", "narrow", "arange", "tile"})


def size_int_calls(tree: ast.AST, line: int) -> list[ast.Call]:
    """The `int(x)` calls that start on `line` and are a size: the whole value assigned to a name
    (`b_merged = int(windows.shape[0] / per_image)`) or returned (a helper computing a size for its
    caller), or an argument of a call that takes sizes
    (`x.view(int(n), -1)`), not a slice bound (slice_int_calls). The TorchScript tracer records
    int() of a traced size as the example's number; the tensor itself is a size it keeps traced."""
    def is_int(node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and node.lineno == line and isinstance(node.func, ast.Name)
                and node.func.id == "int" and len(node.args) == 1 and not node.keywords)

    found: list[ast.Call] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets) and is_int(node.value):
            found.append(node.value)  # type: ignore[arg-type]
        elif isinstance(node, ast.Return) and node.value is not None and is_int(node.value):
            found.append(node.value)  # type: ignore[arg-type]  (a helper computing a size for its caller)
        elif isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in _SIZE_TAKERS:
                found += [a for a in node.args if is_int(a)]
    return found


# numpy's and math's rounding and elementwise functions torch has under the same name (math.fabs
# is torch.abs). Given a traced size (`int(np.ceil(h / 8) * 8 - h)`, FBCNN's padding to a multiple
# of 8, vs-mlrt#83), numpy makes it an array and math a float: the example's number, frozen.
# (Not trunc: the TorchScript exporter has no symbolic for aten::trunc; int() truncates anyway.)
SIZE_MATH = {"ceil": "ceil", "floor": "floor", "round": "round", "sqrt": "sqrt", "log": "log",
             "log2": "log2", "log10": "log10", "exp": "exp", "abs": "abs", "fabs": "abs", "maximum": "maximum",
             "minimum": "minimum"}
# Their arity where torch's takes the same arguments: `np.round(x, 2)` and `math.log(x, 2)` do not.
_TWO = frozenset({"maximum", "minimum"})
_MATH_MODULES = frozenset({"np", "numpy", "math"})


def size_math_calls(int_calls: list[ast.Call]) -> list[ast.Call]:
    """The numpy and math calls of SIZE_MATH inside the arguments of these size int() calls."""
    return [node for call in int_calls for node in ast.walk(call.args[0])
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id in _MATH_MODULES
            and node.func.attr in SIZE_MATH and not node.keywords
            and len(node.args) == (2 if node.func.attr in _TWO else 1)]


def size_int_edit(source: str, line: int) -> tuple[str, str] | None:
    """(the line, the line with each size `int(x)` written `torch.as_tensor(x, dtype=torch.float64).long()`:
    int()'s number in eager code (float64, as Python computes x; float32 would round 90 * 0.7 up
    to 63), a traced size under the tracer), or None where the line holds no such call on one line.
    A numpy or math function of SIZE_MATH inside x is written as torch's of the same values."""
    lines = source.splitlines()
    if not 0 < line <= len(lines):
        return None
    text = lines[line - 1]
    with contextlib.suppress(SyntaxError):
        found = [c for c in size_math_calls(size_int_calls(ast.parse(source), line)) if c.lineno == c.end_lineno == line]
        maths = outermost_right_first(found)
        if len(maths) != len(found):
            return None  # a call inside another's argument: the one-line edit would leave it numpy
        edited = text.encode("utf-8")  # ast's offsets count bytes
        for call in maths:
            values = b", ".join(b"torch.as_tensor(" + edited[a.col_offset:a.end_col_offset] + b", dtype=torch.float64)"
                                for a in call.args)
            torch_name = SIZE_MATH[call.func.attr].encode()  # type: ignore[attr-defined]
            edited = edited[:call.col_offset] + b"torch." + torch_name + b"(" + values + b")" + edited[call.end_col_offset:]
        if maths:
            lines[line - 1] = edited.decode("utf-8")
            found = _int_calls_rewritten("\n".join(lines), line, size_int_calls, b"torch.as_tensor(",
                                         b", dtype=torch.float64).long()")
            return (text, found[1]) if found else None
    return _int_calls_rewritten(source, line, size_int_calls, b"torch.as_tensor(", b", dtype=torch.float64).long()")


def slice_int_edit(source: str, line: int) -> tuple[str, str] | None:
    """(the line, the line with each slice bound `int(x)` written `x`), or None where the line holds
    no such bound on one line."""
    return _int_calls_rewritten(source, line, slice_int_calls, b"", b"")


def _int_calls_rewritten(source: str, line: int, calls_of: Callable[[ast.AST, int], list[ast.Call]],
                         before: bytes, after: bytes) -> tuple[str, str] | None:
    """(the line, the line with each `int(x)` call `calls_of` finds on it written `before x after`),
    or None where it finds none that ends on the line."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    text = source.splitlines()[line - 1] if 0 < line <= len(source.splitlines()) else ""
    calls = outermost_right_first([c for c in calls_of(tree, line) if c.end_lineno == line])
    if not calls:
        return None
    encoded = text.encode("utf-8")  # ast's offsets count bytes
    edited = encoded
    for call in calls:
        inner = encoded[call.args[0].col_offset:call.args[0].end_col_offset]
        edited = edited[:call.col_offset] + before + inner + after + edited[call.end_col_offset:]
    return text, edited.decode("utf-8")
