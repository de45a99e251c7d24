"""Load a model script by the model-script protocol (README; runs inside the worker)."""

from __future__ import annotations

import contextlib
import inspect
import io
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from onnxdoctor.errors import CodedError
from onnxdoctor.scriptfile import ScriptError, check_script

# The name the script runs under: not "__main__", so its `if __name__ == "__main__"` block is inert.
RUN_NAME = "__onnxdoctor__"

SETTING_NAMES = (
    "opset_version",
    "dynamo",
    "input_names",
    "output_names",
    "dynamic_shapes",
    "dynamic_axes",  # the TorchScript exporter's form (the dynamo exporter reads dynamic_shapes)
    "custom_op_libraries",
    "targets",  # deployment targets (docs/targets.md); --target overrides
)


class ProtocolError(CodedError):
    """The script does not follow the model-script protocol; `code` is the finding's code, `facts`
    what the fixes read (`numpy_inputs`: where NumPy arrays stand in for tensors)."""

    def __init__(self, code: str | None, message: str, **facts: Any) -> None:
        super().__init__(code, message)
        self.facts = facts


class ScriptExited(Exception):
    """The script called sys.exit() while loading; `said` is what it printed on the way out."""

    def __init__(self, path: Path, code: object, said: str) -> None:
        shown = f"sys.exit({code!r})" if code is not None else "sys.exit()"
        message = f"{path.name} called {shown} while loading"
        if isinstance(code, str):
            said = code  # Python prints a string exit code itself; that is the message
        if said:
            message += f": {said}"
        super().__init__(message)
        self.code = code


class _StderrTail(io.TextIOBase):
    """Passes writes through to the real stderr and keeps the last few KB (argparse's usage)."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream = stream
        self.kept = ""

    def write(self, text: str) -> int:
        self.kept = (self.kept + text)[-4096:]
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def last_lines(self, count: int = 3) -> str:
        lines = [line.strip() for line in self.kept.splitlines() if line.strip()]
        return " ".join(lines[-count:])


@dataclass
class LoadedModel:
    """The user's model, its example inputs, and the script's optional settings."""

    model: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)
    factory: str = ""
    # The script's globals: fix snippets run with them, as they would in the user's script.
    namespace: dict[str, Any] = field(default_factory=dict)
    # How the factory gave them: "pair", "triple" (the tuple it returned), "get_inputs" or
    # "example_inputs" (it returned the model alone), "module" (module-level names): fix snippets
    # build the model the way the script does.
    form: str = "module"


def load_script(path: Path, factory: str | None, *, arrays_as_tensors: bool = False) -> LoadedModel:
    """Import the script and build (model, args, kwargs) following the model-script protocol.

    `arrays_as_tensors`: NumPy arrays and scalars among the example inputs become tensors (the
    fix for OD107 on arrays, analysis/fixes/array_inputs.py); otherwise they are refused.

    Raises:
        ProtocolError: the script breaks the protocol (code OD1xx and what was expected).
        ScriptExited: the script called sys.exit() (OD109), with what it printed.
        SyntaxError, Exception: raised by the script itself; the caller classifies.
    """
    try:
        source = check_script(path)
    except ScriptError as exc:
        raise ProtocolError(exc.code, str(exc)) from None
    # The script sees the command line it would see run alone, not the worker's request file
    # (module-level argparse would otherwise fail on it).
    sys.argv = [str(path)]
    tail = _StderrTail(sys.stderr)
    sys.stderr = tail
    try:
        namespace = _run_as_module(path, source)
        settings = {name: namespace[name] for name in SETTING_NAMES if name in namespace}
        loaded = _build(path, namespace, settings, factory, arrays_as_tensors)
    except SystemExit as exc:
        raise ScriptExited(path, exc.code, tail.last_lines()) from None
    finally:
        sys.stderr = tail.stream
    loaded.namespace = namespace
    return loaded


def _run_as_module(path: Path, source: str) -> dict[str, Any]:
    """Run the script as the module `RUN_NAME`, left in sys.modules; return its globals.

    runpy.run_path would run it the same way but take the module out of sys.modules afterwards,
    and torch.compile's frontend (torch.cond, torch.compile) imports the module a function was
    defined in by its `__module__` name: a branch function defined at the script's top level
    then fails with "No module named '__onnxdoctor__'". The globals are runpy's (`__file__`,
    no `__spec__`), the code is compiled without this module's `__future__` flags, and a second
    load replaces the module (each load's functions keep their own globals).
    """
    module = types.ModuleType(RUN_NAME)
    module.__dict__.update(
        __file__=str(path), __cached__=None, __loader__=None, __package__="", __spec__=None
    )
    code = compile(source, str(path), "exec", dont_inherit=True)
    sys.modules[RUN_NAME] = module
    exec(code, module.__dict__)  # noqa: S102 -- running the user's script is the protocol
    return module.__dict__


def _build(path: Path, namespace: dict[str, Any], settings: dict[str, Any], factory: str | None,
           arrays: bool) -> LoadedModel:
    if factory is not None:
        if factory not in namespace:
            raise ProtocolError(
                "OD105", f"{path.name} defines no {factory!r} (the factory named after ':')"
            )
        return _from_factory(namespace, factory, settings, arrays)
    if "get_model" in namespace:
        return _from_factory(namespace, "get_model", settings, arrays)
    if "model" in namespace:
        if "example_inputs" not in namespace:
            raise ProtocolError(
                "OD105",
                f"{path.name} defines `model` but not `example_inputs` "
                "(a tuple of tensors to call the model with)",
            )
        args, kwargs = _split_inputs(namespace["example_inputs"], "example_inputs", arrays)
        return LoadedModel(_check_model(namespace["model"], "model"), args, kwargs, settings, "model")
    found = sorted(
        name
        for name, value in namespace.items()
        if not name.startswith("_") and isinstance(value, torch.nn.Module)
    )
    hint = f"; it has module-level nn.Module instance(s) {', '.join(found)}" if found else ""
    raise ProtocolError(
        "OD105",
        f"{path.name} defines neither get_model() nor module-level `model` + `example_inputs`"
        f"{hint}. Add `def get_model(): return model, (example_input,)` or name a factory "
        f"with {path.name}:FACTORY",
    )


def _from_factory(namespace: dict[str, Any], name: str, settings: dict[str, Any], arrays: bool) -> LoadedModel:
    fn = namespace[name]
    if not callable(fn):
        raise ProtocolError("OD106", f"{name} is a {type(fn).__name__}, not a function")
    required = _required_parameters(fn)
    if required:
        raise ProtocolError(
            "OD199",
            f"{name}() needs argument(s) {', '.join(required)}; the factory must be callable with "
            "none (give them defaults, or wrap it in a function that supplies them)",
        )
    result = fn()
    if isinstance(result, tuple) and len(result) in (2, 3):
        model = _check_model(result[0], f"{name}()[0]")
        args, kwargs = _split_inputs(result[1], f"{name}()[1]", arrays)
        if len(result) == 3:
            if not isinstance(result[2], dict):
                raise ProtocolError(
                    "OD106", f"{name}()[2] must be a dict of keyword inputs, got {type(result[2]).__name__}"
                )
            kwargs = {**kwargs, **(_as_tensors(result[2]) if arrays else result[2])}
            _check_all(kwargs, f"{name}()[2]")
        return LoadedModel(model, args, kwargs, settings, name, form="triple" if len(result) == 3 else "pair")
    if isinstance(result, torch.nn.Module) or (callable(result) and not isinstance(result, tuple)):
        for inputs_name in ("get_inputs", "example_inputs"):
            if inputs_name in namespace:
                value = namespace[inputs_name]
                value = value() if inputs_name == "get_inputs" and callable(value) else value
                args, kwargs = _split_inputs(value, inputs_name, arrays)
                return LoadedModel(_check_model(result, f"{name}()"), args, kwargs, settings, name,
                                   form=inputs_name)
        raise ProtocolError(
            "OD106",
            f"{name}() returned only a model; return (model, example_inputs) or also define "
            "get_inputs() or example_inputs",
        )
    shape = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
    raise ProtocolError(
        "OD106",
        f"{name}() returned {shape}; expected (model, example_inputs) or "
        "(model, example_inputs, example_kwargs)",
    )


def _required_parameters(fn: Any) -> list[str]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                       inspect.Parameter.KEYWORD_ONLY)
    ]


def _check_model(model: Any, where: str) -> Any:
    if isinstance(model, torch.nn.Module):
        return model
    raise ProtocolError(
        "OD113", f"{where} is a {type(model).__name__}, not a torch.nn.Module"
    )


def _split_inputs(value: Any, where: str, arrays: bool = False) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if arrays:
        value = _as_tensors(value)
    if isinstance(value, torch.Tensor):
        value = (value,)
    elif isinstance(value, list):
        value = tuple(value)
    if isinstance(value, dict):
        _check_all(value, where)
        return (), dict(value)
    if not isinstance(value, tuple):
        raise ProtocolError(
            "OD107", f"{where} is a {type(value).__name__}; expected a tensor or a tuple of tensors",
            numpy_inputs=numpy_positions(value, where),
        )
    _check_all(value, where)
    return value, {}


def _check_all(value: Any, where: str) -> None:
    """_check_tensors on the whole example, its refusal naming every NumPy value in it (the fix
    converts them all, not only the first one met)."""
    try:
        _check_tensors(value, where)
    except ProtocolError as exc:
        exc.facts["numpy_inputs"] = numpy_positions(value, where)
        raise


def tensor_holder(value: Any, depth: int = 3) -> bool:
    """Whether `value` is a plain object (not a tensor, module or array) whose attributes hold a
    tensor, directly or in lists, dicts or objects a few levels down: an input the exporters take
    only as its tensors (analysis/fixes/object_inputs.py)."""
    if depth < 0 or isinstance(value, (torch.Tensor, torch.nn.Module, type)) or not hasattr(value, "__dict__"):
        return False
    if type(value).__module__.split(".")[0] in ("numpy", "torch"):
        return False
    return any(_holds_tensor(v, depth - 1) for v in vars(value).values())


def settings_object(value: Any, depth: int = 3) -> bool:
    """Whether `value` is a plain object (a dataclass or namespace instance, not a tensor, module
    or array) whose attributes are Python values only (numbers, strings, None, enums and lists,
    tuples and dicts of them): settings a forward() reads, which the exported graph holds as the
    example's (analysis/fixes/object_inputs.py)."""
    if isinstance(value, (torch.nn.Module, type)) or not hasattr(value, "__dict__") or not vars(value):
        return False
    if type(value).__module__.split(".")[0] in ("numpy", "torch"):
        return False
    return all(_python_value(v, depth - 1) for v in vars(value).values())


def _python_value(value: Any, depth: int) -> bool:
    import enum

    if isinstance(value, (bool, int, float, str, type(None), enum.Enum)):
        return True
    if depth < 0:
        return False
    if isinstance(value, dict):
        return all(_python_value(k, depth - 1) and _python_value(v, depth - 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_python_value(v, depth - 1) for v in value)
    return settings_object(value, depth)


def _holds_tensor(value: Any, depth: int) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if depth < 0:
        return False
    if isinstance(value, dict):
        return any(_holds_tensor(v, depth - 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v, depth - 1) for v in value)
    return tensor_holder(value, depth)


def _is_numpy(value: Any) -> bool:
    """A NumPy array or scalar: what `_as_tensors` converts and `numpy_positions` names."""
    import numpy as np

    return isinstance(value, (np.ndarray, np.generic))


def _as_tensors(value: Any) -> Any:
    """`value` with each NumPy array or scalar in it (in tuples, lists and dicts) made a tensor:
    what the model gets when the caller converts before exporting."""
    import numpy as np

    if _is_numpy(value):
        # from_numpy keeps the dtype and refuses object arrays: those stay arrays, and are refused.
        with contextlib.suppress(TypeError):
            return torch.from_numpy(np.ascontiguousarray(value))
        return value
    if isinstance(value, dict):
        return {key: _as_tensors(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(_as_tensors(item) for item in value)
    return value


def numpy_positions(value: Any, where: str) -> list[str]:
    """Where the NumPy arrays and scalars among example inputs are (`example_inputs[0]`)."""
    if _is_numpy(value):
        return [where]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (tuple, list)):
        items = enumerate(value)
    else:
        return []
    return [p for key, item in items for p in numpy_positions(item, f"{where}[{key!r}]")]


def _check_tensors(value: Any, where: str) -> None:
    """Accept tensors, None, python scalars and nestings of them; name the first offender."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, (torch.Tensor, bool, int, float, type(None))):
            continue
        if isinstance(item, (tuple, list, dict)):
            _check_tensors(item, f"{where}[{key!r}]")
            continue
        if tensor_holder(item) or settings_object(item):
            # An object holding the tensors (torchrec's KeyedJaggedTensor, a graph batch), or a
            # config of Python values (a dataclass of ints): the model takes it, and what the
            # exporters make of it is the export's to say (analysis/fixes/object_inputs.py).
            continue
        raise ProtocolError(
            "OD107",
            f"{where}[{key!r}] is a {type(item).__name__}; example inputs must be tensors "
            "(or python numbers, None, and tuples/lists/dicts of them)",
        )


def function_class(name: str, loaded: LoadedModel) -> Any:
    """The autograd.Function `module:Qualname` names: the script's own (through its globals, in
    `loaded`) by name, others imported."""
    import importlib

    module, _, qualname = name.rpartition(":") if ":" in name else ("", "", name)
    parts = qualname.split(".")
    # The script's own: under the run names above or whatever name the loader gave it.
    in_script = not module or module in _SCRIPT_MODULES or module == loaded.namespace.get("__name__")
    owner: Any = loaded.namespace[parts.pop(0)] if in_script else importlib.import_module(module)
    for part in parts:
        owner = getattr(owner, part)
    return owner


# The run names a model script is executed under (its Functions are reached through its globals).
_SCRIPT_MODULES = ("__onnxdoctor__", "__main__")
