"""Model-level fixes for existing .onnx files (onnx only: runs in the worker or anywhere).

`onnx.version_converter` refuses a model that is invalid at its own opset ("No Adapter ... for
Gelu"), so for an op that does not exist at the model's opset there are two routes: expand the op
into its schema's function body (the model keeps its opset), or raise the opset import to where the
op appears, but only when no other op of the model changes meaning between the two versions.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import onnx
import onnx.defs

from onnxdoctor.recipe import (
    AlignIfBranches,
    CastAround,
    CastOutputs,
    ConvertOpset,
    DropShapeAnnotations,
    ExpandFunction,
    FoldConstants,
    NameOutputs,
    NonNegativePerms,
    PerSampleLoop,
    PromoteInputs,
    SetIrVersion,
    SetOpset,
    SplitSizesAsTensor,
    ToFloat32,
    Transform,
)


class TransformError(Exception):
    """The transform does not apply to this model; the message says why."""


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    raise TransformError("the model imports no default-domain opset")


def changed_ops_between(model: onnx.ModelProto, old: int, new: int) -> list[str]:
    """Default-domain ops whose definition differs between opsets `old` and `new` (empty: safe)."""
    changed = []
    for op_type in sorted({n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}):
        try:
            before = onnx.defs.get_schema(op_type, old).since_version
        except onnx.defs.SchemaError:
            continue  # the op does not exist at `old`: it is the one being fixed
        try:
            after = onnx.defs.get_schema(op_type, new).since_version
        except onnx.defs.SchemaError:
            changed.append(op_type)
            continue
        if before != after:
            changed.append(op_type)
    return changed


def set_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """The model with its default-domain opset import set to `target` (up or down).

    Raises:
        TransformError: an op of the model changes definition between the two opsets.
    """
    current = _default_opset(model)
    if target == current:
        raise TransformError(f"the model is already at opset {current}")
    changed = changed_ops_between(model, min(current, target), max(current, target))
    if changed:
        raise TransformError(
            f"{', '.join(changed)} change(s) definition between opsets {current} and {target}; "
            "re-export the model at the higher opset instead"
        )
    return with_opset_import(model, target)


def with_opset_import(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """A copy of the model whose default-domain opset import says `opset`; nothing else changes."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for entry in fixed.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    return fixed


def convert_opset(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """`onnx.version_converter` to `target`; its refusals become a TransformError."""
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, target)
    except Exception as exc:  # noqa: BLE001 - the converter raises RuntimeError and others from C++
        raise TransformError(f"onnx.version_converter cannot convert to opset {target}: {exc}") from None


def first_opset(op_type: str, domain: str = "") -> int | None:
    """The first opset at which `domain` defines `op_type` (None: it never does)."""
    domain = "" if domain == "ai.onnx" else domain
    versions = [
        s.since_version
        for s in onnx.defs.get_all_schemas_with_history()
        if s.name == op_type and s.domain == domain
    ]
    return min(versions) if versions else None


@functools.lru_cache(maxsize=512)
def has_function_body(op_type: str) -> bool:
    """Whether onnx defines `op_type` as a function of other ops in any of its versions."""
    return any(
        s.has_function or s.has_context_dependent_function
        for s in onnx.defs.get_all_schemas_with_history()
        if s.name == op_type and s.domain == ""
    )


def _body_candidates(op_type: str, opset: int) -> list[tuple[onnx.defs.OpSchema, int]]:
    """(schema, body opset) pairs that define `op_type` as a function, nearest to `opset` first.

    A schema may carry bodies written for several opsets (LayerNormalization: 17 and 18); the one
    closest to the model's own opset is the likeliest to use only ops valid there.
    """
    pairs = [
        (s, version)
        for s in onnx.defs.get_all_schemas_with_history()
        if s.name == op_type and s.domain == ""
        for version in {*s.function_opset_versions, *s.context_dependent_function_opset_versions}
    ]
    if not pairs:
        raise TransformError(f"{op_type} has no function body in onnx {onnx.__version__}")
    return sorted(pairs, key=lambda p: (p[1] > opset, abs(p[1] - opset), -p[0].since_version))


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Every value's type that the model declares or shape inference can derive."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - best effort: declared types are often enough
        inferred = model
    graph = inferred.graph
    types = {v.name: v.type for v in [*graph.input, *graph.value_info, *graph.output]}
    for init in graph.initializer:
        types.setdefault(init.name, onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims)))
    return types


def _function_body(
    schema: onnx.defs.OpSchema, version: int, node: onnx.NodeProto, types: dict[str, onnx.TypeProto]
) -> onnx.FunctionProto:
    body = onnx.FunctionProto()
    if version in schema.function_opset_versions:
        body.ParseFromString(schema.get_function_with_opset_version(version))
        return body
    missing = [name for name in node.input if name and name not in types]
    if missing:
        raise TransformError(
            f"the type of {', '.join(missing)} is unknown, and {node.op_type}'s body depends on it"
        )
    complete = onnx.NodeProto()
    complete.CopyFrom(node)
    del complete.attribute[:]
    complete.attribute.extend(_node_attributes(schema, node).values())
    body.ParseFromString(
        schema.get_context_dependent_function_with_opset_version(
            version,
            complete.SerializeToString(),
            # An omitted optional input keeps its place, with an empty type.
            [(types[name] if name else onnx.TypeProto()).SerializeToString() for name in node.input],
        )
    )
    if not body.node:
        raise TransformError(f"onnx builds no function body for this {node.op_type} node")
    return body


def _node_attributes(schema: onnx.defs.OpSchema, node: onnx.NodeProto) -> dict[str, onnx.AttributeProto]:
    """The node's attributes, with the schema's defaults for the ones it leaves out."""
    given = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in given and spec.default_value.name:
            given[name] = spec.default_value
    return given


def _inline(
    body: onnx.FunctionProto,
    node: onnx.NodeProto,
    attributes: dict[str, onnx.AttributeProto],
    prefix: str,
) -> list[onnx.NodeProto]:
    """The body's nodes wired to `node`'s inputs and outputs, its own values renamed apart."""
    names = dict(zip(body.input, node.input, strict=False))
    names.update(zip(body.output, node.output, strict=False))
    for formal in body.input[len(node.input) :]:
        names[formal] = ""  # an optional input the node leaves out
    nodes = []
    for index, inner in enumerate(body.node):
        if inner.domain not in ("", "ai.onnx"):
            raise TransformError(f"{node.op_type}'s body uses {inner.domain}::{inner.op_type}")
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{prefix}/{inner.name or inner.op_type + '_' + str(index)}"
        copy.input[:] = [names.get(n, f"{prefix}/{n}") if n else "" for n in inner.input]
        copy.output[:] = [names.get(n, f"{prefix}/{n}") if n else "" for n in inner.output]
        del copy.attribute[:]
        for attr in inner.attribute:
            if attr.HasField("g") or attr.graphs:
                raise TransformError(f"{node.op_type}'s body has a subgraph; it is not expanded")
            if attr.ref_attr_name:
                if attr.ref_attr_name not in attributes:
                    continue  # an optional attribute the node leaves unset
                resolved = onnx.AttributeProto()
                resolved.CopyFrom(attributes[attr.ref_attr_name])
                resolved.name = attr.name
                copy.attribute.append(resolved)
            else:
                copy.attribute.append(attr)
        nodes.append(copy)
    return nodes


_CONSTANT_KINDS = ("value", "value_float", "value_floats", "value_int", "value_ints")


def _constant_array(node: onnx.NodeProto) -> Any:
    """The value of a Constant node as a numpy array, or None for kinds we do not fold."""
    import numpy as np
    from onnx import numpy_helper

    if node.op_type != "Constant" or len(node.attribute) != 1 or node.attribute[0].name not in _CONSTANT_KINDS:
        return None
    attr = node.attribute[0]
    if attr.name == "value":
        return numpy_helper.to_array(attr.t)
    value = onnx.helper.get_attribute_value(attr)
    return np.asarray(value, dtype=np.float32 if "float" in attr.name else np.int64)


def _fold_castlike(nodes: list[onnx.NodeProto], types: dict[str, onnx.TypeProto]) -> list[onnx.NodeProto]:
    """Replace CastLike(Constant, x) by a Constant of x's type (CastLike needs opset 15)."""
    from onnx import numpy_helper

    constants = {n.output[0]: value for n in nodes if (value := _constant_array(n)) is not None}
    folded = []
    for n in nodes:
        target = types.get(n.input[1]) if n.op_type == "CastLike" else None
        value = constants.get(n.input[0]) if target is not None else None
        if value is None or target is None or not target.tensor_type.elem_type:
            folded.append(n)
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(target.tensor_type.elem_type)
        folded.append(
            onnx.helper.make_node(
                "Constant", [], list(n.output), name=n.name, value=numpy_helper.from_array(value.astype(dtype))
            )
        )
    # The constants that only fed a folded CastLike are now dead.
    used = {name for n in folded for name in n.input}
    return [n for n in folded if n.output[0] not in constants or n.output[0] in used]


def expand_function(model: onnx.ModelProto, op_type: str) -> onnx.ModelProto:
    """The model with every default-domain `op_type` node replaced by the op's function body.

    Of the bodies onnx defines for the op, the first (nearest the model's opset) whose nodes are
    all valid at the model's own opset is used; CastLike of a constant is folded to a constant of
    the right type, since CastLike itself appears only at opset 15.

    Raises:
        TransformError: the op has no function body, or none that the model's opset can express.
    """
    opset = _default_opset(model)
    if not any(n.op_type == op_type and n.domain in ("", "ai.onnx") for n in model.graph.node):
        raise TransformError(f"the main graph has no {op_type} node")
    candidates = _body_candidates(op_type, opset)
    # Inference stops at the first node it does not know (the op itself, at this opset): infer at
    # the op's own opset, so values behind one instance have types for the next one's body.
    types = _value_types(with_opset_import(model, max(opset, first_opset(op_type) or opset)))
    return _replace_nodes(
        model, op_type, lambda node, prefix: _expand_node(node, candidates, types, prefix, opset, model.ir_version)
    )


def _replace_nodes(
    model: onnx.ModelProto,
    op_type: str,
    replace: Callable[[onnx.NodeProto, str], list[onnx.NodeProto]],
) -> onnx.ModelProto:
    """A copy of the model with each default-domain `op_type` node of the main graph replaced.

    `replace(node, prefix)` returns the new nodes; `prefix` is unique per node and no model name
    starts with it, so names the replacement derives from it never collide.
    """
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    del fixed.graph.node[:]
    # Every "a/", "a/b/" that starts a name: a set lookup per candidate prefix, not a scan of every
    # name (a 5,000-node model would take minutes).
    taken: set[str] = set()
    for n in model.graph.node:
        for name in (n.name, *n.input, *n.output):
            taken.update(name[: i + 1] for i, c in enumerate(name) if c == "/")
    for index, node in enumerate(model.graph.node):
        if node.op_type != op_type or node.domain not in ("", "ai.onnx"):
            fixed.graph.node.append(node)
            continue
        prefix = node.name or f"{op_type}_{index}"
        while prefix + "/" in taken:
            prefix += "_"  # keep the new values apart from the model's own names
        taken.add(prefix + "/")  # and from the next node of the same name
        fixed.graph.node.extend(replace(node, prefix))
    return fixed


def _expand_node(
    node: onnx.NodeProto,
    candidates: list[tuple[onnx.defs.OpSchema, int]],
    types: dict[str, onnx.TypeProto],
    prefix: str,
    opset: int,
    ir_version: int,
) -> list[onnx.NodeProto]:
    """The first candidate body that is valid at `opset`; the nearest one's refusal otherwise."""
    refusal: TransformError | None = None
    for schema, version in candidates:
        try:
            body = _function_body(schema, version, node, types)
            inlined = _fold_castlike(_inline(body, node, _node_attributes(schema, node), prefix), types)
            _check_at_opset(inlined, node.op_type, opset, ir_version)
        except TransformError as exc:
            refusal = refusal or exc
            continue
        return inlined
    assert refusal is not None  # candidates is never empty
    raise refusal


def _check_at_opset(nodes: list[onnx.NodeProto], op_type: str, opset: int, ir_version: int) -> None:
    """Every inlined node must exist, and keep its signature, at the model's own opset."""
    missing = sorted({n.op_type for n in nodes if not _exists(n.op_type, opset)})
    if missing:
        raise TransformError(
            f"{op_type}'s function body needs {', '.join(missing)}, which opset {opset} does not have"
        )
    context = onnx.checker.C.CheckerContext()
    context.ir_version = ir_version
    context.opset_imports = {"": opset}
    for node in nodes:
        try:
            onnx.checker.check_node(node, context)
        except onnx.checker.ValidationError as exc:
            first = str(exc).strip().splitlines()[0]
            raise TransformError(
                f"{op_type}'s function body is not valid at opset {opset}: {first}"
            ) from None


def _exists(op_type: str, opset: int) -> bool:
    try:
        onnx.defs.get_schema(op_type, opset)
    except onnx.defs.SchemaError:
        return False
    return True


_FLOATING = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
}


def cast_around(model: onnx.ModelProto, op_type: str, to: str, *, integers: bool = False) -> onnx.ModelProto:
    """Run every `op_type` node in type `to`: Cast its inputs there and its outputs back.

    Only inputs of the same family as `to` (floating point, or integer) that have another type are
    cast; an output is cast back to the type it had, so the rest of the graph is unchanged.

    `to="exact"`: the type the op's schema allows that holds the refused input's values exactly
    (int32 data for a MaxPool that takes no int32 runs in double), across families if need be.

    `integers=True` (with a floating `to`): integer inputs are cast too, and an integer output is
    rounded to the nearest value and clipped to its type's range before the Cast back, as integer
    image kernels (PyTorch's uint8 interpolation) round, where a plain Cast would truncate.

    Raises:
        TransformError: no such node, `to` is not a tensor type, or no input needs a cast.
    """
    import numpy as np

    types = _value_types(model)
    across = to == "exact"
    if across:
        target = _exact_target(model, op_type, types)
    else:
        try:
            target = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(_NUMPY_NAMES.get(to, to)))
        except TypeError:
            raise TransformError(f"{to!r} is not a tensor element type") from None
    casts = 0
    takes_input, gives_output = _takes_type(model, op_type, target)
    refuses, formal_in, formal_out = _schema_positions(model, op_type)
    rounding = integers and target in _FLOATING
    opset = _default_opset(model)

    def same_family(elem: int) -> bool:
        if rounding and elem in _ROUNDED_RANGES:
            return True
        return across or (elem in _FLOATING) == (target in _FLOATING)

    def wrap(node: onnx.NodeProto, prefix: str) -> list[onnx.NodeProto]:
        nonlocal casts
        rewritten = onnx.NodeProto()
        rewritten.CopyFrom(node)
        before, after = [], []
        # "exact" casts only the inputs the schema refuses (ScatterND's int32 indices, not its
        # float data), and casts back only the outputs typed by the same type parameter.
        moved: set[str] = set()
        for i, name in enumerate(node.input):
            elem = types[name].tensor_type.elem_type if name in types else 0
            if (name and elem and elem != target and same_family(elem)
                    and takes_input(i) and (not across or refuses(i, elem))):
                cast = f"{prefix}/cast_in{i}"
                before.append(onnx.helper.make_node("Cast", [name], [cast], name=cast, to=target))
                rewritten.input[i] = cast
                moved.add(formal_in(i))
        for i, name in enumerate(node.output):
            elem = types[name].tensor_type.elem_type if name in types else 0
            if (name and elem and elem != target and same_family(elem)
                    and gives_output(i) and (not across or formal_out(i) in moved)):
                inner = f"{prefix}/cast_out{i}"
                rewritten.output[i] = inner
                back = inner
                if rounding and elem in _ROUNDED_RANGES:
                    after += _round_into(inner, f"{prefix}/round_out{i}", elem, target, opset)
                    inner = f"{prefix}/round_out{i}/clipped"
                after.append(onnx.helper.make_node("Cast", [inner], [name], name=back, to=elem))
        made = [a for a in rewritten.attribute if a.name == "dtype" and a.type == onnx.AttributeProto.INT]
        if after and made and made[0].i != target and not before:
            # A generator's type is its `dtype` attribute, not an input's (RandomUniform,
            # RandomNormal, RandomUniformLike): it draws in `to` and its output is cast back.
            made[0].i = target
            casts += 1
        casts += len(before)
        return [*before, rewritten, *after]

    fixed = _replace_nodes(model, op_type, wrap)
    if not casts:
        raise TransformError(f"no {op_type} node has an input (or a dtype) to cast to {to}")
    return fixed


_NUMPY_NAMES = {"float": "float32", "double": "float64", "float16": "float16"}

# The integer types `cast_around(integers=True)` rounds back into, with their ranges (wider ones
# are not exact in float32 and are left alone).
_ROUNDED_RANGES = {
    onnx.TensorProto.UINT8: (0, 255), onnx.TensorProto.INT8: (-128, 127),
    onnx.TensorProto.UINT16: (0, 65535), onnx.TensorProto.INT16: (-32768, 32767),
}


def _round_into(value: str, prefix: str, elem: int, floating: int, opset: int) -> list[onnx.NodeProto]:
    """Round `value` (of type `floating`) to the nearest integer and clip it to `elem`'s range;
    the result is `{prefix}/clipped`. Round is half to even, as PyTorch's integer kernels."""
    import numpy as np
    from onnx import numpy_helper

    low, high = _ROUNDED_RANGES[elem]
    rounded, clipped = f"{prefix}/rounded", f"{prefix}/clipped"
    nodes = [onnx.helper.make_node("Round", [value], [rounded], name=rounded)]
    if opset < 11:  # Clip's bounds were attributes before opset 11
        nodes.append(onnx.helper.make_node("Clip", [rounded], [clipped], name=clipped,
                                           min=float(low), max=float(high)))
        return nodes
    dtype = onnx.helper.tensor_dtype_to_np_dtype(floating)
    bounds = []
    for label, bound in (("low", low), ("high", high)):
        name = f"{prefix}/{label}"
        tensor = numpy_helper.from_array(np.array(bound, dtype=dtype), name)
        nodes.append(onnx.helper.make_node("Constant", [], [name], name=name, value=tensor))
        bounds.append(name)
    nodes.append(onnx.helper.make_node("Clip", [rounded, *bounds], [clipped], name=clipped))
    return nodes

# Where each element type's values fit exactly, best first: wider integers of the same
# signedness, then double (exact for every integer of 32 bits or fewer), then float.
_EXACT_HOMES = {
    onnx.TensorProto.INT8: ("INT16", "INT32", "INT64", "DOUBLE", "FLOAT", "FLOAT16"),
    onnx.TensorProto.UINT8: ("UINT16", "UINT32", "UINT64", "INT16", "INT32", "INT64", "DOUBLE", "FLOAT", "FLOAT16"),
    onnx.TensorProto.INT16: ("INT32", "INT64", "DOUBLE", "FLOAT"),
    onnx.TensorProto.UINT16: ("UINT32", "UINT64", "INT32", "INT64", "DOUBLE", "FLOAT"),
    onnx.TensorProto.INT32: ("INT64", "DOUBLE"),
    onnx.TensorProto.UINT32: ("UINT64", "INT64", "DOUBLE"),
    onnx.TensorProto.INT64: ("DOUBLE",),  # exact while |x| < 2**53
    onnx.TensorProto.BOOL: ("UINT8", "INT8", "INT32", "INT64", "FLOAT"),
    onnx.TensorProto.BFLOAT16: ("FLOAT", "DOUBLE"),
    onnx.TensorProto.FLOAT16: ("FLOAT", "DOUBLE"),
    onnx.TensorProto.FLOAT: ("DOUBLE",),
}


def _exact_target(model: onnx.ModelProto, op_type: str, types: dict[str, Any]) -> int:
    """The type an `op_type` node's schema allows that holds its refused input's values exactly."""
    try:
        schema = onnx.defs.get_schema(op_type, _default_opset(model))
    except Exception:  # noqa: BLE001 - a custom domain: no schema to choose from
        raise TransformError(f"{op_type} has no ONNX schema to choose a type from") from None
    nodes = [n for n in model.graph.node if n.op_type == op_type]
    if not nodes:
        raise TransformError(f"the model has no {op_type} node")
    # The first refused input of any of them: a model's other nodes of the op may be fine (a
    # ReduceMax over floats before the one over a bool mask).
    for node in nodes:
        for index, name in enumerate(node.input):
            elem = types[name].tensor_type.elem_type if name in types else 0
            allowed = _formal_types(schema, list(schema.inputs), index)
            spelled = _type_string(elem) if elem else ""
            if allowed is None or not elem or spelled in allowed:
                continue
            for home in _EXACT_HOMES.get(elem, ()):
                if _type_string(getattr(onnx.TensorProto, home)) in allowed:
                    return getattr(onnx.TensorProto, home)
            raise TransformError(f"{op_type} takes no type that holds {spelled} exactly ({', '.join(sorted(allowed))})")
    raise TransformError(f"every input of {op_type} already has a type its schema allows")


def _takes_type(model: onnx.ModelProto, op_type: str, elem: int) -> tuple[Callable[[int], bool], Callable[[int], bool]]:
    """Which of the op's inputs and outputs (by position) may have type `elem` in its schema.

    An index input (ReduceProd's int64 `axes`) keeps its type when the data is cast to int32.
    Ops without a schema here (custom domains) allow every position.
    """
    try:
        schema = onnx.defs.get_schema(op_type, _default_opset(model))
    except Exception:  # noqa: BLE001 - no schema: nothing to go by
        return (lambda _i: True), (lambda _i: True)
    wanted = _type_string(elem)

    def allows(formals: list[Any]) -> Callable[[int], bool]:
        def check(index: int) -> bool:
            allowed = _formal_types(schema, formals, index)
            return allowed is None or wanted in allowed
        return check

    return allows(list(schema.inputs)), allows(list(schema.outputs))


def _schema_positions(
    model: onnx.ModelProto, op_type: str
) -> tuple[Callable[[int, int], bool], Callable[[int], str], Callable[[int], str]]:
    """For the op's schema: whether input `i` refuses element type `elem`, and the formal type
    (a type parameter such as `T`, or a fixed `tensor(int64)`) of each input and output."""
    try:
        schema = onnx.defs.get_schema(op_type, _default_opset(model))
    except Exception:  # noqa: BLE001 - no schema: nothing refused, nothing to pair
        return (lambda _i, _e: True), (lambda i: f"in{i}"), (lambda i: f"out{i}")
    inputs, outputs = list(schema.inputs), list(schema.outputs)

    def refuses(index: int, elem: int) -> bool:
        allowed = _formal_types(schema, inputs, index)
        return allowed is not None and _type_string(elem) not in allowed

    def formal(formals: list[Any], index: int) -> str:
        return formals[min(index, len(formals) - 1)].type_str if formals else ""

    return refuses, (lambda i: formal(inputs, i)), (lambda i: formal(outputs, i))


def _type_string(elem: int) -> str:
    """`tensor(int32)`: an element type as a schema's type constraints spell it."""
    return f"tensor({onnx.helper.tensor_dtype_to_string(elem).removeprefix('TensorProto.').lower()})"


def _formal_types(schema: Any, formals: list[Any], index: int) -> set[str] | None:
    """The types the schema allows at input/output position `index` (None: it declares none)."""
    if not formals:
        return None
    formal = formals[min(index, len(formals) - 1)]  # the last formal may be variadic
    constraints = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    return constraints.get(formal.type_str) or {formal.type_str}


def promote_inputs(model: onnx.ModelProto, node_name: str, every: bool = False) -> onnx.ModelProto:
    """The nodes named `node_name` (with `every`, also every other top-level node of a standard
    op whose inputs of one type parameter differ) with the inputs of each type parameter cast to
    the type PyTorch promotes them to: the widest float where a float is among them (float16
    with int64 is float16), numpy's rule otherwise (int32 with int64 is int64). A named node with
    no schema has all its inputs in one group.

    The dynamo exporter writes `torch.stack` of tensors of different dtypes as one Concat over
    them as they are, which the schema refuses ("inputs has inconsistent type"); PyTorch promotes.
    The TorchScript exporter writes int32 bounds (Qwen2-VL's `cu_seqlens`) beside int64 axes in
    every Slice that reads them (transformers#34852): one node fixed leaves the next. A promoted
    node's output may take the wider type, so the pass repeats (a few times at most) with the
    types inferred again.

    Raises:
        TransformError: no such node, an input of it whose type the model does not say, or (with
        `every`) no node whose inputs of one type parameter differ.
    """
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    if not any(n.name == node_name for n in fixed.graph.node):
        raise TransformError(f"the model has no node named {node_name}")
    versions = domain_versions(fixed)
    taken = {o for n in _all_nodes(fixed.graph) for o in n.output} | {i.name for i in fixed.graph.input}
    changed_any = False
    for round_ in range(4 if every else 1):
        types = _value_types(fixed)
        nodes: list[onnx.NodeProto] = []
        changed = False
        for node in list(fixed.graph.node):
            named = node.name == node_name and round_ == 0
            if named or every:
                casts = _promoted(node, type_groups(node, versions, named), types, taken, strict=named)
                changed = changed or bool(casts)
                nodes.extend(casts)
            nodes.append(node)
        fixed.graph.ClearField("node")
        fixed.graph.node.extend(nodes)
        # A promoted node's output, and what follows from it, may be of the promoted type now:
        # the exporter's declared intermediate types are dropped for inference to derive again.
        fixed.graph.ClearField("value_info")
        changed_any = changed_any or changed
        if not changed:
            break
    if every and not changed_any:
        raise TransformError("no node's inputs of one type parameter differ in type")
    return fixed


def domain_versions(model: onnx.ModelProto) -> dict[str, int]:
    """The model's opset per domain, the default domain as "" (however the model spells it)."""
    return {(o.domain if o.domain != "ai.onnx" else ""): o.version for o in model.opset_import}


def type_groups(node: onnx.NodeProto, versions: dict[str, int], named: bool) -> list[list[tuple[int, str]]]:
    """A node's inputs (position, name) grouped by the type parameter its schema binds them to
    (Slice: the data; starts, ends, axes and steps). Variadic inputs of mixed types (Loop's and
    Scan's carried values) and fixed types are left out; a node with no schema is one group when
    it is the named node, else none (a custom op's float data and int64 indices differ on purpose)."""
    inputs = [(i, name) for i, name in enumerate(node.input) if name]
    domain = node.domain if node.domain != "ai.onnx" else ""
    try:
        formals = onnx.defs.get_schema(node.op_type, versions[domain], domain).inputs if domain in versions else []
    except onnx.defs.SchemaError:
        formals = []
    if not formals:
        return [inputs] if named else []
    groups: dict[str, list[tuple[int, str]]] = {}
    for index, name in inputs:
        formal = formals[min(index, len(formals) - 1)]  # the last one may be variadic
        if promotable(formal):
            groups.setdefault(formal.type_str, []).append((index, name))
    return list(groups.values())


def promotable(formal: onnx.defs.OpSchema.FormalParameter) -> bool:
    """Whether a schema's inputs bound to this formal parameter must share one type: a type
    parameter (not a fixed type), and not a variadic of mixed types (Loop's `v_initial`)."""
    heterogeneous = (formal.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
                     and not formal.is_homogeneous)
    return not formal.type_str.startswith("tensor(") and not heterogeneous


def _promoted(node: onnx.NodeProto, groups: list[list[tuple[int, str]]], types: dict[str, onnx.TypeProto],
              taken: set[str], strict: bool) -> list[onnx.NodeProto]:
    """Casts that give each group of the node's inputs one type (their promotion), the node's
    inputs renamed to them; `strict`: an input of unknown type is an error, else the group is left."""
    import numpy as np

    casts = []
    for group in groups:
        unknown = [name for _, name in group if not (name in types and types[name].tensor_type.elem_type)]
        if unknown:
            if strict:
                raise TransformError(f"the type of {unknown[0]}, an input of {node.name}, is unknown")
            continue
        elems = {name: types[name].tensor_type.elem_type for _, name in group}
        if len(set(elems.values())) < 2:
            continue
        dtypes = [onnx.helper.tensor_dtype_to_np_dtype(e) for e in elems.values()]
        floats = [d for d in dtypes if np.issubdtype(d, np.floating)]
        # PyTorch keeps a float's type beside integers (float16 with int64 is float16).
        target = onnx.helper.np_dtype_to_tensor_dtype(np.result_type(*floats) if floats else np.result_type(*dtypes))
        for index, name in group:
            if elems[name] == target:
                continue
            cast_output = _fresh(f"{name}_promoted", taken)
            taken.add(cast_output)
            cast_name = _fresh(f"{node.name}_promote_{index}", taken)
            taken.add(cast_name)
            casts.append(onnx.helper.make_node("Cast", [name], [cast_output], to=target, name=cast_name))
            node.input[index] = cast_output
    return casts


def cast_outputs(model: onnx.ModelProto, casts: tuple[tuple[int, str], ...]) -> onnx.ModelProto:
    """The model with graph output `index` cast to `dtype` (a numpy name), for each pair: the
    value the graph computed keeps its type inside, under a new name.

    Raises:
        TransformError: no such output, or an output already of that type.
    """
    import numpy as np

    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graph = fixed.graph
    taken = ({o for n in _all_nodes(graph) for o in n.output} | {i.name for i in graph.input}
             | {t.name for t in graph.initializer})
    for index, dtype in casts:
        if not 0 <= index < len(graph.output):
            raise TransformError(f"the model has no output {index}")
        output = graph.output[index]
        to = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        if output.type.tensor_type.elem_type == to:
            raise TransformError(f"output {output.name} is already {dtype}")
        if output.name in {i.name for i in graph.input} | {t.name for t in graph.initializer}:
            raise TransformError(f"output {output.name} is an input or a constant of the graph, not computed")
        computed = _fresh(f"{output.name}_computed", taken)
        _rename(graph, output.name, computed, outputs=True)
        graph.node.append(onnx.helper.make_node("Cast", [computed], [output.name], to=to,
                                                name=_fresh(f"{output.name}_to_{dtype}", taken)))
        output.type.tensor_type.elem_type = to
    return fixed


def split_sizes_as_tensor(model: onnx.ModelProto) -> onnx.ModelProto:
    """SplitToSequence nodes whose split sizes come as a sequence of scalars (a scripted
    `[int(s) for s in sizes]`, built by a Loop of SequenceInsert) given them as the 1-D tensor
    the schema takes: ConcatFromSequence(new_axis=1) of that sequence.

    Raises:
        TransformError: no SplitToSequence takes its sizes as a sequence.
    """
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    types = _value_types(fixed)
    producers = {o: n.op_type for n in _all_nodes(fixed.graph) for o in n.output}
    taken = {o for n in _all_nodes(fixed.graph) for o in n.output} | {i.name for i in fixed.graph.input}
    changed = 0

    def sequence(name: str) -> bool:
        known = types.get(name)
        if known is not None and known.HasField("sequence_type"):
            return True
        return producers.get(name, "").startswith("Sequence")

    def rewrite(graph: onnx.GraphProto) -> None:
        nonlocal changed
        nodes: list[onnx.NodeProto] = []
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    rewrite(attribute.g)
                for sub in attribute.graphs:
                    rewrite(sub)
            if node.op_type == "SplitToSequence" and len(node.input) > 1 and node.input[1] and sequence(node.input[1]):
                sizes = _fresh(f"{node.input[1]}_as_tensor", taken)
                nodes.append(onnx.helper.make_node("ConcatFromSequence", [node.input[1]], [sizes], axis=0,
                                                   new_axis=1, name=_fresh(f"{node.name}_sizes", taken)))
                node.input[1] = sizes
                changed += 1
            nodes.append(node)
        graph.ClearField("node")
        graph.node.extend(nodes)

    rewrite(fixed.graph)
    if not changed:
        raise TransformError("no SplitToSequence takes its split sizes as a sequence")
    return fixed


def non_negative_perms(model: onnx.ModelProto) -> onnx.ModelProto:
    """Transpose nodes whose `perm` counts an axis from the end (-1) given it from the start.

    torch's `permute` takes negative dims, and the TorchScript exporter writes them into `perm`
    as they are (`s.permute(1, -1, 0)`, StyleTTS2's duration encoder); Transpose's schema takes
    a permutation of 0..rank-1, and the full checker and ONNX Runtime refuse anything else. The
    rank is the perm's length, so -1 is rank - 1: the same transpose.

    Raises:
        TransformError: no Transpose has a negative perm entry.
    """
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    changed = 0
    for node in _all_nodes(fixed.graph):
        if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
            continue
        for attribute in node.attribute:
            if attribute.name == "perm" and any(p < 0 for p in attribute.ints):
                rank = len(attribute.ints)
                attribute.ints[:] = [p % rank for p in attribute.ints]
                changed += 1
    if not changed:
        raise TransformError("no Transpose has a negative perm entry")
    return fixed


def align_if_branches(model: onnx.ModelProto, to: str) -> onnx.ModelProto:
    """Each If whose branches declare an output in different element types (a scripted function
    returning a uint8 constant on one side and a bool mask on the other) with that output cast to
    `to` at the end of every branch, and the If's output declared `to`.

    Raises:
        TransformError: no If's branches disagree on an output's type.
    """
    import numpy as np

    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(to))
    taken = {o for n in _all_nodes(fixed.graph) for o in n.output} | {i.name for i in fixed.graph.input}
    changed: list[str] = []

    def branches(node: onnx.NodeProto) -> list[onnx.GraphProto]:
        return [a.g for a in node.attribute if a.name in ("then_branch", "else_branch")]

    def retype(graph: onnx.GraphProto, names: set[str]) -> None:
        for value in [*graph.value_info, *graph.output]:
            if value.name in names and value.type.HasField("tensor_type"):
                value.type.tensor_type.elem_type = elem

    def align(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    align(attribute.g)
            if node.op_type != "If":
                continue
            sides = branches(node)
            for index, output in enumerate(node.output):
                types = {side.output[index].type.tensor_type.elem_type for side in sides if index < len(side.output)}
                if len(types) < 2:
                    continue
                for side in sides:
                    declared = side.output[index]
                    if declared.type.tensor_type.elem_type == elem:
                        continue
                    computed = _fresh(f"{declared.name}_{to}", taken)
                    side.node.append(onnx.helper.make_node("Cast", [declared.name], [computed], to=elem,
                                                           name=_fresh(f"{node.name}_align_{index}", taken)))
                    declared.name = computed
                    declared.type.tensor_type.elem_type = elem
                retype(graph, {output})
                changed.append(node.name)

    align(fixed.graph)
    if not changed:
        raise TransformError("no If's branches declare an output in different types")
    return fixed


def to_float32(model: onnx.ModelProto, source: str = "double") -> onnx.ModelProto:
    """The model computing in float32 where it computed in `source` (double, float16, bfloat16);
    its interface keeps that type, but for bfloat16, which numpy callers cannot hold.

    Initializers, constants and tensor attributes of that type become float, casts and dtype
    attributes that name it name FLOAT, every such graph input is cast to float on entry and every
    such output back on exit. From float64 the cost is float32's precision (`model.float()` in ONNX
    terms); from a half type it is twice the memory, and the numbers are the float32 model's (ONNX
    Runtime's CPU kernels mostly take float32 only).

    Raises:
        TransformError: the model has nothing of that type.
    """
    from onnx import numpy_helper

    from_type, single = _SOURCES[source], onnx.TensorProto.FLOAT
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graph = fixed.graph
    if source == "bfloat16":
        # numpy has no bfloat16, so no Python caller feeds or reads one (ONNX Runtime takes numpy
        # arrays): the interface becomes float32 too, each value the same number.
        for value in (*graph.input, *graph.output):
            if value.type.tensor_type.elem_type == from_type:
                value.type.tensor_type.elem_type = single
    # The interface keeps its type: an initializer that is also a graph input or output keeps it.
    interface = {v.name for v in (*graph.input, *graph.output)}
    changed = _graph_to_float32(graph, numpy_helper, from_type, keep=interface)
    taken = {name for n in _all_nodes(graph) for name in (n.name, *n.input, *n.output)} | interface
    read = {name for n in _all_nodes(graph) for name in n.input}
    produced = {name for n in graph.node for name in n.output}
    entry, exit_ = [], []
    for value in graph.input:
        if value.type.tensor_type.elem_type == from_type and value.name in read:
            inner = _fresh(f"{value.name}/float32", taken)
            _rename(graph, value.name, inner, outputs=False)  # every reader, subgraphs included
            entry.append(onnx.helper.make_node("Cast", [value.name], [inner], name=inner, to=single))
    for value in graph.output:
        if value.type.tensor_type.elem_type == from_type and value.name in produced:
            inner = _fresh(f"{value.name}/float32", taken)
            _rename(graph, value.name, inner, outputs=True)  # its producer and its other readers
            exit_.append(onnx.helper.make_node("Cast", [inner], [value.name], name=inner + "/cast", to=from_type))
    if not (changed or entry or exit_):
        raise TransformError(f"the model has nothing in {_SOURCE_NAMES[source]}")
    nodes = [*entry, *graph.node, *exit_]
    del graph.node[:]
    graph.node.extend(nodes)
    return fixed


def name_outputs(model: onnx.ModelProto, names: tuple[str, ...] | list[str]) -> onnx.ModelProto:
    """The model with its first graph outputs named `names`, in order.

    A value that already has one of the names is renamed first (its producer, readers and
    declared shape), so the graph stays in SSA form: the dynamo exporter renames an output in place
    and leaves an internal value of the same name beside it (OD306). An output that is a graph
    input or a weight is passed through an Identity of the new name.

    Raises:
        TransformError: more names than outputs, a name given twice, or a name that is a graph
            input's (renaming an input would change how the model is called).
    """
    graph = model.graph
    if len(names) > len(graph.output):
        raise TransformError(f"{len(names)} output names for a graph with {len(graph.output)} outputs")
    if len(set(names)) != len(names):
        raise TransformError("an output name is given twice")
    inputs = {value.name for value in graph.input}
    clash = sorted(name for index, name in enumerate(names) if name in inputs and graph.output[index].name != name)
    if clash:
        raise TransformError(f"output name {clash[0]!r} is a graph input's name")
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graph = fixed.graph
    taken = _value_names(graph)
    for index, name in enumerate(names):
        current = graph.output[index].name
        if current == name:
            continue
        if name in taken:
            # Another value has the name: an internal one, or an output still to be renamed.
            _rename_value(graph, name, _fresh(name, taken))
        shared = sum(value.name == current for value in graph.output) > 1
        if any(current in node.output for node in graph.node) and not shared:
            _rename_value(graph, current, name)
            taken.discard(current)
        else:  # a graph input, a weight, or a value returned twice: an Identity of the new name
            graph.node.append(onnx.helper.make_node("Identity", [current], [name], name=f"{name}/identity"))
            graph.output[index].name = name
        taken.add(name)
    return fixed


def _value_names(graph: onnx.GraphProto) -> set[str]:
    """Every value name of a graph and its subgraphs."""
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    names.update(t.name for t in graph.initializer)
    for node in _all_nodes(graph):
        names.update(n for n in (*node.input, *node.output) if n)
    return names


def _rename_value(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Rename a value of the main graph everywhere it appears: producer or weight, readers
    (subgraphs too), graph output and declared shape."""
    _rename(graph, old, new, outputs=True)
    for value in (*graph.output, *graph.value_info, *graph.initializer):
        if value.name == old:
            value.name = new


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of a graph and of its subgraphs."""
    from onnxdoctor.onnxkit.walk import walk_nodes

    return (node for _, node in walk_nodes(graph))


def _rename(graph: onnx.GraphProto, old: str, new: str, *, outputs: bool) -> None:
    """Point every reader of `old` (and, with `outputs`, its producer) at `new`."""
    for node in _all_nodes(graph):
        node.input[:] = [new if name == old else name for name in node.input]
        if outputs:
            node.output[:] = [new if name == old else name for name in node.output]


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


_SOURCES = {"double": onnx.TensorProto.DOUBLE, "float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}
_SOURCE_NAMES = {"double": "float64", "float16": "float16", "bfloat16": "bfloat16"}


def _graph_to_float32(graph: onnx.GraphProto, numpy_helper: Any, from_type: int,
                      keep: frozenset[str] | set[str] = frozenset()) -> bool:
    """Rewrite a graph's (and its subgraphs') contents of type `from_type` (a TensorProto type) to
    float32 in place; whether anything changed."""
    single = onnx.TensorProto.FLOAT
    changed = False
    for index, init in enumerate(graph.initializer):
        if init.data_type == from_type and init.name not in keep:
            graph.initializer[index].CopyFrom(_tensor_to_float32(init, numpy_helper))
            changed = True
    for value in graph.value_info:
        if value.type.tensor_type.elem_type == from_type:
            value.type.tensor_type.elem_type = single
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == from_type:
                attr.t.CopyFrom(_tensor_to_float32(attr.t, numpy_helper))
                changed = True
            elif attr.type == onnx.AttributeProto.INT and attr.name in ("to", "dtype") and attr.i == from_type:
                attr.i = single
                changed = True
            elif attr.type == onnx.AttributeProto.GRAPH:
                changed |= _graph_to_float32(attr.g, numpy_helper, from_type)
                for value in (*attr.g.input, *attr.g.output):
                    if value.type.tensor_type.elem_type == from_type:
                        value.type.tensor_type.elem_type = single
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    changed |= _graph_to_float32(sub, numpy_helper, from_type)
    return changed


def _tensor_to_float32(tensor: onnx.TensorProto, numpy_helper: Any) -> onnx.TensorProto:
    import numpy as np

    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)


def set_ir_version(model: onnx.ModelProto, ir_version: int) -> onnx.ModelProto:
    """The model stamped with an older IR version, when its opsets and features allow it.

    Raises:
        TransformError: the model's opset imports need a newer IR version than `ir_version`.
    """
    from onnx import helper

    needed = helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    if needed > ir_version:
        raise TransformError(f"its opset imports need IR version {needed} or newer")
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    fixed.ir_version = ir_version
    return fixed


def expand_for_target(model: onnx.ModelProto, op_type: str, target: str, *, rounds: int = 4) -> onnx.ModelProto:
    """`expand_function(model, op_type)`, then the same for each function op of the result that
    `target`'s operator table (onnxdoctor.targets.tables) lacks, until none is left.

    Raises:
        TransformError: `op_type` cannot be expanded, or `target` has no table.
    """
    from onnxdoctor.targets.tables import load_table

    try:
        listed = {op for (domain, op) in load_table(target).rows if not domain}
    except (OSError, ValueError) as exc:
        raise TransformError(f"no operator table for {target!r}: {exc}") from None
    model = expand_function(model, op_type)
    for _ in range(rounds):
        missing = sorted({n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")
                          and n.op_type not in listed and n.op_type != "Constant" and has_function_body(n.op_type)})
        if not missing:
            break
        for op in missing:
            model = expand_function(model, op)
    return model


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every value computable from constants (and static shapes) stored as an
    initializer: runtimes that need an input constant (TensorRT's axes, CoreML's Slice bounds)
    accept an initializer, not a chain of nodes that computes one.

    Raises:
        TransformError: nothing in the model could be folded.
    """
    import onnx_ir as ir
    from onnx_ir.passes import common
    from onnxscript.optimizer import fold_constants as fold

    folded = ir.from_proto(model)
    before = len(list(folded.graph))
    fold(folded)
    common.RemoveUnusedNodesPass()(folded)
    common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(folded)
    if len(list(folded.graph)) == before:
        raise TransformError("no node computes a value from constants alone")
    return ir.to_proto(folded)


def drop_shape_annotations(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without the shapes declared for its intermediate values (value_info, in the
    graph and every subgraph); inputs and outputs keep theirs.

    ONNX Runtime plans its buffers from the declared shapes: where the exporter wrote a wrong one
    (the dynamo exporter's opset-20 DFT declares a one-sided FFT's output as wide as its input,
    "Shape mismatch attempting to re-use buffer {2,8,16,9,1} != {2,8,16,16,1}") a node's result
    does not fit the buffer planned for it. Without them the runtime infers each from the op.

    Raises:
        TransformError: the model declares no intermediate shape.
    """
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graphs = [fixed.graph, *(a.g for n in _all_nodes(fixed.graph) for a in n.attribute if a.HasField("g")),
              *(g for n in _all_nodes(fixed.graph) for a in n.attribute for g in a.graphs)]
    dropped = sum(len(g.value_info) for g in graphs) + sum(len(f.value_info) for f in fixed.functions)
    if not dropped:
        raise TransformError("the model declares no shape for an intermediate value")
    for graph in graphs:
        graph.ClearField("value_info")
    for function in fixed.functions:  # local functions declare their values' shapes too
        function.ClearField("value_info")
    return fixed


def per_sample_loop(model: onnx.ModelProto, inputs: tuple[int, ...]) -> onnx.ModelProto:
    """The model, exported at one sample, run once per sample of a batch: an ONNX Loop over dim 0
    of the graph inputs at `inputs` (positions among the graph's inputs), whose body is the graph
    given one row of each (`x[i:i+1]`); each output, one row per sample, is stacked along dim 0.

    This is how a model keeps any batch size when its code fixes the batch in the trace (a Python
    loop over the samples, `int(x.shape[0])` into a reshape): the trace at one sample is right
    for each sample. The samples must not interact (a batch statistic, attention across the
    batch), which only running the result at several batch sizes shows; and they run one after
    another, without the batched kernels' speed.

    Raises:
        TransformError: no such input, or an output without its dim 0 of one sample.
    """
    from onnx import helper

    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    graph = fixed.graph
    constants = {t.name for t in graph.initializer}
    real = [i for i in graph.input if i.name not in constants]
    if not inputs or any(not 0 <= p < len(real) for p in inputs):
        raise TransformError(f"the graph has {len(real)} input(s): no input at position(s) {list(inputs)}")
    batched = [real[p] for p in dict.fromkeys(inputs)]
    if any(not i.type.HasField("tensor_type") or len(i.type.tensor_type.shape.dim) == 0 for i in batched):
        raise TransformError("a batched input is not a tensor with a dim 0")
    for output in graph.output:
        dims = output.type.tensor_type.shape.dim
        ranked = output.type.tensor_type.HasField("shape")
        if not output.type.HasField("tensor_type") or (ranked and not dims) or (
                dims and dims[0].HasField("dim_value") and dims[0].dim_value != 1):
            raise TransformError(f"output {output.name} has no dim 0 of one sample to stack the samples along")
    if len({o.name for o in graph.output}) != len(graph.output):
        raise TransformError("an output is listed twice: the Loop cannot give one value two names")
    taken = ({v for n in _all_nodes(graph) for v in (*n.input, *n.output)} | constants
             | {i.name for i in graph.input} | {o.name for o in graph.output})
    renames: dict[str, str] = {}
    batched_names = {i.name for i in batched}
    for output in graph.output:
        if output.name in constants:
            # A constant output (folded by the exporter): the Loop's output takes its name. An
            # initializer also listed as an input (keep_initializers_as_inputs) goes from there.
            renames[output.name] = _fresh(f"{output.name}_constant", taken)
            next(t for t in graph.initializer if t.name == output.name).name = renames[output.name]
            listed = [i for i in graph.input if i.name == output.name]
            for entry in listed:
                graph.input.remove(entry)
            _rename(graph, output.name, renames[output.name], outputs=False)
        elif output.name in {i.name for i in real} and output.name not in batched_names:
            raise TransformError(f"output {output.name} is an input that is not batched")
    # An output that is a batched input is the whole batch already: it stays the input.
    stacked = [o for o in graph.output if o.name not in batched_names]
    opset = _default_opset(fixed)
    index, keep_going = _fresh("sample_index", taken), _fresh("loop_condition", taken)
    row, zero, axes = _fresh("sample_row", taken), _fresh("batch_axis", taken), _fresh("stack_axes", taken)
    row_index = _fresh("sample_row_index", taken)
    body = onnx.GraphProto(name="per_sample")
    body.node.extend([
        helper.make_node("Constant", [], [row], value=helper.make_tensor("shape_1", onnx.TensorProto.INT64, [1], [1])),
        helper.make_node("Reshape", [index, row], [row_index]),
    ])
    for source in batched:
        sample = _fresh(f"{source.name}_sample", taken)
        renames[source.name] = sample
        # x[i:i+1]: one row, the dim kept, as the graph was exported at.
        body.node.append(helper.make_node("Gather", [source.name, row_index], [sample], axis=0))
    traced = onnx.GraphProto()
    traced.node.extend(graph.node)
    for node in _all_nodes(traced):
        node.input[:] = [renames.get(name, name) for name in node.input]
    body.node.extend(traced.node)
    if opset >= 13:
        body.node.append(helper.make_node("Constant", [], [axes], value=helper.make_tensor("axes", onnx.TensorProto.INT64, [1], [0])))
    body_outputs = [helper.make_tensor_value_info(_fresh("continue", taken), onnx.TensorProto.BOOL, [])]
    body.node.append(helper.make_node("Identity", [keep_going], [body_outputs[0].name]))
    produced = {v for n in graph.node for v in n.output}
    for output in stacked:
        squeezed = _fresh(f"{output.name}_row", taken)
        source = renames.get(output.name, output.name)
        if source in produced:
            # The Loop's output takes the name; a subgraph may not define a name of its scope.
            source = _fresh(f"{output.name}_sample", taken)
            _rename(body, output.name, source, outputs=True)
        body.node.append(helper.make_node("Squeeze", [source, axes], [squeezed]) if opset >= 13
                         else helper.make_node("Squeeze", [source], [squeezed], axes=[0]))
        body_outputs.append(helper.make_tensor_value_info(squeezed, output.type.tensor_type.elem_type, None))
    body.input.extend([helper.make_tensor_value_info(index, onnx.TensorProto.INT64, []),
                       helper.make_tensor_value_info(keep_going, onnx.TensorProto.BOOL, [])])
    body.output.extend(body_outputs)
    # The exporter's intermediate shapes are those of one sample: inside the body they still hold.
    body.value_info.extend(graph.value_info)
    count, shape = _fresh("batch_size", taken), _fresh("batch_shape", taken)
    graph.ClearField("node")
    graph.ClearField("value_info")
    graph.node.extend([
        helper.make_node("Shape", [batched[0].name], [shape]),
        helper.make_node("Constant", [], [zero], value=helper.make_tensor("zero", onnx.TensorProto.INT64, [], [0])),
        helper.make_node("Gather", [shape, zero], [count], axis=0),
        helper.make_node("Loop", [count, ""], [o.name for o in stacked], body=body),
    ])
    for value in (*batched, *stacked):
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].Clear()
            dims[0].dim_param = "batch"
    return fixed


def apply_transform(model: onnx.ModelProto, transform: Transform) -> onnx.ModelProto:
    """Apply one of a fix recipe's ONNX rewrites (onnxdoctor.recipe) to the model."""
    match transform:
        case ExpandFunction(op=op, for_target=target):
            return expand_for_target(model, op, target) if target else expand_function(model, op)
        case CastAround(op=op, to=to, integers=integers):
            return cast_around(model, op, to, integers=integers)
        case PromoteInputs(node=node, every=every):
            return promote_inputs(model, node, every)
        case SetIrVersion(ir_version=version):
            return set_ir_version(model, version)
        case ToFloat32(source=source):
            return to_float32(model, source)
        case SetOpset(opset=opset):
            return set_opset(model, opset)
        case ConvertOpset(opset=opset):
            return convert_opset(model, opset)
        case FoldConstants():
            return fold_constants(model)
        case CastOutputs(casts=casts):
            return cast_outputs(model, casts)
        case SplitSizesAsTensor():
            return split_sizes_as_tensor(model)
        case AlignIfBranches(to=to):
            return align_if_branches(model, to)
        case NonNegativePerms():
            return non_negative_perms(model)
        case DropShapeAnnotations():
            return drop_shape_annotations(model)
        case NameOutputs(names=names):
            return name_outputs(model, names)
        case PerSampleLoop(inputs=inputs):
            return per_sample_loop(model, inputs)
    raise TransformError(f"unknown transform {type(transform).__name__}")
