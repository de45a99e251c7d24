"""LOAD facts about model kinds the exporters do not take as they are: ScriptModules, quantized
modules, LSTMs with projections, forward() passes that differentiate (for the scripted,
quantized, recurrent and autograd fix families)."""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def script_module_facts(model: Any, loaded: Any) -> dict[str, Any]:
    """LOAD facts for a ScriptModule model: its class's name, whether the script defines that
    class as an nn.Module buildable with no arguments (the eager route), and forward()'s
    arguments from its TorchScript schema (a wrapper takes exactly the example's). Empty for an
    eager model."""
    import torch

    if not isinstance(model, torch.jit.ScriptModule):
        return {}
    name = str(getattr(model, "original_name", "") or "")
    cls = loaded.namespace.get(name) if name.isidentifier() else None
    eager = None
    if isinstance(cls, type) and issubclass(cls, torch.nn.Module) and not _needs_arguments(cls):
        eager = name
    # A class that derives from torch.jit.ScriptModule itself (`MyModule = torch.jit.ScriptModule`,
    # helpers under @torch.jit.script_method): building it again gives a ScriptModule again.
    subclass = isinstance(cls, type) and issubclass(cls, torch.jit.ScriptModule)
    arguments: list[dict[str, Any]] = []
    try:
        for argument in model.forward.schema.arguments[1:]:  # [0] is self
            arguments.append({"name": argument.name, "type": str(argument.type),
                              "default": argument.has_default_value()})
    except (AttributeError, RuntimeError):  # a module without a scripted forward
        pass
    hooks = 0
    for module in model.modules():  # hooks torch.jit.script compiled (forward and pre-forward)
        compiled = getattr(module, "_c", None)
        with contextlib.suppress(AttributeError, RuntimeError):
            hooks += len(compiled._get_forward_pre_hooks()) + len(compiled._get_forward_hooks())
    return {"script_module": {
        "hooks": hooks,
        "original_name": name,
        "eager_class": eager,
        "script_subclass": subclass,
        "arguments": arguments,
        "positional_inputs": len(loaded.args),
        "keyword_inputs": sorted(loaded.kwargs or {}),
    }}


def scripted_parts(model: Any, namespace: dict[str, Any]) -> int:
    """How many parts of the model TorchScript compiled: ScriptModules among its modules (the
    model itself included) and scripted functions the script defines."""
    import torch

    modules = 0
    if isinstance(model, torch.nn.Module):
        named = dict(model.named_modules())
        # The outermost ones: a scripted FPN's scripted convolutions are one part with it. torch's
        # own ScriptModule classes (torch.utils.mkldnn's layers) are not the user's scripting.
        modules = sum(isinstance(m, torch.jit.ScriptModule)
                      and (isinstance(m, torch.jit.RecursiveScriptModule)
                           or not type(m).__module__.startswith("torch."))
                      and not (path and isinstance(named.get(path.rpartition(".")[0]), torch.jit.ScriptModule))
                      for path, m in named.items())
    functions = sum(isinstance(v, torch.jit.ScriptFunction) for v in namespace.values())
    return modules + functions


def turn_scripting_off() -> None:
    """What PYTORCH_JIT=0 does, in a worker that imported torch before the script: torch.jit.script
    and script_method give back what they are given (they read the flag at each call), and
    torch.jit.ScriptModule and torch.jit.Attribute are torch's own stand-ins under that setting (a
    plain nn.Module, the value itself: chosen when torch is imported, so swapped here). Compiled
    TorchScript files are left alone (torch.jit.load of a saved module needs the variable unset).
    For the rest of this worker's life: the recipe runs in a worker of its own."""
    import torch
    import torch.jit._script as jit_script
    from torch.jit._state import _enabled

    class ScriptModule(torch.nn.Module):
        """torch.jit.ScriptModule as torch defines it under PYTORCH_JIT=0."""

        def __init__(self, arg: Any = None) -> None:
            super().__init__()

    def attribute(value: Any, type: Any) -> Any:
        return value  # as torch defines it under PYTORCH_JIT=0

    _enabled.enabled = False
    torch.jit.ScriptModule = jit_script.ScriptModule = ScriptModule  # type: ignore[misc]
    torch.jit.Attribute = jit_script.Attribute = attribute  # type: ignore[assignment]


def _needs_arguments(cls: type) -> bool:
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return True
    return any(
        p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                       inspect.Parameter.KEYWORD_ONLY)
        for p in list(signature.parameters.values())[1:]
    )


def quantized_facts(model: Any) -> dict[str, Any]:
    """LOAD facts for a model holding quantized modules: their names and classes, whether all of
    them quantize activations at run time, and what the float rebuild cannot handle (the
    quantized fix family exports that float rebuild)."""
    from onnxdoctor.worker.dequantize import is_dynamic, quantized_modules, unsupported

    found = [{"name": name, "class": f"{type(module).__module__}.{type(module).__qualname__}"}
             for name, module in quantized_modules(model)]
    if not found:
        return {}
    return {"quantized_modules": found[:50], "quantized_dynamic": is_dynamic(model),
            "quantized_unsupported": unsupported(model)[:20]}


def reparametrized_facts(model: Any) -> dict[str, Any]:
    """LOAD facts for weights computed from other parameters: weight_norm / spectral_norm hooks
    and torch.nn.utils.parametrize parametrizations (the reparametrized fix family folds them)."""
    from torch.nn.utils import parametrize

    found: list[dict[str, str]] = []
    for path, module in model.named_modules():
        for hook in getattr(module, "_forward_pre_hooks", {}).values():
            if type(hook).__name__ in ("WeightNorm", "SpectralNorm"):
                found.append({"module": path, "name": str(getattr(hook, "name", "weight")),
                              "kind": type(hook).__name__})
        if parametrize.is_parametrized(module):
            for name, chain in module.parametrizations.items():
                found.append({"module": path, "name": name,
                              "kind": "+".join(type(p).__name__ for p in chain)})
    return {"reparametrized": found[:50]} if found else {}


def recurrent_facts(model: Any) -> dict[str, Any]:
    """LOAD facts for LSTM layers with options the exporters miss (proj_size)."""
    import torch

    found = [name for name, module in model.named_modules()
             if isinstance(module, torch.nn.LSTM) and getattr(module, "proj_size", 0) > 0]
    return {"projected_lstms": found[:50]} if found else {}


def renormed_embedding_facts(model: Any) -> dict[str, Any]:
    """LOAD facts for embeddings built with max_norm: each call renormalises the rows it looks up
    in the weight itself (torch.embedding_renorm_, in place), which the tracer does not record."""
    import torch

    found = [name for name, module in model.named_modules()
             if type(module) is torch.nn.Embedding and module.max_norm is not None]
    return {"renormed_embeddings": found[:50]} if found else {}


@contextlib.contextmanager
def autograd_watch() -> Iterator[list[int]]:
    """Count the backward passes run inside the block (torch.autograd.grad, Tensor.backward).

    A forward() that differentiates (forces from an energy, a gradient penalty, a Jacobian) is
    refused by both exporters; the autograd fix family traces it with make_fx instead. Both public
    entry points reach the engine through `torch.autograd._engine_run_backward` (torch 2.13), so
    that one name is wrapped; a torch without it leaves the count at zero (no fact, no fix).
    """
    import torch.autograd

    calls = [0]
    original = getattr(torch.autograd, "_engine_run_backward", None)
    if original is None:
        yield calls
        return

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    torch.autograd._engine_run_backward = counted
    try:
        yield calls
    finally:
        torch.autograd._engine_run_backward = original


def branch_owners(model: Any, sites: list[str], folder: Path) -> dict[str, dict[str, Any]]:
    """For each `file.py:line` branch site in the user's files, every submodule whose class has
    (or inherits) the function holding the line, the class defining it and the function's name:
    what to script so that the branch stays control flow. Sites in a module-level function, or in
    no module's code, are left out."""
    found: dict[str, dict[str, Any]] = {}
    wanted: dict[str, list[int]] = {}  # file name -> lines
    for site in sites:
        name, _, line = site.rpartition(":")
        if line.isdigit():
            wanted.setdefault(name, []).append(int(line))
    spans: dict[type, list[tuple[str, str, int, int, str]]] = {}
    for path, module in model.named_modules():
        cls = type(module)
        if cls not in spans:
            spans[cls] = _function_spans(cls, folder, set(wanted))
        for function, file, first, last, owner in spans[cls]:
            for line in wanted.get(file, ()):
                if first <= line <= last:
                    held = found.setdefault(f"{file}:{line}", {"modules": [], "class": owner, "function": function})
                    if path not in held["modules"]:
                        held["modules"].append(path)
    return found


def _function_spans(cls: type, folder: Path, files: set[str]) -> list[tuple[str, str, int, int, str]]:
    """The functions a module class has from the user's files (its own and inherited ones, in
    its folder or below), as (name, file name, first line, last line, defining class)."""
    import torch

    spans = []
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            # staticmethod / classmethod, and a decorated method (@torch.no_grad()) unwrapped
            function = inspect.unwrap(getattr(value, "__func__", value))
            code = getattr(function, "__code__", None)
            if code is None or os.path.basename(code.co_filename) not in files:
                continue
            where = Path(code.co_filename).resolve()
            # The user's files, not a library installed inside their folder (a virtual environment).
            if folder not in where.parents or Path(torch.__file__).parent in where.parents \
                    or "site-packages" in where.parts:
                continue
            with contextlib.suppress(OSError, TypeError):
                lines, first = inspect.getsourcelines(function)
                spans.append((name, os.path.basename(code.co_filename), first, first + len(lines) - 1,
                              klass.__name__))
    return spans
