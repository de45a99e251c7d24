"""What a `--write-fix` fix.py calls: the same loading, snippet running and checking the worker does.

A written fix.py must run as written in a fresh process and do what onnxdoctor verified, so it
uses the worker's own pieces rather than a second copy of them: the model-script protocol
(`load`), fix code run with the script's globals from a real file (`run_code`, which the worker
uses too), the dynamic_shapes corrections, the ONNX rewrites, and an ONNX Runtime check against
PyTorch's outputs (`check`).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import runpy
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from onnxdoctor.recipe import (
    DeclareDynamic,
    DecodeCheck,
    DynamicShapes,
    EagerExport,
    PerSample,
    QuantizeOnnx,
    RewriteOnnx,
    StateCheck,
    ordered_rewrites,
)

# A quantized fix's snippet (and its fix.py) imports float_model_of from here.
from onnxdoctor.worker.dequantize import float_model_of
from onnxdoctor.worker.facts import forward_scopes, tensor_leaves
from onnxdoctor.worker.loader import LoadedModel, function_class, load_script


def load(script: str, factory: str | None = None, *, arrays_as_tensors: bool = False) -> LoadedModel:
    """Build the model from the user's script, as `onnxdoctor diagnose` does (`arrays_as_tensors`:
    NumPy example inputs made tensors)."""
    import torch

    torch.manual_seed(0)
    return load_script(Path(script), factory, arrays_as_tensors=arrays_as_tensors)


def run_code(code: str, loaded: LoadedModel | None, name: str, folder: Path | None = None,
             given: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run fix code as the user would paste it into their script: with the script's globals.

    The code runs from a real file because onnxscript reads function source with inspect. It sees
    `model`, `example_inputs` and `example_kwargs`, and `given` (what earlier pasted code defined);
    the names it defines are returned.
    """
    import torch

    scope: dict[str, Any] = dict(loaded.namespace) if loaded is not None else {}
    scope.pop("__file__", None)
    scope.update(torch=torch)
    if loaded is not None:
        scope.update(model=loaded.model, example_inputs=loaded.args, example_kwargs=loaded.kwargs)
    scope.update(given or {})
    where = folder or _private_folder()
    path = where / f"{name}_{os.getpid()}_{time.monotonic_ns()}.py"
    path.write_text(code, "utf-8")
    return runpy.run_path(str(path), init_globals=scope)


def apply_load_code(code: str, loaded: LoadedModel, name: str, folder: Path | None = None) -> None:
    """Apply a LOAD fix's code (a wrapper, a switch) as if pasted into the script: the `model` it
    leaves is the one exported, and a setting it defines (`output_names`) is the script's setting
    from then on. Code that defines `example_inputs` anew (a wrapper with other inputs) replaces
    the example: those positional inputs, and `example_kwargs` if it defines that too (else the
    script's keyword inputs stay: a fix that casts or widens the positional ones keeps them)."""
    from onnxdoctor.worker.loader import SETTING_NAMES

    namespace = run_code(code, loaded, name, folder)
    loaded.model = namespace.get("model", loaded.model)
    if namespace.get("example_inputs", loaded.args) is not loaded.args:
        loaded.args = tuple(namespace["example_inputs"])
        if namespace.get("example_kwargs", loaded.kwargs) is not loaded.kwargs:
            loaded.kwargs = dict(namespace["example_kwargs"] or {})
    for setting in SETTING_NAMES:
        if setting in namespace and namespace[setting] is not loaded.namespace.get(setting):
            loaded.settings[setting] = namespace[setting]


_FOLDER: list[Path] = []


def _private_folder() -> Path:
    """One temporary folder for this process's fix code, removed when the process exits.

    The files must outlive `run_code` (onnxscript reads a function's source when it exports), so
    they go when the program ends: a fix.py leaves no `onnxdoctor-fix-*` folder behind.
    """
    if not _FOLDER:
        import atexit
        import shutil

        _FOLDER.append(Path(tempfile.mkdtemp(prefix="onnxdoctor-fix-")))
        atexit.register(shutil.rmtree, _FOLDER[0], True)
    return _FOLDER[0]


def reference_call(loaded: LoadedModel, written: list[str] | None = None) -> Any:
    """forward() at the example inputs, as the reference for parity: seeded, without gradients, on
    the model as `_probing` gives it, whose state names the call changed are appended to `written`."""
    import torch

    with _probing(loaded, written) as model, torch.no_grad():
        torch.manual_seed(0)
        return model(*loaded.args, **loaded.kwargs)


@contextlib.contextmanager
def _probing(loaded: LoadedModel, written: list[str] | None = None) -> Iterator[Any]:
    """The model for a call that must leave it as it was: a copy of a model in training mode (batch
    norm would update its running statistics), else the model with its own state put back after
    the call (see ModelState), whose names the call changed are appended to `written`."""
    import copy

    if getattr(loaded.model, "training", False):
        yield copy.deepcopy(loaded.model)  # a copy's state is thrown away anyway
        return
    restore = python_state(loaded.model)
    try:
        yield loaded.model
    finally:
        if written is not None:
            written.extend(restore.written())
        restore()


# An attribute or buffer holding more tensor bytes than this is left alone by python_state (a
# cache the size of a model), and so are buffers past _STATE_TOTAL bytes in all.
_STATE_BYTES = 16 * 2**20
_STATE_TOTAL = 256 * 2**20
# Frozen parameters as state: a hidden state of a few thousand floats, not a frozen weight matrix.
_STATE_PARAMETER_BYTES = 64 * 2**10


class ModelState:
    """What the model's modules hold besides their weights and submodules, as it was when made:
    the call puts back each value a call changed, rebound or changed in place; `written()` names
    them.

    That is the buffers (a streaming layer's history kept with register_buffer, pytorch#60828),
    plain attributes (a scheduler's list of past outputs, a step counter, a tensor kept from the
    last call) and small parameters without gradient (a hidden state kept in an nn.Parameter;
    one left requiring grad is taken for a weight). A forward() that advances such state gives
    another result at each call (diffusers' PNDM scheduler appends to `self.ets` and counts steps,
    pytorch#93159): the export, which calls forward() again, would trace the state the reference
    call left, and the comparison would be between two different calls. With the state put back,
    every call starts where the first did; whether the state matters across calls is PARITY's own
    check (stateful.consecutive_calls)."""

    def __init__(self, model: Any) -> None:
        import copy

        import torch

        self._attributes: list[tuple[Any, str, str, Any, Any]] = []
        # [module, name, path, tensor, its _version, copy, store ("_buffers"/"_parameters"), data_ptr]
        self._buffers: list[list[Any]] = []
        total = 0
        modules = [(f"{path}." if path else "", module) for path, module in model.named_modules()
                   if not isinstance(module, torch.jit.ScriptModule)] if isinstance(model, torch.nn.Module) else []
        tensors: list[tuple[Any, str, str, str, Any]] = []
        for prefix, module in modules:
            for name, value in list(vars(module).items()):
                size = _plain_state(value)
                if name.startswith("_") or name == "training" or size is None or size > _STATE_BYTES:
                    continue
                with contextlib.suppress(Exception):  # a value that cannot be copied stays as it is
                    self._attributes.append((module, name, prefix + name, value, copy.deepcopy(value)))
            tensors += [(module, "_buffers", prefix, name, value) for name, value in module._buffers.items()]
        # Then small parameters that take no gradient: state kept in an nn.Parameter whose `.data`
        # forward() replaces (a GRU's hidden state, onnxruntime#11085), written from the module
        # or from its parent. A hidden state is small; larger frozen weights are not copied.
        tensors += [(module, "_parameters", prefix, name, value) for prefix, module in modules
                    for name, value in module._parameters.items()
                    if isinstance(value, torch.Tensor) and not value.requires_grad
                    and value.numel() * value.element_size() <= _STATE_PARAMETER_BYTES]
        for module, store, prefix, name, buffer in tensors:
            size = buffer.numel() * buffer.element_size() if isinstance(buffer, torch.Tensor) else None
            if size is None or size > _STATE_BYTES or total + size > _STATE_TOTAL or buffer.is_meta:
                continue
            with contextlib.suppress(Exception):  # an inference-mode tensor keeps no version
                self._buffers.append([module, name, prefix + name, buffer, buffer._version,
                                      buffer.detach().clone(), store, _address(buffer)])
                total += size

    def written(self) -> list[str]:
        """The state a call since this was made rebound or changed (`layer.cache`, `step`)."""
        names = [path for module, name, path, original, copied in self._attributes
                 if vars(module).get(name) is not original or not _same_state_safe(original, copied)]
        return names + [entry[2] for entry in self._buffers if self._changed(entry, compare=True)]

    @staticmethod
    def _changed(entry: list[Any], compare: bool) -> bool:
        """Whether a buffer was rebound or written: its version counter moved, or (`compare`)
        its values differ from the copy (batch norm's kernel updates running statistics in
        place without moving the counter)."""

        module, name, _path, original, version, copied, store, address = entry
        if getattr(module, store).get(name) is not original or _version(original) != version:
            return True
        if address is not None and _address(original) != address:  # `.data` replaced: other memory now
            return True
        with contextlib.suppress(Exception):
            return compare and not (original.shape == copied.shape and _equal_nan(original, copied))
        return False

    def __call__(self, only: Collection[str] | None = None) -> None:
        """Put the state back (`only`: those names, their tensors only). While a tracer records,
        buffers are checked by identity and version counter alone, so the check adds nothing to
        the trace."""
        import copy

        import torch

        for module, name, path, original, copied in self._attributes:
            if only is not None and (path not in only or not isinstance(original, torch.Tensor)):
                continue
            with contextlib.suppress(Exception):
                if vars(module).get(name) is not original or (only is None and not _same_state(original, copied)):
                    setattr(module, name, copy.deepcopy(copied))
        # No comparison of values while a tracer records: it would be recorded too.
        compare = torch._C._get_tracing_state() is None and not torch.compiler.is_compiling()
        for entry in self._buffers:
            module, name, path, original, _version_then, copied, store, address = entry
            if (only is not None and path not in only) or not self._changed(entry, compare):
                continue
            with contextlib.suppress(Exception):
                getattr(module, store)[name] = original
                with torch.no_grad():
                    if _address(original) == address:
                        original.copy_(copied)
                    else:
                        # `.data = h` made the tensor share h's memory, and h may be an output
                        # the caller holds: the old values go into memory of their own.
                        original.data = copied.clone()
                entry[4], entry[7] = original._version, _address(original)


def _equal_nan(a: Any, b: Any) -> bool:
    """torch.equal with NaN equal to NaN (an uninitialized buffer may hold NaN that no call wrote)."""
    import torch

    if torch.equal(a, b):
        return True
    return a.is_floating_point() and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _same_state_safe(a: Any, b: Any) -> bool:
    """_same_state, where a comparison that raises (a sparse tensor: no aten::equal) is taken
    as no change."""
    try:
        return _same_state(a, b)
    except Exception:
        return True


def _address(tensor: Any) -> int | None:
    """Where a strided tensor's values are (None for a sparse or other layout, which has none)."""
    import torch

    return tensor.data_ptr() if tensor.layout is torch.strided else None


def _version(tensor: Any) -> int | None:
    """The tensor's version counter (None where it keeps none)."""
    try:
        return int(tensor._version)
    except Exception:
        return None


def python_state(model: Any) -> ModelState:
    """The model's state as it is now (ModelState): calling the result puts it back."""
    return ModelState(model)


def _plain_state(value: Any, depth: int = 0) -> int | None:
    """The bytes of tensors in a value made of numbers, strings, tensors, and lists, tuples and
    dicts of them; None for anything else (objects, modules, parameters)."""
    import torch

    if value is None or isinstance(value, (bool, int, float, str)):
        return 0
    if isinstance(value, torch.nn.Parameter):
        return None
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    parts: list[Any] = []
    if isinstance(value, (list, tuple)) and depth < 3 and len(value) <= 256:
        parts = list(value)
    elif isinstance(value, dict) and depth < 3 and len(value) <= 256 and all(isinstance(k, (str, int)) for k in value):
        parts = list(value.values())
    else:
        return None
    sizes = [_plain_state(v, depth + 1) for v in parts]
    return None if any(size is None for size in sizes) else sum(size for size in sizes if size is not None)


def _same_state(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and bool(torch.equal(a, b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def with_gradients(loaded: LoadedModel) -> None:
    """forward() run with gradients enabled whatever the caller's mode, its tensors detached: for
    a model whose forward takes gradients itself (torch.autograd.grad of its output with respect
    to its input), which every reference call of the worker (under torch.no_grad) would stop."""
    import functools

    import torch

    forward = loaded.model.forward

    @functools.wraps(forward)
    def forward_with_gradients(*args: Any, **kwargs: Any) -> Any:
        with torch.enable_grad():
            result = forward(*args, **kwargs)
        if torch.jit.is_tracing() or torch.compiler.is_compiling():
            return result  # an export records forward's own graph
        return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: t.detach(), result)

    if isinstance(loaded.model, torch.jit.ScriptModule):
        # Both exporters take a scripted module's code from `model.forward.graph` (then compile
        # from the module itself): without it they stop at "'forward' method must be a script
        # method" instead of the user's own error (aten::grad has no ONNX op).
        forward_with_gradients.graph = forward.graph  # type: ignore[attr-defined]
    loaded.model.forward = forward_with_gradients


def reference_outputs(loaded: LoadedModel) -> list[Any]:
    """PyTorch's outputs at the example inputs, as tensors (the numbers the export must match)."""
    from onnxdoctor.worker.facts import tensor_leaves

    return tensor_leaves(reference_call(loaded))


def dynamic_shapes(settings: dict[str, Any], correction: DynamicShapes | None) -> Any:
    """The script's dynamic_shapes with a fix's corrections applied."""
    from onnxdoctor.worker.facts import corrected_keys, with_suggested_dims

    shapes = settings.get("dynamic_shapes")
    if correction is None:
        return shapes
    shapes = corrected_keys(shapes, dict(correction.rename), correction.pack, correction.missing)
    return with_suggested_dims(shapes, list(correction.suggested))


def rewrite_file(path: str | Path, rewrites: list[RewriteOnnx]) -> None:
    """Apply a fix's ONNX rewrites to the file, in place."""
    import onnx

    from onnxdoctor.onnxkit.transforms import apply_transform

    model = onnx.load(str(path))
    for rewrite in ordered_rewrites(rewrites):
        model = apply_transform(model, rewrite.transform)
    onnx.save(model, str(path))


def check(path: str | Path, reference: list[Any] | None, loaded: LoadedModel | None, *,
          libraries: tuple[str, ...] = (), extensions: bool = False, atol: float = 1e-4,
          rtol: float = 1e-3, config: tuple[tuple[str, str], ...] = (), prefix: bool = False) -> float | None:
    """Load and run the written model in ONNX Runtime; compare with PyTorch's outputs (`prefix`:
    an output longer than PyTorch's on PyTorch's part of it, recipe.PrefixParity).

    Returns the largest absolute difference (None without a reference).

    Raises:
        SystemExit: the outputs differ beyond the tolerances (the message says how).
    """
    from onnxdoctor.worker.facts import tensor_leaves
    from onnxdoctor.worker.parity import compare_outputs, compare_prefix
    from onnxdoctor.worker.runtime import (
        cpu_session,
        feeds_for_session,
        random_feeds,
        run_session,
    )

    if extensions:
        from onnxruntime_extensions import get_library_path

        libraries = (*libraries, get_library_path())
    session = cpu_session(str(path), libraries, config)
    if loaded is None:
        feeds, _described = random_feeds(session, {}, 256 * 1024 * 1024)
        run_session(session, feeds)
        print(f"{path}: loads and runs in ONNX Runtime")
        return None
    got = run_session(session, feeds_for_session(session, tensor_leaves((loaded.args, loaded.kwargs))))
    report = (compare_prefix if prefix else compare_outputs)(reference or [], got, atol, rtol)
    if report["code"]:
        raise SystemExit(f"{path}: {report['message']}")
    cut = f"; on PyTorch's part of the longer outputs: {', '.join(report['prefix'])}" if report.get("prefix") else ""
    print(f"{path}: matches PyTorch (max abs diff {report['max_abs_diff']:.3g}{cut})")
    return report["max_abs_diff"]


def state_check(path: str | Path, loaded: LoadedModel, step: StateCheck, *, atol: float = 1e-4,
                rtol: float = 1e-3) -> dict[str, Any]:
    """Calls of the written model in ONNX Runtime with its state fed back, against the user's
    model called as often in PyTorch (the check the worker ran when it verified a state_io fix).

    Raises:
        SystemExit: a call's outputs differ, or the model lacks the state wrapper's interface.
    """
    from onnxdoctor.worker.runtime import cpu_session
    from onnxdoctor.worker.stateful import check_state_steps
    from onnxdoctor.worker.tracebacks import StageFailed

    try:
        facts = check_state_steps(cpu_session(str(path), ()), loaded, step, atol, rtol)
    except StageFailed as exc:
        raise SystemExit(f"{path}: {exc.message}") from None
    print(f"{path}: {facts['calls']} calls with the state ({', '.join(facts['state'])}) fed back give "
          f"PyTorch's outputs (max abs diff {facts['max_abs_diff']:.3g})")
    return facts


def decode_check(path: str | Path, loaded: LoadedModel, step: DecodeCheck, *, atol: float = 1e-4,
                 rtol: float = 1e-3) -> dict[str, Any]:
    """Greedy decoding with the written model's cache in ONNX Runtime, against eager PyTorch (the
    check the worker ran when it verified a flat-cache fix).

    Raises:
        SystemExit: the tokens or logits differ, or the model lacks the flat-cache interface.
    """
    from onnxdoctor.worker.llm_cache import check_decoding
    from onnxdoctor.worker.runtime import cpu_session
    from onnxdoctor.worker.tracebacks import StageFailed

    path = Path(path)
    encoder = path.with_name(path.stem + "-encoder.onnx")  # an encoder-decoder's second file
    try:
        facts = check_decoding(cpu_session(str(path), ()), loaded.model, step, atol, rtol, encoder)
    except StageFailed as exc:
        raise SystemExit(f"{path}: {exc.message}") from None
    if step.encoder:
        print(f"{encoder}: the encoder, with the cross-attention cache the decoder takes")
    lengths = " and ".join(str(n) for n in facts["prompt_lengths"])
    print(f"{path}: greedy decoding with the cache gives eager PyTorch's tokens (prompts of {lengths} "
          f"tokens, a prefill and {facts['steps']} decode steps each; max abs diff of logits "
          f"{facts['max_abs_diff']:.3g})")
    return facts


@contextlib.contextmanager
def eager_export(loaded: LoadedModel, step: EagerExport) -> Iterator[None]:
    """For the duration of an export, what `step` asks (recipe.EagerExport): the Functions without
    their `symbolic` (the exporter traces their forward), torch.onnx.is_in_onnx_export() false
    (forward() takes its eager branch), values taken out of tensors kept as tensors, helpers
    scripted while tracing traced as Python, full-size pools as reductions, torch.cond as where."""

    undo: list[Callable[[], None]] = []
    try:
        if step.tensor_values:
            _keep_tensor_values(undo)
        if step.traced_helpers:
            _trace_scripted_helpers(undo)
        if step.global_pools:
            _global_pools(loaded, undo)
        if step.cond_as_where:
            _cond_as_where(loaded, undo)
        if step.forced_branches:
            _force_branches(step.forced_branches, undo)
        if step.tensor_outputs:
            _keep_tensor_outputs(loaded, undo)
        if step.seeded_noise:
            _seeded_noise(loaded, step.seeded_noise, undo)
        if step.every_candidate:
            _every_candidate(loaded, undo)
        if step.dense_sparse:
            _dense_sparse(loaded, undo)
        if step.symbolic_sizes:
            _symbolic_sizes(loaded, undo)
        if step.traced_data:
            _traced_data(undo)
        if step.unfolded_convs:
            _unfolded_convs(loaded, undo)
        if step.dense_attention:
            _dense_attention(loaded, undo)
        if step.affine_norms:
            _affine_norms(loaded, undo)
        if step.inplace_operators:
            _inplace_operators(undo)
        if step.cloned_constants:
            _cloned_constants(loaded, undo)
        if step.frozen_weights:
            _frozen_weights(loaded.model, undo)
        if step.int_sizes:
            _int_sizes(undo)
        if step.strided_views:
            _strided_views(loaded, undo)
        if step.fake_quantized:
            _fake_quantized(loaded, undo)
        if step.unbatched_pools:
            _unbatched_pools(loaded, undo)
        if step.where_branches:
            from onnxdoctor.worker.branch_select import select_branches

            select_branches(loaded, step.where_branches, undo)
        if step.len_sites:
            from onnxdoctor.worker.branch_select import sized_lengths

            sized_lengths(loaded, step.len_sites, undo)
        if step.slice_sites:
            from onnxdoctor.worker.branch_select import slice_bounds

            slice_bounds(loaded, step.slice_sites, undo)
        if step.size_sites:
            from onnxdoctor.worker.branch_select import traced_sizes

            traced_sizes(loaded, step.size_sites, undo)
        if step.torch_symbolics:
            _registered_symbolics_aside(step.torch_symbolics, undo)
        if step.selected_modules:
            _selected_modules(undo)
        for name in step.functions:
            cls = function_class(name, loaded)
            owner = next(c for c in cls.__mro__ if "symbolic" in c.__dict__)
            saved = owner.__dict__["symbolic"]
            delattr(owner, "symbolic")
            undo.append(lambda owner=owner, saved=saved: setattr(owner, "symbolic", saved))
        if step.not_in_export:
            def never() -> bool:
                return False

            _replace_in_export_check(loaded, never, undo)
        yield
    finally:
        for restore in reversed(undo):
            restore()


def _selected_modules(undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, an nn.ModuleList indexed with a one-element integer tensor while traced
    gives a callable (not a module: no attribute of the picked module is reached through it) that
    runs every module on its own copy of the arguments and selects each tensor of the results
    with that tensor (recipe.EagerExport.selected_modules); any other index is the list's own."""
    import torch
    import torch.utils._pytree as pytree

    from onnxdoctor.worker.facts import selecting_index

    original = torch.nn.ModuleList.__getitem__

    def select(modules: list[Any], index: Any) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            # A copy each: a module that writes its input in place must not feed the next one.
            results = [module(*pytree.tree_map_only(torch.Tensor, torch.clone, args),
                              **pytree.tree_map_only(torch.Tensor, torch.clone, kwargs)) for module in modules]
            flat = [pytree.tree_flatten(r)[0] for r in results]
            # Negative indices count from the end as the list's own do; one past the end wraps
            # around where the list would raise (the graph has no error to raise).
            position = index.reshape(()).long() % len(modules)
            picked = [torch.stack([leaves[i] for leaves in flat])[position] if isinstance(first, torch.Tensor)
                      else first for i, first in enumerate(flat[0])]
            return pytree.tree_unflatten(picked, pytree.tree_flatten(results[0])[1])
        return call

    def item(self: Any, idx: Any) -> Any:
        if selecting_index(idx) and torch._C._get_tracing_state() is not None and len(self):
            return select(list(self), idx)
        return original(self, idx)

    torch.nn.ModuleList.__getitem__ = item  # type: ignore[method-assign,assignment]
    undo.append(lambda: setattr(torch.nn.ModuleList, "__getitem__", original))


def _registered_symbolics_aside(names: tuple[str, ...], undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, the symbolics registered with `register_custom_op_symbolic` for these
    torch ops are set aside, at every opset they were registered for, so the TorchScript exporter
    writes the ops with its own symbolic (or refuses them at this opset, naming the one that has
    them)."""
    import torch

    from onnxdoctor.worker.registry import registered_symbolics

    for name in names:
        for opset, saved in registered_symbolics(name).items():
            torch.onnx.unregister_custom_op_symbolic(name, opset)
            undo.append(lambda name=name, saved=saved, opset=opset:
                        torch.onnx.register_custom_op_symbolic(name, saved, opset))


# Augmented assignment operators with no TorchScript symbolic, and the operator each computes.
_AUGMENTED = {"__ior__": "__or__", "__iand__": "__and__", "__ixor__": "__xor__",
              "__ilshift__": "__lshift__", "__irshift__": "__rshift__"}


def _inplace_operators(undo: list[Callable[[], None]]) -> None:
    """`x |= y` (and &=, ^=, <<=, >>=) as `x.copy_(x | y)` until `undo` runs: the exporter maps the
    operator and follows copy_ into x and its views (GroundingDINO's `special_tokens_mask |=
    input_ids == t`)."""
    import torch

    for augmented, plain in _AUGMENTED.items():
        original = getattr(torch.Tensor, augmented)

        def computed(self: Any, other: Any, plain: str = plain) -> Any:
            return self.copy_(getattr(self, plain)(other))

        setattr(torch.Tensor, augmented, computed)
        undo.append(lambda name=augmented, saved=original: setattr(torch.Tensor, name, saved))


def _cloned_constants(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, `torch.tensor`, `torch.as_tensor` and `torch.from_numpy` of Python or
    NumPy data give a clone while traced (recipe.EagerExport.cloned_constants): the tracer holds
    what they built as a constant, and in-place writes land on the clone, a traced value."""
    import torch

    from onnxdoctor.worker.provenance import DATA_MAKERS, warned_at

    def cloning(make: Callable[..., Any]) -> Callable[..., Any]:
        def made(data: Any, *args: Any, **kwargs: Any) -> Any:
            tensor = warned_at(sys._getframe(1), make, data, *args, **kwargs)
            if torch._C._get_tracing_state() is None or isinstance(data, torch.Tensor):
                return tensor  # as_tensor of a tensor is that tensor: an alias the caller may rely on
            return tensor.clone()
        return made

    for name in DATA_MAKERS:
        _replace(torch, name, cloning(getattr(torch, name)), loaded, undo)


def _int_sizes(undo: list[Callable[[], None]]) -> None:
    """torch.nn.functional's int-tuple parsing (`_single`, `_pair`, `_triple`) reads a 0-d tensor
    as the int it holds instead of iterating it (recipe.EagerExport.int_sizes)."""
    import torch
    from torch.nn import functional

    def reading(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def parsed(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
                value = int(value)
            return parse(value)
        return parsed

    for name in ("_single", "_pair", "_triple"):
        original = getattr(functional, name, None)
        if callable(original):
            setattr(functional, name, reading(original))
            undo.append(lambda name=name, original=original: setattr(functional, name, original))


def _strided_views(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, under the TorchScript tracer, `stride()` of a contiguous tensor is
    computed from its sizes and `as_strided` is a gather from the storage the tensor views
    (recipe.EagerExport.strided_views).

    The tracer keeps sizes as traced values but records `stride()` as the example's numbers, and
    the exporter's as_strided indexes the tensor it is given: a view's windows that reach past it
    into its base (`torch.as_strided(x[0:6], (6, 4), (1, 1))`, valid in eager) index out of
    bounds. The gather reads the flattened base at `offset + sum(arange(size_i) * stride_i)`, the
    sizes and strides traced, so windows computed from sizes follow them (the storage offset is
    the example's; a size-1 dim's stride, which any value fits, may differ from eager's). A tensor
    whose base is not contiguous keeps the exporter's as_strided."""
    import torch

    strides_of, as_strided = torch.Tensor.stride, torch.Tensor.as_strided

    def traced(tensor: Any) -> bool:
        return torch._C._get_tracing_state() is not None and isinstance(tensor, torch.Tensor)

    def sized_stride(self: Any, dim: int | None = None) -> Any:
        if not traced(self) or not self.is_contiguous():
            return strides_of(self) if dim is None else strides_of(self, dim)
        steps, step = [], 1
        for size in reversed(self.shape):  # traced sizes: the products stay in the graph
            steps.append(step)
            step = step * size
        steps.reverse()
        return tuple(steps) if dim is None else steps[dim]

    def gathered(self: Any, size: Any, stride: Any, storage_offset: Any = None) -> Any:
        # torch's own parameter names: callers pass them by keyword (`x.as_strided(size=..., stride=...)`).
        # The storage offsets are the example's numbers (a view's offset that depends on a size,
        # `x[1:]` of a 2-D x, stays the example's).
        base = self._base if traced(self) and self._base is not None else self
        if not traced(self) or not base.is_contiguous():
            return as_strided(self, size, stride, storage_offset)
        offset = self.storage_offset() if storage_offset is None else storage_offset
        index = torch.zeros((), dtype=torch.long, device=self.device) + (offset - base.storage_offset())
        for count, step in zip(size, stride):
            index = index.unsqueeze(-1) + torch.arange(count, device=self.device) * step
        return base.reshape(-1)[index]

    def gathered_input(input: Any, size: Any, stride: Any, storage_offset: Any = None) -> Any:
        return gathered(input, size, stride, storage_offset)  # torch.as_strided names it `input`

    _replace(torch.Tensor, "stride", sized_stride, loaded, undo)
    _replace(torch.Tensor, "as_strided", gathered, loaded, undo)
    _replace(torch, "as_strided", gathered_input, loaded, undo)


# The pooling functionals that take an unbatched input ((C, L), (C, H, W), (C, D, H, W)).
_POOLS = tuple(f"{kind}{n}d" for n in (1, 2, 3) for kind in (
    "max_pool", "avg_pool", "lp_pool", "adaptive_max_pool", "adaptive_avg_pool", "fractional_max_pool"))


def _unbatched_pools(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, under the TorchScript tracer, a pooling functional given an unbatched
    input (one dim fewer than its batched form: max_pool2d of (C, H, W)) pools it with a batch
    axis of 1 and returns the result(s) without it (recipe.EagerExport.unbatched_pools).

    torch pools an unbatched input itself; the exporter writes the ONNX pool on the input as it is,
    and ONNX's MaxPool/AveragePool read the first two dims as batch and channels, so a 2-D pool's
    attributes do not fit the rank-3 input ("Attribute dilations has incorrect size", hloc#391)."""
    import torch
    import torch.nn.functional as F

    for name in _POOLS:
        original = getattr(F, name, None)
        if original is None:
            continue
        rank = int(name[-2]) + 1  # max_pool2d: an unbatched input has 3 dims

        def batched(input: Any, *args: Any, _original: Any = original, _rank: int = rank, **kwargs: Any) -> Any:
            if torch._C._get_tracing_state() is None or not isinstance(input, torch.Tensor) or input.dim() != _rank:
                return _original(input, *args, **kwargs)
            out = _original(input.unsqueeze(0), *args, **kwargs)
            return tuple(o.squeeze(0) for o in out) if isinstance(out, tuple) else out.squeeze(0)

        _replace(F, name, batched, loaded, undo)


def _fake_quantized(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, under the TorchScript tracer, `torch.quantize_per_tensor` and
    `torch.quantize_per_channel` give the float tensor of the values they quantize to (fake
    quantization: QuantizeLinear then DequantizeLinear in the graph) and `dequantize` of a float
    tensor is that tensor in float32, as eager gives it (recipe.EagerExport.fake_quantized).

    Indexing, slicing or concatenating a quantized tensor then runs on those values, which
    dequantizing afterwards gives exactly: the exporters have no quantized Gather (pytorch#126065)
    and the dynamo exporter no quantized dtype at all."""
    import torch

    per_tensor, per_channel, dequantize = torch.quantize_per_tensor, torch.quantize_per_channel, torch.dequantize
    dequantize_method = torch.Tensor.dequantize
    # qint32's range is wider than the exporter's fake-quantize symbolic takes: left as it is.
    bounds = {torch.qint8: (-128, 127), torch.quint8: (0, 255)}

    def traced() -> bool:
        return torch._C._get_tracing_state() is not None

    def tensor_grid(input: Any, scale: Any, zero_point: Any, dtype: Any) -> Any:
        if not traced() or not isinstance(input, torch.Tensor) or dtype not in bounds:
            return per_tensor(input, scale, zero_point, dtype)
        low, high = bounds[dtype]
        if isinstance(scale, torch.Tensor):
            return torch.fake_quantize_per_tensor_affine(input, scale.float(), torch.as_tensor(zero_point).int(),
                                                         low, high)
        return torch.fake_quantize_per_tensor_affine(input, float(scale), int(zero_point), low, high)

    def channel_grid(input: Any, scales: Any, zero_points: Any, axis: int, dtype: Any) -> Any:
        if not traced() or dtype not in bounds:
            return per_channel(input, scales, zero_points, axis, dtype)
        low, high = bounds[dtype]
        return torch.fake_quantize_per_channel_affine(input, scales.float(), zero_points.int(), axis, low, high)

    def values(tensor: Any) -> Any:
        if traced() and isinstance(tensor, torch.Tensor) and not tensor.is_quantized:
            return tensor.float()  # as eager's dequantize of a float tensor: float32
        return dequantize(tensor)

    def values_method(self: Any) -> Any:
        return self.float() if traced() and not self.is_quantized else dequantize_method(self)

    _replace(torch, "quantize_per_tensor", tensor_grid, loaded, undo)
    _replace(torch, "quantize_per_channel", channel_grid, loaded, undo)
    _replace(torch, "dequantize", values, loaded, undo)
    _replace(torch.Tensor, "dequantize", values_method, loaded, undo)


def _frozen_weights(model: Any, undo: list[Callable[[], None]]) -> None:
    """requires_grad off, until `undo` runs, for every leaf tensor requiring grad that the model
    object reaches: through modules (registered or not), lists, tuples, dicts and plain objects'
    attributes (a normalizing flow's decoders in a Python list, RIFE's flow network on a plain
    class). The tracer writes those as constants, and refuses while they require grad."""
    import torch

    seen: set[int] = set()
    pending: list[tuple[Any, int]] = [(model, 0)]
    while pending:
        value, depth = pending.pop()
        if id(value) in seen or depth > 12:
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            if value.requires_grad and value.is_leaf:
                value.requires_grad_(False)
                undo.append(lambda t=value: t.requires_grad_(True))
            continue
        if isinstance(value, (list, tuple, set, frozenset)):
            pending += [(v, depth + 1) for v in value]
        elif isinstance(value, dict):
            pending += [(v, depth + 1) for v in value.values()]
        elif isinstance(value, torch.nn.Module) or (hasattr(value, "__dict__") and not isinstance(value, type)
                                                    and type(value).__module__ not in ("builtins",)
                                                    and not callable(value)):
            pending += [(v, depth + 1) for v in vars(value).values()]


def _affine_norms(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """F.instance_norm and F.batch_norm given no weight (or bias) get ones (zeros) as long as the
    input's channel dim, until `undo` runs (the script's own names for them too).

    The TorchScript symbolics write a missing weight as a constant of the channel count, and
    refuse when the trace does not know it ("instance_norm for unknown channel size": an
    InstanceNorm1d(affine=False) fed by an LSTM whose output size is dynamic, kokoro#104). Given
    as tensors built from the input's shape, they are graph values and the count is not needed;
    multiplying by one and adding zero is the same normalization."""
    import inspect

    import torch
    import torch.nn.functional as F

    def affine(original: Any) -> Any:
        signature = inspect.signature(original)

        def norm(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            x = bound.arguments["input"]
            if isinstance(x, torch.Tensor) and x.dim() >= 2 and x.is_floating_point():
                for name, fill in (("weight", torch.ones), ("bias", torch.zeros)):
                    if bound.arguments.get(name) is None:
                        bound.arguments[name] = fill(x.shape[1], dtype=x.dtype, device=x.device)
            return original(*bound.args, **bound.kwargs)
        return norm

    for name in ("instance_norm", "batch_norm"):
        _replace(F, name, affine(getattr(F, name)), loaded, undo)


def _global_pools(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """F.avg_pool1d/2d and F.max_pool1d/2d whose kernel covers the whole input are a mean/amax over
    those dims, until `undo` runs (the script's own names for them too); so is a kernel that
    covers some dims whole and is 1 (stride 1) in the others (mmocr's SAR: `(feat.size(2), 1)`).

    The kernel is read from the input's size (`F.avg_pool2d(x, x.size()[2:])`, GeM pooling), and
    the tracer stores it as a number: AveragePool[kernel_shape=[16, 18]] pools only a corner of a
    larger input. A mean over the dims reads the size at run time. Whether the kernel always
    covers the input is a property of the code, not of one call: the fix's check at other sizes
    and inputs says whether it holds."""
    import torch.nn.functional as F

    def covered(x: Any, kernel: Any, stride: Any, padding: Any, rank: int, dilation: Any = 1) -> tuple[int, ...]:
        """The dims (negative) a kernel spans whole, where it is 1 with stride 1 in every other
        (`(x.size(2), 1)` pools each column whole); () when the pool is anything else."""
        def each(value: Any) -> list[int]:
            return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value] * rank)]

        size, kernels = [int(d) for d in x.shape[-rank:]], each(kernel)
        strides = kernels if stride in (None, [], ()) else each(stride)
        if any(p != 0 for p in each(padding)) or any(d != 1 for d in each(dilation)):
            return ()
        if kernels == size and strides == kernels:
            return tuple(range(-rank, 0))  # the whole input, one window (a 1x1 map included)
        # Else a dim the kernel spans whole; a size-1 dim with kernel 1 is the identity's.
        dims = tuple(i - rank for i in range(rank) if kernels[i] == size[i] and size[i] > 1)
        rest_identity = all(kernels[i] == 1 and strides[i] == 1 for i in range(rank) if i - rank not in dims)
        return dims if dims and rest_identity else ()

    def averaging(original: Any, rank: int) -> Any:
        def pool(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True, *rest: Any, **kwargs: Any) -> Any:
            dims = covered(x, kernel_size, stride, padding, rank)
            if not rest and kwargs.get("divisor_override") is None and dims:
                return x.mean(dim=dims, keepdim=True)
            return original(x, kernel_size, stride, padding, ceil_mode, count_include_pad, *rest, **kwargs)
        return pool

    def maximum(original: Any, rank: int) -> Any:
        def pool(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
                 ceil_mode: bool = False, return_indices: bool = False) -> Any:
            dims = covered(x, kernel_size, stride, padding, rank, dilation)
            if not return_indices and dims:
                return x.amax(dim=dims, keepdim=True)
            return original(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)
        return pool

    for name, make, rank in (("avg_pool2d", averaging, 2), ("avg_pool1d", averaging, 1),
                             ("max_pool2d", maximum, 2), ("max_pool1d", maximum, 1)):
        _replace(F, name, make(getattr(F, name), rank), loaded, undo)


MAX_FORCED_READS = 4096  # a branch read one way this often is a loop's condition (`while True: ... if done: break`)


def _force_branches(sites: tuple[tuple[str, int, bool], ...], undo: list[Callable[[], None]]) -> None:
    """A tensor's truth value asked on one of `sites` (file name, line) reads the site's value
    without looking at the tensor, until `undo` runs; elsewhere, the tensor's own.

    `if not mask.any(): continue` skips work that gives the same result when done (an expert no
    token was routed to); traced, the example's answer becomes a constant and the other side is
    missing from the graph. Read as the side that does the work, the branch stays out of the trace
    and the exported graph computes that side for every input: whether that is the same result is
    for the fix's check at other inputs to say."""
    import linecache
    import os

    import torch

    from onnxdoctor.worker.provenance import asking_frame, truth_at

    forced = {(name, int(line)): bool(value) for name, line, value in sites}
    asked: dict[tuple[str, int], int] = {}
    original = torch.Tensor.__bool__

    def truth(self: Any) -> bool:
        caller = asking_frame()  # the line asking (bool() and `if` add no Python frame)
        site = (os.path.basename(caller.f_code.co_filename), caller.f_lineno)
        value = forced.get(site)
        if value is None:
            return truth_at(original, self, caller)
        asked[site] = asked.get(site, 0) + 1
        if value and asked[site] == 1 and linecache.getline(caller.f_code.co_filename, caller.f_lineno).lstrip().startswith("while"):
            raise RuntimeError(f"the condition at {site[0]}:{site[1]} is a while loop's: read as True it never ends")
        if asked[site] > MAX_FORCED_READS:
            # A loop's condition read one way never ends (`while not converged:`): stop the trace
            # before it grows without bound.
            raise RuntimeError(f"the condition at {site[0]}:{site[1]} read as {value} was asked "
                               f"{MAX_FORCED_READS} times: a loop that never ends that way")
        return value

    torch.Tensor.__bool__ = truth  # type: ignore[method-assign]
    undo.append(lambda: setattr(torch.Tensor, "__bool__", original))
    # Under torch.export a value taken out of a tensor (`flag = mask.any().item()`) is a SymBool,
    # and `if flag:` asks it, not the tensor.
    original_symbolic = torch.SymBool.__bool__
    decided: dict[str, bool] = {}  # a symbolic condition read one way, by its expression

    def symbolic_truth(self: Any) -> bool:
        caller = asking_frame()
        value = forced.get((os.path.basename(caller.f_code.co_filename), caller.f_lineno))
        expression = str(getattr(getattr(self, "node", None), "expr", ""))
        if value is not None:
            if expression:
                decided[expression] = value
            return value
        # The same flag asked again further on (Longformer asks `if is_global_attn:` in several
        # places): the same answer.
        return decided[expression] if expression in decided else original_symbolic(self)

    torch.SymBool.__bool__ = symbolic_truth  # type: ignore[method-assign]
    undo.append(lambda: setattr(torch.SymBool, "__bool__", original_symbolic))


def _cond_as_where(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """torch.cond(pred, true_fn, false_fn, operands) computes both branches and picks each output
    with torch.where, until `undo` runs (the script's own name for torch.cond too).

    The same numbers wherever both branches run without error on the operands and return the
    same structure of same-shaped tensors (a branch that may not run for some inputs, or returns
    another shape, is for torch.cond): the exporter then meets plain ops instead of the branch
    subgraphs it fails on. Both branches' cost is paid on every call."""
    import torch
    import torch.utils._pytree as pytree

    def own(operands: tuple[Any, ...]) -> tuple[Any, ...]:
        # Each branch gets copies: one that writes its operand in place (an early-exit token set
        # to 1, pytorch#145300) must not change what the other branch reads.
        return tuple(pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, operands))

    def cond(pred: Any, true_fn: Any, false_fn: Any, operands: Any = (), *args: Any, **kwargs: Any) -> Any:
        operands = tuple(operands) if isinstance(operands, (list, tuple)) else (operands,)
        chosen, other = true_fn(*own(operands)), false_fn(*own(operands))
        return pytree.tree_map(lambda a, b: torch.where(pred, a, b), chosen, other)

    _replace(torch, "cond", cond, loaded, undo)


def _trace_scripted_helpers(undo: list[Callable[[], None]]) -> None:
    """A @torch.jit.script_if_tracing function runs as Python under the tracer, until `undo` runs.

    Its wrapper scripts the function the first time it is called while tracing, and the
    TorchScript exporter then meets the scripted graph (loops, lists, ops of unknown rank) that
    its symbolics cannot always write. Traced as Python instead, the calls are recorded op by op
    for the example's sizes (a loop is unrolled): the fix's check at other inputs says whether
    that holds."""
    import inspect

    from torch.jit import _trace

    original = _trace.script

    def script(obj: Any, *args: Any, **kwargs: Any) -> Any:
        return obj if inspect.isfunction(obj) else original(obj, *args, **kwargs)

    _trace.script = script  # type: ignore[assignment]
    undo.append(lambda: setattr(_trace, "script", original))


@contextlib.contextmanager
def _untraced() -> Iterator[None]:
    """The TorchScript tracer looking away: what runs in the block is not recorded, and a tensor
    it makes enters the graph as a constant where traced code uses it."""
    import torch

    state = torch._C._get_tracing_state()
    torch._C._set_tracing_state(None)
    try:
        yield
    finally:
        torch._C._set_tracing_state(state)


def _dense_sparse(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, sparse tensors are built and used dense: `torch.sparse_coo_tensor` sums
    its values into a zero tensor at their indices (duplicates add up, as coalescing does), the
    sparse products are ordinary ones, and `to_dense`/`coalesce`/`to_sparse` (and the other
    sparse layouts' conversions, `to_sparse_csr`, ...) of a dense tensor give it back. A sparse
    tensor the model holds (a buffer) is made dense with the tracer looking away: a constant of
    the graph; so are its indices and values, where the model reads those.

    ONNX has no sparse tensors, and neither exporter maps the sparse constructors (pytorch#112487:
    "Exporting the operator 'aten::sparse_coo_tensor' ... is not supported")."""
    import torch

    def dense(x: Any) -> Any:
        if not (isinstance(x, torch.Tensor) and x.layout is not torch.strided):
            return x
        with _untraced():
            return to_dense(x)

    def sparse_coo_tensor(indices: Any, values: Any, size: Any = None, *, dtype: Any = None, device: Any = None,
                          **_: Any) -> Any:
        indices, values = torch.as_tensor(indices), torch.as_tensor(values, dtype=dtype, device=device)
        if size is None:  # torch's default: one past the largest index of each sparse dim
            size = [int(m) + 1 for m in indices.amax(1)] + list(values.shape[1:])
        zeros = torch.zeros(tuple(size), dtype=values.dtype, device=values.device)
        return zeros.index_put(tuple(indices.unbind(0)), values, accumulate=True)

    def product(a: Any, b: Any) -> Any:
        return torch.matmul(dense(a), dense(b))

    def added_product(c: Any, a: Any, b: Any, *, beta: Any = 1, alpha: Any = 1) -> Any:
        return beta * dense(c) + alpha * torch.matmul(dense(a), dense(b))

    def part(name: str) -> Callable[..., Any]:
        # `row, col = trans._indices()` of a sparse matrix the model holds (HandMesh's
        # up-sampling, HandMesh#31): the tracer records the op on the sparse constant it cannot
        # write. Read with the tracer looking away, indices and values are dense constants.
        original = getattr(torch.Tensor, name)

        def read(self: Any, *args: Any, **kwargs: Any) -> Any:
            if self.layout is torch.strided:
                return original(self, *args, **kwargs)
            with _untraced():
                found = original(self, *args, **kwargs)
                return found.clone() if isinstance(found, torch.Tensor) else found
        return read

    to_dense, coalesce = torch.Tensor.to_dense, torch.Tensor.coalesce
    for owner, name, replacement in (
        # and its sizes (`dim_size=trans.size(0)`), which the tracer records on the constant too
        *((torch.Tensor, name, part(name)) for name in ("_indices", "_values", "indices", "values", "size")),
        (torch.Tensor, "shape", property(lambda self: torch.Tensor.size(self))),
        (torch, "sparse_coo_tensor", sparse_coo_tensor),
        (torch.sparse, "mm", product),
        (torch, "spmm", product),
        (torch.sparse, "addmm", added_product),
        (torch.sparse, "sum", lambda x, dim=None, dtype=None: dense(x).sum(dim, dtype=dtype) if dim is not None
         else dense(x).sum(dtype=dtype)),
        (torch.Tensor, "to_dense", lambda self, *a, **k: dense(self)),
        (torch.Tensor, "coalesce", lambda self: self if self.layout is torch.strided else coalesce(self)),
        (torch.Tensor, "to_sparse", lambda self, *a, **k: self),
        # A conversion to another sparse layout (CSR for a serving library) is the dense matrix
        # in the graph; parity compares PyTorch's sparse result densified.
        *((torch.Tensor, name, lambda self, *a, **k: self)
          for name in ("to_sparse_coo", "to_sparse_csr", "to_sparse_csc", "to_sparse_bsr", "to_sparse_bsc")),
    ):
        _replace(owner, name, replacement, loaded, undo)


def _unfolded_convs(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, F.conv2d and F.conv_transpose2d whose `groups` is a symbolic size (under
    torch.export) are computed as unfold (fold) and a grouped einsum (recipe.EagerExport.
    unfolded_convs); any other call is torch's own.

    StyleGAN2's modulated convolution folds the batch into the channels and convolves with
    groups=batch (rosinality/stylegan2-pytorch#322): with the batch declared dynamic the group
    count is symbolic, and ONNX's Conv takes it as a fixed attribute ("Unsupported attribute type:
    SymbolicTensor"). Unfolded, the groups are a tensor dim: the same sums in another order."""
    import torch
    import torch.nn.functional as F

    conv2d, conv_transpose2d = F.conv2d, F.conv_transpose2d

    def pair(value: Any) -> tuple[Any, Any]:
        if isinstance(value, (tuple, list)):
            return (value[0], value[-1])  # a 1-tuple holds both
        return (value, value)

    def unfolded_conv2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                        dilation: Any = 1, groups: Any = 1) -> Any:
        if not isinstance(groups, torch.SymInt) or isinstance(padding, str) or input.dim() != 4:
            return conv2d(input, weight, bias, stride, padding, dilation, groups)
        n, _, h, w = input.shape
        out_channels, per_group, kh, kw = weight.shape
        s, p, d = pair(stride), pair(padding), pair(dilation)
        columns = F.unfold(input, (kh, kw), dilation=d, padding=p, stride=s).view(n, groups, per_group * kh * kw, -1)
        out = torch.einsum("ngkl,gok->ngol", columns, weight.reshape(groups, out_channels // groups, per_group * kh * kw))
        height = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
        width = (w + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
        out = out.reshape(n, out_channels, height, width)
        return out if bias is None else out + bias.view(1, -1, 1, 1)

    def folded_conv_transpose2d(input: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
                                output_padding: Any = 0, groups: Any = 1, dilation: Any = 1) -> Any:
        if not isinstance(groups, torch.SymInt) or input.dim() != 4:
            return conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation)
        n, channels, h, w = input.shape
        _, per_group_out, kh, kw = weight.shape
        s, p, o, d = pair(stride), pair(padding), pair(output_padding), pair(dilation)
        per_group_in = channels // groups
        x = input.reshape(n, groups, per_group_in, h * w)
        columns = torch.einsum("ngcl,gck->ngkl", x, weight.reshape(groups, per_group_in, per_group_out * kh * kw))
        columns = columns.reshape(n, groups * per_group_out * kh * kw, h * w)
        # Folded onto the whole canvas the kernels cover, then cut to the padding and grown by
        # output_padding (which may pass the canvas's end: zeros there, as torch has).
        full = ((h - 1) * s[0] + d[0] * (kh - 1) + 1, (w - 1) * s[1] + d[1] * (kw - 1) + 1)
        out = F.fold(columns, full, (kh, kw), dilation=d, stride=s)
        out = F.pad(out, (0, max(o[1] - p[1], 0), 0, max(o[0] - p[0], 0)))
        height, width = full[0] - 2 * p[0] + o[0], full[1] - 2 * p[1] + o[1]
        out = out[:, :, p[0]:p[0] + height, p[1]:p[1] + width]
        return out if bias is None else out + bias.view(1, -1, 1, 1)

    _replace(F, "conv2d", unfolded_conv2d, loaded, undo)
    _replace(F, "conv_transpose2d", folded_conv_transpose2d, loaded, undo)


def _dense_attention(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, flex_attention is dense attention and create_block_mask keeps only its
    mask function (recipe.EagerExport.dense_attention), in torch's module and wherever the model's
    code bound the names themselves (`from ... import flex_attention`).

    Neither exporter converts the flex_attention operator, and building a block mask sorts with
    `stable=True`, which the dynamo exporter has no function for (pytorch/pytorch#140400). Dense,
    the scores are one matrix: score_mod and mask_mod are applied to all of it at once (vmapped
    over batch, head, query and key index, as torch's own reference implementation does), a
    masked score is -inf, and a row with every key masked gives zeros, as flex_attention does."""
    import math

    import torch
    from torch.nn.attention import flex_attention as module

    vmapped = module._vmap_for_bhqkv

    class MaskOnly:
        """What create_block_mask gives while exporting: the mask function, no blocks."""

        def __init__(self, mask_mod: Callable[..., Any]) -> None:
            self.mask_mod = mask_mod

    def create_block_mask(mask_mod: Callable[..., Any], *args: Any, **kwargs: Any) -> MaskOnly:
        return MaskOnly(mask_mod)

    def dense(query: Any, key: Any, value: Any, score_mod: Any = None, block_mask: Any = None, scale: Any = None,
              enable_gqa: bool = False, return_lse: bool = False, kernel_options: Any = None, **_: Any) -> Any:
        scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
        groups = query.size(-3) // key.size(-3)
        if groups > 1:
            key, value = key.repeat_interleave(groups, -3), value.repeat_interleave(groups, -3)
        working = torch.float64 if query.dtype == torch.float64 else torch.float32
        scores = (query.to(working) @ key.to(working).transpose(-2, -1)) * scale
        b, h, m, n = (torch.arange(size, device=scores.device) for size in scores.shape)
        if score_mod is not None:
            scores = vmapped(score_mod, prefix=(0,))(scores, b, h, m, n)
        if block_mask is not None and getattr(block_mask, "mask_mod", None) is not None:
            keep = vmapped(block_mask.mask_mod, prefix=())(b, h, m, n)
            scores = scores.masked_fill(~keep, float("-inf"))
        seen = (scores > float("-inf")).any(-1, keepdim=True)
        weights = torch.where(seen, torch.softmax(scores, -1), torch.zeros_like(scores))
        out = weights.to(query.dtype) @ value
        if return_lse:
            return out, torch.logsumexp(scores, -1)
        return out

    _replace(module, "flex_attention", dense, loaded, undo)
    _replace(module, "create_block_mask", create_block_mask, loaded, undo)


def _traced_data(undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, what forward() does through `.data` is traced (recipe.EagerExport.
    traced_data): reading `x.data` is `x.detach()`, and `x.data = y` makes `x` stand for `y` in
    the graph from then on (the tracer's value for `x` becomes `y`'s).

    The tracer records neither: BinaryNet's `input.data = input.data.sign()` leaves the graph
    computing with the input before its sign (pytorch#51033), and a value read through `.data`
    becomes a constant. Outside a trace, `.data` is untouched."""
    import torch

    data = torch._C.TensorBase.__dict__["data"]

    def read(self: Any) -> Any:
        if torch._C._get_tracing_state() is None:
            return data.__get__(self)
        return self.detach()

    def write(self: Any, value: Any) -> None:
        traced = None
        if torch._C._get_tracing_state() is not None and isinstance(value, torch.Tensor):
            with contextlib.suppress(RuntimeError):  # a value the tracer has not seen: a constant
                traced = torch._C._get_value_trace(value)
        data.__set__(self, value)
        if traced is not None:
            torch._C._set_value_trace(self, traced)

    _replace(torch.Tensor, "data", property(read, write), None, undo)


def _symbolic_sizes(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, sizes read off a shape stay symbolic when forward() puts them in a tensor.

    Deformable-DETR-style code collects each level's `(h, w)` from `x.shape` and calls
    `torch.as_tensor(spatial_shapes)`; torch.export builds that tensor from the example's numbers
    and then reads it back (`for H_, W_ in spatial_shapes`, `split([H_ * W_ ...])`), so the split
    sizes, reshapes and reference points are the example's (GroundingDINO#258). Here such a list
    is stacked from the sizes (`scalar_tensor` of each, which torch.export records as computed
    from the input), and the tensor remembers the sizes it was built from: iterating it, indexing
    a row or `tolist()` hands back the same symbolic sizes rather than data-dependent values.
    `torch.linspace` takes its count as a plain int (torch.export fixes it to the example's);
    with a symbolic count it is `start + arange(n) * step`, which keeps it."""
    import weakref

    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    built: dict[int, tuple[Any, Any]] = {}
    as_tensor, tensor, linspace = torch.as_tensor, torch.tensor, torch.linspace
    iterate, index = torch.Tensor.__iter__, torch.Tensor.__getitem__
    # torch.export's tensors are FakeTensors, whose own tolist() reads every element.
    tolist, fake_tolist = torch.Tensor.tolist, FakeTensor.tolist

    def leaves(data: Any) -> list[Any]:
        if isinstance(data, (list, tuple)):
            return [x for d in data for x in leaves(d)]
        return [data]

    def holds_sizes(data: Any) -> bool:
        values = leaves(data)
        return (isinstance(data, (list, tuple)) and bool(values)
                and all(isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) for v in values)
                and any(isinstance(v, torch.SymInt) for v in values))

    def remembered(t: Any, data: Any) -> Any:
        built[id(t)] = (weakref.ref(t), data)
        return t

    def sizes_of(t: Any) -> Any:
        entry = built.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def stacked(data: Any, dtype: Any, device: Any) -> Any:
        if isinstance(data, (list, tuple)):
            return remembered(torch.stack([stacked(d, dtype, device) for d in data]), data)
        return torch.scalar_tensor(data, dtype=dtype, device=device)

    def building(original: Callable[..., Any]) -> Callable[..., Any]:
        def build(data: Any, *args: Any, dtype: Any = None, device: Any = None, **kwargs: Any) -> Any:
            if args or kwargs.get("requires_grad") or not holds_sizes(data):
                return original(data, *args, dtype=dtype, device=device, **kwargs)
            try:
                return stacked(data, dtype or torch.int64, device)
            except RuntimeError:  # ragged: not a tensor either way
                return original(data, *args, dtype=dtype, device=device, **kwargs)
        return build

    def iter_sizes(self: Any) -> Any:
        data = sizes_of(self)
        if data is None:
            return iterate(self)
        return iter([index(self, i) if isinstance(d, (list, tuple)) else d for i, d in enumerate(data)])

    def index_sizes(self: Any, key: Any) -> Any:
        data = sizes_of(self)
        result = index(self, key)
        if data is not None and isinstance(key, int) and isinstance(data[key], (list, tuple)):
            remembered(result, data[key])
        return result

    def listed(data: Any) -> Any:
        return [listed(d) for d in data] if isinstance(data, (list, tuple)) else data

    def tolist_sizes(self: Any) -> Any:
        data = sizes_of(self)
        if data is not None:
            return listed(data)
        return (fake_tolist if isinstance(self, FakeTensor) else tolist)(self)

    def spaced(start: Any, end: Any, steps: Any, *args: Any, dtype: Any = None, device: Any = None,
               **kwargs: Any) -> Any:
        symbolic = (torch.SymInt, torch.SymFloat)
        integral = dtype is not None and not (dtype.is_floating_point or dtype.is_complex)
        # torch's integer linspace rounds its own way, and out=/requires_grad= are torch's to honour.
        if args or kwargs or integral or not any(isinstance(v, symbolic) for v in (start, end, steps)):
            return linspace(start, end, steps, *args, dtype=dtype, device=device, **kwargs)
        dtype = dtype or torch.get_default_dtype()
        work = torch.float64 if dtype == torch.float64 else torch.float32
        step = (end - start) / torch.sym_max(steps - 1, 1)
        return (start + torch.arange(steps, dtype=work, device=device) * step).to(dtype)

    for owner, name, replacement in (
        (torch, "as_tensor", building(as_tensor)),
        (torch, "tensor", building(tensor)),
        (torch, "linspace", spaced),
        (torch.Tensor, "__iter__", iter_sizes),
        (torch.Tensor, "__getitem__", index_sizes),
        (torch.Tensor, "tolist", tolist_sizes),
        (FakeTensor, "tolist", tolist_sizes),
    ):
        _replace(owner, name, replacement, loaded, undo)


# More positions than this and the unrolled loop would be the graph's bulk: left to fail as it did.
MAX_CANDIDATES = 1024


def _every_candidate(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """Until `undo` runs, a loop over the rows of a `nonzero()` result visits every position of
    the tensor nonzero() was asked about, in order, each row a constant whose `int()` is known.

    A mixture of experts visits only the experts some token chose (`for i in
    mask.sum((-1, -2)).nonzero():`, transformers#38518): torch.export cannot loop over a count
    known only from the data, and the tracer unrolls the example's count. Visiting every expert
    gives the same sum where the body adds nothing for a position nonzero() would have skipped
    (an expert no token chose selects no rows); the check at other inputs tells where it does."""
    import itertools
    import weakref

    import torch

    asked: dict[int, tuple[Any, tuple[int, ...]]] = {}  # id of a nonzero() result -> (ref, input shape)
    rows: dict[int, tuple[Any, tuple[int, ...]]] = {}  # id of a visited row -> (ref, its position)

    def static_shape(x: Any) -> tuple[int, ...] | None:
        if not all(isinstance(size, int) for size in x.shape):  # a symbolic size: count unknown here
            return None
        shape = tuple(x.shape)
        return shape if 0 < len(shape) and math.prod(shape) <= MAX_CANDIDATES else None

    def tracked(original: Any) -> Any:
        def nonzero(x: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(x, *args, **kwargs)
            shape = static_shape(x) if isinstance(result, torch.Tensor) else None
            if shape is not None:
                asked[id(result)] = (weakref.ref(result), shape)
            return result
        return nonzero

    def positions(x: Any) -> list[tuple[int, ...]] | None:
        entry = asked.get(id(x))
        if entry is None or entry[0]() is not x:
            return None
        return list(itertools.product(*(range(size) for size in entry[1])))

    iterate, index, as_int, to_list = (torch.Tensor.__iter__, torch.Tensor.__index__, torch.Tensor.__int__,
                                       torch.Tensor.tolist)

    def every_row(self: Any) -> Any:
        every = positions(self)
        if every is None:
            return iterate(self)
        visited = []
        for position in every:
            row = torch.tensor(position, dtype=self.dtype)
            rows[id(row)] = (weakref.ref(row), position)
            visited.append(row)
        return iter(visited)

    def known(original: Any) -> Any:
        def value(self: Any) -> Any:
            entry = rows.get(id(self))
            if entry is not None and entry[0]() is self and len(entry[1]) == 1:
                return entry[1][0]
            return original(self)
        return value

    def listed(self: Any) -> Any:
        every = positions(self)
        return [list(p) for p in every] if every is not None else to_list(self)

    for owner, name, replacement in (
        (torch.Tensor, "nonzero", tracked(torch.Tensor.nonzero)),
        (torch, "nonzero", tracked(torch.nonzero)),
        (torch.Tensor, "__iter__", every_row),
        (torch.Tensor, "__index__", known(index)),
        (torch.Tensor, "__int__", known(as_int)),
        (torch.Tensor, "tolist", listed),
    ):
        _replace(owner, name, replacement, loaded, undo)


# torch's random functions and in-place samplers that take a `generator=` (torch/_torch_docs.py).
RANDOM_FUNCTIONS = ("randn", "rand", "randint", "randperm", "normal", "bernoulli", "multinomial", "poisson",
                    "randn_like", "rand_like", "randint_like")
RANDOM_METHODS = ("normal_", "uniform_", "random_", "exponential_", "bernoulli_", "cauchy_", "log_normal_",
                  "geometric_", "bernoulli", "multinomial")


def _seeded_noise(loaded: LoadedModel, mode: str, undo: list[Callable[[], None]]) -> None:
    """Random draws given a `generator=` are made, until `undo` runs, as `mode` says: "constant",
    by PyTorch with the TorchScript tracer looking away, so the generator's numbers are a
    constant of the graph; "unseeded", without the generator, so the graph keeps its random op.

    A `torch.Generator` is an object no exporter can write (pytorch#136860: "Unsupported
    prim::Constant kind: 'ival'"). A generator seeded in forward() gives the same numbers every
    call at a given size, and the constant is those numbers; one seeded once and drawn from on
    every call gives new numbers each time, which only a random op reproduces (in distribution).
    The fix's check at other inputs tells the two apart."""
    import torch

    def drawing(original: Any, in_place: bool) -> Any:
        def draw(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("generator") is None:
                return original(*args, **kwargs)
            if mode == "unseeded":
                kwargs.pop("generator")
                return original(*args, **kwargs)
            with _untraced(), torch.no_grad():
                if in_place:  # drawn into a fresh tensor, then written in traced
                    noise = original(torch.empty_like(args[0]), *args[1:], **kwargs)
                else:
                    noise = original(*args, **kwargs)
            # `zero_().add_()` rather than `copy_()`, which the TorchScript exporter writes only
            # into a view: the in-place pass makes both plain data flow.
            return args[0].zero_().add_(noise) if in_place else noise
        return draw

    for owner, names in ((torch, RANDOM_FUNCTIONS), (torch.Tensor, RANDOM_METHODS)):
        for name in names:
            original = getattr(owner, name, None)
            if original is not None:
                _replace(owner, name, drawing(original, owner is torch.Tensor and name.endswith("_")), loaded, undo)


def _passing_tensors(from_numpy: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """torch.from_numpy that passes a tensor on as it is (the array a patch kept a tensor)."""
    import torch

    def passed(data: Any) -> Any:
        return data if isinstance(data, torch.Tensor) else from_numpy(data)
    return passed


def _keep_tensor_outputs(loaded: LoadedModel, undo: list[Callable[[], None]]) -> None:
    """`Tensor.numpy()` and `Tensor.data` return the tensor detached until `undo` runs.

    A forward() that ends in `flow.permute(0, 2, 3, 1).cpu().numpy() * scale` hands its results
    over as numpy arrays, which no exporter can take as outputs; the same arithmetic on the
    tensor is the graph's. Numpy functions applied to such an array afterwards convert it for
    real (frozen by the tracer): the fix's check at other inputs catches that."""
    import torch

    data = torch._C.TensorBase.data  # the C descriptor: torch.Tensor itself defines none

    def numpy(self: Any, *, force: bool = False) -> Any:
        return self.detach()

    _replace(torch.Tensor, "numpy", numpy, None, undo)
    # The caller's `torch.from_numpy(model(x))` then receives the tensor: passed on as it is.
    _replace(torch, "from_numpy", _passing_tensors(torch.from_numpy), loaded, undo)
    # `.cpu().data.numpy()`: the tracer records `.data` as the example's constant, without a
    # warning; `detach()` is the same value for a forward pass and stays data flow.
    _replace(torch.Tensor, "data", property(lambda self: self.detach(), data.__set__), None, undo)


def _keep_tensor_values(undo: list[Callable[[], None]]) -> None:
    """`Tensor.item()` returns the 0-d tensor, `Tensor.tolist()` the tensor (the model's calls while
    tracing), `torch.tensor()` and `torch.as_tensor()` of tensors (or of lists holding tensors) stack
    them, `int(t)` gives a number `torch.arange` reads as `t`, and a NumPy array of a list holding
    tensors stays a tensor (torch.from_numpy passes it on), until `undo` runs.

    The tracer records neither a Python number nor what `torch.tensor` builds from one: a value
    that goes out of a tensor and back (`torch.tensor(logits.argmax().item())`, `torch.arange(
    n.item())`, a list of `.item()` tags) is exported as the example's constant (OD210). Kept a
    tensor, the same code stays data flow. A branch on such a value (`if t.item() > 0:`) still
    asks for a bool and stays frozen: the fix's check at other inputs catches it."""
    import torch

    original_item = torch.Tensor.item
    original_tensor = torch.tensor

    def item(self: Any) -> Any:
        # Not `numel() != 1`: under the tracer that is a tensor, and asking it is a frozen bool.
        try:
            return self.reshape(())
        except RuntimeError:
            return original_item(self)  # more than one element: the usual error

    def holds_tensor(data: Any) -> bool:
        if isinstance(data, torch.Tensor):
            return True
        return isinstance(data, (list, tuple)) and any(holds_tensor(d) for d in data)

    def tensor(data: Any, *args: Any, dtype: Any = None, device: Any = None, **kwargs: Any) -> Any:
        if args or not holds_tensor(data):
            return original_tensor(data, *args, dtype=dtype, device=device, **kwargs)
        if isinstance(data, torch.Tensor):
            built = data.clone()
        else:
            parts = [tensor(d) if holds_tensor(d) else original_tensor(d) for d in data]
            common = parts[0].dtype
            for part in parts[1:]:
                common = torch.promote_types(common, part.dtype)
            built = torch.stack([p.to(common) for p in parts])
        return built.to(dtype=dtype, device=device) if dtype is not None or device is not None else built

    # int(t) must return an exact int (Python drops a subclass): the conversion is remembered by
    # its value, and torch.arange given that number takes the tensor instead
    # (`torch.arange(int(lengths.max()))`, a sequence mask's length). A number that only equals one
    # by chance would make a size follow the input where PyTorch's does not: the fix's check at the
    # other inputs sees that.
    original_int = torch.Tensor.__int__
    original_arange = torch.arange
    converted: list[tuple[int, Any]] = []

    def to_int(self: Any) -> int:
        number = original_int(self)
        if self.numel() == 1:
            converted.append((number, self.reshape(())))
            del converted[:-16]
        return number

    def as_tensor(value: Any) -> Any:
        if type(value) is int:
            for index in range(len(converted) - 1, -1, -1):
                if converted[index][0] == value:
                    return converted.pop(index)[1]
        return value

    def arange(*args: Any, **kwargs: Any) -> Any:
        args = tuple(as_tensor(a) for a in args)
        kwargs = {k: as_tensor(v) if k in ("start", "end", "step") else v for k, v in kwargs.items()}
        return original_arange(*args, **kwargs)

    # A NumPy round trip of sizes (`torch.from_numpy(np.array([x.shape[0], top_k]))`, XFeat's
    # top-k count): under the tracer sizes are 0-d tensors, and a list holding them stays a
    # tensor instead of becoming an array of numbers. A bare tensor given to np.array is left to
    # NumPy: that is post-processing, not a size.
    import numpy

    original_array, original_asarray = numpy.array, numpy.asarray
    original_from_numpy = torch.from_numpy

    def of_sizes(original: Callable[..., Any]) -> Callable[..., Any]:
        def build(data: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(data, (list, tuple)) and holds_tensor(data) and not args and not kwargs.get("dtype"):
                return tensor(data)
            return original(data, *args, **kwargs)
        return build

    array, asarray = of_sizes(original_array), of_sizes(original_asarray)

    from_numpy = _passing_tensors(original_from_numpy)

    # `top_x.tolist()` used to index (`hidden[top_x_list]`, Mixtral's MoE before transformers
    # #29858): a tensor indexes as its list does, and the tracer records it as data. Only the
    # model's own calls while tracing: the exporter's symbolics read constants' lists too.
    original_tolist = torch.Tensor.tolist
    inside_torch = str(Path(torch.__file__).parent) + os.sep

    def tolist(self: Any) -> Any:
        if torch.jit.is_tracing() and not sys._getframe(1).f_code.co_filename.startswith(inside_torch):
            return self
        return original_tolist(self)

    # torch.as_tensor of a list of kept values (pytorch-crf's Viterbi tags, `.item()` of each)
    # stacks them as torch.tensor does; anything else is its own.
    original_as_tensor = torch.as_tensor

    def stacked_as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Any:
        if isinstance(data, (list, tuple)) and holds_tensor(data):
            return tensor(data, dtype=dtype, device=device)
        return original_as_tensor(data, dtype=dtype, device=device)

    # A scale kept a tensor reaches fake_quantize_per_tensor_affine, whose number overload would take
    # it out again (pytorch-quantization's `amax.item() / bound`): its tensor overload takes both
    # qparams as tensors, and the exporter writes them as data.
    original_fake_quantize = torch.fake_quantize_per_tensor_affine

    def fake_quantize(input: Any, scale: Any, zero_point: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(scale, torch.Tensor) and not isinstance(zero_point, torch.Tensor):
            scale = scale.to(torch.float32).reshape(())
            zero_point = torch.full((), int(zero_point), dtype=torch.int32)
        return original_fake_quantize(input, scale, zero_point, *args, **kwargs)

    torch.Tensor.item = item  # type: ignore[method-assign]
    torch.tensor = tensor  # type: ignore[assignment]
    torch.as_tensor = stacked_as_tensor  # type: ignore[assignment]
    torch.Tensor.__int__ = to_int  # type: ignore[method-assign]
    torch.Tensor.tolist = tolist  # type: ignore[method-assign]
    torch.fake_quantize_per_tensor_affine = fake_quantize
    torch.arange = arange  # type: ignore[assignment]
    numpy.array, numpy.asarray = array, asarray
    torch.from_numpy = from_numpy

    def restore() -> None:
        torch.Tensor.item = original_item  # type: ignore[method-assign]
        torch.Tensor.tolist = original_tolist  # type: ignore[method-assign]
        torch.fake_quantize_per_tensor_affine = original_fake_quantize
        torch.tensor = original_tensor  # type: ignore[assignment]
        torch.as_tensor = original_as_tensor  # type: ignore[assignment]
        torch.Tensor.__int__ = original_int  # type: ignore[method-assign]
        torch.arange = original_arange  # type: ignore[assignment]
        numpy.array, numpy.asarray = original_array, original_asarray
        torch.from_numpy = original_from_numpy

    undo.append(restore)


@contextlib.contextmanager
def watching_export_branch(loaded: LoadedModel) -> Iterator[dict[str, bool]]:
    """For the duration of an export: whether forward() asked torch.onnx.is_in_onnx_export() and
    was told true (it has a branch for the export only; the eager_branch fix exports the other)."""
    import torch

    seen = {"export_branch": False}
    original = torch.onnx.is_in_onnx_export

    def watched() -> bool:
        answer = original()
        seen["export_branch"] = seen["export_branch"] or answer
        return answer

    undo: list[Callable[[], None]] = []
    try:
        _replace_in_export_check(loaded, watched, undo)
        yield seen
    finally:
        for step in reversed(undo):
            step()


def _replace_in_export_check(loaded: LoadedModel, replacement: Callable[[], bool],
                             undo: list[Callable[[], None]]) -> None:
    """torch.onnx.is_in_onnx_export replaced (undone by `undo`), and the script's own name for it."""
    import torch

    _replace(torch.onnx, "is_in_onnx_export", replacement, loaded, undo)


_ABSENT = object()


def _replace(owner: Any, name: str, replacement: Any, loaded: LoadedModel | None,
             undo: list[Callable[[], None]]) -> None:
    """`owner.name` replaced until `undo` runs, and every name the model's code binds to the same
    object (`from torch.nn.functional import avg_pool2d` holds its own reference), in the module of
    the model's forward() and of each submodule's (facts.forward_scopes).

    What `owner` held itself is put back as it was; a name it only inherited (torch.Tensor's
    `__getitem__` and `data` are TensorBase's) is removed again, so two patches of one name undo
    in turn."""
    original = getattr(owner, name)
    own = vars(owner).get(name, _ABSENT)
    setattr(owner, name, replacement)
    undo.append(lambda: delattr(owner, name) if own is _ABSENT else setattr(owner, name, own))
    if loaded is None:
        return
    for scope in forward_scopes(loaded.model):
        for key, value in list(scope.items()):
            if value is original:
                scope[key] = replacement
                undo.append(lambda scope=scope, key=key: scope.__setitem__(key, original))
    # A class of the model's that keeps the function as an attribute (`func_conv = F.conv2d` in
    # KernelWarehouse's class body, called as self.func_conv(...)): a staticmethod there, as a
    # builtin is not bound to the instance either.
    modules = loaded.model.modules() if hasattr(loaded.model, "modules") else ()
    for cls in {c for m in modules for c in type(m).__mro__ if c.__module__.split(".")[0] != "torch"}:
        for key, value in list(vars(cls).items()):
            held = value.__func__ if isinstance(value, staticmethod) else value
            if held is original:
                setattr(cls, key, staticmethod(replacement))
                undo.append(lambda cls=cls, key=key, value=value: setattr(cls, key, value))


def quantize_file(path: str | Path, step: QuantizeOnnx) -> Path:
    """Quantize the float model at `path` with ONNX Runtime's dynamic quantization; return the
    quantized file (beside it). A "grid" step leaves the file as it is: its export already rounds
    to the PyTorch model's grids."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = Path(path)
    if step.method == "grid":
        return source
    quantized = source.with_name(source.stem + "-quantized.onnx")
    quantize_dynamic(str(source), str(quantized), weight_type=getattr(QuantType, step.weight_type),
                     reduce_range=step.reduce_range, op_types_to_quantize=list(step.op_types) or None)
    return quantized


def quantization_atol(reference: list[Any], tolerance: float) -> float:
    """The absolute tolerance for comparing two quantized models: a fraction of the largest
    |output| (each model rounds its activations on its own)."""
    import torch

    largest = max((float(t.detach().abs().max()) for t in reference
                   if isinstance(t, torch.Tensor) and t.numel() and t.is_floating_point()), default=1.0)
    return tolerance * max(largest, 1e-6)


# How much further from the float model the quantized ONNX model may be than the quantized
# PyTorch model is: each rounds its activations on its own (ONNX Runtime's dynamic quantization
# uses 8-bit unsigned activations over the batch's range, fbgemm 7-bit ones), so their errors
# differ in detail but not in size.
FLOAT_ANCHOR_FACTOR = 2.0


def float_anchored(loaded: LoadedModel, torch_outputs: list[Any], ort_outputs: list[Any]) -> dict[str, Any] | None:
    """Both quantized models measured against the float model they were made from.

    The quantized ONNX model passes when its largest error against the float model (rebuilt from
    the dequantized weights) is at most FLOAT_ANCHOR_FACTOR times the quantized PyTorch model's
    own: as faithful a quantization, where a fixed fraction of the output is too tight for small
    outputs. None when the float model cannot be rebuilt or run.
    """
    import torch

    from onnxdoctor.worker.facts import tensor_leaves
    from onnxdoctor.worker.parity import compare_outputs

    try:
        with torch.no_grad():
            reference = tensor_leaves(float_model_of(loaded.model)(*loaded.args, **(loaded.kwargs or {})))
    except Exception:  # a model float_model_of cannot rebuild: the fixed tolerance alone decides
        return None
    if len(reference) != len(torch_outputs) or len(reference) != len(ort_outputs):
        return None

    def error(outputs: list[Any]) -> float:
        report = compare_outputs(reference, outputs, 0.0, 0.0)
        # Another count, shape or dtype is no quantization error: never within the factor.
        return float("inf") if report["code"] in ("OD602", "OD603", "OD604") else float(report["max_abs_diff"])

    pytorch, runtime = error(torch_outputs), error(ort_outputs)
    return {"pytorch_error": pytorch, "runtime_error": runtime,
            "passed": runtime <= FLOAT_ANCHOR_FACTOR * pytorch + 1e-6}


# Names of the methods models compute their results with when forward() is a training step or a
# stub: WaveGlow's infer(), Tacotron 2's inference(), a detector's predict().
_ENTRY_METHODS = re.compile(r"^(?:infer\w*|inference\w*|predict\w*|generate\w*|synthesi[sz]e\w*|sample\w*|"
                            r"transcribe\w*|detect\w*|forward_\w+)$")


def entry_methods(loaded: LoadedModel) -> list[str]:
    """The model's own methods (its class's, not torch's) named like an inference entry point that
    take the example inputs, in definition order (at most 3)."""
    import inspect

    model = loaded.model
    found: list[str] = []
    for cls in type(model).__mro__:
        if cls.__module__.split(".")[0] == "torch":
            break
        for name, value in vars(cls).items():
            if name in found or not callable(value) or not _ENTRY_METHODS.match(name):
                continue
            try:
                inspect.signature(getattr(model, name)).bind(*loaded.args, **(loaded.kwargs or {}))
            except (TypeError, ValueError):
                continue
            found.append(name)
    return found[:3]


def working_entry_methods(loaded: LoadedModel) -> list[str]:
    """entry_methods() that run at the example and return a tensor (where forward() itself raised:
    a training step that unpacks targets, while inference() takes the image), at most 2."""
    import inspect

    import torch

    try:
        called = set(re.findall(r"\.(\w+)\(", inspect.getsource(type(loaded.model).forward)))
    except (OSError, TypeError):
        called = set()
    found: list[str] = []
    for name in entry_methods(loaded):
        # A method forward() calls is a part of it (timm's forward_features), not the model's
        # inference path; a sampler or generator may loop a thousand steps: neither is called here.
        if name in called or name.startswith(("sample", "generate")):
            continue
        with _probing(loaded) as model, contextlib.suppress(Exception), torch.no_grad():
            if tensor_leaves(getattr(model, name)(*loaded.args, **(loaded.kwargs or {}))):
                found.append(name)
        if len(found) == 2:
            break
    return found


class _KeyProbe(dict):
    """A dict that answers each key forward() asks for first by the next example tensor."""

    def __init__(self, tensors: list[Any]) -> None:
        super().__init__()
        self.left = list(tensors)
        self.order: list[Any] = []

    def __missing__(self, key: Any) -> Any:
        if not self.left:
            raise KeyError(key)
        self[key] = self.left.pop(0)
        self.order.append(key)
        return self[key]


def dict_input_keys(loaded: LoadedModel) -> dict[str, Any] | None:
    """Where forward() raised at the example's tensors: the string keys it reads them by when given
    them in one dict (lanedet's `batch['img']`), or in a list of one dict per image (detectron2's
    batched inputs): {"keys": [...], "listed": bool}, each tensor read once and every one read."""
    import torch

    args = list(loaded.args)
    if loaded.kwargs or not args or not all(isinstance(a, torch.Tensor) for a in args):
        return None
    for listed in (False, True):
        probe = _KeyProbe(args)
        with _probing(loaded) as model, contextlib.suppress(Exception), torch.no_grad():
            out = model([probe] if listed else probe)
            if not probe.left and all(_parameter_name(k) for k in probe.order) and tensor_leaves(out):
                return {"keys": probe.order, "listed": listed}
    return None


def _parameter_name(key: Any) -> bool:
    """Whether a key can name a parameter of the generated wrapper's forward()."""
    import keyword

    return isinstance(key, str) and key.isidentifier() and not keyword.iskeyword(key) and key != "self"


# Wrappers that hold the model as `module` and whose forward() adds nothing at inference (a
# replica scatter, a gradient hook, a running average's copy).
_WRAPPERS = ("DataParallel", "DistributedDataParallel", "AveragedModel")


def wrapped_module(model: Any) -> list[str]:
    """["module"] for a wrapper (DataParallel, DistributedDataParallel, AveragedModel) holding the
    model as `module`, else []: the module to export in its place."""
    import torch

    held = getattr(model, "module", None)
    return ["module"] if type(model).__name__ in _WRAPPERS and isinstance(held, torch.nn.Module) else []


def submodules_taking_inputs(loaded: LoadedModel) -> list[str]:
    """The model's direct submodules whose own forward() takes the example inputs and returns a
    tensor (at most 2, in definition order): what to export where the model defines no forward()
    (a LightningModule keeping its network in self.model)."""
    import torch

    from onnxdoctor.worker.facts import tensor_leaves

    found: list[str] = []
    for name, child in list(loaded.model.named_children())[:12]:
        result = None
        with contextlib.suppress(Exception), torch.no_grad():  # one that refuses the inputs: the next
            result = child(*loaded.args, **(loaded.kwargs or {}))
        if result is not None and tensor_leaves(result):
            found.append(name)
        if len(found) == 2:
            break
    return found


def forward_parameters(loaded: LoadedModel) -> list[str]:
    """forward()'s argument names in order (none for `*args`/`**kwargs`; [] when unreadable)."""
    import inspect

    try:
        parameters = inspect.signature(loaded.model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def variadic_inputs(loaded: LoadedModel) -> dict[str, Any] | None:
    """How the example reaches a forward() that takes `*args`, `**kwargs` or keyword-only
    arguments: None for any other forward(). `names` holds one identifier per example input, for a
    wrapper whose forward() spells them out (fixes/named_inputs.py): forward()'s own names for
    positional inputs, else the script's input_names, else `argN`; keyword inputs by their keys."""
    import inspect
    import keyword

    try:
        parameters = list(inspect.signature(loaded.model.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    variadic = [f"*{p.name}" for p in parameters if p.kind is p.VAR_POSITIONAL]
    variadic += [f"**{p.name}" for p in parameters if p.kind is p.VAR_KEYWORD]
    variadic += [p.name for p in parameters if p.kind is p.KEYWORD_ONLY]
    if not variadic:
        return None
    own = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    given = [str(n) for n in loaded.settings.get("input_names") or ()]
    keys = [str(k) for k in (loaded.kwargs or {})]
    if len(loaded.args) <= len(own) and all(k in own for k in keys):
        return None  # the example reaches only named parameters (a transformers forward's **kwargs unused)
    taken: set[str] = set()

    def identifier(name: str) -> str:
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "input"
        if name[0].isdigit() or keyword.iskeyword(name) or name == "self":
            name = f"input_{name}"
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    names = [identifier(own[i] if i < len(own) else given[i] if i < len(given) else f"arg{i}")
             for i in range(len(loaded.args))]
    names += [identifier(key) for key in keys]
    return {"variadic": variadic, "positional": len(loaded.args), "keywords": keys, "names": names}


def widened_for_export(loaded: LoadedModel, dynamic_shapes: Any) -> tuple[Any, ...]:
    """The example arguments doubled along every dim declared dynamic whose size is 1.

    torch.export cannot tell a size-1 dim from "any size" and specialises it ("Constraints
    violated"), so a declared batch dim of an example of one never stays dynamic. The doubled
    example (the same rows twice) is only what the export traces; parity still runs at the
    script's example."""
    import torch

    if not isinstance(dynamic_shapes, dict):
        return loaded.args
    params = forward_parameters(loaded)
    args = list(loaded.args)
    for i, arg in enumerate(args):
        spec = dynamic_shapes.get(params[i]) if i < len(params) else None
        if not isinstance(arg, torch.Tensor) or not isinstance(spec, dict):
            continue
        for dim, value in spec.items():
            if value is not None and int(dim) < arg.dim() and arg.shape[int(dim)] == 1:
                arg = torch.cat([arg, arg], dim=int(dim))
        args[i] = arg
    return tuple(args)


def one_sample(loaded: LoadedModel, step: PerSample, args: tuple[Any, ...],
               export_kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The export's arguments for recipe.PerSample: the batched arguments cut to their first row,
    and their dim 0 taken out of the declared dynamic dims (one sample is the whole batch of the
    export; a dim of one declared dynamic would be specialised anyway).

    Raises:
        ValueError: an argument up to the last batched one is not a tensor (the graph's inputs
            would not be forward()'s positions), or a batched one has no dim 0.
    """
    import torch

    if not step.inputs:
        raise ValueError("no batched argument to cut to one sample")
    cut = list(args)
    for i in range(max(step.inputs) + 1):
        if i >= len(cut) or not isinstance(cut[i], torch.Tensor):
            raise ValueError(f"argument {i} of forward() is not a tensor: the graph's inputs are not its positions")
        if i in step.inputs:
            if cut[i].dim() == 0:
                raise ValueError(f"argument {i} of forward() has no batch dim")
            cut[i] = cut[i][:1]
    kwargs = dict(export_kwargs)
    params = forward_parameters(loaded)
    shapes = kwargs.get("dynamic_shapes")
    if isinstance(shapes, dict):
        keys = {params[i] for i in step.inputs if i < len(params)}
        kwargs["dynamic_shapes"] = {k: _without_dim0(v) if k in keys else v for k, v in shapes.items()}
    elif isinstance(shapes, (list, tuple)):
        kwargs["dynamic_shapes"] = type(shapes)(_without_dim0(v) if i in step.inputs else v for i, v in enumerate(shapes))
    axes = kwargs.get("dynamic_axes")
    if isinstance(axes, dict):
        names = list(kwargs.get("input_names") or ()) or params
        batched = {names[i] for i in step.inputs if i < len(names)}
        kept = {k: _without_dim0(v) if k in batched else v for k, v in axes.items()}
        kwargs["dynamic_axes"] = {k: v for k, v in kept.items() if v}
    return tuple(cut), kwargs


def _without_dim0(spec: Any) -> Any:
    """A dim spec (dict by dim, or a list of dims or of per-dim Dims) without dim 0."""
    if isinstance(spec, dict):
        return {d: v for d, v in spec.items() if int(d) != 0} or None
    if isinstance(spec, (list, tuple)) and spec:
        if all(isinstance(d, int) for d in spec):
            return type(spec)(d for d in spec if d != 0)  # dynamic_axes' list of dims
        return type(spec)((None, *spec[1:]))
    return spec


def _dim_name(label: Any) -> str:
    """A dim's label as torch.export.Dim takes it: an identifier (TorchScript's default input
    names hold dots, `input.1`)."""
    name = re.sub(r"\W", "_", str(label))
    return name if name.isidentifier() else f"d_{name}"


def declared_dynamic(loaded: LoadedModel, declare: DeclareDynamic, dynamo: bool,
                     settings: dict[str, Any]) -> dict[str, Any]:
    """torch.onnx.export's arguments for a fix that declares dimensions dynamic: `dynamic_shapes`
    of named Dims (one Dim per name, shared by every input that uses it) on top of the script's
    own, or `dynamic_axes` (and `input_names` where the script gives none) for TorchScript."""
    import torch

    if dynamo:
        made: dict[str, Any] = {}
        spec = settings.get("dynamic_shapes")
        shapes: dict[str, dict[int, Any]] = (
            {k: dict(v) if isinstance(v, dict) else dict(enumerate(v or ())) for k, v in spec.items()}
            if isinstance(spec, dict) else {})
        params = forward_parameters(loaded)
        # The dims are named as the ONNX inputs are (a TorchScript export's input_names such as
        # "input"); torch.export keys dynamic_shapes by forward()'s arguments, in the same order.
        onnx_names = list(settings.get("input_names") or declare.inputs or ())
        to_param = {name: params[i] for i, name in enumerate(onnx_names) if i < len(params) and name not in params}
        axes = settings.get("dynamic_axes") if spec is None else None
        for name, dims in (axes.items() if isinstance(axes, dict) else ()):
            # The script's own dims, declared the TorchScript way: one Dim per label, as torch.onnx
            # converts them.
            key = to_param.get(name, name)
            if params and key not in params:
                continue  # an output's axes (dynamic_axes names outputs too)
            labels = dims.items() if isinstance(dims, dict) else ((d, f"{name}_{d}") for d in dims)
            for dim, label in labels:
                dim_name = _dim_name(label)
                made.setdefault(dim_name, torch.export.Dim(dim_name))
                shapes.setdefault(key, {})[int(dim)] = made[dim_name]
        for name, dim, label, low, high in declare.dims:
            dim_name = _dim_name(label)
            if dim_name not in made:
                bounds = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
                made[dim_name] = torch.export.Dim(dim_name, **bounds)
            shapes.setdefault(to_param.get(name, name), {})[int(dim)] = made[dim_name]
        if params and set(shapes) <= set(params):
            # torch.export wants every argument keyed once a dict is given; the others stay static.
            passed = params[:len(loaded.args)] + [k for k in loaded.kwargs if k in params]
            shapes = {key: shapes.get(key) for key in passed} | shapes
        return {"dynamic_shapes": shapes, "input_names": settings.get("input_names")}
    axes: dict[str, dict[int, str]] = {k: dict(v) if isinstance(v, dict) else {d: f"{k}_{d}" for d in v}
                                       for k, v in (settings.get("dynamic_axes") or {}).items()}
    for name, dim, label, _low, _high in declare.dims:
        axes.setdefault(name, {})[int(dim)] = str(label)
    return {"dynamic_axes": axes, "input_names": settings.get("input_names") or list(declare.inputs) or None}
