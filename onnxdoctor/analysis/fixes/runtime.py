"""Runtime-side fixes: casts to types the kernel table lists, and models too new for the runtime.

Both are rewrites of the ONNX file (onnxdoctor.onnxkit.transforms), so they are verified the same way
for a model script (applied to the fresh export, then compared with PyTorch) and for a `.onnx` file.
"""

from __future__ import annotations

import re

from onnxdoctor.analysis.fixes._context import FixContext
from onnxdoctor.model import Applicability, Finding, Fix, IrTooNew, Stage
from onnxdoctor.recipe import (
    CastAround,
    PromoteInputs,
    Recipe,
    Reference,
    RewriteOnnx,
    SetIrVersion,
    ToFloat32,
    UseExporter,
)

# OD303/OD304: the checker or shape inference refuses a node's input type (a type constraint of
# the op's schema), the same gap one stage earlier than OD402.
# OD501: a kernel that exists but refuses a type when it runs ("LSTM operator does not support
# double yet", "MLFloat16 data type is not supported with ScatterElements ... reduction is 'add'").
# OD601: a node ONNX Runtime computes otherwise than ONNX's reference evaluator (the mismatch
# search's verdict): in float64 its kernel may be close enough (a float32 STFT that loses digits).
CODES = ("OD402", "OD403", "OD303", "OD304", "OD501", "OD601")

# The checker's words for a type a node's schema refuses, input ("x typestr: T, has unsupported
# type: tensor(float16)") or output ("output has unsupported type tensor(float8e4m3fn)").
REFUSED_TYPE = re.compile(r"has unsupported type:? tensor\((\w+)\)")
_RUN_REFUSED_TYPE = re.compile(
    r"does not support (double|float16|bfloat16|MLFloat16|BFloat16|int8|uint8|int16|int32|int64|bool)\b"
    r"|\b(double|float16|bfloat16|MLFloat16|BFloat16|int8|uint8|int16|int32|int64|bool)(?: data)? type is not supported"
)
# The type a kernel that refuses one at run time is tried in: float32 for floating point, the
# integer type ONNX Runtime's CPU kernels list most often for integers.
_RUN_TARGETS = {"double": "float", "float16": "float", "mlfloat16": "float", "bfloat16": "float",
                "int8": "int32", "uint8": "int32", "int16": "int32", "int32": "int64", "int64": "int32",
                # bool as 0 and 1: max and min are or and and, and a Cast back keeps them bool.
                "bool": "int32"}

_TORCH_DTYPES = {"float": "float32", "double": "float64", "float16": "float16", "int64": "int64", "int32": "int32"}


def propose(finding: Finding, ctx: FixContext) -> list[Fix]:
    """A cast around the op for OD402; an older IR version stamp for OD403."""
    if finding.code == "OD402" and finding.op:
        ort_load = next((o for o in ctx.outcomes if o.stage is Stage.ORT_LOAD), None)
        if ort_load is not None and "kernels" in ort_load.facts and not ort_load.facts["kernels"]:
            return []  # no CPU kernel of the op for any type: no cast reaches one
        types = set(((ort_load.facts.get("node_types") if ort_load else None) or {}).values())
        # Where more than one op may lack the type's kernels, the whole graph in float32 too.
        source = next((name for name in ("double", "bfloat16", "float16") if any(name in t for t in types)), None)
        return [_cast_fix(finding, ctx), *([_float32_fix(ctx, source)] if source else [])]
    if finding.code == "OD403" and isinstance(finding.detail, IrTooNew):
        return [_ir_fix(ctx, finding.detail.max_ir)]
    if finding.code in ("OD303", "OD304") and finding.node and _INCONSISTENT.search(finding.message):
        op = finding.onnx_op or finding.op or "the node"
        # Promoted, the node's output takes the wider type (torch.stack of mixed dtypes); a node
        # PyTorch computes wide but returns in its input's type (layer_norm of float16 data with
        # float32 weights, under autocast) keeps its output's type: computed wide, cast back.
        wide = _WIDE_FLOATS.get((_INCONSISTENT_TYPE.search(finding.message) or [None, None])[1] or "")
        return [_promote_fix(finding.node, op, ctx),
                *([_mixed_cast_fix(op, wide, ctx)] if wide and "::" not in op else [])]
    refused = REFUSED_TYPE.search(finding.message)
    if finding.code in ("OD303", "OD304") and finding.op and "::" not in finding.op and refused:
        return [_schema_cast_fix(finding.op, refused.group(1), ctx)]
    if finding.code == "OD601":
        departs = _departing_op(ctx)
        ops = ctx.export_facts.get("op_types") or ()
        wider = [op for op in _WIDER_ACCUMULATOR if f"ai.onnx::{op}" in ops and op != departs]
        return [*([_double_fix(departs, ctx)] if departs else []), *(_accumulator_fix(op, ctx) for op in wider)]
    at_run = _RUN_REFUSED_TYPE.search(finding.message)
    if finding.code == "OD501" and finding.op and "::" not in finding.op and at_run:
        return [_run_cast_fix(finding.op, next(g for g in at_run.groups() if g), ctx)]
    mismatched = _MISMATCHED_TENSOR.search(finding.message)
    if finding.code == "OD501" and finding.op and "::" not in finding.op and mismatched:
        wanted, given = mismatched.group(1), _MANGLED_TYPES.get(mismatched.group(2))
        if wanted in ("float", "double") and given is not None:
            return [_mismatched_tensor_fix(finding.op, wanted, given, ctx)]
    return []


# A kernel registered for a type its implementation does not handle: ONNX Runtime's templated
# accessor names the type it wanted and, mangled, the one the tensor holds
# ("[with T = float] ... Tensor type mismatch. T !=N11onnxruntime17PrimitiveDataTypeIhEE": uint8).
_MISMATCHED_TENSOR = re.compile(
    r"\[with T = (\w+)\].*?Tensor type mismatch\. T !=\s*N11onnxruntime17PrimitiveDataTypeI(\w)EE", re.DOTALL)
_MANGLED_TYPES = {"h": "uint8", "a": "int8", "s": "int16", "t": "uint16", "i": "int32", "j": "uint32",
                  "l": "int64", "m": "uint64", "b": "bool", "f": "float", "d": "double"}


def _mismatched_tensor_fix(op: str, wanted: str, given: str, ctx: FixContext) -> Fix:
    """Run the node in the type its kernel's code handles, rounding integer data back."""
    integer = given.startswith(("int", "uint"))
    return _one_cast_fix(
        op, wanted, ctx,
        why=(f"ONNX Runtime's {op} kernel is registered for {given} but its code handles {wanted}: "
             f"compute it in {wanted}" + (", rounding back to the nearest integer" if integer else "")),
        title=f"Run {op} in {wanted} (its ONNX Runtime kernel fails on {given} data at run time), cast back after",
        applicability=Applicability.SAFE,
        cost=(f"{op} computes in {wanted}" + (f" and its result is rounded to {given} (half to even), as PyTorch's "
                                              "integer kernels round; a value halfway between two levels may "
                                              "land one level apart" if integer else "")
              + "; two Casts per node"),
        integers=integer,
    )


def _departing_op(ctx: FixContext) -> str | None:
    """The default-domain op a mismatch's search found ONNX Runtime computing unlike the reference."""
    diverging = ctx.diverging
    if diverging.get("runtime_matches_reference") is False:
        op = diverging.get("departing_op") or diverging.get("op")
        return str(op) if op and "::" not in str(op) else None
    return None


def _double_fix(op: str, ctx: FixContext) -> Fix:
    """Compute the op the runtime gets wrong in float64, cast back after (integer image data
    rounded back to the nearest level: ONNX Runtime's uint8 Resize truncates where the
    reference and PyTorch round)."""
    return _float64_fix(
        op, ctx,
        why=(f"ONNX Runtime's {op} departs from ONNX's reference in the model's type: compute it in float64 "
             "(8- and 16-bit integer data rounded back to the nearest value)"),
        title=f"Compute {op} in float64 (ONNX Runtime's {op} departs from ONNX's reference), cast back after",
        integers=True,
    )


def _float64_fix(op: str, ctx: FixContext, *, why: str, title: str, integers: bool = False) -> Fix:
    """Every `op` node computed in float64, cast back after."""
    return _one_cast_fix(
        op, "double", ctx, why=why, title=title, applicability=Applicability.SAFE, integers=integers,
        cost=f"every {op} node computes in float64 (slower, twice the memory for its tensors); two Casts per node",
    )


# Ops whose PyTorch CPU kernel keeps a wider accumulator than the data (ATen's acc_type: float64 for
# float32, float32 for float16 and bfloat16) where ONNX Runtime's kernel sums in the data's type. A
# float32 cumsum over 10^5 steps then parts by ~1e-5, which a later scale (a phase times 2 pi) makes
# a mismatch; computed in float64 and rounded once, the ONNX model gives PyTorch's numbers.
_WIDER_ACCUMULATOR = ("CumSum",)


def _accumulator_fix(op: str, ctx: FixContext) -> Fix:
    """Run an op PyTorch accumulates wider than ONNX Runtime does in float64, cast back after."""
    return _float64_fix(
        op, ctx,
        why=(f"PyTorch's CPU {op} accumulates float32 in float64 (float16 in float32); ONNX Runtime's sums in "
             "the data's type, so long running sums part: compute it in float64, round once"),
        title=f"Compute {op} in float64, as PyTorch's CPU kernel accumulates, cast back after",
    )


def _run_cast_fix(op: str, refused: str, ctx: FixContext) -> Fix:
    """Cast around a node whose kernel refuses its input type when it runs."""
    target = _RUN_TARGETS[refused.lower()]
    source = {"mlfloat16": "float16", "bfloat16": "float16"}.get(refused.lower(), refused.lower())
    return _one_cast_fix(
        op, target, ctx,
        why=f"ONNX Runtime's {op} kernel refuses {refused} when it runs: compute it in {target} and cast back",
        title=f"Run {op} in {target} (ONNX Runtime's kernel refuses {refused} at run time), cast back after",
        applicability=Applicability.UNSAFE if target != "float" or source == "double" else Applicability.SAFE,
        cost=(f"{op} computes in {target}: "
              + _PRECISION.get((source, target), "wider than the model's type, so nothing is lost")
              + "; two Casts per node"),
    )


def _one_cast_fix(op: str, to: str, ctx: FixContext, *, why: str, title: str, applicability: Applicability,
                  cost: str, integers: bool = False) -> Fix:
    """A cast of one op type's nodes to `to` ("exact": the schema's exact home), as a snippet
    rewriting the exported file and the recipe that verifies that same rewrite."""
    reference, load, saved = _cast_files(ctx)
    snippet = (
        "import onnx\n"
        "from onnxdoctor.onnxkit.transforms import cast_around\n\n"
        f"{load}"
        f"# {why}\n"
        f"onnx.save(cast_around(model, {op!r}, to={to!r}{', integers=True' if integers else ''}), {saved!r})\n"
    )
    return Fix(kind="cast", title=title, snippet=snippet, applicability=applicability, cost=cost,
               recipe=Recipe("cast", (RewriteOnnx(CastAround(op, to, integers), reference),)))


# Shape inference's words for a node whose inputs of one type parameter differ in type.
_INCONSISTENT = re.compile(r"inconsistent type")
# The type shape inference names as the odd one ("Scale has inconsistent type tensor(float)"), and
# the float type both are computed in: the wider of float32 and the half types.
_INCONSISTENT_TYPE = re.compile(r"inconsistent type tensor\((\w+)\)")
_WIDE_FLOATS = {"float": "float", "float16": "float", "bfloat16": "float", "double": "double"}


def _mixed_cast_fix(op: str, to: str, ctx: FixContext) -> Fix:
    """Every `op` node computed in `to` with its outputs cast back to their own types."""
    named = {"float": "float32", "double": "float64"}.get(to, to)
    return _one_cast_fix(
        op, to, ctx,
        why=(f"{op}'s inputs mix float types, which its schema refuses; PyTorch computes such a node in the "
             f"wider type and returns the input's: compute it in {named} and cast its outputs back"),
        title=f"Compute {op} in {named} (its inputs mix float types), its outputs cast back to their own types",
        applicability=Applicability.SAFE,
        cost=f"{op} computes in {named}; a Cast per input of another type and per output",
    )


def _promote_fix(node: str, op: str, ctx: FixContext) -> Fix:
    """Cast a node's inputs to the type PyTorch promotes them to (`torch.stack` of float16 and
    float32, written by the dynamo exporter as one Concat over both as they are)."""
    reference, load, saved = _cast_files(ctx)
    snippet = (
        "import onnx\n"
        "from onnxdoctor.onnxkit.transforms import promote_inputs\n\n"
        f"{load}"
        f"# {node}'s inputs differ in type; PyTorch promotes them (numpy's rule) before it computes.\n"
        "# The same value often reaches other nodes the same way: every such node is promoted.\n"
        f"onnx.save(promote_inputs(model, {node!r}, every=True), {saved!r})\n"
        "# or in the model: cast them to one dtype before torch.stack / torch.cat / slicing\n"
    )
    return Fix(kind="promote_inputs",
               title=f"Cast the inputs of {node} ({op}), and of every node whose inputs differ in type the same way,"
                     + (f" in the {ctx.exporter} exporter's model" if ctx.target_kind == "script" and ctx.exporter else "")
                     + " to the type PyTorch promotes them to",
               snippet=snippet, applicability=Applicability.SAFE,
               cost="one Cast per input of another type; none at run time beyond it",
               # The node's name is the export's: the same exporter, or no such node.
               recipe=Recipe("promote_inputs", (*((UseExporter(ctx.exporter),) if ctx.target_kind == "script"
                                                   and ctx.exporter else ()),
                                                 RewriteOnnx(PromoteInputs(node, every=True), reference))))


def _cast_files(ctx: FixContext) -> tuple[Reference | None, str, str]:
    """What a cast fix compares with, the snippet's line loading the model, and the file it saves.

    An ONNX file has no PyTorch to compare with, and the original is refused (by ONNX Runtime or
    the checker): onnx's reference evaluator is the reference, and the fix goes beside the file.
    """
    if ctx.target_kind == "onnx":
        return (Reference(required=True), f"model = onnx.load({ctx.target_name!r})\n",
                ctx.target_name.removesuffix(".onnx") + "-cast.onnx")
    return None, "# after torch.onnx.export(..., 'model.onnx'):\nmodel = onnx.load('model.onnx')\n", "model.onnx"


def _schema_cast_fix(op: str, refused: str, ctx: FixContext) -> Fix:
    """Cast a node's input the schema refuses to a type it allows that holds the values exactly."""
    return _one_cast_fix(
        op, "exact", ctx,
        why=f"{op}'s schema takes no {refused}: run it in the type it allows that holds the values exactly",
        title=f"Run {op} in a type its ONNX schema allows (its {refused} input cast there and back)",
        # int64 data above 2**53 would round in double: the user decides there.
        applicability=Applicability.UNSAFE if refused in ("int64", "uint64") else Applicability.SAFE,
        cost=(f"{op} computes in a wider type that holds every {refused} value (double for 32-bit integers; "
              "int64 beyond 2**53 would round), then casts back: two Casts per node"),
    )


def _cast_fix(finding: Finding, ctx: FixContext) -> Fix:
    ort_load = next((o for o in ctx.outcomes if o.stage is Stage.ORT_LOAD), None)
    kernels = (ort_load.facts.get("kernels") if ort_load else None) or []
    listed = sorted({t for k in kernels for types in (k.get("types") or {}).values() for t in types})
    supported = ", ".join(t.replace("tensor(", "").rstrip(")") for t in listed[:8]) or "float"
    node_types = set(((ort_load.facts.get("node_types") if ort_load else None) or {}).values())
    target = _cast_target(listed, node_types)
    op = (finding.op or "the op").rsplit("::", 1)[-1]  # cast_around matches the node's op_type
    ops = [op, *_same_gap(ort_load.facts if ort_load else {}, op, target)]
    named = ", ".join(ops)
    rewrite = (
        "import onnx\n"
        "from onnxdoctor.onnxkit.transforms import cast_around\n\n"
        f"# Cast the inputs of every {named} node to {target} and its outputs back:\n"
    )
    calls = "model"
    for each in ops:
        calls = f"cast_around({calls}, {each!r}, to={target!r})"
    reference, load, saved = _cast_files(ctx)
    snippet = rewrite + load + f"onnx.save({calls}, {saved!r})\n"
    if reference is None:
        torch_dtype = _TORCH_DTYPES.get(target, "float32")
        snippet += f"# or, in forward(), around the call: y = op(x.to(torch.{torch_dtype})).to(x.dtype)\n"
    return Fix(
        kind="cast",
        title=f"Run {named} in {target}, a type ONNX Runtime's CPU kernel has ({supported})",
        snippet=snippet,
        applicability=Applicability.UNSAFE,
        cost=f"{named} {'computes' if len(ops) == 1 else 'compute'} in {target}: {_precision(node_types, target)}; "
             "another execution provider may have the kernel instead",
        recipe=Recipe("cast", tuple(RewriteOnnx(CastAround(each, target), reference) for each in ops)),
    )


def _same_gap(facts: dict[str, object], op: str, target: str) -> list[str]:
    """The model's other ops without a CPU kernel for the same input type (ONNX Runtime names only
    the first it meets): cast together, or the fixed model stops at the next one."""
    found = facts.get("ops_without_kernel")
    if not isinstance(found, list):
        return []
    first = next((f.get("type") for f in found if isinstance(f, dict) and f.get("op") == op), None)
    if first is None or first == target:
        return []
    return [str(f["op"]) for f in found
            if isinstance(f, dict) and f.get("op") != op and f.get("type") == first]


# What computing in a narrower type costs, stated rather than hedged.
_PRECISION = {
    ("double", "float"): "about 7 significant digits instead of float64's 16 (relative rounding "
                         "6e-8 instead of 1e-16); the error against PyTorch is measured",
    ("double", "float16"): "about 3 significant digits instead of 16, and values above 65504 overflow",
    ("float", "float16"): "about 3 significant digits instead of 7, and values above 65504 overflow",
    ("int64", "int32"): "exact while values stay within +-2.1e9; larger ones wrap",
    ("float16", "float"): "wider than float16, so nothing is lost (the sums may round less than PyTorch's float16)",
}


def _precision(node_types: set[str], target: str) -> str:
    source = next((t for t in ("double", "float", "int64") if t in node_types), "")
    return _PRECISION.get((source, target), "precision may change")


# The kernel types a cast may go to, best first within each family: the widest that keeps values.
_INTEGER_TARGETS = ("int32", "int64")
_FLOAT_TARGETS = ("float", "double", "float16")


def _cast_target(listed: list[str], node_types: set[str]) -> str:
    """The listed type to compute in: same family as the node's inputs (cast_around casts integer
    inputs only to integer types, floating ones to floating types), float when nothing says."""
    names = {t.replace("tensor(", "").rstrip(")") for t in listed}
    integer_inputs = bool(node_types) and all(
        ("int" in t or "bool" in t) and "float" not in t for t in node_types)
    for candidate in _INTEGER_TARGETS if integer_inputs else _FLOAT_TARGETS:
        if candidate in names:
            return candidate
    return "float" if not names else min(names)


def _float32_fix(ctx: FixContext, source: str = "double") -> Fix:
    """The whole model in float32: the fix when more than one op lacks a kernel for the model's
    float64 or half type (`source`)."""
    reference = None
    measured = "against PyTorch"
    shown = {"double": "float64"}.get(source, source)
    argument = "" if source == "double" else f", {source!r}"
    if ctx.target_kind == "onnx":
        # Without a reference, float32 could be silently wrong (cancellation): numbers are required.
        reference = Reference(required=True)
        measured = f"against onnx's reference evaluator running the {shown} original"
        stem = ctx.target_name.removesuffix(".onnx")
        snippet = (
            "import onnx\n"
            "from onnxdoctor.onnxkit.transforms import to_float32\n\n"
            f"# Compute in float32; the inputs and outputs {'become float32' if source == 'bfloat16' else 'stay ' + shown}:\n"
            f"onnx.save(to_float32(onnx.load({ctx.target_name!r}){argument}), {stem + '-float32.onnx'!r})\n"
        )
    else:
        snippet = (
            "# Export (and run) the model in float32:\n"
            "model = model.float()\n"
            "example_inputs = tuple(t.float() if t.is_floating_point() else t for t in example_inputs)\n"
            f"# or {'compute in float32' if source == 'bfloat16' else 'keep ' + shown + ' inputs and outputs'} by rewriting the exported file:\n"
            "#   from onnxdoctor.onnxkit.transforms import to_float32\n"
            f"#   onnx.save(to_float32(onnx.load('model.onnx'){argument}), 'model.onnx')\n"
        )
    cost = (f"float32 precision instead of float64 (the error {measured} is measured)" if source == "double" else
            f"twice the memory of the {shown} weights, and float32's rounding where the model rounded to {shown} "
            f"(the error {measured} is measured); keep the {shown} file for an execution provider with the kernels")
    return Fix(
        kind="float32",
        title="Compute the whole model in float32 (ONNX Runtime's CPU kernels are float32 first; "
              + ("its inputs and outputs become float32 too: numpy holds no bfloat16)" if source == "bfloat16"
                 else f"its {shown} inputs and outputs stay)"),
        snippet=snippet,
        applicability=Applicability.UNSAFE,
        cost=cost,
        recipe=Recipe("float32", (RewriteOnnx(ToFloat32(source), reference),)),
    )


def _ir_fix(ctx: FixContext, ir_version: int) -> Fix:
    name = ctx.target_name if ctx.target_kind == "onnx" else "model.onnx"
    stem = name.removesuffix(".onnx")
    return Fix(
        kind="ir_version",
        title=f"Write the model with IR version {ir_version}, the newest this ONNX Runtime reads",
        snippet=(
            "import onnx\n\n"
            f"model = onnx.load({name!r})\n"
            f"model.ir_version = {ir_version}\n"
            f"onnx.save(model, {stem + f'-ir{ir_version}.onnx'!r})\n"
            "# Valid only when the model uses no feature newer than that IR version: onnxdoctor checked\n"
            "# its opset imports, and the checker and ONNX Runtime accept the result.\n"
        ),
        applicability=Applicability.UNSAFE,
        cost="valid only while the model uses no newer IR feature",
        recipe=Recipe("ir_version", (RewriteOnnx(SetIrVersion(ir_version)),)),
    )
