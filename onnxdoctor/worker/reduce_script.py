"""The worker side of `onnxdoctor reduce model.py` (docs/reduce.md): the smallest submodule whose own
export and run fail the way the whole model does.

The script is loaded once (with every nn.Module's constructor arguments recorded), each
submodule's inputs are captured on the example with forward hooks, and the module tree is walked
from the root down: the first child that fails the same way is entered, until no child does.
Each candidate runs the same stages as `diagnose` (worker/run.py), reusing the loaded script.
What the parent needs to write a standalone repro crosses back as a ReproSpec event.
"""

from __future__ import annotations

import inspect
import sys
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

from onnxdoctor.protocol import (
    HEALTHY,
    NOT_REDUCED,
    REDUCED,
    ReduceOutcome,
    ReproSpec,
    WorkerRequest,
    append_event,
)
from onnxdoctor.worker.reduce import Failure, first_failure, progress
from onnxdoctor.worker.run import Runner

_LITERALS = (int, float, bool, str, type(None))


def _literal(value: Any) -> bool:
    if isinstance(value, _LITERALS):
        return True
    if isinstance(value, (tuple, list)):
        return all(_literal(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _literal(v) for k, v in value.items())
    return False


class _Constructors:
    """Records each nn.Module's constructor arguments while the script builds its model.

    nn.Module.__init__ is wrapped: the outermost `__init__` frame above it with the same `self`
    is the most derived class's, and its arguments (still untouched when it calls super) are what
    the repro must pass to rebuild that module.
    """

    def __init__(self) -> None:
        self.calls: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], dict[str, Any]]] = weakref.WeakKeyDictionary()

    def install(self) -> None:
        import torch

        original = torch.nn.Module.__init__
        calls = self.calls

        def init(module: Any, *args: Any, **kwargs: Any) -> None:
            frame = sys._getframe(1)
            outer = None
            while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is module:
                outer, frame = frame, frame.f_back
            if outer is not None:
                with_values = inspect.getargvalues(outer)
                local = with_values.locals
                code = outer.f_code
                # getargvalues lists keyword-only parameters with the positional ones: split them.
                named = code.co_varnames[1:code.co_argcount]
                only = code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]
                positional = tuple(local[n] for n in named if n in local)
                extra = tuple(local.get(with_values.varargs, ())) if with_values.varargs else ()
                keywords = {n: local[n] for n in only if n in local}
                keywords.update(dict(local.get(with_values.keywords, {})) if with_values.keywords else {})
                try:
                    calls[module] = ((*positional, *extra), keywords)
                except TypeError:
                    pass
            original(module, *args, **kwargs)

        torch.nn.Module.__init__ = init  # type: ignore[method-assign]


def _capture(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, tuple[tuple[Any, ...], dict[str, Any]]]:
    """Each submodule's first call's inputs on the example (cloned), by module path."""
    import copy

    import torch

    probe = copy.deepcopy(model)  # a module in training mode updates its statistics on a call
    seen: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {}
    handles = []
    for name, module in probe.named_modules():
        if not name:
            continue

        def hook(_module: Any, hook_args: tuple[Any, ...], hook_kwargs: dict[str, Any], name: str = name) -> None:
            if name not in seen:
                clone = (lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v)
                seen[name] = (tuple(clone(a) for a in hook_args), {k: clone(v) for k, v in hook_kwargs.items()})

        handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        torch.manual_seed(0)
        with torch.no_grad():
            probe(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _size(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())


def _words(module: Any) -> str:
    """`DeepNet (3 Stage), 240 k parameters`: the module, its repeated children, its size."""
    counts: dict[str, int] = {}
    for child in module.children():
        counts[type(child).__name__] = counts.get(type(child).__name__, 0) + 1
    for child in module.children():  # a ModuleList / Sequential of blocks: count what it holds
        if type(child).__name__ in ("ModuleList", "Sequential"):
            for inner in child.children():
                counts[type(inner).__name__] = counts.get(type(inner).__name__, 0) + 1
    parts = ", ".join(f"{n} {name}" for name, n in counts.items() if n > 1)
    size = _size(module)
    shown = f"{size / 1e6:.1f} M" if size >= 1e6 else f"{size / 1e3:.0f} k" if size >= 1e3 else str(size)
    return type(module).__name__ + (f" ({parts})" if parts else "") + f", {shown} parameters"


def reduce_script(request: WorkerRequest, started: float) -> ReduceOutcome:
    """Find the smallest submodule failing like the model; write its state beside, describe it."""
    ends = started + (request.reduce.budget if request.reduce else 300.0)
    constructors = _Constructors()
    constructors.install()
    main = replace(request, reduce=None, gather_facts=False, events_path=str(Path(request.workdir) / "reduce-original.jsonl"))
    runner = Runner(main)
    records, state = runner.run_once("main")
    target = first_failure(main)
    if target is None:
        return ReduceOutcome(HEALTHY, message="the model passes every stage: there is no failure to reduce")
    base = ReduceOutcome(NOT_REDUCED, code=target.code, stage=target.stage, op=target.op, node=target.node,
                         message=target.message)
    loaded = state.get("loaded")
    if target.stage == "load" or loaded is None:
        return replace(base, message=f"the script fails before there is a model ({target.message})")
    exporter = next((r.facts.get("exporter") for r in records if r.stage == "export"), None)
    model = loaded.model
    try:
        captured = _capture(model, loaded.args, loaded.kwargs)
    except Exception as exc:  # a model that cannot be copied or hooked: say so, as a finding would
        return replace(base, what_before=_words(model),
                       message=f"the submodules' inputs could not be captured ({type(exc).__name__}: {exc})")
    search = _Search(main, runner, loaded, target, captured, ends, shown=request)
    path, tried = search.walk(model)
    # No submodule fails alone: the repro is the whole model, still without the user's script.
    module = model.get_submodule(path) if path else model
    inputs = captured[path] if path else (tuple(loaded.args), dict(loaded.kwargs))
    spec = _spec(request, loaded, module, path, inputs, constructors, exporter)
    if not isinstance(spec, str) and "::" in target.op and target.stage == "export":
        spec = replace(spec, **_op_call(module, inputs, target.op))
    if isinstance(spec, str):
        where = f"submodule {path} fails the same way" if path else "no submodule fails the same way alone"
        return replace(base, tried=tried, what_before=_words(model), message=f"{where}, but {spec}")
    append_event(request.events_path, spec.to_event())
    return replace(base, status=REDUCED, before=_size(model), after=_size(module), tried=tried,
                   what_before=_words(model),
                   what_after=f"{path}: " + _words(module) if path else "the whole model (no submodule fails alone)",
                   budget_spent=time.monotonic() >= ends, path=request.reduce.output if request.reduce else "",
                   extra_files=(spec.state_path,))


class _Search:
    """Top-down through the module tree: enter the first child that fails the same way."""

    def __init__(self, request: WorkerRequest, runner: Runner, loaded: Any, target: Failure,
                 captured: dict[str, Any], ends: float, *, shown: WorkerRequest) -> None:
        self.request, self.runner, self.loaded, self.target = request, runner, loaded, target
        self.shown = shown  # the request whose events the parent reads: progress goes there
        self.captured, self.ends = captured, ends
        self.tried = 0
        self.hints = _hints(loaded.model, target)

    def walk(self, model: Any) -> tuple[str, int]:
        found = ""
        current = model
        prefix = ""
        while time.monotonic() < self.ends:
            children = self._called_children(current, prefix)
            children.sort(key=lambda c: (not any(h == c[0] or h.startswith(c[0] + ".") for h in self.hints),
                                         -_size(c[1])))
            entered = False
            for path, child in children:
                if time.monotonic() >= self.ends:
                    break
                if self._fails(path, child):
                    found, current, prefix, entered = path, child, path + ".", True
                    break
            if not entered:
                break
        return found, self.tried

    def _called_children(self, module: Any, prefix: str) -> list[tuple[str, Any]]:
        """The children that were called on the example; a container never called itself
        (a ModuleList iterated in forward) stands for its own children."""
        found: list[tuple[str, Any]] = []
        import torch

        containers = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)
        for name, child in module.named_children():
            path = f"{prefix}{name}"
            if path in self.captured and not isinstance(child, containers):
                found.append((path, child))
            else:
                found += self._called_children(child, path + ".")
        return found

    def _fails(self, path: str, module: Any) -> bool:
        from onnxdoctor.worker.facts import tensor_leaves
        from onnxdoctor.worker.fixkit import reference_call

        args, kwargs = self.captured[path]
        loaded = replace(self.loaded, model=module, args=args, kwargs=kwargs)
        try:
            outputs = reference_call(loaded)
        except Exception:
            return False
        self.tried += 1
        run_id = f"sub{self.tried}"
        reuse = {"loaded": loaded, "torch_outputs": tensor_leaves(outputs), "load_facts": {}}
        self.runner.run_once(run_id, reuse=reuse)
        failure = first_failure(self.request, run_id)
        same = _same(self.target, failure)
        progress(self.shown, self.tried, _size(module), same, f"parameters ({path})")
        return same


def _same(target: Failure, other: Failure | None) -> bool:
    """Same code and stage, and same op except for a mismatch (its first diverging node is the cut's)."""
    if other is None or (other.code, other.stage) != (target.code, target.stage):
        return False
    return target.stage == "parity" or other.op == target.op


def _hints(model: Any, target: Failure) -> list[str]:
    """Module paths to try first: the ones whose class holds the failing line, and those in
    training mode inside a model in eval mode (a mismatch's usual cause)."""
    hints = [name for name, m in model.named_modules() if name and m.training and not model.training]
    line = _source_line(target.source)
    file = target.source.rpartition(":")[0]
    for name, module in model.named_modules():
        if name and line is not None and _holds_line(type(module), file, line):
            hints.append(name)
    return hints


def _holds_line(kind: type, file: str, line: int) -> bool:
    """Whether one of the class's own functions spans `file:line` (from their code objects:
    the script's module has no source file inspect can find)."""
    for value in vars(kind).values():
        code = getattr(value, "__code__", None)
        if code is None or Path(code.co_filename).name != Path(file).name:
            continue
        lines = [number for _start, _end, number in code.co_lines() if number is not None]
        if lines and min(code.co_firstlineno, *lines) <= line <= max(lines):
            return True
    return False


def _source_line(source: str) -> int | None:
    """The line number of a finding's `model.py:42` source, if it has one."""
    _file, _sep, number = source.rpartition(":")
    return int(number) if number.isdigit() else None


def _op_call(module: Any, inputs: tuple[tuple[Any, ...], dict[str, Any]], op: str) -> dict[str, Any]:
    """The failing custom op's first call on the submodule's inputs, as ReproSpec fields (none when
    it is not seen, or takes what a script cannot write: only tensors and literals)."""
    import copy

    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[tuple[Any, ...]] = []

    class Catch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if not seen and func.name() == op and not kwargs:
                seen.append(tuple(args))
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), Catch():
            copy.deepcopy(module)(*inputs[0], **inputs[1])
    except Exception:
        return {}
    if not seen:
        return {}
    described: list[tuple[Any, ...]] = []
    for value in seen[0]:
        if isinstance(value, torch.Tensor):
            described.append(("tensor", tuple(value.shape), str(value.dtype).removeprefix("torch.")))
        elif _literal(value):
            described.append(("literal", repr(value)))
        else:
            return {}
    return {"op": op, "op_args": tuple(described)}


def _spec(request: WorkerRequest, loaded: Any, module: Any, path: str, inputs: tuple[tuple[Any, ...], dict[str, Any]],
          constructors: _Constructors, exporter: str | None) -> ReproSpec | str:
    """What the parent needs to write the repro script, or why it cannot be written."""
    import torch

    script_module = sys.modules.get("__onnxdoctor__")
    classes: list[str] = []
    builtins: list[str] = []
    for _name, sub in module.named_modules():
        kind = type(sub)
        if kind.__module__ == getattr(script_module, "__name__", "__onnxdoctor__"):
            for base in kind.__mro__:
                if base.__module__ == kind.__module__ and base.__qualname__ not in classes:
                    classes.append(base.__qualname__)
        else:
            builtins.append(f"{kind.__module__}.{kind.__qualname__}")
    call = constructors.calls.get(module)
    if call is None:
        return "its constructor's arguments were not recorded"
    args, kwargs = call
    if not _literal(list(args)) or not _literal(kwargs):
        return "its constructor takes values that are not literals (numbers, strings, tuples)"
    kind = type(module)
    if kind.__module__ == getattr(script_module, "__name__", "__onnxdoctor__"):
        ctor = kind.__qualname__
    else:
        ctor = f"{kind.__module__}.{kind.__qualname__}"
    call_text = f"{ctor}({', '.join([*(repr(a) for a in args), *(f'{k}={v!r}' for k, v in kwargs.items())])})"
    tensors = [*inputs[0], *inputs[1].values()]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return "it takes inputs that are not tensors"
    state_path = str(Path(request.workdir) / "reduced.pt")
    torch.save({"state_dict": module.state_dict(), "args": list(inputs[0]), "kwargs": dict(inputs[1])}, state_path)
    modes = tuple((name, bool(m.training)) for name, m in module.named_modules() if bool(m.training) != bool(module.training))
    settings = loaded.settings
    return ReproSpec(
        script=str(Path(request.target).resolve()), module_path=path, classes=tuple(classes), call=call_text,
        training=bool(module.training), modes=modes,
        inputs=tuple((tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in inputs[0]),
        kwarg_inputs=tuple((k, tuple(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in inputs[1].items()),
        opset=request.opset or (settings.get("opset_version") if isinstance(settings.get("opset_version"), int) else None),
        dynamo=(exporter == "dynamo") if exporter in ("dynamo", "torchscript") else None,
        state_path=state_path,
    )
