"""Elementwise expressions for `scaffold --expr`: parse with `ast`, validate, differentiate, and
print the same math for every backend (torch, numpy, ONNX builders, C++ and CUDA).

One small expression tree feeds all generators, so the torch op, the ONNX decomposition, the
native and CUDA kernels and the Python kernel cannot drift apart.
"""

from __future__ import annotations

import ast
import keyword
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from onnxdoctor.errors import UsageError


@dataclass(frozen=True)
class Num:
    """A numeric literal; `text` keeps the user's spelling (``2`` stays an int literal)."""

    value: float
    text: str


@dataclass(frozen=True)
class Var:
    """An input tensor (``kind == "input"``) or a scalar attribute (``kind == "attr"``)."""

    name: str
    kind: str


@dataclass(frozen=True)
class Neg:
    """Unary minus."""

    operand: Expr


@dataclass(frozen=True)
class Bin:
    """A binary arithmetic operation: one of ``+ - * / **``."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Call:
    """A call to one of the math functions in FUNCTIONS (``step`` is internal, for derivatives)."""

    fn: str
    args: tuple[Expr, ...]


Expr = Num | Var | Neg | Bin | Call


@dataclass(frozen=True)
class Function:
    """How one math function is spelled in each backend; `{0}`, `{1}` are the printed arguments."""

    arity: int
    torch: str
    scalar: str  # Python `math` form, used where every argument is a scalar (attributes, literals)
    numpy: str
    onnx: str  # ONNX operator type (standard domain)
    cxx: str  # C++/CUDA helper name, defined in the generated kernel sources


FUNCTIONS: dict[str, Function] = {
    "sigmoid": Function(1, "torch.sigmoid({0})", "_sigmoid({0})", "_np_sigmoid({0})", "Sigmoid", "od_sigmoid"),
    "exp": Function(1, "torch.exp({0})", "math.exp({0})", "np.exp({0})", "Exp", "od_exp"),
    "log": Function(1, "torch.log({0})", "math.log({0})", "np.log({0})", "Log", "od_log"),
    "tanh": Function(1, "torch.tanh({0})", "math.tanh({0})", "np.tanh({0})", "Tanh", "od_tanh"),
    "sqrt": Function(1, "torch.sqrt({0})", "math.sqrt({0})", "np.sqrt({0})", "Sqrt", "od_sqrt"),
    "abs": Function(1, "torch.abs({0})", "abs({0})", "np.abs({0})", "Abs", "od_abs"),
    "sin": Function(1, "torch.sin({0})", "math.sin({0})", "np.sin({0})", "Sin", "od_sin"),
    "cos": Function(1, "torch.cos({0})", "math.cos({0})", "np.cos({0})", "Cos", "od_cos"),
    "erf": Function(1, "torch.erf({0})", "math.erf({0})", "_np_erf({0})", "Erf", "od_erf"),
    "relu": Function(1, "torch.relu({0})", "max({0}, 0.0)", "np.maximum({0}, 0)", "Relu", "od_relu"),
    "softplus": Function(
        1, "torch.nn.functional.softplus({0})", "_softplus({0})", "np.logaddexp({0}, 0)", "Softplus", "od_softplus"
    ),
    "floor": Function(1, "torch.floor({0})", "float(math.floor({0}))", "np.floor({0})", "Floor", "od_floor"),
    "ceil": Function(1, "torch.ceil({0})", "float(math.ceil({0}))", "np.ceil({0})", "Ceil", "od_ceil"),
    "sign": Function(1, "torch.sign({0})", "_sign({0})", "np.sign({0})", "Sign", "od_sign"),
    "min": Function(2, "torch.minimum({0}, {1})", "min({0}, {1})", "np.minimum({0}, {1})", "Min", "od_min"),
    "max": Function(2, "torch.maximum({0}, {1})", "max({0}, {1})", "np.maximum({0}, {1})", "Max", "od_max"),
}

# Internal: the derivative of relu/abs/min/max. Never accepted from the user's expression.
_STEP = Function(1, "({0} > 0).to(grad.dtype)", "(1.0 if {0} > 0 else 0.0)", "np.heaviside({0}, 0.0)", "", "")

_BINOPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_ONNX_BINOPS: dict[str, str] = {"+": "Add", "-": "Sub", "*": "Mul", "/": "Div", "**": "Pow"}

# Names the generated sources use themselves; an input or attribute may not shadow them.
RESERVED_NAMES = frozenset(
    {
        "torch", "np", "numpy", "math", "op", "g", "ctx", "grad", "grads", "onnx", "onnxscript", "ort",
        "self", "args", "kwargs", "inputs", "outputs", "out", "result", "n", "i", "T", "C", "F", "x_",
        "float", "double", "int", "half", "auto", "const", "void", "char", "long", "short", "signed",
        "unsigned", "bool", "true", "false", "new", "delete", "this", "class", "struct", "template",
        "typename", "namespace", "using", "static", "extern", "inline", "register", "volatile",
        "switch", "case", "default", "goto", "do", "sizeof", "operator", "private", "public",
        "protected", "virtual", "friend", "union", "enum", "typedef", "mutable", "explicit",
        "export", "catch", "throw", "try", "std", "size_t", "int64_t", "stream", "blockDim",
        "blockIdx", "threadIdx", "gridDim", "FLOAT", "name", "shape", "dtype", "beta_", "pi", "e",
        "abs", "min", "max", "sum", "len", "range", "list", "dict", "tuple", "str", "object", "type",
    }
    | set(FUNCTIONS)
    | {"step"}
)

MAX_EXPR_LENGTH = 1000
MAX_EXPR_NODES = 200


def _reject(message: str) -> UsageError:
    return UsageError(message)


def parse_expression(text: str, inputs: Sequence[str], attrs: Sequence[str]) -> Expr:
    """Parse and validate an elementwise expression over `inputs` and scalar `attrs`.

    Raises:
        UsageError: the text does not parse, names something unknown, calls an unknown function,
            uses a non-elementwise construct (subscripts, methods, comparisons, ...), or uses none
            of the inputs.
    """
    if not text or not text.strip():
        raise _reject("--expr is empty")
    if len(text) > MAX_EXPR_LENGTH:
        raise _reject(f"--expr is longer than {MAX_EXPR_LENGTH} characters")
    if "\n" in text or "\r" in text:
        raise _reject("--expr must be a single line")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        # Python reports "unexpected end" at column 0 or past the end: say where the text stops.
        column = exc.offset if exc.offset and 0 < exc.offset <= len(text.strip()) else None
        where = f"column {column}" if column else "it ends too soon"
        raise _reject(f"--expr does not parse: {exc.msg} ({where})") from None
    input_set, attr_set = set(inputs), set(attrs)
    count = [0]

    def convert(node: ast.AST) -> Expr:
        count[0] += 1
        if count[0] > MAX_EXPR_NODES:
            raise _reject(f"--expr has more than {MAX_EXPR_NODES} nodes")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise _reject(f"--expr: only numeric literals are allowed, got {node.value!r}")
            value = float(node.value)
            if not math.isfinite(value):
                raise _reject("--expr: literals must be finite")
            text_ = repr(node.value) if isinstance(node.value, int) else repr(value)
            return Num(value, text_)
        if isinstance(node, ast.Name):
            if node.id in input_set:
                return Var(node.id, "input")
            if node.id in attr_set:
                return Var(node.id, "attr")
            known = ", ".join(sorted(input_set | attr_set))
            hint = " (declare it with --attr NAME:float=DEFAULT or --inputs)" if node.id.isidentifier() else ""
            raise _reject(f"--expr: unknown name {node.id!r}; known names: {known}{hint}")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = convert(node.operand)
            return Neg(operand) if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return Bin(_BINOPS[type(node.op)], convert(node.left), convert(node.right))
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                raise _reject(
                    f"--expr: call {ast.unparse(node.func)}(...) is not allowed; use the bare function "
                    f"names: {', '.join(sorted(FUNCTIONS))}"
                )
            fn = node.func.id
            if fn not in FUNCTIONS:
                raise _reject(
                    f"--expr: unknown function {fn!r}; known functions: {', '.join(sorted(FUNCTIONS))}"
                )
            if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
                raise _reject(f"--expr: {fn}() takes positional arguments only")
            spec = FUNCTIONS[fn]
            if len(node.args) != spec.arity:
                raise _reject(f"--expr: {fn}() takes {spec.arity} argument(s), got {len(node.args)}")
            return Call(fn, tuple(convert(a) for a in node.args))
        construct = type(node).__name__
        snippet = ast.unparse(node)
        raise _reject(
            f"--expr: {snippet!r} ({construct}) is not elementwise arithmetic; allowed: numbers, "
            f"inputs, attributes, + - * / **, and {', '.join(sorted(FUNCTIONS))}"
        )

    expr = convert(tree.body)
    used = inputs_used(expr)
    missing = [name for name in inputs if name not in used]
    if missing:
        raise _reject(f"--expr does not use input(s) {', '.join(missing)}; every input must appear")
    return expr


def inputs_used(expr: Expr) -> set[str]:
    """The input names the expression reads."""
    if isinstance(expr, Var):
        return {expr.name} if expr.kind == "input" else set()
    if isinstance(expr, Num):
        return set()
    if isinstance(expr, Neg):
        return inputs_used(expr.operand)
    if isinstance(expr, Bin):
        return inputs_used(expr.left) | inputs_used(expr.right)
    return set().union(*(inputs_used(a) for a in expr.args))


def is_scalar(expr: Expr) -> bool:
    """True when no input tensor appears below `expr` (only literals and attributes)."""
    return not inputs_used(expr)


# ----------------------------------------------------------------------------------- simplify


def _num(value: float) -> Num:
    text = repr(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))
    return Num(float(value), text)


def _is_num(expr: Expr, value: float) -> bool:
    return isinstance(expr, Num) and expr.value == value


def simplify(expr: Expr) -> Expr:
    """Fold the 0s and 1s that differentiation leaves behind (not a general algebra system)."""
    if isinstance(expr, (Num, Var)):
        return expr
    if isinstance(expr, Neg):
        inner = simplify(expr.operand)
        if isinstance(inner, Num):
            return _num(-inner.value)
        if isinstance(inner, Neg):
            return inner.operand
        return Neg(inner)
    if isinstance(expr, Call):
        return Call(expr.fn, tuple(simplify(a) for a in expr.args))
    left, right = simplify(expr.left), simplify(expr.right)
    op = expr.op
    if isinstance(left, Num) and isinstance(right, Num) and op in "+-*":
        value = {"+": left.value + right.value, "-": left.value - right.value, "*": left.value * right.value}[op]
        return _num(value)
    if op == "+":
        if _is_num(left, 0):
            return right
        if _is_num(right, 0):
            return left
    if op == "-":
        if _is_num(right, 0):
            return left
        if _is_num(left, 0):
            return simplify(Neg(right))
    if op == "*":
        if _is_num(left, 0) or _is_num(right, 0):
            return _num(0)
        if _is_num(left, 1):
            return right
        if _is_num(right, 1):
            return left
        if _is_num(left, -1):
            return simplify(Neg(right))
        if _is_num(right, -1):
            return simplify(Neg(left))
    if op == "/" and _is_num(right, 1):
        return left
    if op == "**" and _is_num(right, 1):
        return left
    return Bin(op, left, right)


# ------------------------------------------------------------------------------ differentiate


def derivative(expr: Expr, wrt: str) -> Expr:
    """d(expr)/d(wrt) for an input name, simplified. Every function in FUNCTIONS has a rule."""
    return simplify(_d(expr, wrt))


def _d(e: Expr, wrt: str) -> Expr:
    if isinstance(e, Num):
        return _num(0)
    if isinstance(e, Var):
        return _num(1) if (e.kind == "input" and e.name == wrt) else _num(0)
    if wrt not in inputs_used(e):
        return _num(0)
    if isinstance(e, Neg):
        return Neg(_d(e.operand, wrt))
    if isinstance(e, Bin):
        a, b = e.left, e.right
        da, db = _d(a, wrt), _d(b, wrt)
        if e.op == "+":
            return Bin("+", da, db)
        if e.op == "-":
            return Bin("-", da, db)
        if e.op == "*":
            return Bin("+", Bin("*", da, b), Bin("*", a, db))
        if e.op == "/":
            return Bin("-", Bin("/", da, b), Bin("/", Bin("*", a, db), Bin("*", b, b)))
        # a ** b: b * a ** (b - 1) * da + a ** b * log(a) * db (the log term only when b varies)
        term = Bin("*", Bin("*", b, Bin("**", a, Bin("-", b, _num(1)))), da)
        if wrt in inputs_used(b):
            term = Bin("+", term, Bin("*", Bin("*", e, Call("log", (a,))), db))
        return term
    u = e.args[0]
    du = _d(u, wrt)
    fn = e.fn
    inner: Expr
    if fn == "sigmoid":
        inner = Bin("*", e, Bin("-", _num(1), e))
    elif fn == "exp":
        inner = e
    elif fn == "log":
        inner = Bin("/", _num(1), u)
    elif fn == "tanh":
        inner = Bin("-", _num(1), Bin("*", e, e))
    elif fn == "sqrt":
        inner = Bin("/", Num(0.5, "0.5"), e)
    elif fn == "abs":
        inner = Call("sign", (u,))
    elif fn == "sin":
        inner = Call("cos", (u,))
    elif fn == "cos":
        inner = Neg(Call("sin", (u,)))
    elif fn == "erf":
        inner = Bin("*", Num(2.0 / math.sqrt(math.pi), repr(2.0 / math.sqrt(math.pi))), Call("exp", (Neg(Bin("*", u, u)),)))
    elif fn == "relu":
        inner = Call("step", (u,))
    elif fn == "softplus":
        inner = Call("sigmoid", (u,))
    elif fn in ("floor", "ceil", "sign"):
        inner = _num(0)
    elif fn in ("min", "max"):
        a, b = e.args
        da, db = _d(a, wrt), _d(b, wrt)
        # Gradient flows to the chosen operand; on ties torch splits it, we pick one (measure zero).
        first = Call("step", (Bin("-", b, a) if fn == "min" else Bin("-", a, b),))
        return Bin("+", Bin("*", first, da), Bin("*", Bin("-", _num(1), first), db))
    else:  # pragma: no cover - FUNCTIONS and this table are kept in step by a test
        raise _reject(f"no derivative rule for {fn}")
    return Bin("*", inner, du)


# ----------------------------------------------------------------------------------- printers

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


def _prec(e: Expr) -> int:
    if isinstance(e, Bin):
        return 4 if e.op == "**" else _PREC[e.op]
    if isinstance(e, Neg):
        return 3
    return 5


def _infix(
    e: Expr,
    leaf: Callable[[Expr], str],
    call: Callable[[Call, Sequence[str]], str],
    power: Callable[[str, str], str | None],
) -> str:
    """Print with C/Python precedence; `power` returns a function-call spelling or None for `**`."""
    if isinstance(e, (Num, Var)):
        return leaf(e)
    if isinstance(e, Call):
        return call(e, [_infix(a, leaf, call, power) for a in e.args])
    if isinstance(e, Neg):
        inner = _infix(e.operand, leaf, call, power)
        # `- -x` and `-x ** 2` read badly (and `--x` is a decrement in C): parenthesize.
        return f"-({inner})" if _prec(e.operand) <= 4 else f"-{inner}"
    left = _infix(e.left, leaf, call, power)
    right = _infix(e.right, leaf, call, power)
    if e.op == "**":
        spelled = power(left, right)
        if spelled is not None:
            return spelled
        if _prec(e.left) <= 4:
            left = f"({left})"
        if _prec(e.right) <= 4:
            right = f"({right})"
        return f"{left} ** {right}"
    p = _PREC[e.op]
    if _prec(e.left) < p:
        left = f"({left})"
    if _prec(e.right) < p or (_prec(e.right) == p and e.op in "-/"):
        right = f"({right})"
    return f"{left} {e.op} {right}"


def _fn(name: str) -> Function:
    return _STEP if name == "step" else FUNCTIONS[name]


def to_python(expr: Expr, backend: str) -> str:
    """Print for Python: backend ``"torch"`` or ``"numpy"``; scalar-only subtrees use `math`."""

    def leaf(e: Expr) -> str:
        return e.text if isinstance(e, Num) else e.name  # type: ignore[union-attr]

    def call(e: Call, args: Sequence[str]) -> str:
        spec = _fn(e.fn)
        if is_scalar(e):
            return spec.scalar.format(*args)
        template = spec.torch if backend == "torch" else spec.numpy
        return template.format(*args)

    return _infix(expr, leaf, call, lambda a, b: None)


def to_cxx(expr: Expr, literal: Callable[[Num], str]) -> str:
    """Print for C++/CUDA with `od_*` helper functions; `literal` spells numeric literals."""

    def leaf(e: Expr) -> str:
        return literal(e) if isinstance(e, Num) else e.name  # type: ignore[union-attr,arg-type]

    def call(e: Call, args: Sequence[str]) -> str:
        return f"{_fn(e.fn).cxx or 'od_step'}({', '.join(args)})"

    return _infix(expr, leaf, call, lambda a, b: f"od_pow({a}, {b})")


def to_onnx_lines(
    expr: Expr,
    emit: Callable[[str, Sequence[str]], str],
    leaf: Callable[[Expr], str],
) -> str:
    """Walk the tree bottom-up, calling `emit(op_type, args)` per ONNX node; returns the root.

    `leaf` turns an input, attribute or literal into the backend's value (attributes and literals
    are CastLike'd to the first input there, so half and double graphs stay in their dtype).
    """
    if isinstance(expr, (Num, Var)):
        return leaf(expr)
    if isinstance(expr, Neg):
        return emit("Neg", [to_onnx_lines(expr.operand, emit, leaf)])
    if isinstance(expr, Bin):
        return emit(_ONNX_BINOPS[expr.op], [to_onnx_lines(expr.left, emit, leaf), to_onnx_lines(expr.right, emit, leaf)])
    return emit(FUNCTIONS[expr.fn].onnx, [to_onnx_lines(a, emit, leaf) for a in expr.args])


def onnx_nested(expr: Expr, first_input: str, prefix: str) -> str:
    """One nested call expression for onnxscript (``prefix="op."``)."""

    def emit(op_type: str, args: Sequence[str]) -> str:
        return f"{prefix}{op_type}({', '.join(args)})"

    def leaf(e: Expr) -> str:
        if isinstance(e, Var) and e.kind == "input":
            return e.name
        text = e.text if isinstance(e, Num) else e.name  # type: ignore[union-attr]
        return f"{prefix}CastLike({text}, {first_input})"

    return to_onnx_lines(expr, emit, leaf)


def torchscript_nested(expr: Expr, first_input: str) -> str:
    """One nested `g.op(...)` expression for a TorchScript symbolic (standard ONNX ops only)."""

    def emit(op_type: str, args: Sequence[str]) -> str:
        return f'g.op("{op_type}", {", ".join(args)})'

    def leaf(e: Expr) -> str:
        if isinstance(e, Var) and e.kind == "input":
            return e.name
        text = e.text if isinstance(e, Num) else e.name  # type: ignore[union-attr]
        # float64 constants keep the attribute exact; CastLike brings it to the input's dtype.
        return (
            f'g.op("CastLike", g.op("Constant", value_t=torch.tensor({text}, dtype=torch.float64)), '
            f"{first_input})"
        )

    return to_onnx_lines(expr, emit, leaf)


def uses_function(expr: Expr, names: Mapping[str, object] | set[str]) -> bool:
    """True when any call in the tree is to one of `names`."""
    if isinstance(expr, (Num, Var)):
        return False
    if isinstance(expr, Neg):
        return uses_function(expr.operand, names)
    if isinstance(expr, Bin):
        return uses_function(expr.left, names) or uses_function(expr.right, names)
    return expr.fn in names or any(uses_function(a, names) for a in expr.args)


def validate_identifier(kind: str, name: str) -> None:
    """Reject anything but a short ASCII Python identifier that is not a keyword.

    Raises:
        UsageError: with a one-line reason.
    """
    shown = name if len(name) <= 40 else name[:37] + "..."
    if not name:
        raise _reject(f"{kind} is empty")
    if not name.isascii():
        raise _reject(f"{kind} {shown!r} is not ASCII; use letters, digits and underscores")
    if len(name) > 64:
        raise _reject(f"{kind} {shown!r} is longer than 64 characters")
    if not name.isidentifier():
        raise _reject(f"{kind} {shown!r} is not an identifier (letters, digits, underscores; no leading digit)")
    if keyword.iskeyword(name) or keyword.iskeyword(name.lower()) or keyword.issoftkeyword(name):
        raise _reject(f"{kind} {shown!r} is a Python keyword")
