"""The pipeline stages, run inside the worker process: the only place torch and onnxruntime load.

Each stage returns an outcome record and never raises; the first failure ends the run. Records
are appended to the events file as they happen, so a crash or a kill still leaves the parent
the last stage reached.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import math
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onnxdoctor.errors import CodedError
from onnxdoctor.worker.protocol import (
    PARENT_PID_ENV,
    WorkerRequest,
    WorkerResult,
    append_event,
    read_events,
)

STAGES_SCRIPT = ("load", "export", "check", "ort_load", "ort_run", "parity")
STAGES_ONNX = ("load", "check", "ort_load", "ort_run")


class StageFailed(CodedError):
    """A stage found a problem it can describe precisely (a code hint and facts)."""

    def __init__(self, message: str, code: str | None = None, **facts: Any) -> None:
        super().__init__(code, message)
        self.facts = facts


def exception_chain(
    exc: BaseException, *, limit: int = 64, hidden_context: bool = False
) -> list[BaseException]:
    """`exc` and its causes, outermost first, each once.

    `raise ... from None` hides the context from what is reported (`hidden_context` False); the
    searches for the user's line look behind it too, since torch re-raises that way from its own
    frames while the user's frame sits in the hidden context.
    """
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < limit:
        seen.add(id(current))
        chain.append(current)
        hide = current.__suppress_context__ and not hidden_context
        current = current.__cause__ or (None if hide else current.__context__)
    return chain


def error_info(exc: BaseException) -> dict[str, Any]:
    """Reduce an exception and its cause/context chain to plain data."""
    chain: list[str] = []
    messages: list[str] = []
    for current in exception_chain(exc, limit=12):
        chain.append(f"{type(current).__module__}.{type(current).__qualname__}")
        try:
            messages.append(str(current)[:8000])
        except Exception:  # a user exception whose __str__ raises
            messages.append(f"<{type(current).__name__}: message unavailable>")
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    return {
        "type": chain[0],
        "message": messages[0],
        "chain": chain,
        "chain_messages": messages[1:],
        "traceback_tail": tail[-6000:],
    }


class Runner:
    """Runs the stages for one request; `run_once` can be repeated for fix re-runs."""

    def __init__(self, request: WorkerRequest) -> None:
        self.request = request
        self.target = Path(request.target)
        self.workdir = Path(request.workdir)
        self._kernels_registered: set[str] = set()
        self._snippets = 0

    def _run_snippet(self, code: str, name: str, loaded: Any) -> dict[str, Any]:
        """Run a fix's code as the user would paste it into their script: with its globals.

        The code runs from a real file because onnxscript reads function source with inspect.
        """
        import runpy

        import torch

        self._snippets += 1
        path = self.workdir / f"{name}_{os.getpid()}_{self._snippets}.py"
        path.write_text(code, "utf-8")
        scope: dict[str, Any] = dict(loaded.namespace) if loaded is not None else {}
        scope.pop("__file__", None)
        scope.update(torch=torch)
        if loaded is not None:
            scope.update(model=loaded.model, example_inputs=loaded.args)
        return runpy.run_path(str(path), init_globals=scope)

    def emit(self, event: dict[str, Any]) -> None:
        append_event(self.request.events_path, event)

    # ---- the generic stage wrapper -------------------------------------------------------

    def stage(self, name: str, fn: Callable[[], dict[str, Any] | None], run_id: str) -> dict[str, Any]:
        self.emit({"event": "start", "stage": name, "run": run_id, "time": time.time()})
        started = time.perf_counter()
        record: dict[str, Any] = {"event": "stage", "run": run_id, "stage": name}
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                facts = fn() or {}
            record.update(status="passed", facts=facts)
        except StageFailed as exc:
            # Report the library's own exception, not our wrapper, when there is one.
            original = exc.__cause__ if exc.code is None and exc.__cause__ is not None else exc
            record.update(status="failed", error=error_info(original), facts=dict(exc.facts))
            if exc.code:
                record["facts"]["code"] = exc.code
        except SystemExit as exc:
            record.update(status="failed", error=error_info(exc), facts={"code": "OD109", "exit_code": str(exc.code)})
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the user's code may raise anything
            record.update(status="failed", error=error_info(exc), facts={})
        record["seconds"] = round(time.perf_counter() - started, 4)
        record["warnings"] = _warning_texts(caught)
        self.emit(record)
        return record

    # ---- a whole run ---------------------------------------------------------------------

    def run_once(
        self, run_id: str, fix: dict[str, Any] | None = None, reuse: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Run the stages; with `reuse`, take LOAD's results from an earlier run of this process.

        Re-importing the script would register its custom ops twice, which torch refuses, so
        in-process fix re-runs reuse the loaded model; fixes that change the model or torch's
        global registries run in a fresh worker instead.
        """
        state: dict[str, Any] = {"fix": fix or {}}
        names = STAGES_SCRIPT if self.request.kind == "script" else STAGES_ONNX
        records: list[dict[str, Any]] = []
        if reuse is not None and self.request.kind == "onnx" and state["fix"].get("onnx_transform"):
            reuse = None  # a file's rewrite happens in LOAD: read the file again (cheap)
        if reuse is not None:
            # A script's fix run exports anew (and sets onnx_path); a file's reads the same file.
            for key in ("loaded", "torch_outputs", "onnx_model", "onnx_path", "load_facts"):
                if key in reuse:
                    state[key] = reuse[key]
            facts = {**reuse.get("load_facts", {}), "reused": True}
            self.emit({"event": "stage", "run": run_id, "stage": "load", "status": "passed",
                       "seconds": 0.0, "facts": facts, "warnings": []})
            names = names[1:]
        if self.request.load_only and reuse is None:
            names = names[:1]
        if self.request.skip_check:
            names = tuple(n for n in names if n != "check")
        for name in names:
            fn = getattr(self, f"_stage_{self.request.kind}_{name}", None) or getattr(self, f"_stage_{name}")
            record = self.stage(name, lambda fn=fn: fn(state), run_id)
            records.append(record)
            if record["status"] != "passed":
                break
        self.emit({"event": "run_done", "run": run_id})
        return records, state

    # ---- LOAD ----------------------------------------------------------------------------

    def _stage_script_load(self, state: dict[str, Any]) -> dict[str, Any]:
        import torch

        from onnxdoctor.worker.loader import ProtocolError, ScriptExited, load_script

        torch.manual_seed(0)
        try:
            loaded = load_script(self.target, self.request.factory)
        except ProtocolError as exc:
            raise StageFailed(str(exc), exc.code) from None
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
                f"{self.target.name} raised {type(exc).__name__} {_where_in_script(exc, self.target)}: {exc}",
                "OD104",
                source=_user_frame(exc, self.target),
                raised=info["type"],
            ) from exc
        model = loaded.model
        fix = state["fix"]
        if fix.get("eval"):
            model.eval()
        state["loaded"] = loaded
        facts: dict[str, Any] = {
            "factory": loaded.factory,
            "model_class": type(model).__qualname__,
            "training": bool(getattr(model, "training", False)),
            "mode_sensitive_modules": _mode_sensitive_modules(model),
            "settings": {k: _jsonable(v) for k, v in loaded.settings.items()},
            "inputs": [_describe(t) for t in _tensor_leaves((loaded.args, loaded.kwargs))],
        }
        facts["custom_symbolics"] = _custom_symbolics()
        facts["fingerprint"] = _fingerprint(model, loaded)
        expected = self.request.expected_fingerprint
        if expected is not None and facts["fingerprint"]["hash"] != expected:
            raise StageFailed(
                f"{self.target.name} built a different model on this import than on the first "
                f"({facts['fingerprint']['summary']}): the script is not deterministic across imports "
                "(random weights without a fixed seed, time, files it reads), so a fix checked on this "
                "model would not be a fix of yours",
                "OD114",
                **facts,
            )
        reference_model = copy.deepcopy(model) if facts["training"] else model
        torch.manual_seed(0)
        try:
            with torch.no_grad():
                outputs = reference_model(*loaded.args, **loaded.kwargs)
        except BaseException as exc:
            raise StageFailed(
                f"forward() raised {type(exc).__name__} with the example inputs: {_first(exc)}",
                "OD108",
                source=_user_frame(exc, self.target),
                **facts,
            ) from exc
        state["torch_outputs"] = _tensor_leaves(outputs)
        facts["outputs"] = [_describe(t) for t in state["torch_outputs"]]
        facts["none_outputs"] = _none_leaves(outputs)
        state["load_facts"] = facts
        return facts

    def _stage_onnx_load(self, state: dict[str, Any]) -> dict[str, Any]:
        from onnxdoctor.onnxfile import OnnxFileError, check_external_data, read_onnx

        transform = state["fix"].get("onnx_transform")
        try:
            # Weights stay on disk unless a rewrite must carry them into a new file: checking needs
            # none, and ORT_LOAD hands them to ONNX Runtime as arrays (see _runtime_source).
            model = read_onnx(self.target, load_external_data=bool(transform))
            # read_onnx resolves a symlinked model to its real folder: external data lives there.
            problems = check_external_data(model, self.target.resolve().parent)
        except OnnxFileError as exc:
            raise StageFailed(exc.message, exc.code) from None
        if problems:
            raise StageFailed(problems[0].message, problems[0].code)
        if transform:
            model, path = self._rewrite(model, transform, state)
            state["onnx_path"] = path
        state["onnx_model"] = model
        facts = _model_facts(model)
        if transform:
            facts["onnx_path"] = str(path)
        return facts

    def _rewrite(self, model: Any, transform: dict[str, Any], state: dict[str, Any]) -> tuple[Any, Path]:
        """Apply a fix's ONNX rewrite; keep the original (a reference) and save the result."""
        import onnx

        from onnxdoctor.onnx_transforms import TransformError, apply_transform

        state["original_model"] = model
        try:
            fixed = apply_transform(model, transform)
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
        fix = state["fix"]
        settings = loaded.settings
        dynamo = self._choose_dynamo(settings, fix)
        opset = fix.get("opset") or self.request.opset or settings.get("opset_version")
        path = self.workdir / f"model-{os.getpid()}-{time.monotonic_ns()}.onnx"
        namespace: dict[str, Any] = {}
        if fix.get("prelude"):
            namespace = self._run_snippet(fix["prelude"], f"fix_{fix.get('kind', 'x')}", loaded)
        kwargs: dict[str, Any] = {
            "kwargs": loaded.kwargs or None,
            "dynamo": dynamo,
            "opset_version": opset,
            "input_names": settings.get("input_names"),
            "output_names": settings.get("output_names"),
        }
        if dynamo:
            shapes = _renamed_keys(settings.get("dynamic_shapes"), fix.get("dynamic_shapes_rename"))
            kwargs["dynamic_shapes"] = _with_suggested_dims(shapes, fix.get("dynamic_shapes_suggested") or ())
            table = namespace.get(fix.get("translation_table_var") or "", None)
            if table:
                kwargs["custom_translation_table"] = table
        if fix.get("custom_opsets") and not dynamo:
            kwargs["custom_opsets"] = dict(fix["custom_opsets"])
        if fix.get("operator_export_type"):
            kwargs["operator_export_type"] = getattr(
                torch.onnx.OperatorExportTypes, fix["operator_export_type"]
            )
        model_or_program: Any = loaded.model
        if fix.get("program_var"):
            # The fix built an ExportedProgram itself (e.g. run_decompositions): export that.
            model_or_program = namespace[fix["program_var"]]
        facts: dict[str, Any] = {
            "exporter": "dynamo" if dynamo else "torchscript",
            "requested_opset": opset,
        }
        state["exporter"] = facts["exporter"]
        try:
            with _quiet_torch_logs():
                state["onnx_program"] = torch.onnx.export(model_or_program, loaded.args, str(path), **kwargs)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            facts.update(self._export_failure_facts(exc, loaded, dynamo))
            raise StageFailed(_first(exc), None, **facts) from exc
        import onnx

        model = onnx.load(str(path), load_external_data=False)
        if fix.get("onnx_transform"):
            # A rewrite of the exported file (a cast, a newer IR stamp): compared with PyTorch as usual.
            model, path = self._rewrite(model, fix["onnx_transform"], state)
        state["onnx_path"] = path
        state["onnx_model"] = model  # CHECK reuses it: weights are not needed to check
        facts.update(_model_facts(model))
        facts["onnx_path"] = str(path)
        sources = _node_sources(model, self.target)
        if sources:
            facts["node_sources"] = sources
        if dynamo and kwargs.get("dynamic_shapes") is not None:
            facts["dynamic_shapes_requested"] = True
            facts["symbolic_input_dims"] = sum(
                1 for i in model.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param
            )
            facts.update(_torch_export_verdict(loaded, kwargs["dynamic_shapes"]))
        if not dynamo:
            from torch.onnx import _constants

            facts["exporter_max_opset"] = _constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET
        return facts

    def _choose_dynamo(self, settings: dict[str, Any], fix: dict[str, Any]) -> bool:
        import torch

        choice = fix.get("exporter") or self.request.exporter
        if choice:
            return choice == "dynamo"
        if "dynamo" in settings:
            return bool(settings["dynamo"])
        return bool(inspect.signature(torch.onnx.export).parameters["dynamo"].default)

    def _export_failure_facts(self, exc: BaseException, loaded: Any, dynamo: bool) -> dict[str, Any]:
        """Op, node, source line and registry facts for an export failure (best effort)."""
        from onnxdoctor.classify import extract_op

        info = error_info(exc)
        op = extract_op("\n".join([info["message"], *info["chain_messages"]]))
        facts: dict[str, Any] = {"source": _user_frame(exc, self.target)}
        symbolic = _symbolic_frame(exc, self.target)
        if symbolic:
            # The failure happened inside the user's own symbolic function, called by torch.onnx.
            facts["symbolic_frame"] = symbolic
            facts["source"] = symbolic["source"]
            owners = [op for op, fn in _custom_symbolics().items() if fn == symbolic["function"]]
            if owners and not op:
                op = owners[0]
                facts["op"] = op
        if op:
            facts["op"] = op
        if op and not symbolic:
            located = _source_from_frames(exc, self.target)
            if located:
                facts["source"] = located
            else:  # costs a torch.export: only when the exporter's own frames did not tell
                with contextlib.suppress(Exception):
                    facts.update(_locate_op(loaded, op, self.target))
            if self.request.gather_facts:
                with contextlib.suppress(Exception):
                    from onnxdoctor.worker.registry import op_facts

                    facts["op_facts"] = op_facts(op, "dynamo" if dynamo else "torchscript")
        return facts

    # ---- CHECK ---------------------------------------------------------------------------

    def _stage_check(self, state: dict[str, Any]) -> dict[str, Any]:
        import onnx

        from onnxdoctor.checks import check_model

        model = state.get("onnx_model")
        if model is None:
            model = onnx.load(str(state["onnx_path"]), load_external_data=False)
        state["onnx_model"] = model
        findings = check_model(model, model_dir=str(self.target.parent))
        records = [_finding_record(f) for f in findings]
        for record in records:
            if "is higher than the checker's" in record["message"]:
                # The onnx library is older than the model; only the runtime load can tell more.
                record["severity"] = "warning"
        errors = [r for r in records if r["severity"] == "error"]
        if errors:
            raise StageFailed(errors[0]["message"], errors[0]["code"], findings=records)
        return {"findings": records}

    # ---- ORT_LOAD ------------------------------------------------------------------------

    def _stage_ort_load(self, state: dict[str, Any]) -> dict[str, Any]:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        fix = state["fix"]
        libraries = list(self.request.custom_op_libraries)
        loaded = state.get("loaded")
        if loaded is not None:
            libraries += [str(p) for p in loaded.settings.get("custom_op_libraries", ())]
        libraries += list(fix.get("custom_op_libraries", ()))
        if fix.get("ort_prelude") and fix["ort_prelude"] not in self._kernels_registered:
            # onnxruntime-extensions keeps Python kernels in a process-wide table: register once.
            self._run_snippet(fix["ort_prelude"], f"kernel_{fix.get('kind', 'x')}", None)
            self._kernels_registered.add(fix["ort_prelude"])
        if fix.get("ort_extensions"):
            from onnxruntime_extensions import get_library_path

            libraries.append(get_library_path())
        for library in libraries:
            try:
                options.register_custom_ops_library(str(library))
            except Exception as exc:
                raise StageFailed(
                    f"custom-op library {Path(library).name} failed to load: {_first(exc)}",
                    "OD405",
                    library=str(library),
                ) from exc
        if "onnx_path" in state:
            source: Any = str(state["onnx_path"])  # our own export or rewrite, in the work folder
        else:
            source, names, values = _runtime_source(state["onnx_model"], self.target.resolve().parent)
            if names:
                options.add_external_initializers(names, values)
        try:
            session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            facts = {}
            with contextlib.suppress(Exception):
                model = state.get("onnx_model")
                if model is None and "onnx_path" in state:
                    import onnx

                    model = onnx.load(str(state["onnx_path"]), load_external_data=False)
                facts = _kernel_facts(str(exc), model)
            model = state.get("onnx_model")
            if model is not None and not model.graph.node:
                # ONNX Runtime answers an empty graph with one of its C++ signatures: say what it is.
                graph = model.graph
                raise StageFailed(
                    f"the graph has no nodes ({len(graph.input)} input(s), {len(graph.output)} output(s), "
                    f"{len(graph.initializer)} initializer(s)): ONNX Runtime builds no session for it",
                    "OD499",
                ) from exc
            raise StageFailed(_first(exc), None, **facts) from exc
        state["session"] = session
        return {
            "providers": session.get_providers(),
            "session_inputs": [
                {"name": i.name, "type": i.type, "shape": [_dim(d) for d in i.shape]}
                for i in session.get_inputs()
            ],
        }

    # ---- ORT_RUN -------------------------------------------------------------------------

    def _stage_script_ort_run(self, state: dict[str, Any]) -> dict[str, Any]:
        loaded = state["loaded"]
        tensors = _tensor_leaves((loaded.args, loaded.kwargs))
        feeds = _feeds_for_session(state["session"], tensors)
        state["ort_outputs"] = _run_session(state["session"], feeds)
        names = [i.name for i in state["session"].get_inputs()]
        return {"outputs": len(state["ort_outputs"]), "example_tensors": len(tensors), "model_inputs": names}

    def _stage_onnx_ort_run(self, state: dict[str, Any]) -> dict[str, Any]:
        feeds, described = _random_feeds(state["session"], self.request.input_shapes,
                                         self.request.max_input_bytes)
        state["ort_outputs"] = _run_session(state["session"], feeds)
        facts: dict[str, Any] = {"inputs": described, "outputs": len(state["ort_outputs"])}
        transform = state["fix"].get("onnx_transform") or {}
        if transform.get("reference_opset") or transform.get("reference") == "onnx.reference":
            facts.update(self._compare_with_reference(state, transform, feeds))
        return facts

    def _compare_with_reference(
        self, state: dict[str, Any], transform: dict[str, Any], feeds: dict[str, Any]
    ) -> dict[str, Any]:
        """A rewritten file's outputs against the original model's, computed another way.

        A .onnx target has no PyTorch to compare with. A function expansion is compared with the op
        itself, run by ONNX Runtime at the opset that defines it (only the opset import changes:
        the other ops keep their meaning for a comparison on these inputs); a rewrite of a model
        ONNX Runtime cannot run (a cast around an op without a kernel) with onnx's own reference
        evaluator, on models small enough for it.
        """
        from onnxdoctor.onnx_transforms import with_opset_import
        from onnxdoctor.worker.parity import compare_outputs

        original = state["original_model"]
        try:
            if transform.get("reference_opset"):
                import onnxruntime as ort

                opset = int(transform["reference_opset"])
                name = f"the original model at opset {opset}"
                options = ort.SessionOptions()
                options.log_severity_level = 3
                session = ort.InferenceSession(
                    with_opset_import(original, opset).SerializeToString(), options,
                    providers=["CPUExecutionProvider"],
                )
                expected = list(session.run(None, feeds))
            else:
                from onnx.reference import ReferenceEvaluator

                name = "the original model in onnx's reference evaluator"
                if len(original.graph.node) > _REFERENCE_EVALUATOR_MAX_NODES:
                    return {"reference": f"not compared: {len(original.graph.node)} nodes is too many for "
                                         "onnx's reference evaluator",
                            "reference_required": bool(transform.get("reference_required"))}
                expected = list(ReferenceEvaluator(original).run(None, feeds))
        except Exception as exc:  # ORT and the evaluator raise their own types: any means no reference
            return {"reference": f"not compared: {name} does not run ({_first(exc)})",
                    "reference_required": bool(transform.get("reference_required"))}
        report = compare_outputs(expected, state["ort_outputs"], self.request.atol, self.request.rtol)
        return {
            "reference": name,
            "max_abs_diff": report["max_abs_diff"],
            "max_rel_diff": report["max_rel_diff"],
            "reference_mismatch": report["message"] or None,
        }

    # ---- PARITY --------------------------------------------------------------------------

    def _stage_parity(self, state: dict[str, Any]) -> dict[str, Any]:
        from onnxdoctor.worker.parity import compare_outputs

        report = compare_outputs(
            state["torch_outputs"], state["ort_outputs"], self.request.atol, self.request.rtol
        )
        if report["code"]:
            facts = {k: v for k, v in report.items() if k not in ("code", "message")}
            if report["code"] == "OD601" and state.get("onnx_program") is not None:
                with contextlib.suppress(Exception):
                    facts["diverging"] = self._first_diverging_value(state)
            raise StageFailed(report["message"], report["code"], **facts)
        return report

    def _first_diverging_value(self, state: dict[str, Any]) -> dict[str, Any] | None:
        """Compare every intermediate value with PyTorch's (dynamo exports name values after FX nodes)."""
        from torch.onnx import verification

        loaded = state["loaded"]
        with _quiet_torch_logs():
            infos = verification.verify_onnx_program(
                state["onnx_program"], loaded.args, loaded.kwargs or None, compare_intermediates=True
            )
        producers = {out: node for node in state["onnx_model"].graph.node for out in node.output}
        for info in infos:
            if info.max_abs_diff > self.request.atol and info.max_rel_diff > self.request.rtol:
                node = producers.get(info.name)
                return {
                    "value": info.name,
                    "node": node.name if node is not None else None,
                    "op": node.op_type if node is not None else None,
                    "max_abs_diff": float(info.max_abs_diff),
                    "max_rel_diff": float(info.max_rel_diff),
                    "compared": len(infos),
                }
        return None


# ---- helpers --------------------------------------------------------------------------------


def _run_session(session: Any, feeds: dict[str, Any]) -> list[Any]:
    try:
        return list(session.run(None, feeds))
    except Exception as exc:
        text = str(exc)
        code = "OD502" if ("INVALID_ARGUMENT" in text and "input" in text.lower()) else None
        raise StageFailed(_first(exc), code) from exc


def _feeds_for_session(session: Any, tensors: list[Any]) -> dict[str, Any]:
    inputs = session.get_inputs()
    arrays = [_to_numpy(t) for t in tensors]
    if len(arrays) < len(inputs):
        raise StageFailed(
            f"the model has {len(inputs)} inputs but the example inputs hold {len(arrays)} tensors",
            "OD502",
        )
    # Exporters drop unused inputs; a count mismatch then keeps the first ones in order.
    return {i.name: a for i, a in zip(inputs, arrays)}


def _to_numpy(tensor: Any) -> Any:
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


def _random_feeds(
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


def _kernel_facts(message: str, model: Any) -> dict[str, Any]:
    """For "Could not find an implementation", the types ONNX Runtime's kernel table lists."""

    from onnxdoctor.classify import NO_IMPLEMENTATION, NOT_REGISTERED_RT

    match = NO_IMPLEMENTATION.search(message)
    unregistered = NOT_REGISTERED_RT.search(message)
    if unregistered and model is not None:
        domain, op_type = unregistered.group(1), unregistered.group(2)
        for node in model.graph.node:
            if node.op_type == op_type and node.domain == domain:
                return {"node": node.name or None, "op": f"{domain}::{op_type}" if domain else op_type}
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
    if model is not None:
        node_types = _node_input_types(model, node)
    return {"op": op_type, "node": node, "op_version": version, "kernels": kernels, "node_types": node_types}


def _node_input_types(model: Any, node_name: str) -> dict[str, str]:
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
    for node in inferred.graph.node:
        if node.name == node_name:
            return {name: types.get(name, "?") for name in node.input if name}
    return {}


def _locate_op(loaded: Any, op: str, target: Path) -> dict[str, Any]:
    """Find the op's FX node through torch.export to learn the user's source line and call values."""
    import torch

    program = torch.export.export(loaded.model, loaded.args, kwargs=loaded.kwargs or None, strict=False)
    wanted = op.replace("::", ".")
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        name_of = getattr(node.target, "name", None)
        name = str(name_of() if callable(name_of) else node.target)
        if not (name == op or str(node.target).startswith(wanted) or name.startswith(op + ".")):
            continue
        facts: dict[str, Any] = {"fx_node": node.name}
        trace = node.meta.get("stack_trace") or ""
        source = _user_line_from_trace(trace, target)
        if source:
            facts["source"] = source
        facts["call_args"] = [_jsonable(a) if not isinstance(a, torch.fx.Node) else "<tensor>" for a in node.args]
        facts["call_kwargs"] = {
            k: (_jsonable(v) if not isinstance(v, torch.fx.Node) else "<tensor>") for k, v in node.kwargs.items()
        }
        return facts
    return {}


def _source_from_frames(exc: BaseException, target: Path) -> str | None:
    """The user's line from the node the exporter was converting when it failed.

    The TorchScript exporter's frames hold a `node` whose sourceRange() is the Python stack;
    the dynamo exporter's hold an FX `node` whose meta["stack_trace"] is.
    """
    for current in exception_chain(exc, hidden_context=True):
        tb = current.__traceback__
        while tb is not None:
            node = tb.tb_frame.f_locals.get("node")
            trace = ""
            with contextlib.suppress(Exception):
                if hasattr(node, "sourceRange"):
                    trace = str(node.sourceRange())
                elif hasattr(node, "meta"):
                    trace = str(node.meta.get("stack_trace") or "")
            found = _user_line_from_trace(trace, target) if trace else None
            if found:
                return found
            tb = tb.tb_next
    return None


def _where_in_script(exc: BaseException, target: Path) -> str:
    """'in get_model()' when a function of the script raised, 'while importing' for module code."""
    functions = [
        frame.name
        for frame in traceback.extract_tb(exc.__traceback__)
        if Path(frame.filename).resolve() == target.resolve() and frame.name != "<module>"
    ]
    return f"in {functions[0]}()" if functions else "while importing"


def _node_sources(model: Any, target: Path, limit: int = 5000) -> dict[str, str]:
    """Node name -> the user's line that produced it, from the stack traces dynamo stores."""
    sources: dict[str, str] = {}
    for node in model.graph.node:
        for prop in node.metadata_props:
            if prop.key == "pkg.torch.onnx.stack_trace" and node.name:
                line = _user_line_from_trace(prop.value, target)
                if line:
                    sources[node.name] = line
        if len(sources) >= limit:
            break
    return sources


def _user_line_from_trace(trace: str, target: Path) -> str | None:
    import re

    best = None
    for match in re.finditer(r'File "([^"]+)", line (\d+)', trace):
        path = Path(match.group(1))
        if path.resolve() == target.resolve() or path.parent.resolve() == target.parent.resolve():
            best = f"{path.name}:{match.group(2)}"
    return best


def _symbolic_frame(exc: BaseException, target: Path) -> dict[str, Any] | None:
    """The user's frame when torch.onnx called into the user's code and it failed there."""
    folder = target.resolve().parent
    seen_torch_onnx = False
    found = None
    for item in traceback.extract_tb(exc.__traceback__):
        filename = item.filename.replace("\\", "/")
        if "/torch/onnx/" in filename:
            seen_torch_onnx = True
            continue
        try:
            inside = Path(item.filename).resolve().parent == folder
        except (OSError, ValueError):
            inside = False
        if inside and seen_torch_onnx:
            found = {"source": f"{Path(item.filename).name}:{item.lineno}", "function": item.name,
                     "line": (item.line or "").strip()}
    return found


def _custom_symbolics() -> dict[str, str]:
    """Ops for which the user's script registered its own TorchScript symbolic -> function name."""
    try:
        from torch.onnx._internal.torchscript_exporter import registration
    except ImportError:
        return {}
    found: dict[str, str] = {}
    for name, group in registration.registry._registry.items():
        overrides = getattr(getattr(group, "_functions", None), "_overrides", None)
        if overrides:
            function = next(iter(overrides.values()))
            found[name] = getattr(function, "__name__", "")
    return dict(sorted(found.items()))


def _user_frame(exc: BaseException, target: Path) -> str | None:
    """The innermost frame inside the user's folder, as file:line, searching the cause chain.

    torch re-raises capture errors from its own frames; the user's line is in the original
    exception's traceback, or in the message (`File "model.py", line 5`).
    """
    folder = target.resolve().parent
    for current in exception_chain(exc, hidden_context=True):
        best = None
        for item in traceback.extract_tb(current.__traceback__):
            try:
                path = Path(item.filename).resolve()
            except (OSError, ValueError):
                continue
            if path.parent == folder:
                best = f"{path.name}:{item.lineno}"
        if best is None:
            best = _user_line_from_trace(str(current), target)
        if best is not None:
            return best
        if isinstance(current, SyntaxError) and current.lineno:
            return f"{target.name}:{current.lineno}"
    return None


def _runtime_source(model: Any, model_dir: Path) -> tuple[bytes, list[str], list[Any]]:
    """A user's model for ONNX Runtime without ever giving it a path to resolve (README, "Robustness").

    ONNX Runtime follows hard links in external data, so it gets the model as bytes and the
    external weights of the main graph as arrays that onnx read with its own containment checks
    (LOAD vetted every reference); the bytes then stay small, whatever the weights weigh.
    """
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    from onnx.external_data_helper import load_external_data_for_tensor

    from onnxdoctor.onnxfile import OnnxFileError, external_refs, load_external_weights

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
            raise StageFailed(f"external data of {tensor.name} could not be read: {_first(exc)}", "OD112") from None
        names.append(tensor.name)
        values.append(ort.OrtValue.ortvalue_from_numpy(numpy_helper.to_array(loaded)))
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


# onnx.reference runs node by node in numpy: fine for a check, slow for big graphs.
_REFERENCE_EVALUATOR_MAX_NODES = 2000

# Protobuf refuses messages of 2 GiB; stay well below it when writing a rewritten model inline.
_INLINE_WEIGHTS_LIMIT = 1 << 30


def _renamed_keys(dynamic_shapes: Any, rename: dict[str, str] | None) -> Any:
    """`dynamic_shapes` with its top-level keys renamed (a fix for keys forward() does not have)."""
    if not rename or not isinstance(dynamic_shapes, dict):
        return dynamic_shapes
    return {rename.get(key, key): value for key, value in dynamic_shapes.items()}


def _with_suggested_dims(dynamic_shapes: Any, suggestions: Any) -> Any:
    """`dynamic_shapes` refined by torch's own suggestions ("batch = Dim('batch', min=5)", "b = a").

    torch parses its suggestion text itself (the same call torch.onnx makes when it relaxes Dims).
    """
    if not suggestions:
        return dynamic_shapes
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    message = "Suggested fixes:\n" + "".join(f"  {line}\n" for line in suggestions)
    return refine_dynamic_shapes_from_suggested_fixes(message, dynamic_shapes)


def _torch_export_verdict(loaded: Any, dynamic_shapes: Any) -> dict[str, Any]:
    """torch.export's own verdict on the user's dynamic_shapes, which torch.onnx relaxes.

    torch.onnx lets the export specialize a Dim, or keep it symbolic while dropping the guard
    the model needs (batch >= 5), without a word: when its first capture raises a UserError about
    the Dims, it retries with torch's suggestions. The same first capture here keeps that error,
    which says which dim breaks what.
    """
    import torch

    try:
        # torch.onnx's own first attempt (its non-strict capture strategy), which it retries with
        # relaxed Dims when torch raises a UserError about them.
        from torch.onnx import _flags
        from torch.onnx._internal.exporter import _capture_strategies

        settings = (
            _capture_strategies._patch_dynamic_shape_rnn_decompositions(dynamic_shapes),
            torch.fx.experimental._config.patch(backed_size_oblivious=True),
        )
        deferred = {"prefer_deferred_runtime_asserts_over_guards": _flags.PREFER_DEFERRED_RUNTIME_ASSERTS_OVER_GUARDS}
    except (ImportError, AttributeError):  # another torch: a plain export is the nearest judge
        settings, deferred = (), {}
    try:
        with _quiet_torch_logs(), contextlib.ExitStack() as stack:
            for setting in settings:
                stack.enter_context(setting)
            torch.export.export(
                loaded.model, loaded.args, loaded.kwargs or None, dynamic_shapes=dynamic_shapes, strict=False,
                **deferred,
            )
    except torch._dynamo.exc.UserError as exc:  # the Dims are wrong; any other failure is not our verdict
        text = re.sub(r" For more information, run with TORCH_LOGS=\S+", "", str(exc))
        lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
        kept = [ln for ln in lines if "error above occurred" not in ln]
        suggested = [ln.strip() for ln in lines[lines.index("Suggested fixes:") + 1 :]] if "Suggested fixes:" in lines else []
        return {
            "dynamic_shapes_violation": "\n".join(kept[:8])[:1500],
            "dynamic_shapes_suggested": [ln for ln in suggested if re.fullmatch(r"\w+ = .+", ln)][:8],
        }
    except Exception:  # a capture failure torch.onnx got past another way: not about the Dims
        return {}
    return {}


def _model_facts(model: Any) -> dict[str, Any]:
    opsets = {imp.domain or "ai.onnx": imp.version for imp in model.opset_import}
    op_types = sorted({(n.domain or "ai.onnx") + "::" + n.op_type for n in model.graph.node})
    return {
        "ir_version": model.ir_version,
        "opset_imports": opsets,
        "written_opset": opsets.get("ai.onnx"),
        "node_count": len(model.graph.node),
        "op_types": op_types,
        "aten_nodes": [n.name for n in model.graph.node if n.op_type == "ATen"][:20],
        "graph_inputs": [i.name for i in model.graph.input],
        "graph_outputs": [o.name for o in model.graph.output],
    }


def _fingerprint(model: Any, loaded: Any) -> dict[str, str]:
    """What identifies the model a script built: class, tensors' names/shapes/dtypes and values,
    and the example inputs' signature; compared across the fresh imports that verify fixes."""
    import hashlib

    import torch

    digest = hashlib.sha256(type(model).__qualname__.encode())
    count = values = 0
    state = model.state_dict() if isinstance(model, torch.nn.Module) else {}
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            continue
        count += 1
        values += tensor.numel()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        try:
            raw = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            digest.update(raw.numpy().tobytes())
        except Exception:  # sparse, quantized or meta tensors: their signature has to do
            pass
    for tensor in _tensor_leaves((loaded.args, loaded.kwargs)):
        digest.update(f"input:{tuple(tensor.shape)}:{tensor.dtype};".encode())
    summary = f"{type(model).__qualname__}, {count} tensors, {values} values"
    return {"hash": digest.hexdigest()[:32], "summary": summary}


def _finding_record(finding: Any) -> dict[str, Any]:
    return {
        "code": finding.code,
        "severity": finding.severity.value,
        "message": finding.message,
        "op": finding.op,
        "node": finding.node,
        "opset": finding.opset,
        "evidence": list(finding.evidence),
        "source": finding.source,
    }


def _mode_sensitive_modules(model: Any) -> list[str]:
    import torch

    kinds = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._BatchNorm)
    found = []
    for name, module in model.named_modules():
        if isinstance(module, kinds):
            found.append(f"{name or '<root>'} ({type(module).__name__})")
    return found[:20]


def _tensor_leaves(value: Any) -> list[Any]:
    import torch
    import torch.utils._pytree as pytree

    leaves, _ = pytree.tree_flatten(value)
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _none_leaves(value: Any) -> int:
    """How many outputs PyTorch returns as None (exporters drop them from the graph)."""
    if value is None:
        return 0  # a bare None output is no output at all
    if isinstance(value, (tuple, list)):
        return sum(1 if item is None else _none_leaves(item) for item in value)
    if isinstance(value, dict):
        return sum(1 if item is None else _none_leaves(item) for item in value.values())
    return 0


def _describe(tensor: Any) -> dict[str, Any]:
    return {"shape": list(tensor.shape), "dtype": str(tensor.dtype).replace("torch.", "")}


def _dim(dim: Any) -> Any:
    return dim if isinstance(dim, int) else str(dim)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)[:200]


def _first(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text


def _warning_texts(caught: list[warnings.WarningMessage]) -> list[str]:
    texts: list[str] = []
    for item in caught:
        text = f"{item.category.__name__}: {item.message}"
        if text not in texts:
            texts.append(text[:1000])
    return texts[:30]


@contextlib.contextmanager
def _quiet_torch_logs() -> Any:
    """Keep torch's export logging out of the user's captured output where torch allows it."""
    import logging

    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _works(request: WorkerRequest, run_id: str) -> bool:
    """The parent's own verdict on a fix run (stages and remaining findings), to stop early."""
    from onnxdoctor.analysis.judge import fix_check

    return fix_check(_result_so_far(request), run_id, _target(request)).works


def _target(request: WorkerRequest) -> Any:
    from onnxdoctor.target import Target

    return Target(path=Path(request.target), factory=request.factory, kind=request.kind)


def _result_so_far(request: WorkerRequest) -> WorkerResult:
    events = list(read_events(request.events_path))
    return WorkerResult(events=events, returncode=None, ended_at=time.time(), timed_out=False, seconds=0.0)


def _plan(request: WorkerRequest) -> list[dict[str, Any]]:
    """The parent's own fix proposals for the main run, computed here (pure code, no second import)."""
    from onnxdoctor.analysis.judge import outcomes_for_run, prepare_findings, shared_fix_plan
    from onnxdoctor.model import DiagnoseOptions

    target = _target(request)
    options = DiagnoseOptions(exporter=request.exporter, opset=request.opset, all_fixes=request.all_fixes)
    outcomes, tool = outcomes_for_run(_result_so_far(request), "main", target, first_run=False)
    exporter = next((o.facts.get("exporter") for o in outcomes if o.stage.value == "export"), None)
    return shared_fix_plan(prepare_findings(outcomes, tool, target, options, exporter), options)


def _die_with_parent(workdir: str) -> None:
    """End this worker's whole group, and remove the run's folder, once the parent is gone.

    The parent can die without a chance to clean up (SIGKILL, the OOM killer); nothing would then
    bound this worker's time. A daemon thread polls the parent's pid.
    """
    import shutil
    import signal
    import threading

    try:
        parent = int(os.environ.get(PARENT_PID_ENV, ""))
    except ValueError:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        shutil.rmtree(workdir, ignore_errors=True)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="onnxdoctor-parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    """Worker entry point: `python -m onnxdoctor.worker REQUEST.json`."""
    import faulthandler

    faulthandler.enable(file=sys.stderr, all_threads=False)
    request = WorkerRequest.from_json(Path(argv[0]).read_text("utf-8"))
    _die_with_parent(request.workdir)
    runner = Runner(request)
    records, state = runner.run_once("main", request.apply_fix)
    if records and records[0]["status"] == "passed":
        for index, fix in enumerate(request.verify_fixes):
            runner.run_once(f"fix{index}", fix, reuse=state)
            if request.stop_on_success and _works(request, f"fix{index}"):
                break
        if request.plan_fixes and records[-1]["status"] != "passed":
            plan = _plan(request)
            append_event(request.events_path, {"event": "fix_plan", "recipes": plan})
            for index, fix in enumerate(plan):
                runner.run_once(f"plan{index}", fix, reuse=state)
                if request.stop_on_success and _works(request, f"plan{index}"):
                    break
    append_event(request.events_path, {"event": "done"})
    return 0
