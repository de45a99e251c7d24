"""ONNX Runtime sessions: the vetted model source, feeds, generated inputs, kernel facts."""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path
from typing import Any

from onnxdoctor.analysis.normalize import RUNNING_NODE
from onnxdoctor.worker.tracebacks import StageFailed, exception_text


def seed_runtime() -> None:
    """Seed ONNX Runtime's random ops (RandomUniformLike, Multinomial, ... with no `seed`
    attribute) for the sessions created after this: each kernel seeds its generator when the
    session is built, so a diagnose run twice draws the same numbers and reaches the same verdict
    where outputs are compared in distribution (worker/randomness.py)."""
    import onnxruntime as ort

    ort.set_seed(0)


def cpu_session(source: str | bytes, libraries: tuple[str, ...] = (),
                config: tuple[tuple[str, str], ...] = ()) -> Any:
    """A quiet ONNX Runtime CPU session (errors only) of a file path or serialized model, with
    custom-op libraries registered and session configuration entries set."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    for key, value in config:
        options.add_session_config_entry(key, value)
    for library in libraries:
        options.register_custom_ops_library(str(library))
    seed_runtime()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def run_session(session: Any, feeds: dict[str, Any]) -> list[Any]:
    try:
        return list(session.run(None, feeds))
    except Exception as exc:
        text = str(exc)
        # The feeds refused (a name, a type, a rank) are the inputs' fault; an INVALID_ARGUMENT
        # raised while a node ran is that node's failure (OD501, which names it).
        inside = RUNNING_NODE.search(text)
        code = "OD502" if ("INVALID_ARGUMENT" in text and "input" in text.lower() and not inside) else None
        raise StageFailed(exception_text(exc), code) from exc


# The names the script gave its example tensors (its input_names), set by the export stage: an
# exporter that drops an unused input keeps the others' names, so the rest are fed by name.
_example_names: list[str] = []


def name_example_inputs(names: Any) -> None:
    """Record the script's input_names for feeds_for_session (none: feed by position and type)."""
    _example_names[:] = [str(n) for n in names] if isinstance(names, (list, tuple)) else []


def feeds_for_session(session: Any, tensors: list[Any]) -> dict[str, Any]:
    """ONNX Runtime's feeds for the example tensors: each input its tensor (by position, by the
    example's names, or by type and rank where the exporter dropped unused inputs), complex ones as
    the real pairs the graph declares."""
    feeds = _feeds(session, tensors)
    declared = {i.name: i for i in session.get_inputs()}
    return {name: _as_pairs(declared[name], array) if name in declared else array for name, array in feeds.items()}


def _as_pairs(declared: Any, array: Any) -> Any:
    """A complex example for an input the graph declares as real pairs (the dynamo exporter's
    representation of a complex tensor: the same dims and a trailing one of 2, float for
    complex64): the (real, imaginary) pairs, as a deployer feeds them (torch.view_as_real)."""
    import numpy as np

    if not _pairs_fit(declared, array):
        return array
    wanted = _ORT_TYPES.get(declared.type)
    return np.ascontiguousarray(np.stack([array.real, array.imag], -1).astype(wanted))


def _pairs_fit(declared: Any, array: Any) -> bool:
    """Whether a complex array is the input `declared` as real pairs: a float type, its dims and
    a trailing one of 2 (a symbolic dim fits any size)."""
    shape = list(declared.shape or [])
    if array.dtype.kind != "c" or _ORT_TYPES.get(declared.type) not in ("float32", "float64"):
        return False
    if len(shape) != array.ndim + 1:
        return False
    return all(not isinstance(d, int) or d == n for d, n in zip(shape, [*array.shape, 2]))


def _feeds(session: Any, tensors: list[Any]) -> dict[str, Any]:
    inputs = session.get_inputs()
    arrays = [to_numpy(t) for t in tensors]
    if len(arrays) < len(inputs):
        raise StageFailed(
            f"the model has {len(inputs)} inputs but the example inputs hold {len(arrays)} tensors",
            "OD502",
        )
    if len(arrays) == len(inputs):
        return {i.name: a for i, a in zip(inputs, arrays)}
    named = dict(zip(_example_names, arrays)) if len(_example_names) == len(arrays) else {}
    if named and all(i.name in named for i in inputs):
        return {i.name: named[i.name] for i in inputs}
    # Exporters drop unused inputs, wherever they sit (an encoder state a decoder with past never
    # reads): each of the model's inputs takes the next example tensor its type and rank fit.
    feeds: dict[str, Any] = {}
    position = 0
    for index, declared in enumerate(inputs):
        left = len(inputs) - index - 1  # inputs still to place after this one
        while position < len(arrays) - left - 1 and not _fits(declared, arrays[position]):
            position += 1
        feeds[declared.name] = arrays[position]
        position += 1
    return feeds


def _fits(declared: Any, array: Any) -> bool:
    """Whether an example array can be the model input `declared` (its type, rank, fixed dims)."""
    wanted = _ORT_TYPES.get(declared.type)
    shape = declared.shape or []
    if array.dtype.kind == "c":
        return _pairs_fit(declared, array)  # complex values as real pairs (_as_pairs)
    if wanted is not None and str(array.dtype) != wanted:
        return False
    if len(shape) != array.ndim:
        return False
    return all(not isinstance(d, int) or d == n for d, n in zip(shape, array.shape))


def to_numpy(tensor: Any) -> Any:
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.contiguous().numpy()


_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(double)": "float64",
    "tensor(float16)": "float16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16",
    "tensor(uint32)": "uint32",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


def random_feeds(
    session: Any, shapes: dict[str, list[int]], max_bytes: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Random inputs from the model's declared shapes (free dims as 2), within `max_bytes` total.

    A 64-byte file can declare a [100000, 100000] input: the sizes are added up before anything
    is allocated, and each array is generated in its own dtype (no float64 intermediate).
    """
    import numpy as np

    rng = np.random.default_rng(0)
    planned: list[tuple[str, str, list[int], Any]] = []
    for item in session.get_inputs():
        if item.type not in _ORT_TYPES:
            raise StageFailed(
                f"input {item.name!r} has type {item.type}; random inputs exist only for tensors of "
                f"{', '.join(sorted(_ORT_TYPES))}",
                "OD502",
            )
        if item.name in shapes:
            shape = list(shapes[item.name])
        else:
            shape = [d if isinstance(d, int) and d >= 0 else 2 for d in item.shape]
        planned.append((item.name, item.type, shape, np.dtype(_ORT_TYPES[item.type])))
    sizes = {name: math.prod(shape) * dtype.itemsize for name, _, shape, dtype in planned}
    total = sum(sizes.values())
    if total > max_bytes:
        biggest = max(sizes, key=lambda name: sizes[name])
        shape = next(shape for name, _, shape, _ in planned if name == biggest)
        raise StageFailed(
            f"the inputs generated from the model's declared shapes would take {total / 2**20:.0f} MB "
            f"(input {biggest!r} alone is {shape}), over the {max_bytes / 2**20:.0f} MB cap; give smaller "
            f"shapes with --input-shape {biggest}=... or raise --max-input-mb",
            "OD503", total_bytes=total, input=biggest,
        )
    feeds: dict[str, Any] = {}
    described: list[dict[str, Any]] = []
    try:
        for name, type_name, shape, dtype in planned:
            if dtype.kind == "f":
                native = dtype if dtype in (np.float32, np.float64) else np.float32
                value = rng.standard_normal(shape, dtype=native).astype(dtype, copy=False)
            elif dtype.kind == "b":
                value = rng.integers(0, 2, shape, dtype=np.uint8).astype(bool)
            else:
                value = rng.integers(0, 4, shape, dtype=dtype)
            feeds[name] = value
            described.append({"name": name, "type": type_name, "shape": shape})
    except MemoryError:
        raise StageFailed(
            f"could not allocate {total / 2**20:.0f} MB of generated inputs; give smaller shapes with "
            "--input-shape", "OD503", total_bytes=total,
        ) from None
    return feeds, described


# A C++ source file in ONNX Runtime's message (…/cpu/tensor/upsamplebase.h:314): kernels live in
# files named after their op.
_SOURCE_FILE = re.compile(r"\b([A-Za-z][A-Za-z0-9_]*)\.(?:h|cc|cpp)\b")


def initializing_op(message: str, model: Any) -> dict[str, Any]:
    """The op whose kernel failed to construct ("Exception during initialization" names only the
    kernel's source file, or the attribute it could not read): the graph's op type that file is
    named after, the longest that fits (ConvTranspose before Conv), else the custom-domain node
    type carrying that attribute; its node when it is the only one; {} when none fits."""
    if model is None or "during initialization" not in message:
        return {}
    types = {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}
    for stem in _SOURCE_FILE.findall(message):
        bare = stem.replace("_", "").lower()
        fits = [t for t in types if bare.startswith(t.lower())]
        if fits:
            op = max(fits, key=len)
            nodes = [n.name for n in model.graph.node if n.op_type == op and n.domain in ("", "ai.onnx")]
            return {"op": op, "node": nodes[0] or None} if len(nodes) == 1 else {"op": op}
    attribute = _ATTRIBUTE.search(message)
    if attribute:
        # A kernel that could not read an attribute names the attribute alone (an onnxruntime-
        # extensions Python op declared with another type: "Unable to find attribute
        # 'padding_length'"): the node type that carries it, where one does.
        # Custom domains only: a standard op's `axis` says nothing of which node refused it.
        nodes = [n for n in model.graph.node if n.domain not in ("", "ai.onnx")
                 and any(a.name == attribute.group(1) for a in n.attribute)]
        kinds = {(n.domain, n.op_type) for n in nodes}
        if len(kinds) == 1:
            ((domain, op_type),) = kinds
            op = f"{domain}::{op_type}"  # custom domains only (above)
            return {"op": op, "node": nodes[0].name or None} if len(nodes) == 1 else {"op": op}
    return {}


_ATTRIBUTE = re.compile(r"attribute '(\w+)'")


def kernel_facts(message: str, model: Any) -> dict[str, Any]:
    """For "Could not find an implementation", the types ONNX Runtime's kernel table lists."""

    from onnxdoctor.analysis.classify import NO_IMPLEMENTATION, NOT_REGISTERED_RT

    match = NO_IMPLEMENTATION.search(message)
    unregistered = NOT_REGISTERED_RT.search(message)
    if unregistered and model is not None:
        domain, op_type = unregistered.group(1), unregistered.group(2)
        # The message quotes the domain raw: one holding spaces, colons or escape characters is
        # found by the model's own nodes, never by what a pattern makes of the text.
        named = next(((n.domain, n.op_type) for n in model.graph.node
                      if f"{n.domain}:{n.op_type}(" in message and " is not a registered" in message), None)
        if named is not None:
            domain, op_type = named
        # ATen fallback nodes name the aten op they stand for in their `operator` attribute.
        aten = sorted({a.s.decode("utf-8", "replace") for n in model.graph.node
                       if n.domain == "org.pytorch.aten" for a in n.attribute if a.name == "operator"})
        for node in model.graph.node:
            if node.op_type == op_type and node.domain == domain:
                facts = {"node": node.name or None, "op": f"{domain}::{op_type}" if domain else op_type}
                return {**facts, "aten_operators": aten} if domain == "org.pytorch.aten" else facts
    if not match:
        return {}
    op_type, version, node = match.group(1), int(match.group(2)), match.group(3)
    from onnxruntime.capi import _pybind_state as C

    kernels = []
    for kernel in C.get_all_opkernel_def():
        if kernel.op_name != op_type or kernel.provider != "CPUExecutionProvider":
            continue
        kernels.append(
            {
                "domain": kernel.domain or "ai.onnx",
                "since": kernel.version_range[0],
                "until": kernel.version_range[1],
                "types": {k: sorted(set(v)) for k, v in kernel.type_constraints.items()},
            }
        )
    node_types: dict[str, str] = {}
    facts: dict[str, Any] = {"op": op_type, "node": node, "op_version": version, "kernels": kernels}
    domain = next((n.domain for n in model.graph.node if n.name == node), "") if model is not None else ""
    if domain not in ("", "ai.onnx"):
        # The message names the op bare; com.microsoft::Rfft (a contrib op with CUDA kernels only) is
        # not the ONNX op Rfft, so the finding qualifies it as the node does.
        facts["op"] = f"{domain}::{op_type}"
        kernels[:] = [k for k in kernels if k["domain"] == domain]
    if model is not None:
        node_types = _node_input_types(model, node)
        # ONNX Runtime names only the first node it cannot place: a cast of that op alone then
        # stops at the next one (Erf after Atan in a float64 model). List them all.
        with contextlib.suppress(Exception):
            facts["ops_without_kernel"] = _ops_without_kernel(model, C.get_all_opkernel_def())
        present = any(n.op_type == op_type for n in model.graph.node)
        lacking = facts.get("ops_without_kernel") or []
        if not node and not present and lacking:
            # A node of no name and of a type the graph lacks: ONNX Runtime expanded a node without
            # a kernel for its type into its function body (int16 Clip into Where), and names the
            # body's op. The graph's node is the one to cast.
            facts.update(op=lacking[0]["op"], expanded_into=op_type)
            named = next((n for n in model.graph.node if n.op_type == lacking[0]["op"]), None)
            if named is not None:
                facts["node"] = named.name or None
                node_types = _node_input_types(model, named.name)
    facts["node_types"] = node_types
    return facts


def _ops_without_kernel(model: Any, kernel_defs: Any) -> list[dict[str, str]]:
    """Default-domain op types of the main graph whose first input's type no CPU kernel of the op
    lists: [{"op", "type"}], in graph order, one entry per op type."""
    inferred, types = _inferred_types(model)
    listed: dict[str, set[str]] = {}
    for kernel in kernel_defs:
        if kernel.provider == "CPUExecutionProvider" and kernel.domain in ("", "ai.onnx"):
            accepted = listed.setdefault(kernel.op_name, set())
            for allowed in kernel.type_constraints.values():
                accepted.update(allowed)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    found: list[dict[str, str]] = []
    for node in inferred.graph.node:
        elem = types.get(node.input[0]) if node.input else None
        if node.domain not in ("", "ai.onnx") or not elem or any(f["op"] == node.op_type for f in found):
            continue
        # An op without a kernel of its own runs as its function body (HardSwish as HardSigmoid, Mul).
        ops = [node.op_type] if node.op_type in listed else _function_ops(node.op_type, opset)
        if any(op in listed and f"tensor({elem})" not in listed[op] for op in ops):
            found.append({"op": node.op_type, "type": elem})
    return found


def _function_ops(op_type: str, opset: int) -> list[str]:
    import onnx

    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # no such op at that opset (onnx's SchemaError)
        return []
    return [n.op_type for n in schema.function_body.node] if schema.has_function else []


def _inferred_types(model: Any) -> tuple[Any, dict[str, str]]:
    """The model after shape inference (the model itself where inference fails) and the element
    type of each value it names (`float`, `int64`)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    types: dict[str, str] = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if value.type.HasField("tensor_type"):
            types[value.name] = onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type).lower()
    for init in inferred.graph.initializer:
        types[init.name] = onnx.TensorProto.DataType.Name(init.data_type).lower()
    return inferred, types


def _node_input_types(model: Any, node_name: str) -> dict[str, str]:
    inferred, types = _inferred_types(model)
    for node in inferred.graph.node:
        if node.name == node_name:
            return {name: types.get(name, "?") for name in node.input if name}
    return {}


def runtime_source(model: Any, model_dir: Path) -> tuple[bytes, list[str], list[Any]]:
    """A user's model for ONNX Runtime without ever giving it a path to resolve (README, "Robustness").

    ONNX Runtime follows hard links in external data, so it gets the model as bytes and the
    external weights of the main graph as arrays that onnx read with its own containment checks
    (LOAD vetted every reference); the bytes then stay small, whatever the weights weigh.
    """
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    from onnx.external_data_helper import load_external_data_for_tensor

    from onnxdoctor.onnxkit.files import OnnxFileError, external_refs, load_external_weights

    names: list[str] = []
    values: list[Any] = []
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        loaded = onnx.TensorProto()
        loaded.CopyFrom(tensor)
        try:
            load_external_data_for_tensor(loaded, str(model_dir))
        except (onnx.checker.ValidationError, ValueError, OSError) as exc:
            raise StageFailed(f"external data of {tensor.name} could not be read: {exception_text(exc)}", "OD112") from None
        try:
            array = numpy_helper.to_array(loaded)
        except ValueError as exc:  # the file holds another size than the tensor's shape needs
            raise StageFailed(f"external data of {tensor.name} does not fit its shape: {exception_text(exc)}", "OD112") from None
        names.append(tensor.name)
        values.append(ort.OrtValue.ortvalue_from_numpy(array))
    if len(names) < len(external_refs(model)):
        # Weights in subgraphs or attributes cannot be handed over as initializers: inline them all.
        full = onnx.ModelProto()
        full.CopyFrom(model)
        try:
            load_external_weights(full, model_dir)
        except OnnxFileError as exc:
            raise StageFailed(exc.message, exc.code) from None
        return full.SerializeToString(), [], []
    return model.SerializeToString(), names, values
