"""A forward() that writes the model's own state, and the check that a graph without state repeats it.

An ONNX graph keeps nothing between runs. A model whose forward() writes a buffer or an
attribute that its next call reads (a streaming layer's history, `self.cache = cat(...)`,
pytorch#60828; a step counter) is exported with the value that state held at export time as a
constant: ONNX Runtime then repeats the first call for ever, while PyTorch's second call reads
what the first left. One comparison at the example cannot see it (both sides make their first
call there), so every run whose model wrote state at LOAD (`ModelState.written`) is checked by
calling PyTorch twice (`consecutive_calls`), and no fix is verified while the second call
differs.

The `state_io` fix (analysis/fixes/state_io.py) exports the model through a wrapper that takes
the tensor state as inputs and returns it after the outputs; `check_state_steps` verifies it by
calling ONNX Runtime several times, feeding the returned state back, against PyTorch calling the
model as the user does.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from onnxdoctor.recipe import StateCheck
from onnxdoctor.worker.tracebacks import StageFailed

# The tail of the names the fix's wrapper gives its state inputs and outputs.
STATE_IN, STATE_OUT = "_in", "_out"


def describe_writes(model: Any, names: list[str]) -> list[dict[str, Any]]:
    """What each written name is: a buffer or an attribute, its owner's class, its type, and
    the line of the owner's class that writes it (found in the source; empty where none is)."""
    import torch

    described: list[dict[str, Any]] = []
    for name in names[:20]:
        path, _, attr = name.rpartition(".")
        try:
            owner = model.get_submodule(path) if path else model
        except Exception:  # a name that no longer resolves: described by name alone
            described.append({"name": name, "kind": "attribute"})
            continue
        value = getattr(owner, attr, None)
        row: dict[str, Any] = {
            "name": name,
            "kind": ("buffer" if attr in getattr(owner, "_buffers", {}) else
                     "parameter" if attr in getattr(owner, "_parameters", {}) else "attribute"),
            "owner": type(owner).__qualname__,
            "tensor": isinstance(value, torch.Tensor),
        }
        if isinstance(value, torch.Tensor):
            row.update(dtype=str(value.dtype).removeprefix("torch."), shape=list(value.shape))
        with contextlib.suppress(Exception):
            row["source"] = write_site(type(owner), attr)
        described.append({k: v for k, v in row.items() if v is not None})
    return described


def write_site(cls: type, attr: str) -> str | None:
    """`file.py:line` of the first statement outside `__init__` of `cls` (or a base class of
    the script's) that writes `self.<attr>`: assigns it, an item or slice of it or its `.data`,
    augments it, or calls an in-place method on it (`self.count.add_(1)`)."""
    for klass in cls.__mro__:
        if klass.__module__ in ("builtins",) or klass.__module__.startswith("torch."):
            continue
        try:
            lines, start = inspect.getsourcelines(klass)
            file = Path(inspect.getsourcefile(klass) or "").name
        except (OSError, TypeError):
            continue
        tree = ast.parse(textwrap.dedent("".join(lines)))
        for method in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            if method.name == "__init__":
                continue
            for node in ast.walk(method):
                if _writes(node, attr):
                    return f"{file}:{start + node.lineno - 1}"
    return None


def _writes(node: ast.AST, attr: str) -> bool:
    def is_self_attr(target: ast.AST) -> bool:
        while isinstance(target, ast.Subscript):
            target = target.value
        if isinstance(target, ast.Attribute) and target.attr == "data" and isinstance(target.value, ast.Attribute):
            target = target.value  # `self.hidden.data = h` replaces the tensor's values
        return (isinstance(target, ast.Attribute) and target.attr == attr
                and isinstance(target.value, ast.Name) and target.value.id == "self")

    if isinstance(node, ast.Assign):
        return any(is_self_attr(t) for t in node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return is_self_attr(node.target)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method = node.func.attr
        return (method.endswith("_") and not method.endswith("__") and is_self_attr(node.func.value)) or (
            method in ("append", "extend", "insert", "update", "pop", "clear") and is_self_attr(node.func.value))
    return False


class FirstCallHook:
    """A forward pre-hook on the model that puts the written buffers and rebound tensor
    attributes back before every call, so each call the worker makes (the searches for a
    diverging value, other input sets and sizes) starts where the reference call did (plain
    Python state, a step counter, is put back after each export only). `paused` lets `consecutive_calls` look past it; it is
    detached while an exporter traces (torch.export refuses a graph with such a hook in it, and
    the export starts from the state put back anyway)."""

    def __init__(self, model: Any, restore: Any, names: list[str]) -> None:
        self.model, self.restore, self.names = model, restore, names
        self.paused = False
        self.handle: Any = None
        self.attach()

    def __call__(self, module: Any, args: Any) -> None:
        if not self.paused:
            self.restore(only=self.names)

    def attach(self) -> None:
        if self.handle is None:
            with contextlib.suppress(Exception):
                self.handle = self.model.register_forward_pre_hook(self)

    def detach(self) -> None:
        if self.handle is not None:
            self.handle.remove()
            self.handle = None


def consecutive_calls(state: dict[str, Any], atol: float, rtol: float) -> dict[str, Any] | None:
    """PyTorch called four times in a row, at the example, at the example's values shuffled
    (parity.derived_input_sets: same shapes and distribution), and at the example twice more,
    each seeded as the reference call was: None when the later calls at the example give the
    reference call's outputs, which ONNX Runtime's run matched; else the first that differs, for
    OD601.

    The call in between gives state that other inputs leave: a running mean of one input
    repeated stays where the first call put it. The fourth lets a history of frames move on
    (a dilated kernel reads every other frame)."""
    import torch

    from onnxdoctor.worker.facts import tensor_leaves
    from onnxdoctor.worker.parity import compare_outputs

    loaded = state["loaded"]
    example = (tuple(loaded.args), dict(loaded.kwargs or {}))
    other = _shuffled(*example)
    with _from_the_first_call(state), torch.no_grad():
        for call, (args, kwargs) in enumerate((example, other, example, example), 1):
            torch.manual_seed(0)
            try:
                outputs = tensor_leaves(loaded.model(*args, **kwargs))
            except Exception:
                if call != 2:
                    raise
                # The model refuses the shuffled values (a check on their order): the example.
                outputs = tensor_leaves(loaded.model(*loaded.args, **loaded.kwargs))
            if call < 3:
                continue
            # Against PyTorch's own first call, which ONNX Runtime matched: a graph that draws
            # random numbers never repeats PyTorch's draws, and this is about PyTorch's calls.
            report = compare_outputs(outputs, state["torch_outputs"], atol, rtol)
            if report["code"] is not None:
                return {"call": call, "max_abs_diff": report.get("max_abs_diff"),
                        "max_rel_diff": report.get("max_rel_diff"), "message": report["message"],
                        "outputs": report.get("outputs") or []}
    return None


@contextlib.contextmanager
def _from_the_first_call(state: dict[str, Any]) -> Iterator[None]:
    """The model's state as the reference call found it for the block, with the hook that puts it
    back before every call paused (the block's calls follow one another), and put back after."""
    hook, restore = state.get("state_hook"), state["pristine"]
    if hook is not None:
        hook.paused = True
    try:
        restore()
        yield
    finally:
        restore()
        if hook is not None:
            hook.paused = False


def one_call_later(state: dict[str, Any], atol: float, rtol: float) -> bool:
    """Whether ONNX Runtime's outputs, which differ from PyTorch's first call, are PyTorch's second
    call at the example: forward() rebinds its state (`self.buf = cat(...)`), the TorchScript
    tracer's own call of forward() left the new value on the model, and the export wrote that as
    the initializer, so the ONNX model starts from the state one call leaves."""
    import torch

    from onnxdoctor.worker.facts import tensor_leaves
    from onnxdoctor.worker.parity import compare_outputs

    loaded = state["loaded"]
    outputs: list[Any] = []
    with _from_the_first_call(state), torch.no_grad():
        for _call in range(2):
            torch.manual_seed(0)
            outputs = tensor_leaves(loaded.model(*loaded.args, **(loaded.kwargs or {})))
    return compare_outputs(state["ort_outputs"], outputs, atol, rtol)["code"] is None


def one_call_later_message(writes: list[dict[str, Any]], report: dict[str, Any]) -> str:
    """OD601's message for an export whose first call is PyTorch's second."""
    worst = report.get("max_abs_diff")
    figure = f" (max abs error {worst:.3g})" if isinstance(worst, float) else ""
    return (f"ONNX Runtime's outputs for the example are PyTorch's second call, not its first{figure}: "
            f"forward() writes the {_written([w for w in writes if w.get('tensor')] or writes)}, and the "
            "ONNX model starts from the value one call leaves, which is what an export gives when its own "
            "call of forward() (the tracer's) leaves the new state on the model and it is written as a "
            "constant; an ONNX graph keeps no state between runs")


def _written(writes: list[dict[str, Any]]) -> str:
    """The first write as a message names it: its kind, name, owner and line, and how many more."""
    first = writes[0]
    what = f"{first['kind']} `{first['name']}`" + (f" of {first['owner']}" if first.get("owner") else "")
    where = f" ({first['source']})" if first.get("source") else ""
    return what + where + (f" and {len(writes) - 1} more" if len(writes) > 1 else "")


def _shuffled(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The example's values in a seeded random order (parity.derived_input_sets' "shuffled" set:
    the same shapes and distribution), the calls in between that give the state other inputs leave."""
    from onnxdoctor.worker.parity import derived_input_sets

    return next((a, k) for name, a, k in derived_input_sets(args, kwargs) if name.endswith("shuffled"))


def stateful_message(writes: list[dict[str, Any]], found: dict[str, Any]) -> str:
    """OD601's message for state a second call reads."""
    worst = found.get("max_abs_diff")
    figure = f"max abs error {worst:.3g} at" if isinstance(worst, float) else "at"
    nth = {3: "third", 4: "fourth"}.get(found.get("call", 3), f"call {found.get('call')}")
    return (f"PyTorch's outputs for the example inputs change from call to call ({figure} the {nth} call "
            f"in a row, after one with other values) and ONNX Runtime's do not: forward() writes the "
            f"{_written(writes)}, and each call reads what the last left; an ONNX graph keeps no state "
            "between runs, and the export wrote the value it held then as a constant, so the ONNX model "
            "repeats the first call")


def check_state_steps(session: Any, loaded: Any, step: StateCheck, atol: float, rtol: float) -> dict[str, Any]:
    """The `StateCheck` of a model exported through the state wrapper (`loaded.model`: its
    `model` is the user's, `state_names` what forward() writes, the example's last inputs the
    state's starting values): `step.calls` calls in ONNX Runtime, each fed the state the last
    returned, against the user's model called as many times in PyTorch from the same state.

    Raises:
        StageFailed: a call's outputs differ (OD601), or the model is not the wrapper (OD699).
    """
    import torch

    from onnxdoctor.worker.facts import tensor_leaves
    from onnxdoctor.worker.parity import compare_outputs
    from onnxdoctor.worker.runtime import feeds_for_session, run_session

    wrapper = loaded.model
    eager, names = getattr(wrapper, "model", None), list(getattr(wrapper, "state_names", ()))
    if eager is None or not names or len(loaded.args) < len(names):
        raise StageFailed("the state check needs the state wrapper's model, state_names and state inputs", "OD699")
    count = len(loaded.args) - len(names)
    inputs, carried = tuple(loaded.args[:count]), [t.detach().clone() for t in loaded.args[count:]]
    # Other inputs in between: the script's get_inputs2(), else the example's values shuffled
    # (a running mean of one input repeated stays where the first call put it).
    other = _shuffled(inputs, dict(loaded.kwargs or {}))[0]
    own = loaded.namespace.get("get_inputs2")
    with contextlib.suppress(Exception):
        if callable(own):
            second = own()
            other = (second,) if isinstance(second, torch.Tensor) else tuple(second)
    calls = [(inputs, other)[i % 2] for i in range(step.calls)]
    kept = [wrapper.get_state(name) for name in names]
    expected: list[list[Any]] = []
    try:
        for name, value in zip(names, carried, strict=True):
            wrapper.set_state(name, value.clone())
        with torch.no_grad():
            for args in calls:
                torch.manual_seed(0)
                expected.append(tensor_leaves(eager(*args, **loaded.kwargs)))
    finally:
        for name, value in zip(names, kept, strict=True):
            wrapper.set_state(name, value)
    worst = 0.0
    fed: list[Any] = carried
    for index, (args, want) in enumerate(zip(calls, expected, strict=True)):
        got = run_session(session, feeds_for_session(session, [*tensor_leaves((args, loaded.kwargs)), *fed]))
        outputs = got[:len(got) - len(names)]
        fed = [torch.from_numpy(np.ascontiguousarray(a)) for a in got[len(got) - len(names):]]
        report = compare_outputs(want, outputs, atol, rtol)
        if report["code"] is not None:
            raise StageFailed(f"call {index + 1} of {len(calls)}, with the state the call before returned "
                              f"fed back: {report['message']}", "OD601", state_calls=index + 1)
        worst = max(worst, report.get("max_abs_diff") or 0.0)
    return {"calls": len(calls), "state": names, "max_abs_diff": worst,
            "inputs": "the example and " + ("the script's get_inputs2()" if callable(own) else "its values shuffled")
            + " in turn"}
