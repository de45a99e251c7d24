"""A model handed to the Python API, carried by value to the worker (docs/api.md).

`dump_model` runs in the user's process (where torch is already imported: the caller holds a
model); `load_model` runs in the worker, from the model script `onnxdoctor.api` writes beside
the payload. cloudpickle carries classes and functions defined in `__main__` (a notebook, a
plain program) by value; everything importable is carried by reference and imported again in
the worker, from the caller's `sys.path`.

torch.library custom ops cannot be pickled (they are dispatcher registrations, not objects):
each op defined in `__main__` travels as its definition (schema, Python body, fake, autograd,
kernels) and is registered again in the worker before the model is unpickled; the op objects
the model refers to travel as their names (pickle's persistent ids). TorchScript symbolics
`__main__` registered are registered again too.
"""

from __future__ import annotations

import contextlib
import importlib
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

PAYLOAD_NAME = "model.pkl"
# Names the model-script protocol reads: a name of the caller's `__main__` must not shadow them.
_PROTOCOL_NAMES = frozenset({
    "get_model", "get_inputs", "get_inputs2", "model", "example_inputs", "opset_version", "dynamo",
    "input_names", "output_names", "dynamic_shapes", "custom_op_libraries", "targets",
})
# Modules whose objects the caller's process already shares with the worker by import.
_NOT_CARRIED = ("torch", "onnxdoctor", "builtins")


class NotSerialisable(Exception):
    """The model or its inputs cannot be carried to the worker: `code` is the LOAD finding's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class _OpDefinition:
    """One torch.library custom op defined where the worker cannot import it from."""

    qualname: str
    schema: str
    tags: tuple[str, ...]  # torch.Tag names (pybind enums do not pickle)
    init_fn: Any
    fake_fn: Any = None
    backward_fn: Any = None
    setup_context_fn: Any = None
    vmap_fn: Any = None
    # Device-specific kernels (register_kernel), by device type; the default body is `init_fn`.
    kernels: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadedPayload:
    """What the worker unpickled: the model, its inputs, settings and the caller's own names."""

    model: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    dynamic_shapes: Any = None
    names: dict[str, Any] = field(default_factory=dict)


def _custom_ops() -> Any:
    from torch._library import custom_ops

    return custom_ops


class _Pickler:
    """cloudpickle's pickler with torch ops as persistent ids (they are registrations)."""

    def __init__(self, stream: Any) -> None:
        import cloudpickle

        custom_ops = _custom_ops()

        class Pickler(cloudpickle.CloudPickler):
            def persistent_id(self, obj: Any) -> Any:
                if isinstance(obj, custom_ops.CustomOpDef):
                    return ("custom_op", obj._qualname)
                if isinstance(obj, torch._ops.OpOverloadPacket):
                    return ("op", obj._qualified_op_name, None)
                if isinstance(obj, torch._ops.OpOverload):
                    return ("op", obj._overloadpacket._qualified_op_name, obj._overloadname)
                return None

        self.pickler = Pickler(stream)


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        kind, qualname, *rest = pid
        if kind == "custom_op":
            return _custom_ops().OPDEFS[qualname]
        namespace, _, name = qualname.partition("::")
        packet = getattr(getattr(torch.ops, namespace), name)
        return packet if rest[0] is None else getattr(packet, rest[0])


def _carried_by_value(module_name: str | None) -> bool:
    """Objects of this module cannot be imported in the worker: `__main__`, or no file."""
    if not module_name or module_name == "__main__":
        return True
    module = sys.modules.get(module_name)
    return module is None or getattr(module, "__file__", None) is None


def _op_definitions() -> tuple[list[str], list[_OpDefinition]]:
    """Custom ops the worker must have: modules to import for the importable ones, definitions
    to register again for those defined in `__main__`."""
    modules: list[str] = []
    definitions: list[_OpDefinition] = []
    for qualname, definition in list(_custom_ops().OPDEFS.items()):
        module = getattr(definition._init_fn, "__module__", None)
        if module and module.split(".")[0] in _NOT_CARRIED:
            continue
        if not _carried_by_value(module):
            if module not in modules:
                modules.append(module)
            continue
        definitions.append(_OpDefinition(
            qualname=qualname, schema=definition._schema, tags=tuple(t.name for t in definition._tags),
            init_fn=definition._init_fn, fake_fn=definition._abstract_fn,
            backward_fn=definition._backward_fn, setup_context_fn=definition._setup_context_fn,
            vmap_fn=definition._vmap_fn,
            kernels={k: v for k, v in definition._backend_fns.items() if k is not None},
        ))
    return modules, definitions


def _main_symbolics() -> list[tuple[str, int, Any]]:
    """TorchScript symbolics the caller's `__main__` registered (`register_custom_op_symbolic`):
    (op, opset, function), registered again in the worker before the export."""
    try:
        from torch.onnx._internal.torchscript_exporter import registration
    except ImportError:
        return []
    found: list[tuple[str, int, Any]] = []
    for name, group in list(registration.registry._registry.items()):
        overrides = getattr(getattr(group, "_functions", None), "_overrides", None) or {}
        for opset, function in overrides.items():
            if getattr(function, "__module__", None) == "__main__" and _picklable(function):
                found.append((name, opset, function))
    return found


def _main_names() -> dict[str, Any]:
    """The classes, functions and custom ops the caller's `__main__` defines, by name: fix checks
    run snippets (`myselu._init_fn`) and look up autograd.Functions in the script's globals."""

    main = sys.modules.get("__main__")
    found: dict[str, Any] = {}
    custom_ops = _custom_ops()
    for name, value in list(vars(main).items()) if main is not None else ():
        if name.startswith("__") or name in _PROTOCOL_NAMES:
            continue
        if isinstance(value, custom_ops.CustomOpDef):
            found[name] = value
        elif isinstance(value, type) or callable(value) and hasattr(value, "__code__"):
            if getattr(value, "__module__", None) != "__main__":
                continue
            if _picklable(value):  # what cannot travel (a function holding a lock) stays behind
                found[name] = value
    return found


class _Sink:
    def write(self, data: bytes) -> int:
        return len(data)


def _picklable(value: Any) -> bool:
    try:
        _Pickler(_Sink()).pickler.dump(value)
    except Exception:
        return False
    return True


def user_source_file(model: Any) -> str | None:
    """The file the model's code lives in (its forward's), where findings' lines should point."""
    forward = getattr(type(model), "forward", None)
    code = getattr(forward, "__code__", None)
    filename = getattr(code, "co_filename", "") or ""
    if not filename or filename.startswith("<"):
        return None
    parts = Path(filename).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return None  # a library's model (torchvision): the caller's own file is the better guess
    return filename


def dump_model(folder: Path, model: Any, args: Any, kwargs: dict[str, Any] | None,
               dynamic_shapes: Any = None) -> None:
    """Write the payload `load_model` reads into `folder`.

    Raises:
        NotSerialisable: `model` is not an nn.Module, or something it holds cannot be pickled.
    """
    if not isinstance(model, torch.nn.Module):
        raise NotSerialisable("OD113", f"the model is a {type(model).__name__}, not a torch.nn.Module")
    modules, definitions = _op_definitions()
    # "" on sys.path is the caller's working folder (a notebook, `python -c`); the worker's differs.
    paths = [str(Path(p or ".").absolute()) for p in sys.path]
    header = {"sys_path": [p for p in paths if Path(p).is_dir()], "modules": modules,
              "ops": definitions, "symbolics": _main_symbolics()}
    body = {"model": model, "args": args if isinstance(args, tuple) else (args,) if not isinstance(args, list)
            else tuple(args), "kwargs": dict(kwargs or {}), "dynamic_shapes": dynamic_shapes,
            "names": _main_names()}
    path = folder / PAYLOAD_NAME
    try:
        with path.open("wb") as stream:
            pickler = _Pickler(stream).pickler
            # One pickler for both: its memo makes an object shared by an op and the model one
            # object again in the worker.
            pickler.dump(header)
            pickler.dump(body)
    except Exception as exc:
        raise NotSerialisable("OD199", f"the model or its inputs could not be pickled for the worker "
                              f"({type(exc).__name__}: {exc}); docs/api.md says what travels") from exc


def load_model(script: str) -> LoadedPayload:
    """Read the payload beside `script` (the generated model script): import what the model's
    pickle refers to, register the caller's custom ops again, unpickle the model."""
    path = Path(script).with_name(PAYLOAD_NAME)
    with path.open("rb") as stream:
        unpickler = _Unpickler(stream)
        header = unpickler.load()
        for entry in header["sys_path"]:
            if entry not in sys.path:
                sys.path.append(entry)
        for module in header["modules"]:
            # A library the caller had imported for another model must not fail this one: if
            # this model needs it, unpickling imports it again and says why it cannot.
            with contextlib.suppress(Exception):
                importlib.import_module(module)
        for definition in header["ops"]:
            _register(definition)
        for name, opset, function in header.get("symbolics", ()):
            torch.onnx.register_custom_op_symbolic(name, function, opset)
        body = unpickler.load()
    return LoadedPayload(model=body["model"], args=body["args"], kwargs=body["kwargs"],
                         dynamic_shapes=body["dynamic_shapes"], names=body["names"])


def _register(definition: _OpDefinition) -> None:
    """Define the op again from its definition, as the caller's torch.library.custom_op did."""
    if definition.qualname in _custom_ops().OPDEFS:
        return
    schema = torch._C.parse_schema(definition.qualname + definition.schema)
    mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    op = torch.library.custom_op(definition.qualname, definition.init_fn, mutates_args=mutated,
                                 schema=definition.schema,
                                 tags=tuple(getattr(torch.Tag, t) for t in definition.tags) or None)
    for device, kernel in definition.kernels.items():
        op.register_kernel(device, kernel)
    if definition.fake_fn is not None:
        op.register_fake(definition.fake_fn)
    if definition.backward_fn is not None:
        op.register_autograd(definition.backward_fn, setup_context=definition.setup_context_fn)
    if definition.vmap_fn is not None:
        op.register_vmap(definition.vmap_fn)
