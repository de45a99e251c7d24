"""The request, event and result formats both processes speak (plain JSON, standard library only)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from onnxdoctor.recipe import Recipe

# The parent's pid, in the worker's environment: the worker ends itself when that process is gone.
PARENT_PID_ENV = "ONNXDOCTOR_PARENT_PID"
# The worker's memory cap in MB, which it sets on itself first thing (0 or absent: none).
MEMORY_CAP_ENV = "ONNXDOCTOR_MAX_MEMORY_MB"


@dataclass(frozen=True)
class WorkerRequest:
    """Everything the worker needs to run the pipeline once (plus fix re-runs)."""

    target: str
    kind: str  # "script" | "onnx"
    workdir: str
    events_path: str
    factory: str | None = None
    exporter: str | None = None  # "dynamo" | "torchscript" | None: the script's setting, else torch's
    opset: int | None = None
    custom_op_libraries: tuple[str, ...] = ()
    atol: float = 1e-4
    rtol: float = 1e-3
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    # Cap on the inputs generated for a .onnx target from its declared shapes.
    max_input_bytes: int = 256 * 1024 * 1024
    # A fix recipe applied to the main run (the fix verification of a process-unsafe fix).
    apply_fix: Recipe | None = None
    # Fix recipes verified one after another in this process after the main run (safe ones).
    verify_fixes: tuple[Recipe, ...] = ()
    # Gather registry facts for failing ops (costs an import or two; off for fix re-runs).
    gather_facts: bool = True
    # Stop the main run after LOAD (fix verification only needs the loaded model).
    load_only: bool = False
    # Skip CHECK (graph --runtime checks in-process and wants the runtime's verdict regardless).
    skip_check: bool = False
    # Stop verifying fixes after the first one that reaches parity.
    stop_on_success: bool = False
    # After the main run, classify it, propose fixes and verify the in-process-safe ones here.
    plan_fixes: bool = False
    all_fixes: bool = False
    # The first load's model fingerprint: a fix worker that re-imports the script must build the
    # same model, or its verdict is about someone else's model (OD114).
    expected_fingerprint: str | None = None
    # Seconds the search for a mismatch's first diverging value may take; 0 skips it.
    localize_budget: float = 30.0
    # Deployment targets the worker runs itself after the main run (docs/targets.md): "openvino".
    targets: tuple[str, ...] = ()
    # The cap on the worker's memory in MB (0: none); the parent sets it, the worker names it.
    max_memory_mb: int = 0
    # The file the user's code is in, when the target is a script onnxdoctor wrote (the Python
    # API, docs/api.md): source lines point there; None: the target itself.
    source_file: str | None = None
    # `onnxdoctor reduce`: instead of the pipeline, search for the smallest model that fails the
    # same way (docs/reduce.md); None for every other request.
    reduce: ReduceSpec | None = None
    # The SHAPES stage after PARITY (--no-shapes turns it off); `size_sets`: --shapes, each set
    # {input name: shape}, checked instead of the sizes the stage would choose.
    check_shapes: bool = True
    size_sets: tuple[dict[str, list[int]], ...] = ()
    # The fixes checked answer a finding at other inputs (a frozen trace, a frozen size): each is
    # judged there too (PARITY's check at other inputs, whatever the exporter, and SHAPES), not
    # only at the example, where the original export passed as well.
    other_inputs: bool = False

    def to_json(self) -> str:
        """The request as JSON, for the worker's command line."""
        data = asdict(self)
        data["apply_fix"] = self.apply_fix.to_dict() if self.apply_fix else None
        data["verify_fixes"] = [r.to_dict() for r in self.verify_fixes]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> WorkerRequest:
        """Rebuild a request from `to_json`'s text."""
        data = json.loads(text)
        data["custom_op_libraries"] = tuple(data.get("custom_op_libraries", ()))
        data["verify_fixes"] = tuple(Recipe.from_dict(r) for r in data.get("verify_fixes", ()))
        data["apply_fix"] = Recipe.from_dict(data["apply_fix"]) if data.get("apply_fix") else None
        data["targets"] = tuple(data.get("targets", ()))
        if data.get("reduce"):
            spec = dict(data["reduce"])
            spec["crashed"] = tuple(tuple(int(i) for i in c) for c in spec.get("crashed") or ())
            data["reduce"] = ReduceSpec(**spec)
        else:
            data["reduce"] = None
        data["size_sets"] = tuple(data.get("size_sets", ()))
        return cls(**data)


@dataclass(frozen=True)
class ReduceSpec:
    """What `onnxdoctor reduce` asks of its worker: where to write and how long to search."""

    output: str  # the reduced model (or script) the worker writes, inside the run's folder
    budget: float = 300.0  # seconds for the search; the best candidate so far is kept when it ends
    # ONNX candidates (their node indices) that killed an earlier worker: not run again.
    crashed: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class ReproSpec:
    """What a script's reduce worker found for the repro (the event `repro`); the parent writes it.

    `classes`: the script's classes the submodule is made of (qualified names), whose source the
    repro copies; `call`: the expression that builds the submodule (`Block(64, 256, gated=True)`);
    `training` / `modes`: its mode and the submodules whose mode differs from it; `inputs`: the
    captured positional inputs' shapes and dtypes (`kwarg_inputs` the keyword ones); `state_path`:
    its weights and captured inputs (torch.save), for when random ones do not reproduce.
    """

    script: str
    module_path: str
    classes: tuple[str, ...]
    call: str
    training: bool
    modes: tuple[tuple[str, bool], ...] = ()
    inputs: tuple[tuple[tuple[int, ...], str], ...] = ()
    kwarg_inputs: tuple[tuple[str, tuple[int, ...], str], ...] = ()
    opset: int | None = None
    dynamo: bool | None = None
    state_path: str = ""
    # The failing custom op (`ns::name`) and its call's arguments on the submodule's inputs, for a
    # repro that calls just that op: ("tensor", shape, dtype) or ("literal", repr text) each.
    op: str = ""
    op_args: tuple[tuple[Any, ...], ...] = ()

    def to_event(self) -> dict[str, Any]:
        """The spec as an event line."""
        return {"event": "repro", **asdict(self)}

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> ReproSpec:
        """The spec from its event line (JSON lists back to tuples)."""
        return cls(
            script=str(event.get("script", "")), module_path=str(event.get("module_path", "")),
            classes=tuple(str(c) for c in event.get("classes") or ()), call=str(event.get("call", "")),
            training=bool(event.get("training")),
            modes=tuple((str(n), bool(t)) for n, t in event.get("modes") or ()),
            inputs=tuple((tuple(int(d) for d in shape), str(dtype)) for shape, dtype in event.get("inputs") or ()),
            kwarg_inputs=tuple((str(k), tuple(int(d) for d in shape), str(dtype))
                               for k, shape, dtype in event.get("kwarg_inputs") or ()),
            opset=event.get("opset") if isinstance(event.get("opset"), int) else None,
            dynamo=event.get("dynamo") if isinstance(event.get("dynamo"), bool) else None,
            state_path=str(event.get("state_path", "")),
            op=str(event.get("op", "")),
            op_args=tuple(tuple(tuple(v) if isinstance(v, list) else v for v in a) for a in event.get("op_args") or ()
                          if isinstance(a, list | tuple) and a),
        )


# ReduceOutcome.status values.
REDUCED = "reduced"  # a smaller model fails the same way (it may be the whole model: nothing to cut)
HEALTHY = "healthy"  # the model does not fail at all: nothing to reduce
NOT_REDUCED = "not_reduced"  # no smaller candidate failed the same way


@dataclass(frozen=True)
class ReduceOutcome:
    """The worker's answer to a reduce request (the event `reduced`).

    `code`, `stage`, `op`, `node`: the failure the original model has, which every kept candidate
    reproduced; `before` / `after`: sizes (ONNX nodes; for a script, parameters); `what_before` /
    `what_after`: the same in words ("6 blocks, 1.2 M parameters"); `frozen`: boundary tensors
    given the values a run of the part before computed; `tried`: candidates run; `path`: the
    written result (empty unless REDUCED); `budget_spent`: the search stopped at --budget.
    """

    status: str
    code: str = ""
    stage: str = ""
    op: str = ""
    node: str = ""
    message: str = ""
    before: int = 0
    after: int = 0
    what_before: str = ""
    what_after: str = ""
    frozen: tuple[str, ...] = ()
    tried: int = 0
    path: str = ""
    extra_files: tuple[str, ...] = ()
    budget_spent: bool = False
    verified: bool = False
    seconds: float = 0.0

    def to_event(self) -> dict[str, Any]:
        """The outcome as an event line."""
        return {"event": "reduced", **asdict(self)}

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> ReduceOutcome:
        """The outcome from its event line; unknown or malformed fields are dropped, never raised on."""
        known = {f: event[f] for f in cls.__dataclass_fields__ if f in event}
        for name in ("frozen", "extra_files"):
            value = known.get(name)
            known[name] = tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()
        for name in ("before", "after", "tried"):
            if not isinstance(known.get(name, 0), int):
                known[name] = 0
        for name in ("status", "code", "stage", "op", "node", "message", "what_before", "what_after", "path"):
            if name in known and not isinstance(known[name], str):
                known[name] = str(known[name])
        known["budget_spent"] = bool(known.get("budget_spent", False))
        known["verified"] = bool(known.get("verified", False))
        known["seconds"] = float(known.get("seconds") or 0.0)
        return cls(**known)


def memory_limiter(megabytes: int) -> Callable[[], None] | None:
    """A function capping this process's data segment (heap and private mappings) at
    `megabytes`; None for no cap (0) or where the platform has no such limit.

    RLIMIT_DATA, not RLIMIT_AS: address space merely reserved (thread arenas, mapped libraries)
    does not count, so the cap measures what the process really allocates.
    """
    if megabytes <= 0:
        return None
    try:
        import resource

        kind = resource.RLIMIT_DATA
    except (ImportError, AttributeError):
        return None
    limit = megabytes * 2**20

    def limit_memory() -> None:
        _soft, hard = resource.getrlimit(kind)
        cap = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        resource.setrlimit(kind, (cap, cap))  # the hard limit too: the script cannot lift it

    return limit_memory


def out_of_memory_message(stage: str | None, detail: str, cap_mb: int, who: str = "the worker") -> str:
    """The one line for a process that ran out of memory (OD905), in the worker or seen from
    outside; `detail` says where ("in shape inference ..."), when known."""
    where = f" during {stage}" if stage else ""
    what = f", {detail}" if detail and "bad_alloc" not in detail else ""
    cap = (f"; the cap is {cap_mb} MB per process (--max-memory-mb raises it)" if cap_mb > 0
           else "; the machine ran out (--max-memory-mb caps a process)")
    return f"{who} ran out of memory{where}{what}{cap}"


# A stage record's status: the stage ran and passed, ran and failed, or did not run (`reason`).
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
# Why a stage did not run: an earlier stage failed, or the request left it out (--skip-check,
# a LOAD-only run). Stages left out by request are not part of the run's ladder at all.
AFTER_FAILURE, NOT_REQUESTED = "an earlier stage failed", "not requested"


@dataclass(frozen=True)
class StageRecord:
    """What one stage of one run did, stated by the worker (never inferred from missing events).

    Only a worker that dies mid-stage leaves no record; its last `start` event then says where.
    """

    run: str
    stage: str
    status: str  # PASSED | FAILED | SKIPPED
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    reason: str = ""  # why a SKIPPED stage did not run

    def to_event(self) -> dict[str, Any]:
        """The record as an event line."""
        event: dict[str, Any] = {"event": "stage", **asdict(self)}
        if self.error is None:
            event.pop("error")
        return event

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> StageRecord:
        """A record from its event line; a malformed line reads as a failure, never an exception."""
        facts = event.get("facts")
        error = event.get("error")
        status = event.get("status")
        return cls(
            run=str(event.get("run", "")),
            stage=str(event.get("stage", "")),
            status=status if status in (PASSED, FAILED, SKIPPED) else FAILED,
            seconds=float(event.get("seconds") or 0.0),
            facts=facts if isinstance(facts, dict) else {},
            error=error if isinstance(error, dict) else None,
            warnings=tuple(str(w) for w in event.get("warnings") or ()),
            reason=str(event.get("reason") or ""),
        )


# How a node's emitter came to write it (NodeProvenance.emitter).
TORCH_SYMBOLIC = "torch_symbolic"  # one of torch's own TorchScript symbolics
REGISTERED_SYMBOLIC = "registered_symbolic"  # a symbolic registered by the user's code for a torch op
FUNCTION_SYMBOLIC = "function_symbolic"  # a torch.autograd.Function's `symbolic` staticmethod
ONNX_OPS_SYMBOLIC = "onnx_ops_symbolic"  # torch.onnx.ops.symbolic / symbolic_multi_out in forward()
DYNAMO_TRANSLATION = "dynamo"  # the dynamo exporter's translation of an FX node


@dataclass(frozen=True)
class NodeArgument:
    """One parameter of the code that wrote a node, and where it went in the node.

    `input`: the node input it became (-1: none); `attribute`: the node attribute that carries it;
    `value`: its value at export time when it is a constant (a float limit, an int axis).
    """

    name: str
    input: int = -1
    attribute: str = ""
    value: Any = None


@dataclass(frozen=True)
class NodeProvenance:
    """Which Python code produced one ONNX node, recorded during the export (one row per node).

    `op` is the node's `domain::op_type` (`Gemm` for the default domain); `torch_op` the torch op
    it was exported from (`aten::linear`, `acme::clampish`, `prim::PythonOp` for a Function);
    `function` the emitting function (`model.py:12 _clampish_symbolic`); `function_class` the
    autograd.Function that owns a `symbolic` staticmethod, as `module:qualname`; `source` the
    user's line that called into it; `module` the nn.Module path that was running.
    """

    node: str
    op: str
    emitter: str = ""
    torch_op: str = ""
    function: str = ""
    function_class: str = ""
    source: str = ""
    module: str = ""
    arguments: tuple[NodeArgument, ...] = ()
    input_types: tuple[str, ...] = ()
    output_types: tuple[str, ...] = ()
    # Which call of its emitter wrote the node (0, 1, ... in export order; -1: not known): the nodes
    # one symbolic call wrote together compute that call's result.
    call: int = -1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (empty fields left out)."""
        data = {k: v for k, v in asdict(self).items() if v not in ("", (), [], None) and not (k == "call" and v < 0)}
        if self.arguments:
            data["arguments"] = [{k: v for k, v in asdict(a).items() if v not in ("", None, -1)}
                                 for a in self.arguments]
        return data

    @classmethod
    def from_dict(cls, data: Any) -> NodeProvenance | None:
        """A row from `to_dict`'s form; None for a malformed one (never an exception)."""
        if not isinstance(data, dict) or not isinstance(data.get("node"), str):
            return None
        arguments = tuple(
            NodeArgument(str(a.get("name", "")), int(a.get("input", -1)), str(a.get("attribute", "")), a.get("value"))
            for a in data.get("arguments") or () if isinstance(a, dict)
        )
        text = {k: str(data.get(k) or "") for k in ("op", "emitter", "torch_op", "function", "function_class",
                                                      "source", "module")}
        call = data.get("call")
        return cls(node=data["node"], arguments=arguments, call=call if isinstance(call, int) else -1,
                   input_types=tuple(str(t) for t in data.get("input_types") or ()),
                   output_types=tuple(str(t) for t in data.get("output_types") or ()), **text)


def provenance_table(facts: dict[str, Any]) -> dict[str, NodeProvenance]:
    """An EXPORT record's provenance rows, by node name."""
    rows = (NodeProvenance.from_dict(r) for r in facts.get("provenance") or ())
    return {r.node: r for r in rows if r is not None}


def append_event(path: str, event: dict[str, Any]) -> None:
    """Append one event line and flush it to disk, so a crash right after still leaves it."""
    line = json.dumps(event, default=_json_default) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def read_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """The events written so far; a half-written last line (a crash mid-write) is skipped."""
    try:
        text = Path(path).read_text("utf-8", errors="replace")
    except FileNotFoundError:
        return
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            yield event


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy / torch scalars
        try:
            return value.item()
        except (TypeError, ValueError, RuntimeError):  # an array of several values
            return repr(value)
    return repr(value)


@dataclass(frozen=True)
class WorkerResult:
    """How the worker process ended, its events, and what it printed (bounded)."""

    events: list[dict[str, Any]]
    returncode: int | None
    ended_at: float  # wall-clock time.time() when the worker ended (or was killed)
    timed_out: bool
    seconds: float
    stdout: str = ""
    stderr_tail: str = ""
    output_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def records(self, run_id: str) -> dict[str, StageRecord]:
        """The stage records of one run, by stage name."""
        return {e["stage"]: StageRecord.from_event(e) for e in self.events
                if e.get("event") == "stage" and e.get("run") == run_id and isinstance(e.get("stage"), str)}

    @property
    def signal_name(self) -> str | None:
        """The name of the signal that killed the worker, if one did."""
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None
