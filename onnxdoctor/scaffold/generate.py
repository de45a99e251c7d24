"""Render a custom-op package from an `OpSpec`: pure text, no torch/onnx imports, no writes."""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from importlib import resources
from string import Template

from onnxdoctor.errors import UsageError
from onnxdoctor.opsig import attribute_suffix
from onnxdoctor.scaffold import expr as E

DEFAULT_NAMESPACE = "mynamespace"
DEFAULT_OPSET = 18
# dynamo exports natively from opset 18 (lower is converted, lossy); TorchScript stops at 20.
MIN_OPSET, MAX_OPSET = 18, 20
DOMAIN_VERSION = 1

# The known reference op: `scaffold MYSELU` with no options reproduces kernels/myselu/.
REFERENCE_OPS: dict[str, tuple[str, tuple[str, ...], tuple[tuple[str, str, float], ...]]] = {
    "MYSELU": ("x * sigmoid(beta * x)", ("x",), (("beta", "float", 1.0),)),
}

RESERVED_NAMESPACES = frozenset({"aten", "prim", "prims", "onnx", "quantized", "torch", "c10", "cuda", "ai", "com"})


@dataclass(frozen=True)
class Attr:
    """A scalar attribute of the op (float or int) with its default."""

    name: str
    type: str
    default: float | int  # an int for "int" (exact: 2**53 + 1 stays itself), a float for "float"

    @property
    def suffix(self) -> str:
        """The TorchScript `g.op` attribute suffix (`f` or `i`)."""
        return attribute_suffix(self.type)

    def literal(self) -> str:
        """The default as a Python literal of the attribute's type."""
        return repr(int(self.default)) if self.type == "int" else repr(float(self.default))


@dataclass(frozen=True)
class OpSpec:
    """Everything the templates need, validated."""

    name: str
    namespace: str
    inputs: tuple[str, ...]
    attrs: tuple[Attr, ...]
    expression: str | None  # None: no math given; the kernels are the identity, marked
    tree: E.Expr
    opset: int
    options_text: str = ""  # the command-line options given, quoted; "" for none

    @property
    def lname(self) -> str:
        """The lowercase name used for the torch op, the folder and the file names."""
        return self.name.lower()

    @property
    def qualified(self) -> str:
        """The torch.library name, ``namespace::lname``."""
        return f"{self.namespace}::{self.lname}"

    @property
    def has_math(self) -> bool:
        """False for a package whose kernels are the identity placeholder."""
        return self.expression is not None


def parse_attr(text: str) -> Attr:
    """Parse ``name:float=1.0`` / ``name:int=3`` / ``name=1.0`` (float) / ``name`` (float, 0.0).

    Raises:
        UsageError: a malformed spec, a bad name, an unknown type or a default that does not parse.
    """
    head, sep, default_text = text.partition("=")
    name, _, type_ = head.partition(":")
    name, type_ = name.strip(), (type_.strip() or "float")
    E.validate_identifier("--attr name", name)
    if type_ not in ("float", "int"):
        raise UsageError(f"--attr {text!r}: type must be float or int, got {type_!r}")
    default_text = default_text.strip()
    if sep and not default_text:
        raise UsageError(f"--attr {text!r}: empty default after '='")
    default: float | int
    try:
        default = int(default_text or 0) if type_ == "int" else float(default_text or 0.0)
    except ValueError:
        raise UsageError(f"--attr {text!r}: default {default_text!r} is not a {type_}") from None
    if type_ == "int" and not INT64_MIN <= default <= INT64_MAX:
        raise UsageError(f"--attr {text!r}: an int attribute is int64: {INT64_MIN} to {INT64_MAX}")
    if type_ == "float" and not (math.isfinite(default) and abs(default) <= FLOAT32_MAX):
        raise UsageError(f"--attr {text!r}: a float attribute is float32: finite, at most {FLOAT32_MAX:.7g} "
                         "in size")
    return Attr(name, type_, default)


# An ONNX int attribute is an int64, a float attribute a float32.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FLOAT32_MAX = 3.4028234663852886e38


def build_spec(
    name: str,
    namespace: str | None = None,
    expression: str | None = None,
    attrs: list[str] | None = None,
    inputs: str | None = None,
    opset: int | None = None,
) -> OpSpec:
    """Validate the command-line values and build the spec (the reference op fills in MYSELU).

    Raises:
        UsageError: any invalid value, with a one-line reason.
    """
    E.validate_identifier("NAME", name)
    if name.startswith("_"):
        raise UsageError(f"NAME {name!r} must not start with an underscore")
    namespace = DEFAULT_NAMESPACE if namespace is None else namespace
    E.validate_identifier("--namespace", namespace)
    if namespace.lower() in RESERVED_NAMESPACES or namespace.startswith("_"):
        raise UsageError(f"--namespace {namespace!r} is reserved by torch/ONNX; pick your own")
    opset = DEFAULT_OPSET if opset is None else opset
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UsageError(
            f"--opset {opset} is outside {MIN_OPSET}..{MAX_OPSET} (dynamo exports from 18, TorchScript up to 20)"
        )
    # The exact options given, for the "Generated by" lines (shlex-quoted, so they can be re-run).
    given: list[str] = []
    if namespace != DEFAULT_NAMESPACE:
        given += ["--namespace", namespace]
    if expression is not None:
        given += ["--expr", expression]
    for attr_text in attrs or []:
        given += ["--attr", attr_text]
    if inputs is not None:
        given += ["--inputs", inputs]
    if opset != DEFAULT_OPSET:
        given += ["--opset", str(opset)]
    reference = REFERENCE_OPS.get(name)
    if expression is None and reference is not None:
        # The reference math, with the user's inputs/attributes if given (then they must fit it).
        expression = reference[0]
        input_names: tuple[str, ...] = tuple(p.strip() for p in inputs.split(",")) if inputs else reference[1]
        attr_specs = tuple(parse_attr(a) for a in attrs) if attrs else tuple(Attr(*a) for a in reference[2])
    else:
        input_names = tuple(part.strip() for part in (inputs or "x").split(","))
        attr_specs = tuple(parse_attr(a) for a in (attrs or []))
    for input_name in input_names:
        E.validate_identifier("--inputs name", input_name)
    if len(input_names) > 8:
        raise UsageError("--inputs: at most 8 inputs")
    names = list(input_names) + [a.name for a in attr_specs]
    for n in names:
        if n in E.RESERVED_NAMES or n.startswith("od_") or n.lower() == name.lower():
            raise UsageError(f"name {n!r} is reserved in the generated code; rename it")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"duplicate input/attribute name(s): {', '.join(duplicates)}")
    if expression is not None:
        try:
            tree = E.parse_expression(expression, input_names, [a.name for a in attr_specs])
        except UsageError as exc:
            if reference is None or "--expr" in given:
                raise
            raise UsageError(
                f"{name}'s reference math {expression!r} needs input(s) {', '.join(reference[1])} and "
                f"attribute(s) {', '.join(a[0] for a in reference[2])}; pass --expr for other math ({exc})"
            ) from None
        expression = expression.strip()
    else:
        tree = E.Var(input_names[0], "input")
    return OpSpec(name, namespace, input_names, attr_specs, expression, tree, opset, " ".join(shlex.quote(g) for g in given))


# --------------------------------------------------------------------------------- fragments


def _cxx_literal(num: E.Num) -> str:
    # C(...) is the compute type (float or double), so literals never promote float math to double.
    return f"C({num.text})"


def _cuda_literal(num: E.Num) -> str:
    text = repr(float(num.value))
    return f"{text}f" if ("." in text or "e" in text) else f"{text}.0f"


def _fragments(spec: OpSpec) -> dict[str, str]:
    """Every template placeholder's text, backend by backend (the order matters: later parts read
    earlier ones, e.g. the helpers scan the torch body)."""
    f: dict[str, str] = {}
    for part in (_common_fragments, _torch_fragments, _autograd_fragments, _export_fragments,
                 _python_kernel_fragments, _cxx_fragments, _cuda_fragments, _helper_fragments):
        part(spec, f)
    return f


def _common_fragments(spec: OpSpec, f: dict[str, str]) -> None:
    """Names, documentation and the math marker shared by every file."""
    ins, attrs, first = spec.inputs, spec.attrs, spec.inputs[0]
    lname = spec.lname
    f["name"], f["lname"], f["namespace"] = spec.name, lname, spec.namespace
    f["domain"], f["qualified"], f["opset"] = spec.namespace, spec.qualified, str(spec.opset)
    f["domain_version"] = str(DOMAIN_VERSION)
    f["first_input"] = first
    f["env_prefix"] = spec.lname.upper()
    f["kernel_struct"] = "".join(p.capitalize() for p in lname.split("_") if p) + "Kernel"
    f["generated_from"] = f" {spec.options_text}" if spec.options_text else ""
    f["input_list"] = ", ".join(ins) + "".join(f", {a.name}={a.literal()}" for a in attrs)
    f["expression_doc"] = spec.expression if spec.has_math else f"{first} (identity: the math is not written yet)"
    f["expression_repr"] = repr(spec.expression)
    f["input_names_tuple"] = "".join(f'"{n}", ' for n in ins).rstrip(" ") if len(ins) == 1 else ", ".join(f'"{n}"' for n in ins)
    f["attr_defaults_dict"] = ", ".join(f'"{a.name}": {a.literal()}' for a in attrs)
    f["math_marker"] = (
        "MATH_IS_WRITTEN = True"
        if spec.has_math
        else "# WRITE THE MATH in every place marked so (torch, numpy, C++, CUDA, ONNX), then set True.\n"
        "MATH_IS_WRITTEN = False"
    )
    f["attr_doc"] = (
        "; attributes: " + ", ".join(f"`{a.name}` ({a.type}, default {a.literal()})" for a in attrs) if attrs else ""
    )
    f["math_note"] = (
        ""
        if spec.has_math
        else "\n**The math is not written yet**: every kernel is the identity on `"
        + first
        + "`. Fill the places marked `WRITE THE MATH`, set `MATH_IS_WRITTEN = True` in `"
        + f"{lname}_op.py`; until then the tests are reported as expected failures, not passes.\n"
    )
    f["attr_suffixes"] = ", ".join(f"`{a.name}_{a.suffix}`" for a in attrs) or "none"


def _torch_fragments(spec: OpSpec, f: dict[str, str]) -> None:
    """The torch.library op: signature, input checks, body."""
    ins, attrs, first, tree = spec.inputs, spec.attrs, spec.inputs[0], spec.tree
    todo_py = "    # WRITE THE MATH here (torch); the identity keeps the wiring testable until then.\n"
    py_attr = "".join(f", {a.name}: {a.type} = {a.literal()}" for a in attrs)
    f["py_params"] = ", ".join(f"{n}: torch.Tensor" for n in ins) + py_attr
    f["py_args"] = ", ".join(list(ins) + [a.name for a in attrs])
    f["py_inputs_tuple"] = ", ".join(ins) + ("," if len(ins) == 1 else "")
    f["symbolic_attrs"] = ", ".join(f'"{a.name}": {a.type}({a.name})' for a in attrs)

    checks = [
        f"    if not {first}.is_floating_point():",
        f'        raise TypeError(f"{spec.qualified} takes floating-point inputs, got {{{first}.dtype}}")',
    ]
    for other in ins[1:]:
        checks += [
            f"    if {other}.shape != {first}.shape or {other}.dtype != {first}.dtype:",
            f'        raise ValueError("{spec.qualified}: inputs must share shape and dtype (no broadcasting)")',
        ]
    f["torch_checks"] = "\n".join(checks)
    f["fake_checks"] = "\n".join(checks)
    if spec.has_math:
        f["torch_body"] = f"    return {E.to_python(tree, 'torch')}"
    else:
        f["torch_body"] = todo_py + f"    return {first}.clone()"


def _autograd_fragments(spec: OpSpec, f: dict[str, str]) -> None:
    """The autograd formula, derived from the expression."""
    ins, attrs, tree = spec.inputs, spec.attrs, spec.tree
    # autograd
    if spec.has_math:
        lines: list[str] = []
        returns: list[str] = []
        for n in ins:
            d = E.derivative(tree, n)
            if isinstance(d, E.Num) and d.value == 0:
                lines.append(f"    grad_{n} = torch.zeros_like(grad)")
            else:
                lines.append(f"    grad_{n} = grad * ({E.to_python(d, 'torch')})")
            returns.append(f"grad_{n}")
        returns += ["None"] * len(attrs)
        f["backward_lines"] = "\n".join(lines)
        f["backward_unpack"] = ", ".join(ins) + ("," if len(ins) == 1 else "")
        f["backward_unpack"] = f"({f['backward_unpack']})" if len(ins) == 1 else f["backward_unpack"]
        f["backward_attr_unpack"] = (
            f"    ({', '.join(a.name for a in attrs)}{',' if len(attrs) == 1 else ''}) = ctx.attributes"
            if attrs
            else "    # no attributes"
        )
        f["backward_return"] = ", ".join(returns) + ("," if len(returns) == 1 else "")
        f["n_inputs"] = str(len(ins))
        f["autograd_section"] = _render_text("autograd.py.tmpl", f).rstrip("\n")
        f["typing_import"] = "from typing import Any, Optional, Tuple"
    else:
        f["typing_import"] = "from typing import Tuple"
        f["autograd_section"] = "# WRITE THE MATH: add an autograd formula (register_autograd) once the math exists."


def _export_fragments(spec: OpSpec, f: dict[str, str]) -> None:
    """The TorchScript symbolic, the onnxscript translation and the example model."""
    ins, attrs, first, tree = spec.inputs, spec.attrs, spec.inputs[0], spec.tree
    # TorchScript
    f["ts_parse_args"] = ", ".join(['"v"'] * len(ins) + [f'"{a.type[0]}"' for a in attrs])
    f["ts_params"] = ", ".join([f"{n}: Any" for n in ins] + [f"{a.name}: {a.type}" for a in attrs])
    f["ts_inputs"] = ", ".join(ins)
    f["ts_attr_kwargs"] = "".join(f", {a.name}_{a.suffix}={a.name}" for a in attrs)
    f["ts_decomposed"] = E.torchscript_nested(tree, first) if spec.has_math else f'g.op("Identity", {first})  # WRITE THE MATH'
    # onnxscript
    f["os_params"] = ", ".join(f"{n}: FLOAT" for n in ins) + "".join(f", {a.name}: {a.type} = {a.literal()}" for a in attrs)
    f["os_inputs"] = ", ".join(ins)
    f["os_attr_kwargs"] = "".join(f", {a.name}={a.name}" for a in attrs)
    f["os_decomposed"] = E.onnx_nested(tree, first, "op.") if spec.has_math else f"op.Identity({first})  # WRITE THE MATH"
    # example model
    f["example_attr_params"] = "".join(f", {a.name}: {a.type} = {a.literal()}" for a in attrs)
    f["example_attr_assign"] = "\n".join(f"        self.{a.name} = {a.name}" for a in attrs) or "        # no attributes"
    f["example_forward_params"] = ", ".join(f"{n}: torch.Tensor" for n in ins)
    f["example_call"] = ", ".join([f"{n}.transpose(0, 1)" for n in ins] + [f"self.{a.name}" for a in attrs])


def _python_kernel_fragments(spec: OpSpec, f: dict[str, str]) -> None:
    """The numpy reference and the onnxruntime-extensions Python kernel."""
    ins, attrs, first, tree = spec.inputs, spec.attrs, spec.inputs[0], spec.tree
    py_attr = "".join(f", {a.name}: {a.type} = {a.literal()}" for a in attrs)
    # numpy / Python kernel
    f["np_params"] = ", ".join(f"{n}: np.ndarray" for n in ins) + py_attr
    f["np_body"] = (
        f"    return {E.to_python(tree, 'numpy')}"
        if spec.has_math
        else "    # WRITE THE MATH here (numpy).\n" + f"    return {first}.copy()"
    )
    f["pyop_inputs"] = ", ".join("PyCustomOpDef.dt_float" for _ in ins)
    f["pyop_attrs"] = ", ".join(
        f'"{a.name}": PyCustomOpDef.{"dt_float" if a.type == "float" else "dt_int64"}' for a in attrs
    )
    f["pyop_params"] = "".join(f"{n}: np.ndarray, " for n in ins)
    f["pyop_attr_reads"] = "\n".join(f'        {a.name} = {a.type}(attributes["{a.name}"])' for a in attrs) or "        # no attributes"
    f["pyop_call"] = ", ".join(list(ins) + [a.name for a in attrs])


def _cxx_fragments(spec: OpSpec, f: dict[str, str]) -> None:
    """The native ONNX Runtime CPU kernel."""
    ins, attrs, first, tree = spec.inputs, spec.attrs, spec.inputs[0], spec.tree
    # C++
    f["cxx_element_params"] = ", ".join([f"C {n}" for n in ins] + [f"C {a.name}" for a in attrs])
    f["cxx_body"] = (
        f"  return {E.to_cxx(tree, _cxx_literal)};"
        if spec.has_math
        else f"  // WRITE THE MATH here (C++); the identity keeps the wiring testable until then.\n  return {first};"
    )
    if not spec.has_math:
        unused = [n for n in list(ins[1:]) + [a.name for a in attrs]]
        if unused:
            f["cxx_body"] = "".join(f"  (void){n};\n" for n in unused) + f["cxx_body"]
    f["cxx_span_params"] = ", ".join([f"const T* __restrict od_in_{n}" for n in ins] + [f"double {a.name}" for a in attrs])
    f["cxx_span_params_f32"] = ", ".join([f"const float* __restrict od_in_{n}" for n in ins] + [f"double {a.name}" for a in attrs])
    f["cxx_span_params_t"] = ", ".join([f"const T* od_in_{n}" for n in ins] + [f"double {a.name}" for a in attrs])
    f["cxx_span_args"] = ", ".join([f"od_in_{n}" for n in ins] + [a.name for a in attrs])
    f["cxx_attr_locals"] = "\n".join(f"  const C od_attr_{a.name} = static_cast<C>({a.name});" for a in attrs) or "  // no attributes"
    f["cxx_element_call"] = ", ".join([f"load(od_in_{n}[i])" for n in ins] + [f"od_attr_{a.name}" for a in attrs])
    f["cxx_job_fields"] = "\n".join([f"  const T* od_in_{n};" for n in ins] + [f"  double {a.name};" for a in attrs])
    f["cxx_job_args"] = ", ".join([f"job.od_in_{n}" for n in ins] + [f"job.{a.name}" for a in attrs])
    f["cxx_job_init"] = ", ".join([f"{n}.Data()" for n in ins] + [f"{a.name}_" for a in attrs])
    f["cxx_compute_params"] = ", ".join(f"const Ort::Custom::Tensor<T>& {n}" for n in ins)
    checks_cxx = [
        f'    if ({n}.Shape() != {first}.Shape()) {{\n'
        f'      ORT_CXX_API_THROW("{spec.name}: inputs {first} and {n} must have the same shape", ORT_INVALID_ARGUMENT);\n'
        "    }"
        for n in ins[1:]
    ]
    f["cxx_shape_checks"] = "\n".join(checks_cxx) or "    // one input: nothing to match"
    reads = []
    for a in attrs:
        ctype = "float" if a.type == "float" else "int64_t"
        reads.append(
            f"    {a.name}_ = read_attribute<{ctype}>(kinfo, \"{a.name}\", {a.literal() if a.type == 'int' else a.literal() + 'f'});"
        )
    f["cxx_read_attrs"] = "\n".join(reads) or "    (void)kinfo;"
    f["cxx_attr_members"] = "\n".join(
        f"  double {a.name}_ = {a.literal()};" for a in attrs
    ) or "  // no attributes"


def _cuda_fragments(spec: OpSpec, f: dict[str, str]) -> None:
    """The CUDA kernel and its ctypes launchers."""
    ins, attrs, first, tree = spec.inputs, spec.attrs, spec.inputs[0], spec.tree
    # CUDA
    f["cuda_element_params"] = ", ".join([f"float {n}" for n in ins] + [f"float {a.name}" for a in attrs])
    f["cuda_body"] = (
        f"  return {E.to_cxx(tree, _cuda_literal)};"
        if spec.has_math
        else "".join(f"  (void){n};\n" for n in list(ins[1:]) + [a.name for a in attrs])
        + f"  // WRITE THE MATH here (CUDA).\n  return {first};"
    )
    f["cuda_kernel_params"] = ", ".join(f"const T* __restrict__ {n}" for n in ins)
    f["cuda_attr_params"] = "".join(f", float {a.name}" for a in attrs)
    f["cuda_attr_args"] = "".join(f", {a.name}" for a in attrs)
    f["cuda_element_call"] = ", ".join([f"to_float({n}[i])" for n in ins] + [a.name for a in attrs])
    f["cuda_launch_args"] = ", ".join(ins)
    f["cuda_packed_params"] = ", ".join(f"const Pack<T>* __restrict__ {n}" for n in ins)
    f["cuda_packed_loads"] = "\n".join(f"    const Pack<T> {n}_p = {n}[p];" for n in ins)
    f["cuda_packed_call"] = ", ".join([f"to_float({n}_p.v[k])" for n in ins] + [a.name for a in attrs])
    f["cuda_packed_args"] = ", ".join(f"reinterpret_cast<const Pack<T>*>({n})" for n in ins)
    f["cuda_aligned_check"] = "".join(f"aligned16({n}) && " for n in ins)
    f["cuda_offset_args"] = ", ".join(f"{n} + done" for n in ins)
    f["cuda_c_params_f32"] = ", ".join(f"const float* {n}" for n in ins)
    f["cuda_c_params_f16"] = ", ".join(f"const __half* {n}" for n in ins)
    f["cuda_c_params_bf16"] = ", ".join(f"const __nv_bfloat16* {n}" for n in ins)
    f["cuda_ctypes_attrs"] = "".join(f', ctypes.c_float(ATTRIBUTES["{a.name}"])' for a in attrs)


def _helper_fragments(spec: OpSpec, f: dict[str, str]) -> None:
    """Python helpers the printed expressions call, and the test attribute values."""
    attrs = spec.attrs
    # Python helpers: only what the printed expressions call.
    op_code = f["torch_body"] + "\n" + f.get("backward_lines", "")
    f["py_helpers"], op_math = _helpers_for(op_code)
    f["math_import"] = "import math\n" if op_math else ""
    f["np_helpers"], np_math = _helpers_for(f["np_body"])
    f["math_import_ort"] = "import math\n" if np_math else ""

    # tests
    f["test_attr_values"] = ", ".join(f'"{a.name}": {_test_value(a)}' for a in attrs)
    f["test_attr_types"] = ", ".join(f'"{a.name}": onnx.AttributeProto.{"FLOAT" if a.type == "float" else "INT"}' for a in attrs)


# Helpers the printed Python may call; only those a package uses are written into it.
_PY_HELPERS: dict[str, str] = {
    "_sigmoid": (
        "def _sigmoid(v: float) -> float:\n"
        '    """Scalar logistic function without overflow (expressions over attributes)."""\n'
        "    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))\n"
    ),
    "_softplus": (
        "def _softplus(v: float) -> float:\n"
        '    """Scalar log(1 + e^v) without overflow."""\n'
        "    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))\n"
    ),
    "_sign": (
        "def _sign(v: float) -> float:\n"
        '    """Scalar sign, 0 at 0."""\n'
        "    return float((v > 0) - (v < 0))\n"
    ),
    "_np_sigmoid": (
        "def _np_sigmoid(v: np.ndarray) -> np.ndarray:\n"
        '    """Logistic function; the tanh form never overflows (no warnings, no inf/inf)."""\n'
        "    return 0.5 * (1.0 + np.tanh(0.5 * v))\n"
    ),
    "_np_erf": (
        "def _np_erf(v: np.ndarray) -> np.ndarray:\n"
        '    """erf elementwise (numpy has none), keeping the dtype."""\n'
        "    return np.vectorize(math.erf, otypes=[v.dtype])(v)\n"
    ),
}


def _helpers_for(code: str) -> tuple[str, bool]:
    """The helper definitions `code` calls (each followed by two blank lines), and whether math is needed."""
    used = [name for name in _PY_HELPERS if re.search(rf"(?<![\w.]){name}\(", code)]
    text = "".join(_PY_HELPERS[name] + "\n\n" for name in used)
    needs_math = "math." in code or any("math." in _PY_HELPERS[name] for name in used)
    return text, needs_math


def _test_value(attr: Attr) -> str:
    """An attribute value unlike the default, so a kernel that ignores the attribute fails."""
    if attr.type == "int":
        return repr(int(attr.default) + 2)
    value = attr.default * 0.75 + 0.125 if attr.default != 0 else 0.625
    # A multiple of 1/64: exact in float32, so the ONNX attribute (always float32) equals the
    # Python float the torch op gets, and double-precision comparisons stay tight.
    return repr(round(value * 64) / 64)


# ------------------------------------------------------------------------------------ render


def _template_text(name: str) -> str:
    return resources.files("onnxdoctor.scaffold").joinpath("templates", name).read_text(encoding="utf-8")


def _render_text(template: str, fragments: dict[str, str]) -> str:
    return Template(_template_text(template)).substitute(fragments)


# (template, output file name pattern); "{lname}" is replaced.
FILES: tuple[tuple[str, str], ...] = (
    ("README.md.tmpl", "README.md"),
    ("build.sh.tmpl", "build.sh"),
    ("static/fetch_ort_headers.sh", "fetch_ort_headers.sh"),
    ("op.py.tmpl", "{lname}_op.py"),
    ("onnx_export.py.tmpl", "{lname}_onnx.py"),
    ("ort.py.tmpl", "{lname}_ort.py"),
    ("kernel.h.tmpl", "{lname}_kernel.h"),
    ("ort_op.cc.tmpl", "{lname}_ort_op.cc"),
    ("cuda.cu.tmpl", "{lname}_cuda.cu"),
    ("test.py.tmpl", "test_{lname}.py"),
)
EXECUTABLE = frozenset({"build.sh", "fetch_ort_headers.sh"})


def render_package(spec: OpSpec) -> dict[str, str]:
    """File name -> content for the package folder (static files copied verbatim)."""
    fragments = _fragments(spec)
    files: dict[str, str] = {}
    for template, pattern in FILES:
        target = pattern.format(lname=spec.lname)
        if template.startswith("static/"):
            files[target] = _template_text(template)
        else:
            files[target] = _render_text(template, fragments)
    return files
