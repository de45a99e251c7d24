"""The pipeline stages, run inside the worker process: the only place torch and onnxruntime load.

Each stage returns an outcome record and never raises; the first failure ends the run. Records
are appended to the events file as they happen, so a crash or a kill still leaves the parent
the last stage reached.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onnxdoctor.protocol import (
    AFTER_FAILURE,
    FAILED,
    NOT_REQUESTED,
    PASSED,
    SKIPPED,
    StageRecord,
    WorkerRequest,
    append_event,
    out_of_memory_message,
)
from onnxdoctor.recipe import (
    ArraysAsTensors,
    CustomOpsets,
    DeclareDynamic,
    DecodeCheck,
    DynamicShapes,
    EagerExport,
    EvalMode,
    ExportCode,
    LoadCode,
    NameOutputs,
    OperatorExportType,
    PerSample,
    PrefixParity,
    QuantizeOnnx,
    Recipe,
    RewriteOnnx,
    RuntimeKernels,
    ScriptingOff,
    SessionConfig,
    StateCheck,
    StrictCapture,
    TrailingDict,
    Unoptimized,
    UseExporter,
    UseOpset,
    ordered_rewrites,
)
from onnxdoctor.worker.facts import (
    aliased_inputs,
    builds_tensors_from_values,
    conversion_refusal,
    corrected_keys,
    describe_tensor,
    finding_record,
    input_tree,
    jsonable,
    jsonable_dim,
    keep_state,
    mode_sensitive_modules,
    model_facts,
    model_fingerprint,
    none_leaves,
    object_inputs,
    packed_sequences,
    quiet_torch_logs,
    restore_state,
    sized_transposed_convs,
    sparse_tensors,
    strict_capture,
    tensor_leaves,
    text_output,
    torch_export_verdict,
    uses_flex_attention,
    with_suggested_dims,
)
from onnxdoctor.worker.failures import (
    export_failure_facts,
    extension_build_facts,
    shapeless_function_facts,
    torch_op_behind,
)
from onnxdoctor.worker.fixkit import (
    apply_load_code,
    dict_input_keys,
    entry_methods,
    forward_parameters,
    python_state,
    reference_call,
    submodules_taking_inputs,
    variadic_inputs,
    with_gradients,
    working_entry_methods,
    wrapped_module,
)
from onnxdoctor.worker.llm_cache import cache_facts, check_decoding
from onnxdoctor.worker.parity import (
    FROZEN_TRACE,
    OutOfTime,
    compare_with_reference,
    first_diverging_module,
    first_diverging_symbolic,
    first_diverging_traced,
    first_diverging_value,
    output_producer,
    second_input_check,
    time_limit,
    traced_functions,
)
from onnxdoctor.worker.runtime import (
    feeds_for_session,
    initializing_op,
    kernel_facts,
    name_example_inputs,
    random_feeds,
    run_session,
    runtime_source,
    seed_runtime,
)
from onnxdoctor.worker.scripted import (
    autograd_watch,
    quantized_facts,
    recurrent_facts,
    renormed_embedding_facts,
    reparametrized_facts,
    script_module_facts,
    scripted_parts,
    turn_scripting_off,
)
from onnxdoctor.worker.stateful import (
    FirstCallHook,
    check_state_steps,
    consecutive_calls,
    describe_writes,
    one_call_later,
    one_call_later_message,
    stateful_message,
)
from onnxdoctor.worker.tracebacks import (
    StageFailed,
    StderrText,
    aten_op,
    capturing_stderr,
    error_info,
    exception_text,
    find_custom_symbolics,
    node_source_lines,
    node_torch_op,
    not_inlined,
    user_frame,
    warning_texts,
    where_in_script,
)

STAGES_SCRIPT = ("load", "export", "check", "ort_load", "ort_run", "parity")
STAGES_ONNX = ("load", "check", "ort_load", "ort_run")

# The TorchScript exporter's C++ warning for a node it cannot infer shapes through.
_SHAPELESS = re.compile(r"The shape inference of (\w+::\w+) type is missing")
# torch.nn.Module's own forward(), reached when a model class defines none.
_NO_FORWARD = 'is missing the required "forward" function'


def _runs_in_distribution(state: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None,
                          budget: float, atol: float, rtol: float) -> dict[str, Any]:
    """PyTorch (reseeded each run) and the exported model's session run at these inputs, compared
    in distribution (worker/randomness.compare_in_distribution)."""
    import torch

    from onnxdoctor.worker.randomness import compare_in_distribution
    from onnxdoctor.worker.runtime import to_numpy

    model, session = state["loaded"].model, state["session"]
    feeds = feeds_for_session(session, tensor_leaves((args, kwargs)))

    def run_torch(seed: int) -> list[Any]:
        torch.manual_seed(seed)
        with torch.no_grad():
            return [to_numpy(t) for t in tensor_leaves(model(*args, **(kwargs or {})))]

    return compare_in_distribution(run_torch, lambda: run_session(session, feeds), budget, atol, rtol)


def _raising_op(loaded: Any, raised: BaseException) -> str | None:
    """The aten op the user's code called when forward() raised `raised` (torch.cat at tensors of
    sizes that do not match), or None where the error came from Python (the model's own TypeError).

    The traceback cannot tell: a C++ op leaves no frame of its own, only the user's line. So the
    failing call runs once more under a torch-function mode, which sees each torch call the model
    makes itself (not the calls inside them) and notes the one the same error leaves. That is a
    second forward() with each torch call through Python: not run after running out of memory.
    """
    if "out of memory" in str(raised).lower():
        return None
    from torch.overrides import TorchFunctionMode

    class Watch(TorchFunctionMode):
        failed: tuple[Any, type[BaseException], str] | None = None

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            try:
                return func(*args, **(kwargs or {}))
            except Exception as exc:
                # The latest: an error the model caught (a fallback after a failed op) is not the
                # one that left forward().
                self.failed = (func, type(exc), str(exc))
                raise

    watch = Watch()
    with contextlib.suppress(Exception), watch:
        reference_call(loaded)
    if watch.failed is None:
        return None
    func, kind, text = watch.failed
    if not (isinstance(raised, kind) and str(raised) == text):
        return None  # the model caught that error and raised another: not the op's
    return aten_op(getattr(func, "__name__", ""))


class Runner:
    """Runs the stages for one request; `run_once` can be repeated for fix re-runs."""

    def __init__(self, request: WorkerRequest) -> None:
        self.request = request
        self.target = Path(request.target)
        # Where the user's code is, for source lines: the script, or for the Python API the file
        # the model was defined in (its generated script is not the user's code; docs/api.md).
        self.code = Path(request.source_file) if request.source_file else self.target
        self.workdir = Path(request.workdir)
        self._kernels_registered: set[str] = set()
        # Called with each stage's name before it runs (the worker starts OpenVINO's import there).
        self.before_stage: Callable[[str, dict[str, Any]], None] | None = None

    def _run_snippet(self, code: str, name: str, loaded: Any, given: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run a fix's code as the user would paste it into their script (and as fix.py does)."""
        from onnxdoctor.worker.fixkit import run_code

        return run_code(code, loaded, name, self.workdir, given)

    def emit(self, event: dict[str, Any]) -> None:
        append_event(self.request.events_path, event)

    # ---- the generic stage wrapper -------------------------------------------------------

    def step(self, text: str) -> None:
        """Say which step of the current stage runs now: a crash or a kill in native code (shape
        inference, a compiler) then names it (OD901, OD905)."""
        stage, run_id = getattr(self, "_current", ("", ""))
        self.emit({"event": "step", "stage": stage, "run": run_id, "step": text})

    def stage(self, name: str, fn: Callable[[], dict[str, Any] | None], run_id: str) -> StageRecord:
        """Run one stage and write its record; the stage's failure is data, never an exception."""
        self._current = (name, run_id)
        self.emit({"event": "start", "stage": name, "run": run_id, "time": time.time()})
        started = time.perf_counter()
        status, facts, error = FAILED, {}, None
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                facts = fn() or {}
            status = PASSED
        except StageFailed as exc:
            # Report the library's own exception, not our wrapper, when there is one.
            original = exc.__cause__ if exc.code is None and exc.__cause__ is not None else exc
            error, facts = error_info(original), dict(exc.facts)
            if exc.code:
                facts["code"] = exc.code
        except SystemExit as exc:
            error, facts = error_info(exc), {"code": "OD109", "exit_code": str(exc.code)}
        except KeyboardInterrupt:
            raise
        except MemoryError as exc:  # over the memory cap: say so, not "MemoryError: std::bad_alloc"
            error, facts = error_info(exc), {"code": "OD905"}
            for key in ("node", "op"):  # where known: the node a check suspects
                if isinstance(getattr(exc, key, None), str):
                    facts[key] = getattr(exc, key)
            error["message"] = out_of_memory_message(name, str(exc), self.request.max_memory_mb)
        except BaseException as exc:  # the user's code may raise anything
            error = error_info(exc)
        record = StageRecord(run=run_id, stage=name, status=status, facts=facts, error=error,
                             seconds=round(time.perf_counter() - started, 4),
                             warnings=tuple(warning_texts(caught)))
        self.emit(record.to_event())
        return record

    # ---- a whole run ---------------------------------------------------------------------

    def run_once(
        self, run_id: str, fix: Recipe | None = None, reuse: dict[str, Any] | None = None
    ) -> tuple[list[StageRecord], dict[str, Any]]:
        """Run the stages; with `reuse`, take LOAD's results from an earlier run of this process.

        Re-importing the script would register its custom ops twice, which torch refuses, so
        in-process fix re-runs reuse the loaded model; fixes that change the model or torch's
        global registries run in a fresh worker instead.
        """
        recipe = fix or Recipe("none")
        state: dict[str, Any] = {"recipe": recipe}
        names = STAGES_SCRIPT if self.request.kind == "script" else STAGES_ONNX
        records: list[StageRecord] = []
        if reuse is not None and self.request.kind == "onnx" and recipe.first(RewriteOnnx) is not None:
            reuse = None  # a file's rewrite happens in LOAD: read the file again (cheap)
        left_out: set[str] = set()
        # load_only is for the run that loads what the fix runs then reuse (or, for a file's
        # rewrite, read again): never for a fix run itself.
        if self.request.load_only and fix is None:
            left_out |= set(names[1:])
        if self.request.skip_check:
            left_out.add("check")
        for name in names:
            if name in left_out:
                self.emit(StageRecord(run_id, name, SKIPPED, reason=NOT_REQUESTED).to_event())
            elif records and records[-1].status != PASSED:
                self.emit(StageRecord(run_id, name, SKIPPED, reason=AFTER_FAILURE).to_event())
            elif name == "load" and reuse is not None:
                # A script's fix run exports anew (and sets onnx_path); a file's reads the same file.
                for key in ("loaded", "torch_outputs", "onnx_model", "onnx_path", "load_facts", "pristine",
                            "state_hook"):
                    if key in reuse:
                        state[key] = reuse[key]
                if "pristine" in state:
                    state["pristine"]()  # the export of the run before called forward()
                record = StageRecord(run_id, "load", PASSED, facts={**reuse.get("load_facts", {}), "reused": True})
                self.emit(record.to_event())
                records.append(record)
            else:
                if self.before_stage is not None:
                    self.before_stage(name, state)
                hook = state.get("state_hook") if name == "export" else None
                if hook is not None:
                    hook.detach()  # the exporters trace forward(): no hook of ours in the graph
                records.append(self.stage(name, lambda name=name: self._stage_for(name)(state), run_id))
                state[f"{name}_warnings"] = records[-1].warnings
                if name == "export":
                    state["export_facts"] = records[-1].facts  # what the recorder noted (module_indices)
                if name == "export" and "pristine" in state:
                    state["pristine"]()
                if hook is not None:
                    hook.attach()
        # Sizes are checked for the diagnosis's own runs (one per exporter), for fixes that
        # declare dims and for every fix of a script that declares dims itself: an export that
        # failed never reached SHAPES, and a fix (another opset) that exports a Reshape with the
        # example's length frozen matches at the example only (mmdeploy#1970). Other fix checks
        # keep their cost (they are judged at the example's size).
        own_run = self.request.gather_facts and not run_id.startswith("plan")
        loaded = state.get("loaded")
        declares = loaded is not None and any(loaded.settings.get(k) for k in ("dynamic_axes", "dynamic_shapes"))
        if (self.request.kind == "script" and self.request.check_shapes and "parity" not in left_out
                and (fix is None or own_run or declares or recipe.first(DeclareDynamic) is not None
                     or self.request.other_inputs)
                and records and all(r.status == PASSED for r in records) and records[-1].stage == "parity"):
            # After PARITY, never part of the ladder: a size problem is a finding of its own.
            self.stage("shapes", lambda: self._stage_shapes(state), run_id)
        self.emit({"event": "run_done", "run": run_id})
        return records, state

    def _stage_for(self, name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """The stage's method: a kind-specific one (`_stage_script_load`) or the shared one."""
        by_kind = {
            ("script", "load"): self._stage_script_load, ("onnx", "load"): self._stage_onnx_load,
            ("script", "ort_run"): self._stage_script_ort_run, ("onnx", "ort_run"): self._stage_onnx_ort_run,
        }
        shared = {"export": self._stage_export, "check": self._stage_check, "ort_load": self._stage_ort_load,
                  "parity": self._stage_parity}
        return by_kind.get((self.request.kind, name)) or shared[name]

    # ---- LOAD ----------------------------------------------------------------------------

    def _stage_script_load(self, state: dict[str, Any]) -> dict[str, Any]:
        import torch

        from onnxdoctor.worker.loader import ProtocolError, ScriptExited, load_script

        torch.manual_seed(0)
        if state["recipe"].first(ScriptingOff) is not None:
            turn_scripting_off()  # before the script's classes and decorators are made
        try:
            loaded = load_script(self.target, self.request.factory,
                                 arrays_as_tensors=state["recipe"].first(ArraysAsTensors) is not None)
        except ProtocolError as exc:
            raise StageFailed(str(exc), exc.code, **exc.facts) from None
        except ScriptExited as exc:
            raise StageFailed(str(exc), "OD109", exit_code=str(exc.code)) from None
        except SyntaxError as exc:
            raise StageFailed(
                f"{Path(exc.filename or self.target).name}:{exc.lineno}: {exc.msg}", "OD103",
                source=f"{self.target.name}:{exc.lineno}",
            ) from None
        except SystemExit:
            raise
        except BaseException as exc:
            info = error_info(exc)
            raise StageFailed(
                f"{self.target.name} raised {type(exc).__name__} {where_in_script(exc, self.target)}: {exc}",
                "OD104",
                source=user_frame(exc, self.code),
                raised=info["type"],
                **extension_build_facts(info),
            ) from exc
        model = loaded.model
        # The model the script built, before any fix changes it: what must match across imports.
        fingerprint = model_fingerprint(model, loaded)
        expected = self.request.expected_fingerprint
        if expected is None:
            keep_state(model, fingerprint["hash"], self.workdir)
        elif fingerprint["hash"] != expected and restore_state(model, expected, self.workdir):
            # Same tensors, other values (an uninitialized buffer, a draw the seed does not
            # cover): the first import's values, so the fix is checked on the model diagnosed.
            fingerprint = {**model_fingerprint(model, loaded), "restored": True}
        recipe: Recipe = state["recipe"]
        for step in recipe.steps:
            match step:
                case EvalMode():
                    model.eval()
                case LoadCode(code=code):
                    # A fix that changes the model itself (its switches, a wrapper) runs before the
                    # reference outputs, and the model it leaves in `model` is the one exported.
                    before = model
                    apply_load_code(code, loaded, f"load_{recipe.kind}", self.workdir)
                    model = loaded.model
                    if model is not before and not getattr(before, "training", True) and getattr(model, "training", False):
                        # A fix's wrapper module starts in training mode; the model inside is in
                        # eval mode, and the wrapper's own flag must say so too (its modules'
                        # flags are their own: set on the wrapper alone, not recursively).
                        model.training = False
        state["loaded"] = loaded
        facts: dict[str, Any] = {
            "factory": loaded.factory,
            "factory_form": loaded.form,
            "model_class": type(model).__qualname__,
            "training": bool(getattr(model, "training", False)),
            # transformers models have this switch; a cache object in the outputs needs it off.
            "config_use_cache": getattr(getattr(model, "config", None), "use_cache", None),
            "mode_sensitive_modules": mode_sensitive_modules(model),
            "settings": {k: jsonable(v) for k, v in loaded.settings.items()},
            "inputs": [describe_tensor(t) for t in tensor_leaves((loaded.args, loaded.kwargs))],
            "forward_parameters": forward_parameters(loaded),
            # torch.onnx.export reads a dict at the end of args as keyword arguments.
            "trailing_dict": bool(loaded.args) and isinstance(loaded.args[-1], dict) and not loaded.kwargs,
        }
        with contextlib.suppress(Exception):
            facts["builds_tensors"] = builds_tensors_from_values(model, self.code)
        facts["custom_symbolics"] = find_custom_symbolics(self.code.resolve().parent)
        with contextlib.suppress(Exception):
            facts["flex_attention"] = uses_flex_attention(model)
        with contextlib.suppress(Exception):
            facts["sparse_tensors"] = sparse_tensors(model)
        with contextlib.suppress(Exception):
            # Sparse positional example inputs: an ONNX model takes them dense (fixes/sparse_dense.py).
            facts["sparse_inputs"] = [str(i) for i, a in enumerate(loaded.args)
                                      if isinstance(a, torch.Tensor) and a.layout is not torch.strided]
        with contextlib.suppress(Exception):
            facts["packed_sequences"] = packed_sequences(model)
        with contextlib.suppress(Exception):
            facts["object_inputs"] = object_inputs(loaded.args)
        with contextlib.suppress(Exception):
            facts["variadic_inputs"] = variadic_inputs(loaded)
        with contextlib.suppress(Exception):
            facts["sized_transposed_convs"] = sized_transposed_convs(model)
        with contextlib.suppress(Exception):
            facts["aliased_inputs"] = aliased_inputs(loaded.args, loaded.kwargs or {})
        with contextlib.suppress(Exception):
            facts["input_tree"] = input_tree((list(loaded.args), dict(loaded.kwargs or {})))
        facts.update(script_module_facts(model, loaded))  # a torch.jit.script / jit.load model
        with contextlib.suppress(Exception):
            facts["scripted_parts"] = scripted_parts(model, loaded.namespace)
        helpers = [name for name, value in loaded.namespace.items()
                   if callable(value) and getattr(value, "__script_if_tracing_wrapper", False)]
        if helpers:
            facts["script_if_tracing"] = helpers[:20]  # scripted only while tracing
        facts.update(quantized_facts(model))  # quantized modules (torch.ao)
        facts.update(recurrent_facts(model))  # LSTM options the exporters miss
        facts.update(renormed_embedding_facts(model))  # max_norm: renormed in place, untraced
        facts.update(reparametrized_facts(model))  # weight_norm, spectral_norm, parametrizations
        facts.update(cache_facts(model))  # a transformers model's cache (decoder-only or not)
        facts["fingerprint"] = fingerprint
        if expected is not None and facts["fingerprint"]["hash"] != expected:
            raise StageFailed(
                f"{self.target.name} built a different model on this import than on the first "
                f"({facts['fingerprint']['summary']}): the script is not deterministic across imports "
                "(random weights without a fixed seed, time, files it reads), so a fix checked on this "
                "model would not be a fix of yours",
                "OD114",
                **facts,
            )
        written: list[str] = []  # the model's own state the reference call changed
        try:
            with autograd_watch() as backward_passes:
                try:
                    outputs = reference_call(loaded, written)
                except RuntimeError as exc:
                    if "does not require grad" not in str(exc):
                        raise
                    # forward() takes gradients itself (torch.autograd.grad in a physics-informed
                    # loss) and the reference ran without them: from here on it runs with them.
                    with_gradients(loaded)
                    facts["forward_needs_gradients"] = True
                    outputs = reference_call(loaded, written)
        except BaseException as exc:
            if isinstance(exc, NotImplementedError) and _NO_FORWARD in str(exc):
                # The model defines no forward() (a LightningModule keeping its network in
                # self.model): a submodule that takes the inputs. A forward() that is there and
                # fails is the user's bug, which no submodule answers.
                with contextlib.suppress(Exception):
                    facts["inner_modules"] = submodules_taking_inputs(loaded)
            elif isinstance(exc, Exception) and not isinstance(exc, MemoryError):
                # forward() raised at the example: an inference method that takes it (forward() is a
                # training step), or the dict of named tensors forward() reads its input from.
                with contextlib.suppress(Exception):
                    facts["entry_methods"] = working_entry_methods(loaded)
                with contextlib.suppress(Exception):
                    facts["dict_inputs"] = dict_input_keys(loaded)
                with contextlib.suppress(Exception):
                    facts["op"] = _raising_op(loaded, exc)
            raise StageFailed(
                f"forward() raised {type(exc).__name__} with the example inputs: {exception_text(exc)}",
                "OD108",
                source=user_frame(exc, self.code),
                **facts,
            ) from exc
        if backward_passes[0]:
            facts["autograd_in_forward"] = backward_passes[0]  # torch.autograd.grad / backward in forward()
        state["torch_outputs"] = tensor_leaves(outputs)
        # The model's Python state as the reference call found it: put back after each export,
        # which calls forward() again (fixkit.python_state).
        state["pristine"] = python_state(loaded.model)
        if written:
            # forward() writes the model's own state: every call the worker makes from here on
            # starts from the state the reference call found, and PARITY calls it in a row to see
            # whether the state matters (worker/stateful.py).
            names = list(dict.fromkeys(written))
            facts["state_writes"] = describe_writes(loaded.model, names)
            state["state_hook"] = FirstCallHook(loaded.model, state["pristine"], names)
        facts["outputs"] = [describe_tensor(t) for t in state["torch_outputs"]]
        if not state["torch_outputs"]:
            # forward() computes nothing to export (a stub returning None): what else may.
            with contextlib.suppress(Exception):
                facts["entry_methods"] = entry_methods(loaded)
        facts["inner_modules"] = wrapped_module(loaded.model)  # a DataParallel's module
        facts["none_outputs"] = none_leaves(outputs)
        with contextlib.suppress(Exception):
            facts["text_output"] = text_output(outputs)
        state["load_facts"] = facts
        return facts

    def _stage_onnx_load(self, state: dict[str, Any]) -> dict[str, Any]:
        from onnxdoctor.onnxkit.files import OnnxFileError, check_external_data, read_onnx

        rewrites = state["recipe"].all(RewriteOnnx)
        try:
            # Weights stay on disk unless a rewrite must carry them into a new file: checking needs
            # none, and ORT_LOAD hands them to ONNX Runtime as arrays (see runtime_source).
            model = read_onnx(self.target, load_external_data=bool(rewrites))
            # read_onnx resolves a symlinked model to its real folder: external data lives there.
            problems = check_external_data(model, self.target.resolve().parent)
        except OnnxFileError as exc:
            raise StageFailed(exc.message, exc.code) from None
        if problems:
            raise StageFailed(problems[0].message, problems[0].code)
        if rewrites:
            model, path = self._rewrite(model, rewrites, state)
            state["onnx_path"] = path
        state["onnx_model"] = model
        facts = model_facts(model)
        if rewrites:
            facts["onnx_path"] = str(path)
        return facts

    def _rewrite(self, model: Any, rewrites: list[RewriteOnnx], state: dict[str, Any]) -> tuple[Any, Path]:
        """Apply a fix's ONNX rewrites in order; keep the original (a reference) and save the result."""
        import onnx

        from onnxdoctor.onnxkit.transforms import TransformError, apply_transform

        state["original_model"] = model
        fixed = model
        for rewrite in ordered_rewrites(rewrites):
            try:
                fixed = apply_transform(fixed, rewrite.transform)
            except TransformError as exc:
                raise StageFailed(str(exc), "OD199") from None
        # In the work folder, beside any external data an export wrote, so relative paths resolve.
        path = self.workdir / f"fixed-{os.getpid()}-{time.monotonic_ns()}.onnx"
        weights = sum(len(t.raw_data) for t in fixed.graph.initializer)
        if weights > _INLINE_WEIGHTS_LIMIT:
            onnx.save(fixed, str(path), save_as_external_data=True, location=path.name + ".data")
        else:
            onnx.save(fixed, str(path))
        return fixed, path

    # ---- EXPORT --------------------------------------------------------------------------

    def _stage_export(self, state: dict[str, Any]) -> dict[str, Any]:
        import torch

        loaded = state["loaded"]
        recipe: Recipe = state["recipe"]
        settings = loaded.settings
        dynamo = self._choose_dynamo(settings, recipe)
        # Said before the export: a worker that dies in it (a native crash) leaves no record, and
        # the other exporter is then a fix to try.
        self.emit({"event": "exporter", "run": getattr(self, "_current", ("", ""))[1],
                   "exporter": "dynamo" if dynamo else "torchscript"})
        text = state.get("load_facts", {}).get("text_output")
        if text and not dynamo:
            # torch flattens the outputs in C++ and decodes a byte string there as UTF-8: an
            # undecodable one leaves an exception set, and the process may crash (SIGSEGV).
            raise StageFailed(f"forward() returns text or bytes in {text}: an ONNX graph's outputs are tensors "
                              "(return the tensors the text is made from, class indices or codes as a uint8 "
                              "tensor, and make the text outside the model)", "OD299")
        opset_step = recipe.first(UseOpset)
        opset = (opset_step.opset if opset_step else None) or self.request.opset or settings.get("opset_version")
        path = self.workdir / f"model-{os.getpid()}-{time.monotonic_ns()}.onnx"
        name_example_inputs(settings.get("input_names"))
        kwargs: dict[str, Any] = {
            "kwargs": loaded.kwargs or None,
            "dynamo": dynamo,
            "opset_version": opset,
            "input_names": settings.get("input_names"),
            "output_names": settings.get("output_names"),
        }
        if any(isinstance(r.transform, NameOutputs) for r in recipe.all(RewriteOnnx)):
            # Named after the export instead (recipe.NameOutputs): the dynamo exporter's own
            # renaming can give an output the name of a value already in the graph.
            kwargs["output_names"] = None
        if dynamo:
            kwargs["dynamic_shapes"] = settings.get("dynamic_shapes")
            if kwargs["dynamic_shapes"] is None and settings.get("dynamic_axes") is not None:
                # A dynamo script may declare its dims the TorchScript way: torch.onnx turns
                # dynamic_axes into dynamic_shapes itself, as it does for the user's own call.
                kwargs["dynamic_axes"] = settings.get("dynamic_axes")
        elif settings.get("dynamic_axes") is not None:
            kwargs["dynamic_axes"] = settings.get("dynamic_axes")
        declare = recipe.first(DeclareDynamic)
        if declare is not None:
            from onnxdoctor.worker.fixkit import declared_dynamic

            kwargs.update(declared_dynamic(loaded, declare, dynamo, settings))
            if dynamo and kwargs.get("dynamic_shapes") is not None:
                kwargs.pop("dynamic_axes", None)  # the declaration covers the script's own axes
        export_args = loaded.args
        if declare is not None and dynamo:
            from onnxdoctor.worker.fixkit import widened_for_export

            export_args = widened_for_export(loaded, kwargs.get("dynamic_shapes"))
        per_sample = recipe.first(PerSample)
        if per_sample is not None:
            from onnxdoctor.worker.fixkit import one_sample

            try:
                export_args, kwargs = one_sample(loaded, per_sample, tuple(export_args), kwargs)
            except ValueError as exc:
                raise StageFailed(str(exc), "OD199") from None
        model_or_program: Any = loaded.model
        built: dict[str, Any] = {}
        for step in recipe.steps:
            match step:
                case ExportCode(code=code, program=program, translation_table=table, nests=nests):
                    from onnxdoctor.worker.fixkit import eager_export

                    eager_step = recipe.first(EagerExport)
                    # A program the code captures itself (a rewrite's run_decompositions) is
                    # captured with the chain's model changes in force, as the export would be.
                    with eager_export(loaded, eager_step) if eager_step else contextlib.nullcontext():
                        given = {program: built[program]} if nests and program in built else None
                        namespace = self._run_snippet(code, f"fix_{recipe.kind}", loaded, given)
                    if program:
                        # The fix built an ExportedProgram itself (e.g. run_decompositions): export that.
                        model_or_program = built[program] = namespace[program]
                    if table and dynamo and namespace.get(table):
                        kwargs["custom_translation_table"] = namespace[table]
                case DynamicShapes(rename=rename, suggested=suggested, pack=pack, missing=missing) if dynamo:
                    shapes = corrected_keys(kwargs["dynamic_shapes"], dict(rename), pack, missing)
                    kwargs["dynamic_shapes"] = with_suggested_dims(shapes, list(suggested))
                case CustomOpsets(domains=domains) if not dynamo:
                    kwargs["custom_opsets"] = dict(domains)
                case OperatorExportType(name=name):
                    kwargs["operator_export_type"] = getattr(torch.onnx.OperatorExportTypes, name)
                case Unoptimized() if dynamo:
                    kwargs["optimize"] = False
        facts: dict[str, Any] = {
            "exporter": "dynamo" if dynamo else "torchscript",
            "requested_opset": opset,
        }
        state["exporter"] = facts["exporter"]
        # What a frozen trace's check at other inputs exports again, traced at those inputs.
        state["export_call"] = (model_or_program, kwargs)
        from onnxdoctor.worker.fixkit import eager_export, watching_export_branch
        from onnxdoctor.worker.provenance import dynamo_table, recording_torchscript

        recorder = None
        stderr: StderrText | None = None
        eager = recipe.first(EagerExport)
        branch = {"export_branch": False}
        try:
            with quiet_torch_logs(), (
                eager_export(loaded, eager) if eager
                else watching_export_branch(loaded)
            ) as watched, (contextlib.nullcontext() if dynamo else recording_torchscript(self.code)) as recorder, (
                contextlib.nullcontext(StderrText()) if dynamo else capturing_stderr()
            ) as stderr:
                branch = watched or branch
                if dynamo and recipe.first(StrictCapture) is not None and isinstance(model_or_program, torch.nn.Module):
                    # torch.export's strict capture, then the exporter on its program.
                    model_or_program = strict_capture(model_or_program, tuple(export_args), loaded.kwargs or None,
                                                      kwargs.pop("dynamic_shapes", None))
                state["onnx_program"] = torch.onnx.export(model_or_program, _onnx_args(recipe, export_args), str(path),
                                                          **kwargs)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            facts.update(export_failure_facts(exc, loaded, dynamo, self.code, gather=self.request.gather_facts))
            shapeless = _SHAPELESS.findall(stderr.text) if stderr is not None else []
            if shapeless and not facts.get("op") and shapeless[0].startswith("prim::"):
                # A native error that names nothing (`vector::_M_range_check`, onnx#1399), after the
                # exporter warned it had no shape inference for one of its own prim:: ops (not a
                # custom domain's, which it warns of whenever one is exported): that op's output
                # is what the failing pass read (an unpaired prim::PackPadded).
                facts["op"] = shapeless[0]
            inlined = not_inlined(stderr.text) if stderr is not None else []
            if inlined:
                if recorder is not None:
                    from onnxdoctor.worker.registry import DUNDER_OPS, torchscript_registrations

                    # The op whose symbolic refused, where its message names none, and the opsets
                    # that register a symbolic for it (a later one may take the call).
                    for entry in inlined:
                        kind = next((op for op, reason in recorder.refusals if reason.startswith(entry["reason"][:60])),
                                    None)
                        if kind:
                            named = DUNDER_OPS.get(kind, kind)
                            entry.update(op=named, registrations=sorted({*torchscript_registrations(kind),
                                                                         *torchscript_registrations(named)}))
                facts["not_inlined"] = inlined  # why a Function's forward could not stand in for it
                facts.update(shapeless_function_facts(exc, inlined, loaded, facts))
            if branch["export_branch"]:
                facts["export_branch"] = True
            if recorder is not None and recorder.failure:
                facts["symbolic_attribute"] = recorder.failure
            typed = _UNEXPECTED_TYPE.search(str(exc))
            if recorder is not None and typed and not facts.get("op"):
                # Raised when the file is written, after every symbolic ran: the node holding the
                # type is found in the named graph (docs/ARCHITECTURE.md, "Node provenance").
                with contextlib.suppress(Exception):
                    holder = recorder.of_type(typed.group(1))
                    if holder and holder["op"]:
                        facts["op"] = holder["op"]
                        facts["source"] = holder["source"] or facts.get("source")
                        if str(holder.get("node_kind", "")).startswith("onnx::"):
                            facts["onnx_op"] = holder["node_kind"].removeprefix("onnx::")
            raise StageFailed(exception_text(exc), None, **facts) from exc
        import onnx

        quantize = recipe.first(QuantizeOnnx)
        if quantize is not None:
            from onnxdoctor.worker.fixkit import quantize_file

            path = quantize_file(path, quantize)
            facts["quantized"] = {"weight_type": quantize.weight_type, "reduce_range": quantize.reduce_range}
        # A rewrite may need the weights (float64 ones become float32): the exporter writes big
        # ones beside the file, and the rewritten copy is saved elsewhere.
        model = onnx.load(str(path), load_external_data=bool(recipe.first(RewriteOnnx)))
        if recipe.first(RewriteOnnx):
            # A rewrite of the exported file (a cast, a newer IR stamp): compared with PyTorch as usual.
            model, path = self._rewrite(model, recipe.all(RewriteOnnx), state)
        state["onnx_path"] = path
        state["onnx_model"] = model  # CHECK reuses it: weights are not needed to check
        facts.update(model_facts(model))
        if dynamo and opset and facts.get("written_opset") and int(opset) < int(facts["written_opset"]):
            # The dynamo exporter wrote a newer opset than asked when its conversion failed, and
            # logs why only as a traceback: ONNX's converter says which op it stops at.
            facts.update(conversion_refusal(model, int(opset)))
        if branch["export_branch"]:
            facts["export_branch"] = True  # forward() took a branch written for the export only
        facts["onnx_path"] = str(path)
        sources = node_source_lines(model, self.code)
        with contextlib.suppress(Exception):
            # Which code wrote each node (docs/ARCHITECTURE.md, "Node provenance").
            table = dynamo_table(model, self.code) if dynamo else recorder.table(model) if recorder else []
            facts["provenance"] = [row.to_dict() for row in table]
            state["provenance"] = table
            sources.update({row.node: row.source for row in table if row.source and row.node not in sources})
        if sources:
            facts["node_sources"] = sources
        if recorder is not None and recorder.branch_values:
            facts["branch_values"] = dict(recorder.branch_values)
        if recorder is not None and recorder.data_sites:
            facts["data_sites"] = list(recorder.data_sites)
        if recorder is not None and recorder.module_indices:
            facts["module_indices"] = list(recorder.module_indices)
        constants_written = recorder.written_constants if recorder is not None else []
        if constants_written:
            facts["written_constants"] = constants_written
        if recorder is not None and recorder.loop_exits:
            facts["loop_exits"] = list(recorder.loop_exits)
        if recorder is not None and recorder.loop_conditions:
            facts["loop_conditions"] = list(recorder.loop_conditions)
        if recorder is not None and recorder.branch_values:
            from onnxdoctor.worker.scripted import branch_owners

            with contextlib.suppress(Exception):
                # The modules whose code holds each frozen branch: scripted, they keep it (OD210).
                owners = branch_owners(loaded.model, list(recorder.branch_values), self.code.resolve().parent)
                if owners:
                    facts["branch_owners"] = owners
        if recorder is not None and recorder.size_branches:
            facts["size_branches"] = list(recorder.size_branches)
        if dynamo and kwargs.get("dynamic_shapes") is not None:
            facts["dynamic_shapes_requested"] = True
            facts["symbolic_input_dims"] = sum(
                1 for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param
            )
            facts.update(torch_export_verdict(loaded, kwargs["dynamic_shapes"]))
        if not dynamo:
            from torch.onnx import _constants

            facts["exporter_max_opset"] = _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET
        return facts

    def _choose_dynamo(self, settings: dict[str, Any], recipe: Recipe) -> bool:
        import torch

        step = recipe.first(UseExporter)
        choice = (step.exporter if step else None) or self.request.exporter
        if choice:
            return choice == "dynamo"
        if "dynamo" in settings:
            return bool(settings["dynamo"])
        return bool(inspect.signature(torch.onnx.export).parameters["dynamo"].default)

    # ---- CHECK ---------------------------------------------------------------------------

    def _stage_check(self, state: dict[str, Any]) -> dict[str, Any]:
        import onnx

        from onnxdoctor.onnxkit.checks import check_model

        model = state.get("onnx_model")
        if model is None:
            model = onnx.load(str(state["onnx_path"]), load_external_data=False)
        state["onnx_model"] = model
        findings = check_model(model, model_dir=str(self.target.parent), on_step=self.step)
        records = [finding_record(f) for f in findings]
        for record in records:
            if "is higher than the checker's" in record["message"]:
                # The onnx library is older than the model; only the runtime load can tell more.
                record["severity"] = "warning"
        errors = [r for r in records if r["severity"] == "error"]
        if self.request.kind == "script":
            # An invalid node the dynamo exporter wrote: the torch op it translated is what the
            # user can act on (the message still names the ONNX node).
            # A type its schema refuses is the ONNX node's own problem (a cast around that node
            # fixes it), so that finding keeps the ONNX op and names the torch op in its message.
            for record in errors:
                if record.get("code") in ("OD303", "OD304") and record.get("node"):
                    torch_op = node_torch_op(model, record["node"])
                    if torch_op and "has unsupported type" in record["message"]:
                        record["message"] += f" (the node was exported from {torch_op})"
                    elif torch_op:
                        record["op"] = torch_op
        if errors:
            raise StageFailed(errors[0]["message"], errors[0]["code"], findings=records)
        return {"findings": records}

    # ---- ORT_LOAD ------------------------------------------------------------------------

    def _stage_ort_load(self, state: dict[str, Any]) -> dict[str, Any]:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        recipe: Recipe = state["recipe"]
        config = recipe.first(SessionConfig)
        for key, value in config.entries if config else ():
            options.add_session_config_entry(key, value)
        libraries = list(self.request.custom_op_libraries)
        loaded = state.get("loaded")
        if loaded is not None:
            libraries += [str(p) for p in loaded.settings.get("custom_op_libraries", ())]
        for kernels in recipe.all(RuntimeKernels):
            libraries += list(kernels.libraries)
            if kernels.python and kernels.python not in self._kernels_registered:
                # onnxruntime-extensions keeps Python kernels in a process-wide table: register once.
                # With the script's globals: a kernel calls the code that wrote the node (a Function
                # defined there, its custom op), as it does pasted into the script.
                self._run_snippet(kernels.python, f"kernel_{recipe.kind}", state.get("loaded"))
                self._kernels_registered.add(kernels.python)
            if kernels.extensions:
                from onnxruntime_extensions import get_library_path

                if get_library_path() not in libraries:
                    libraries.append(get_library_path())
        for library in libraries:
            try:
                options.register_custom_ops_library(str(library))
            except Exception as exc:
                # The reason alone: ONNX Runtime repeats the path, which the finding gives whole.
                reason = exception_text(exc).replace(str(library), Path(library).name)
                raise StageFailed(f"failed to load: {reason}", "OD405", library=str(library)) from exc
        if "onnx_path" in state:
            source: Any = str(state["onnx_path"])  # our own export or rewrite, in the work folder
        else:
            source, names, values = runtime_source(state["onnx_model"], self.target.resolve().parent)
            if names:
                options.add_external_initializers(names, values)
        try:
            seed_runtime()
            session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            facts = {}
            with contextlib.suppress(Exception):
                model = state.get("onnx_model")
                if model is None and "onnx_path" in state:
                    import onnx

                    model = onnx.load(str(state["onnx_path"]), load_external_data=False)
                facts = kernel_facts(str(exc), model) or initializing_op(str(exc), model)
                facts.update(torch_op_behind(facts.get("op"), state, facts.get("node")))
            model = state.get("onnx_model")
            if model is not None and not model.graph.node:
                # ONNX Runtime answers an empty graph with one of its C++ signatures: say what it is.
                graph = model.graph
                if not state.get("torch_outputs") and "load_facts" in state:
                    methods = state["load_facts"].get("entry_methods") or []
                    raise StageFailed(
                        "forward() returns no tensor with the example inputs (None), so the export holds "
                        f"nothing: the graph has no nodes and {len(graph.output)} output(s), and ONNX Runtime "
                        "builds no session for it"
                        + (f"; the model's {', '.join(m + '()' for m in methods)} take the example inputs"
                           if methods else ""),
                        "OD499",
                    ) from exc
                raise StageFailed(
                    f"the graph has no nodes ({len(graph.input)} input(s), {len(graph.output)} output(s), "
                    f"{len(graph.initializer)} initializer(s)): ONNX Runtime builds no session for it",
                    "OD499",
                ) from exc
            raise StageFailed(exception_text(exc), None, **facts) from exc
        state["session"] = session
        return {
            "providers": session.get_providers(),
            "session_inputs": [
                {"name": i.name, "type": i.type, "shape": [jsonable_dim(d) for d in i.shape]}
                for i in session.get_inputs()
            ],
        }

    # ---- ORT_RUN -------------------------------------------------------------------------

    def _stage_script_ort_run(self, state: dict[str, Any]) -> dict[str, Any]:
        loaded = state["loaded"]
        tensors = tensor_leaves((loaded.args, loaded.kwargs))
        feeds = feeds_for_session(state["session"], tensors)
        state["ort_outputs"] = run_session(state["session"], feeds)
        names = [i.name for i in state["session"].get_inputs()]
        return {"outputs": len(state["ort_outputs"]), "example_tensors": len(tensors), "model_inputs": names}

    def _stage_onnx_ort_run(self, state: dict[str, Any]) -> dict[str, Any]:
        feeds, described = random_feeds(state["session"], self.request.input_shapes,
                                         self.request.max_input_bytes)
        state["ort_outputs"] = run_session(state["session"], feeds)
        facts: dict[str, Any] = {"inputs": described, "outputs": len(state["ort_outputs"])}
        reference = next((r.reference for r in state["recipe"].all(RewriteOnnx) if r.reference), None)
        if reference is not None:
            facts.update(compare_with_reference(state, reference, feeds, self.request.atol, self.request.rtol))
        return facts

    # ---- PARITY --------------------------------------------------------------------------

    def _tolerance(self, state: dict[str, Any]) -> tuple[float, float]:
        """The comparison's atol and rtol: the request's, or quantization's for a model quantized
        by the fix (a quantized model against a quantized one), at the example and other sizes alike."""
        quantize = state["recipe"].first(QuantizeOnnx)
        if quantize is None:
            return self.request.atol, self.request.rtol
        from onnxdoctor.worker.fixkit import quantization_atol

        return quantization_atol(state["torch_outputs"], quantize.tolerance), 0.0

    def _stage_parity(self, state: dict[str, Any]) -> dict[str, Any]:
        from onnxdoctor.worker.parity import compare_outputs, compare_prefix

        atol, rtol = self._tolerance(state)
        quantize = state["recipe"].first(QuantizeOnnx)
        prefix = state["recipe"].first(PrefixParity) is not None
        report = (compare_prefix if prefix else compare_outputs)(state["torch_outputs"], state["ort_outputs"], atol, rtol)
        if quantize is not None:
            report["tolerance"] = f"quantization: {quantize.tolerance:.0%} of the largest output ({atol:.3g})"
            if report["code"] == "OD601":
                from onnxdoctor.worker.fixkit import FLOAT_ANCHOR_FACTOR, float_anchored

                # Small outputs make a fraction of them too tight: then both models are measured
                # against the float one, and the ONNX one may not stray further than allowed.
                anchored = float_anchored(state["loaded"], state["torch_outputs"], state["ort_outputs"])
                if anchored is not None and anchored["passed"]:
                    report.update(code=None, message="")
                    report["tolerance"] = (
                        f"quantization: against the float model ONNX Runtime's quantized model errs by at most "
                        f"{anchored['runtime_error']:.3g}, PyTorch's by {anchored['pytorch_error']:.3g} "
                        f"(allowed: {FLOAT_ANCHOR_FACTOR:g}x PyTorch's)")
        # A model in training mode with dropout or batch norm differs for that reason: the
        # search for a diverging node would only find the first such module, at a high cost.
        explained = bool(state.get("load_facts", {}).get("training")
                         and state.get("load_facts", {}).get("mode_sensitive_modules"))
        if report["code"] == "OD601" and not explained and quantize is None:
            drawn = self._in_distribution(state, atol, rtol)
            if drawn is not None:
                report["random"] = drawn
                if drawn["matched"]:
                    # One run against one run says nothing when both draw: the runs agree in distribution.
                    report.update(code=None, message="", max_abs_diff=None, max_rel_diff=None)
                    state["random_outputs"] = set(drawn.get("varying_outputs") or ())
                else:
                    report["message"] += f"; {drawn['message']}"
        if report["code"] == "OD601" and not explained and quantize is None and not prefix:
            from onnxdoctor.worker.parity import OWN_ROUNDING_FACTOR, own_rounding

            # PyTorch's float32 result may itself be off by more than the tolerance (an
            # ill-conditioned inverse): then both are measured against PyTorch's float64 run.
            loaded = state["loaded"]
            if state.get("state_hook") is not None:
                state["pristine"]()  # the float64 copy starts from the state the first call found
            own = own_rounding(loaded.model, loaded.args, loaded.kwargs or {}, state["torch_outputs"],
                               state["ort_outputs"], atol, rtol)
            if own is not None and own["passed"]:
                report.update(code=None, message="")
                report["tolerance"] = (
                    f"PyTorch's own float32 rounding: against its float64 run of the model, ONNX Runtime errs by at "
                    f"most {own['runtime_error']:.3g}, PyTorch in float32 by {own['pytorch_error']:.3g} "
                    f"(allowed at each element: {OWN_ROUNDING_FACTOR:g}x PyTorch's error there, plus the tolerance)")
        writes = state.get("load_facts", {}).get("state_writes")
        tensors = [w for w in writes or () if w.get("tensor")]
        if report["code"] == "OD601" and tensors and "ort_outputs" in state and state.get("onnx_program") is None:
            later = False
            with contextlib.suppress(Exception):  # a model that refuses a second call: not judged
                later = one_call_later(state, atol, rtol)
            if later:
                where = next((w["source"] for w in tensors if w.get("source")), None)
                # "call": PyTorch's call that differs (the first; ONNX Runtime's matches the second).
                raise StageFailed(one_call_later_message(writes, report), "OD601",
                                  **({"source": where} if where else {}),
                                  stateful={"writes": writes, "tensor_state": [w["name"] for w in tensors], "call": 1},
                                  max_abs_diff=report.get("max_abs_diff"), max_rel_diff=report.get("max_rel_diff"),
                                  outputs=report.get("outputs") or [])
        if report["code"] is None and writes and "ort_outputs" in state:
            # The first call matched; the state forward() writes may make a later one differ.
            try:
                found = consecutive_calls(state, atol, rtol)
            except Exception as exc:  # the model refused to be called again: said, not judged
                found = None
                report["state_check"] = f"not checked: {exception_text(exc)}"
            if found is not None:
                where = next((w["source"] for w in writes if w.get("source")), None)
                raise StageFailed(stateful_message(writes, found), "OD601",
                                  **({"source": where} if where else {}),
                                  stateful={"writes": writes, "tensor_state": [w["name"] for w in tensors],
                                            "call": found["call"]},
                                  **{k: v for k, v in found.items() if k not in ("call", "message")})
            if "state_check" not in report:
                report["state_writes_harmless"] = [w["name"] for w in writes]
        if report["code"]:
            facts = {k: v for k, v in report.items() if k not in ("code", "message")}
            searchable = state.get("onnx_program") is not None or (
                state.get("exporter") == "torchscript" and state.get("onnx_path") is not None)
            torchscript = state.get("onnx_program") is None
            if searchable and not explained and (report["code"] in ("OD601", "OD604") or torchscript):
                # An output of another dtype (OD604): there a type that differs is the difference.
                state["dtype_differs"] = report["code"] == "OD604"
                budget = self.request.localize_budget
                atol, rtol = self.request.atol, self.request.rtol
                try:
                    with time_limit(budget):
                        # TorchScript: the user's symbolics first (their calls compared one by one),
                        # then the modules; dynamo: every intermediate value.
                        found = first_diverging_symbolic(state, atol, rtol) if torchscript else None
                        if found is None and report["code"] == "OD601" and torchscript:
                            # Then every aten op's nodes against the trace; then the modules.
                            searched = False
                            with contextlib.suppress(Exception):
                                found = first_diverging_traced(state, atol, rtol)
                                searched = True
                            found = found or first_diverging_module(state, atol, rtol, self.code)
                            if found is None and searched:
                                # Every value the trace search compared agreed: the output's own node.
                                found = output_producer(state, report)
                        elif found is None and report["code"] == "OD601":
                            # Every intermediate value agreeing, the output's own node (a graph
                            # output takes the script's output name, so it is not compared there).
                            found = first_diverging_value(state, atol, rtol) or output_producer(state, report)
                        elif found is None and report["code"] == "OD604":
                            # An output of another dtype: in a TorchScript export, the first call
                            # whose result's type differs from PyTorch's (a CumSum kept in int32
                            # where PyTorch promotes to int64, a clamp after it); else, and with
                            # the dynamo exporter, the node that writes the output.
                            if torchscript:
                                with contextlib.suppress(Exception):
                                    found = first_diverging_traced(state, atol, rtol)
                            found = found or output_producer(state, report)
                        elif found is None and report["code"] == "OD603" and torchscript:
                            # An output of another shape: the first call whose result's shape differs.
                            with contextlib.suppress(Exception):
                                found = first_diverging_traced(state, atol, rtol, shapes=True)
                        if isinstance(found, dict) and found.get("random") and "random" in report:
                            found["in_distribution"] = report["random"].get("matched")
                        facts["diverging"] = found
                except OutOfTime:
                    facts["diverging_skipped"] = f"over the --localize-budget of {budget:g} s"
                except Exception:  # best effort: the mismatch itself is reported either way
                    pass
            if torchscript and state.get("loaded") is not None:
                # Functions traced through their forward: what they computed outside PyTorch is
                # frozen (the function_kernel fix family gives them a node and a kernel).
                with contextlib.suppress(Exception):
                    facts["traced_functions"] = traced_functions(state["loaded"], self.code)
            raise StageFailed(report["message"], report["code"], **facts)
        for step in state["recipe"].steps:
            match step:
                case StateCheck():
                    # The model exported with its state as inputs and outputs: calls in a row, the
                    # state carried, are the test.
                    report["state_calls"] = check_state_steps(state["session"], state["loaded"], step,
                                                              self.request.atol, self.request.rtol)
                case DecodeCheck():
                    # A decoder exported with its cache: generation, not one forward pass, is the test.
                    encoder = self.workdir / f"encoder-{os.getpid()}-{time.monotonic_ns()}.onnx"
                    report["decode"] = check_decoding(state["session"], state["loaded"].model, step,
                                                      self.request.atol, self.request.rtol, encoder)
        # A module picked from a list by a tensor is frozen too, and the tracer does not warn.
        frozen = (state.get("exporter") == "torchscript"
                  and (any(FROZEN_TRACE in w for w in state.get("export_warnings", ()))
                       or bool(state.get("export_facts", {}).get("module_indices"))))
        if self.request.other_inputs:
            report["other_inputs_required"] = True  # a fix for a finding there: unchecked is not verified
        loaded = state.get("loaded")
        own_inputs = loaded is not None and callable(loaded.namespace.get("get_inputs2"))
        if frozen or self.request.other_inputs or own_inputs:
            # The tracer froze a value, or the fix answers a finding at other inputs: a match at
            # the example input says nothing about others. The script's own get_inputs2() is
            # checked in any case: inputs it says the model takes, which the export may refuse.
            # Outputs that matched only in distribution are compared in distribution there too
            # (one run against one run cannot tell a frozen branch from the draws).
            random = "random_outputs" in state
            with contextlib.suppress(Exception):
                # At the tolerance of this comparison (a quantized fix's, where there is one).
                report["second_inputs"] = second_input_check(
                    state, atol, rtol, None if random or not frozen else self._retrace(state), self.code,
                    derived=frozen or self.request.other_inputs,
                    compare=self._distribution_comparer(state, atol, rtol) if random else None, prefix=prefix,
                    budget=self.request.localize_budget)
            if frozen and loaded is not None and (report.get("second_inputs") or {}).get("matched") is False:
                # A value frozen inside a Function the tracer inlined (a compiled extension's
                # sampling read through numpy): the function_kernel family gives it a node.
                with contextlib.suppress(Exception, OutOfTime), time_limit(self.request.localize_budget):
                    report["traced_functions"] = traced_functions(loaded, self.code)
        return report

    def _distribution_comparer(self, state: dict[str, Any], atol: float, rtol: float,
                               ) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
        """A judge of one other input set for outputs that draw random numbers: both sides run
        many times there and compared in distribution, as PARITY compared the example."""
        # The sets share what PARITY may spend on one search (up to four sets).
        budget = min(self.request.localize_budget, 20.0) / 2

        def compare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            found = _runs_in_distribution(state, args, kwargs, budget, atol, rtol)
            if found["matched"] is False:
                return {"code": "OD601", "message": f"differs in distribution: {found['message']}", "max_abs_diff": None}
            if found["matched"] is None:  # not judged (too slow): not called a match
                return {"code": "OD601", "message": found["message"], "max_abs_diff": None}
            return {"code": None, "message": "", "max_abs_diff": None}

        return compare

    def _in_distribution(self, state: dict[str, Any], atol: float, rtol: float) -> dict[str, Any] | None:
        """The outputs compared over many runs, where the exported graph draws random numbers
        (docs/ARCHITECTURE.md, "Random outputs"); None when it draws none."""
        from onnxdoctor.worker.randomness import random_ops

        model = state.get("onnx_model")
        drawn = random_ops(model) if model is not None else []
        if not drawn:
            return None
        loaded = state["loaded"]
        try:
            found = _runs_in_distribution(state, loaded.args, loaded.kwargs, min(self.request.localize_budget, 20.0),
                                          atol, rtol)
        except Exception as exc:  # best effort: the one-run mismatch is reported as it was
            return {"ops": drawn, "matched": None, "message": f"not compared in distribution: {exception_text(exc)}"}
        return {"ops": drawn, **found}

    # ---- SHAPES --------------------------------------------------------------------------

    def _stage_shapes(self, state: dict[str, Any]) -> dict[str, Any]:
        from onnxdoctor.worker.shapes import check_sizes

        declare = state["recipe"].first(DeclareDynamic)
        atol, rtol = self._tolerance(state)
        return check_sizes(
            state, atol=atol, rtol=rtol, explicit=self.request.size_sets,
            dynamo=state.get("exporter") == "dynamo",
            declared_extra=declare.dims if declare else (),
            sizes_from_fix=tuple({n: list(v) for n, v in s} for s in declare.sizes) if declare else (),
        )

    def _retrace(self, state: dict[str, Any]) -> Callable[[tuple[Any, ...], dict[str, Any]], Path] | None:
        """The export of this run again, traced at other inputs (None where it cannot be redone)."""
        if state["recipe"].first(RewriteOnnx) or "export_call" not in state:
            return None  # a rewritten file: a new trace would need the rewrite again
        model, kwargs = state["export_call"]

        def retrace(args: tuple[Any, ...], inputs: dict[str, Any]) -> Path:
            import torch

            from onnxdoctor.worker.fixkit import eager_export

            path = self.workdir / f"retrace-{os.getpid()}-{time.monotonic_ns()}.onnx"
            eager = state["recipe"].first(EagerExport)
            # Traced again as the fix traced it: its Functions, branch and kept values included.
            with quiet_torch_logs(), warnings.catch_warnings(), (
                eager_export(state["loaded"], eager)
                if eager else contextlib.nullcontext()
            ):
                warnings.simplefilter("ignore")
                torch.onnx.export(model, _onnx_args(state["recipe"], args), str(path),
                                  **{**kwargs, "kwargs": inputs or None})
            return path

        return retrace



# ---- helpers --------------------------------------------------------------------------------


def _onnx_args(recipe: Recipe, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The args as torch.onnx.export takes them: with recipe.TrailingDict, an empty dict after
    them, so a dict that is forward()'s last positional argument is not read as keyword ones."""
    return (*args, {}) if recipe.first(TrailingDict) is not None else tuple(args)


# Protobuf refuses messages of 2 GiB; stay well below it when writing a rewritten model inline.
_INLINE_WEIGHTS_LIMIT = 1 << 30
# The TorchScript file writer's refusal of a type ONNX cannot hold, naming no node.
_UNEXPECTED_TYPE = re.compile(r"ScalarType (\w+) is an unexpected tensor scalar type")


