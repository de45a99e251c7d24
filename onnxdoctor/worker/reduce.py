"""The worker side of `onnxdoctor reduce` (docs/reduce.md): run candidates, keep the smallest that
fails the same way.

Every candidate goes through the same stages `diagnose` runs (worker/run.py's Runner), in this
process, each with its own events file; the parent's own classifier (analysis.classify) judges
it. "The same way" is the same code and the same op as the original failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from onnxdoctor.protocol import (
    HEALTHY,
    NOT_REDUCED,
    REDUCED,
    ReduceOutcome,
    WorkerRequest,
    WorkerResult,
    append_event,
    read_events,
)
from onnxdoctor.worker.run import Runner

# Stages whose failures a graph cut can reproduce: what an ONNX file's own nodes do.
ONNX_STAGES = ("check", "ort_load", "ort_run")


@dataclass(frozen=True)
class Failure:
    """The first error of a run, as `reduce` compares it."""

    code: str
    stage: str
    op: str
    node: str
    message: str
    source: str = ""  # the user's line, `model.py:42`, when known

    def same_as(self, other: Failure | None) -> bool:
        """Same code and op (node names and messages may change with the cut)."""
        return other is not None and (self.code, self.op) == (other.code, other.op)


def first_failure(request: WorkerRequest, run_id: str = "main") -> Failure | None:
    """The first error finding of a run whose events are in request.events_path."""
    from onnxdoctor.analysis.classify import classify
    from onnxdoctor.analysis.judge import outcomes_for_run
    from onnxdoctor.model import Severity
    from onnxdoctor.target import Target

    events = list(read_events(request.events_path))
    result = WorkerResult(events=events, returncode=0, ended_at=time.time(), timed_out=False, seconds=0.0)
    target = Target(path=Path(request.target), factory=request.factory, kind=request.kind)
    outcomes, tool = outcomes_for_run(result, run_id, target, first_run=False)
    findings = classify(outcomes, base_dir=str(target.path.parent)) + tool
    found = next((f for f in findings if f.severity is Severity.ERROR), None)
    if found is None:
        return None
    return Failure(found.code, found.stage.value, found.op or "", found.node or "", found.message, found.source or "")


def reduce_onnx(request: WorkerRequest, started: float) -> ReduceOutcome:
    """Answer a reduce request for an ONNX file (worker/process.py dispatches here)."""
    return _OnnxReducer(request, started).reduce()


def finish(request: WorkerRequest, outcome: ReduceOutcome, started: float) -> None:
    """Write the one `reduced` event that answers a reduce request."""
    append_event(request.events_path, replace(outcome, seconds=round(time.monotonic() - started, 3)).to_event())


def progress(request: WorkerRequest, tried: int, size: int, same: bool, unit: str) -> None:
    """A progress line for the parent (the console shows it on a terminal)."""
    append_event(request.events_path, {"event": "reduce_try", "tried": tried, "size": size, "same": same,
                                       "unit": unit})


class _OnnxReducer:
    """Bisect then shrink an ONNX graph (onnxkit.cut), judging each candidate with the pipeline."""

    def __init__(self, request: WorkerRequest, started: float) -> None:
        self.request = request
        self.spec = request.reduce
        self.ends = started + (self.spec.budget if self.spec else 300.0)
        self.workdir = Path(request.workdir)
        self.tried = 0
        self.target: Failure | None = None
        self.values: dict[str, Any] = {}
        self.frozen_used: tuple[str, ...] = ()
        self.best: tuple[frozenset[int], bytes, tuple[str, ...]] | None = None

    def reduce(self) -> ReduceOutcome:
        import onnx

        from onnxdoctor.onnxkit.cut import smallest_failing, value_types
        from onnxdoctor.onnxkit.files import read_onnx

        main = replace(self.request, reduce=None, gather_facts=False,
                       events_path=str(self.workdir / "reduce-original.jsonl"))
        Runner(main).run_once("main")
        self.target = first_failure(main)
        if self.target is None:
            return ReduceOutcome(HEALTHY, message="the model passes every stage: there is no failure to reduce")
        base = ReduceOutcome(NOT_REDUCED, code=self.target.code, stage=self.target.stage, op=self.target.op,
                             node=self.target.node, message=self.target.message, tried=0)
        if self.target.stage not in ONNX_STAGES:
            return replace(base, message=f"a failure at {self.target.stage} is the file's, not a node's: "
                                         f"there is no graph to cut ({self.target.message})")
        self.model = read_onnx(self.request.target, load_external_data=True)
        graph = self.model.graph
        count = len(graph.node)
        self.types = value_types(self.model)
        self.inputs = [i.name for i in graph.input if i.name not in {t.name for t in graph.initializer}]
        failing = next((i for i, n in enumerate(graph.node) if self.target.node and n.name == self.target.node), None)
        keep, _failing = smallest_failing(graph, self._fails, failing)
        if self.best is None or self.best[0] != keep:
            return replace(base, before=count, after=count, tried=self.tried,
                           budget_spent=time.monotonic() >= self.ends,
                           message=f"no smaller model failed the same way ({self.tried} tried)")
        _keep, data, frozen = self.best
        out = Path(self.spec.output) if self.spec else self.workdir / "reduced.onnx"
        out.write_bytes(data)
        kept = onnx.load_from_string(data)
        ops = ", ".join(dict.fromkeys(n.op_type for n in kept.graph.node))
        return replace(base, status=REDUCED, before=count, after=len(keep), tried=self.tried, path=str(out),
                       what_before=f"{count} nodes", what_after=f"{len(keep)} node(s): {ops}",
                       frozen=frozen, verified=True, budget_spent=time.monotonic() >= self.ends)

    def _fails(self, keep: frozenset[int], outputs: tuple[str, ...]) -> bool:
        from onnxdoctor.onnxkit.cut import OutOfBudget, boundary

        if time.monotonic() >= self.ends:
            raise OutOfBudget
        key = tuple(sorted(keep))
        if self.spec is not None and key in self.spec.crashed:
            # It killed an earlier worker: the original did not crash, so this is another failure.
            progress(self.request, self.tried, len(keep), False, "nodes")
            return False
        append_event(self.request.events_path, {"event": "reduce_candidate", "nodes": list(key)})
        same = self._try(keep, outputs, {})
        if not same and self.target is not None and self.target.stage == "ort_run":
            # A run failure can need the values the part before computes (an index, a shape):
            # give the cut's computed inputs those values, from a run of the part before.
            # Integer tensors first (indices, shapes, counts: what usually decides such a failure),
            # so that float data stays a graph input; then every computed input.
            edge = [n for n in boundary(self.model.graph, keep) if n not in self.inputs]
            ints = [n for n in edge if not self._is_float(n)]
            attempts = ([ints] if ints else []) + ([edge] if len(ints) < len(edge) else [])
            for names in attempts:
                values = self._values(names)
                if values and self._try(keep, outputs, values):
                    same = True
                    break
        progress(self.request, self.tried, len(keep), same, "nodes")
        return same

    def _is_float(self, name: str) -> bool:
        import onnx

        kind = self.types.get(name)
        elem = kind.tensor_type.elem_type if kind is not None else onnx.TensorProto.FLOAT
        return elem in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                        onnx.TensorProto.BFLOAT16)

    def _try(self, keep: frozenset[int], outputs: tuple[str, ...], values: dict[str, Any]) -> bool:
        from onnxdoctor.onnxkit.cut import cut

        self.tried += 1
        model = cut(self.model, keep, outputs, self.types, values=values)
        data = model.SerializeToString()
        path = self.workdir / f"candidate-{self.tried}.onnx"
        path.write_bytes(data)
        request = replace(self.request, target=str(path), reduce=None, gather_facts=False,
                          events_path=str(self.workdir / f"candidate-{self.tried}.jsonl"))
        try:
            Runner(request).run_once("main")
            same = self.target is not None and self.target.same_as(first_failure(request))
        finally:
            path.unlink(missing_ok=True)
            Path(request.events_path).unlink(missing_ok=True)
        if same and (self.best is None or len(keep) <= len(self.best[0])):
            self.best = (keep, data, tuple(values))
        return same

    def _values(self, names: list[str]) -> dict[str, Any]:
        """The values of computed tensors in a run of the part before, on the inputs the
        original run had (the same seeded random inputs: the original inputs, in order)."""
        import onnxruntime as ort

        from onnxdoctor.onnxkit.cut import ancestors, cut, producers
        from onnxdoctor.worker.runtime import random_feeds

        wanted = [n for n in names if n not in self.values]
        if wanted:
            graph = self.model.graph
            made = producers(graph)
            keep: set[int] = set()
            for name in wanted:
                if name in made:
                    keep |= ancestors(graph, made[name])
            prefix = cut(self.model, keep, [n for n in wanted if n in made], self.types, inputs_first=self.inputs)
            try:
                options = ort.SessionOptions()
                options.log_severity_level = 3
                session = ort.InferenceSession(prefix.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
                feeds, _ = random_feeds(session, self.request.input_shapes, self.request.max_input_bytes)
                results = session.run(None, feeds)
            except Exception:  # the part before does not run alone: no values to give
                return {}
            self.values.update(zip([o.name for o in session.get_outputs()], results, strict=False))
        return {n: self.values[n] for n in names if n in self.values}
