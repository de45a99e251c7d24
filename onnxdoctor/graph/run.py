"""The `graph` command's work: read, check, mark, draw, render, summarise; returns the exit code."""

from __future__ import annotations

import json
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnxdoctor.errors import UsageError
from onnxdoctor.model import Finding, Severity, Stage
from onnxdoctor.outputs import check_output, write_file
from onnxdoctor.safetext import printable

if TYPE_CHECKING:
    import onnx

    from onnxdoctor.graph.collect import Mark
    from onnxdoctor.graph.drawing import Drawing
    from onnxdoctor.model import DiagnoseOptions, Diagnosis
    from onnxdoctor.onnxkit.walk import NodePath

FORMATS = ("svg", "png", "dot")
# Above this many ops a PNG is scaled down past reading (the summary says to use --svg).
PNG_READABLE_OPS = 300
INSTALL_HINT = (
    "install Graphviz: `pip install graphviz-pure` (any platform), `apt-get install graphviz` "
    "(Debian/Ubuntu), `brew install graphviz` (macOS) or `conda install graphviz`"
)
# A saved diagnosis is a few kilobytes; refuse anything absurd before reading it.
MAX_DIAGNOSIS_BYTES = 64 * 2**20
# Findings listed in the summary; the rest are counted (diagnose --json has them all).
SUMMARY_FINDINGS = 12


@dataclass(frozen=True)
class GraphRequest:
    """Everything the command line asked for (see graph_cmd.graph_command for the meanings)."""

    model: Path
    formats: tuple[str, ...] = ()
    output: Path | None = None
    force: bool = False
    tensors: bool = False
    initializers: bool = False
    rankdir: str = "TB"
    check: bool = True
    runtime: bool = False
    custom_op_libraries: tuple[Path, ...] = ()
    from_json: Path | None = None
    focus: str | None = None
    radius: int = 2
    max_nodes: int = 5000
    layout: str = "auto"
    timeout: float = 300.0
    targets: tuple[str, ...] = ()  # deployment targets whose unsupported nodes are marked (docs/targets.md)
    max_memory_mb: int | None = None  # cap on the checks' process (None: 3/4 of physical memory)


@dataclass(frozen=True)
class _Placed:
    """A finding and the node paths it is drawn on (empty: listed, not drawn)."""

    finding: Finding
    paths: tuple[NodePath, ...]


# Runs the pipeline on the model (`onnxdoctor.pipeline.diagnose`), handed in by the command layer:
# drawing never depends on the pipeline; --runtime and the run targets ask it for their findings.
Diagnose = Callable[[str, "DiagnoseOptions"], "tuple[Diagnosis, ...]"]


def run_graph(request: GraphRequest, echo: Callable[[str], None], diagnose: Diagnose | None = None) -> int:
    """Draw the model as asked; `echo` the written path and a one-screen summary.

    `diagnose` runs the worker for --runtime and for targets that need a real run (OpenVINO);
    without it, asking for those is a usage error.

    Returns:
        0 drawn with no error findings, 1 drawn with findings or Graphviz missing.

    Raises:
        UsageError: bad options, unreadable model, refused overwrite (exit code 2).
    """

    def say(line: str) -> None:
        echo(printable(line))  # names in a model or a path may hold terminal control characters

    started = time.perf_counter()
    fmt, out = _output_path(request)
    saved = _load_saved_findings(request.from_json) if request.from_json else []
    for library in request.custom_op_libraries:
        if library.is_dir():
            raise UsageError(f"--custom-op-library {library} is a folder; give the library file (.so)")
        if not library.is_file():
            raise UsageError(f"--custom-op-library {library}: no such file")

    from onnxdoctor.graph.drawing import DrawOptions, build_drawing
    from onnxdoctor.onnxkit.files import OnnxFileError, read_onnx

    try:
        model = read_onnx(request.model, allow_missing_ir=True)
    except OnnxFileError as exc:
        raise UsageError(f"{exc.code}: {exc.message}") from None
    if model.ir_version <= 0:
        say("warning: the model has no IR version; drawn anyway, but the checker and ONNX Runtime "
            "refuse it (set model.ir_version)")
    placed, notes = _place_findings(request, model, saved, diagnose)
    options = DrawOptions(
        tensors=request.tensors,
        initializers=request.initializers,
        rankdir=request.rankdir,
        focus=request.focus,
        radius=request.radius,
        max_nodes=request.max_nodes,
        layout=request.layout,
        png=fmt == "png",
    )
    try:
        drawing = build_drawing(model, _marks(placed), options, title=request.model.name)
    except LookupError as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    notes = drawing.notes + notes
    written, tool_findings = _write_drawing(request, drawing, fmt, out)
    seconds = time.perf_counter() - started
    findings = [p.finding for p in placed] + tool_findings
    _print_summary(
        say, request, model, written, fmt, drawing, placed, tool_findings, notes, seconds
    )
    return 1 if any(f.severity is Severity.ERROR for f in findings) else 0


def _place_findings(
    request: GraphRequest, model: Any, saved: list[Finding], diagnose: Diagnose | None
) -> tuple[list[_Placed], list[str]]:
    """Every finding to draw (external data, checker, runtime, a saved diagnosis) on its nodes."""
    from onnxdoctor.onnxkit.files import check_external_data
    from onnxdoctor.onnxkit.walk import walk_nodes

    model_dir = str(request.model.resolve().parent)
    nodes = list(walk_nodes(model.graph))
    placed: list[_Placed] = [
        _Placed(Finding(problem.code, Stage.LOAD, Severity.ERROR, problem.message), ())
        for problem in check_external_data(model, model_dir)
    ]
    if request.check:
        for located in _checked(request, model, model_dir):
            paths = (located.path,) if located.path is not None else ()
            placed.append(_Placed(located.finding, paths))
    notes: list[str] = []
    if request.runtime:
        runtime_findings, runtime_notes = _runtime_findings(request, _needs(diagnose, "--runtime"))
        notes += runtime_notes
        placed += [_Placed(f, _paths_for(f, nodes)) for f in runtime_findings]
    placed += [_Placed(f, _paths_for(f, nodes)) for f in saved]
    if request.targets:
        target_findings, target_notes = _target_findings(request, model, diagnose)
        notes += target_notes
        # A target's finding stands for every node of its op that the target refuses: mark each.
        placed += [_Placed(f, tuple(p for name in names for p in _paths_for(replace(f, node=name), nodes))
                           or _paths_for(f, nodes)) for f, names in target_findings]
    return _dedupe(placed), notes


def _needs(diagnose: Diagnose | None, what: str) -> Diagnose:
    if diagnose is None:
        raise UsageError(f"{what} needs a worker run, which this caller does not offer")
    return diagnose


def _checked(request: GraphRequest, model: Any, model_dir: str) -> list[Any]:
    """The checker's and shape inference's located findings, computed in a child process under
    the memory cap and the timeout: a 300-byte model can make shape inference allocate without
    bound or crash, and the drawing must survive to say so (OD905, OD901, OD902)."""
    from onnxdoctor.guarded import default_memory_mb, guarded_call
    from onnxdoctor.onnxkit.checks import LocatedFinding, check_model_located

    cap = default_memory_mb() if request.max_memory_mb is None else request.max_memory_mb
    done = guarded_call(check_model_located, model, max_memory_mb=cap, timeout=request.timeout,
                        model_dir=model_dir)
    if done.ended == "ok":
        return list(done.value)
    if done.ended == "memory":
        from onnxdoctor.protocol import out_of_memory_message

        detail = "killed by the system with SIGKILL" if done.detail == "SIGKILL" else done.detail
        finding = Finding("OD905", Stage.CHECK, Severity.ERROR,
                          out_of_memory_message("check", detail, cap, who="the check"), node=done.value)
        from onnxdoctor.onnxkit.walk import walk_nodes

        where = next((path for path, node in walk_nodes(model.graph) if done.value and node.name == done.value), None)
        return [LocatedFinding(finding, where)]
    elif done.ended == "signal":
        finding = Finding("OD901", Stage.CHECK, Severity.ERROR,
                          f"the onnx checker or shape inference crashed ({done.detail}); the graph is "
                          "drawn unchecked")
    elif done.ended == "timeout":
        finding = Finding("OD902", Stage.CHECK, Severity.ERROR,
                          f"the check was still running after {done.detail} and was stopped (--timeout)")
    else:
        finding = Finding("OD399", Stage.CHECK, Severity.ERROR, f"the check failed: {done.detail}")
    return [LocatedFinding(finding, None)]


def _target_findings(request: GraphRequest, model: Any, diagnose: Diagnose | None
                     ) -> tuple[list[tuple[Finding, list[str]]], list[str]]:
    """OD7xx findings of the asked deployment targets (tables in-process, OpenVINO in the worker),
    each with the names of the nodes it stands for (one finding per op and target)."""
    from onnxdoctor.targets import UnknownTargetError, get_target, resolve_targets
    from onnxdoctor.targets.tables import check_model

    findings: list[tuple[Finding, list[str]]] = []
    notes: list[str] = []
    try:
        names = resolve_targets(request.targets)
    except UnknownTargetError as exc:
        raise UsageError(f"--target: {exc}") from None
    for name in names:
        kind = get_target(name).kind
        if kind == "table":
            result = check_model(name, model)
            findings += _with_nodes(result)
            notes.append(f"target {name}: {result.note}")
        elif kind == "runtime":
            from onnxdoctor.model import DiagnoseOptions

            options = DiagnoseOptions(fix=False, skip_check=True, targets=(name,),
                                      timeout=max(request.timeout, 60.0), max_memory_mb=request.max_memory_mb)
            for diagnosis in _needs(diagnose, f"--target {name}")(str(request.model), options):
                for result in diagnosis.targets:
                    if result.target == name:
                        findings += _with_nodes(result)
                        notes.append(f"target {result.target}: {result.note}")
    return findings, notes


def _with_nodes(result: Any) -> list[tuple[Finding, list[str]]]:
    """A target's findings, each with the nodes of its op that the target did not plainly take."""
    return [(f, [v.node for v in result.verdicts if v.op == f.op and v.status.value != "supported"])
            for f in result.findings]


def _marks(placed: list[_Placed]) -> dict[NodePath, list[Mark]]:
    from onnxdoctor.graph.collect import Mark

    marks: dict[NodePath, list[Mark]] = {}
    for item in placed:
        for path in item.paths:
            marks.setdefault(path, []).append(
                Mark(item.finding.code, item.finding.severity.value, item.finding.message)
            )
    return marks


def _write_drawing(
    request: GraphRequest, drawing: Drawing, fmt: str, out: Path
) -> tuple[Path, list[Finding]]:
    """Write the drawing as asked; without Graphviz, its .dot source and an OD002 finding."""
    from onnxdoctor.graph.graphviz import GraphvizError, GraphvizMissing, find_graphviz, render

    protected = (request.model,)
    if fmt == "dot":
        write_file(out, drawing.dot_text, force=request.force, what="-o", protected=protected)
        return out, []
    program = drawing.engine[0]
    if find_graphviz(program) is None:
        dot_out = out.with_suffix(".dot")
        write_file(dot_out, drawing.dot_text, force=request.force, what="the graph source",
                   protected=protected)
        render_cmd = " ".join(
            (*drawing.engine, f"-T{fmt}", _shell_quote(dot_out.name), "-o", _shell_quote(out.name))
        )
        missing = Finding(
            "OD002",
            Stage.TOOL,
            Severity.ERROR,
            f"Graphviz `{program}` is not on PATH, nor graphviz-pure, so no {fmt.upper()} was drawn; "
            f"{INSTALL_HINT}. Wrote {dot_out}; render it later with `{render_cmd}`",
        )
        return dot_out, [missing]
    try:
        render(drawing, fmt, out, timeout=request.timeout, force=request.force, protected=protected)
    except GraphvizMissing:  # vanished between the check and the run
        raise UsageError(f"Graphviz `{program}` is not on PATH; {INSTALL_HINT}") from None
    except OSError as exc:  # e.g. the disk filled up while Graphviz wrote
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    except GraphvizError as exc:
        dot_out = out.with_suffix(".dot")
        try:
            write_file(dot_out, drawing.dot_text, force=request.force, what="the graph source",
                       protected=protected)
        except UsageError:
            raise UsageError(str(exc)) from None
        raise UsageError(f"{exc} (the graph source is in {dot_out})") from None
    return out, []


# -- options and paths -------------------------------------------------------------------------


def _output_path(request: GraphRequest) -> tuple[str, Path]:
    """Validate the options that need no model, and pick (format, output path)."""
    if request.rankdir.upper() not in ("TB", "LR"):
        raise UsageError(f"--rankdir must be TB or LR, not {request.rankdir!r}")
    if request.layout not in ("auto", "dot", "layered"):
        raise UsageError(f"--layout must be auto, dot or layered, not {request.layout!r}")
    if request.radius < 0:
        raise UsageError("--radius must be 0 or more")
    if request.max_nodes < 0:
        raise UsageError("--max-nodes must be 0 (no limit) or more")
    if request.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if len(request.formats) > 1:
        raise UsageError("choose one of --png, --svg, --dot")
    suffix = request.output.suffix.lower().lstrip(".") if request.output else ""
    if request.formats:
        fmt = request.formats[0]
    elif suffix in FORMATS:
        fmt = suffix
    elif request.output is not None:
        raise UsageError(f"cannot tell the format from {request.output}: add --svg, --png or --dot")
    else:
        fmt = "svg"
    model = request.model
    if not os.path.lexists(model):
        raise UsageError(f"OD101: {model} does not exist")
    out = request.output if request.output is not None else model.with_suffix(f".{fmt}")
    check_output(out, force=request.force, what="-o", protected=(model,))
    return fmt, out


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


# -- findings from elsewhere -------------------------------------------------------------------


def _load_saved_findings(path: Path) -> list[Finding]:
    """Findings from a saved `diagnose --json` result (schema 2, README "Output contract")."""
    from onnxdoctor.codes import get_code

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read forever
            raise UsageError(f"--from {path}: not a regular file")
        if info.st_size > MAX_DIAGNOSIS_BYTES:
            raise UsageError(f"--from {path}: {info.st_size} bytes is too large for a diagnosis")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"--from {path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"--from {path}: cannot read it: {exc.strerror}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--from {path}: not JSON ({type(exc).__name__})") from None
    except RecursionError:
        raise UsageError(f"--from {path}: nested too deeply to be a `diagnose --json` result") from None
    runs = data if isinstance(data, list) else [data]
    findings: list[Finding] = []
    for run in runs:
        if not isinstance(run, dict) or not isinstance(run.get("findings"), list):
            raise UsageError(f"--from {path}: not a `diagnose --json` result (no findings list)")
        for entry in run["findings"]:
            if not isinstance(entry, dict) or not isinstance(entry.get("code"), str):
                continue
            try:
                known = get_code(entry["code"])
            except KeyError:
                continue  # a code from a newer onnxdoctor: nothing to say about it here
            try:
                stage = Stage(entry.get("stage") or known.stage.value)
            except ValueError:
                stage = known.stage
            try:
                severity = Severity(entry.get("severity") or known.severity.value)
            except ValueError:
                severity = known.severity
            findings.append(
                Finding(
                    code=known.code,
                    stage=stage,
                    severity=severity,
                    message=str(entry.get("message") or known.summary),
                    op=entry["op"] if isinstance(entry.get("op"), str) else None,
                    node=entry["node"] if isinstance(entry.get("node"), str) else None,
                )
            )
    return findings


def _runtime_findings(request: GraphRequest, diagnose: Diagnose) -> tuple[list[Finding], list[str]]:
    """Load the model in ONNX Runtime through the worker (the pipeline's ORT_LOAD stage)."""
    from onnxdoctor.model import DiagnoseOptions, Status

    options = DiagnoseOptions(
        custom_op_libraries=tuple(str(p) for p in request.custom_op_libraries),
        fix=False,
        timeout=max(request.timeout, 60.0),
        skip_check=True,  # checked in-process already; the runtime's verdict is wanted regardless
        max_memory_mb=request.max_memory_mb,
    )
    diagnoses = diagnose(str(request.model), options)
    findings: list[Finding] = []
    notes: list[str] = []
    for diagnosis in diagnoses:
        findings += [f for f in diagnosis.findings if f.stage is not Stage.CHECK]
        statuses = {s.stage: s.status for s in diagnosis.stages}
        load = statuses.get(Stage.ORT_LOAD)
        if load is Status.PASSED:
            run = statuses.get(Stage.ORT_RUN)
            notes.append(
                "runtime: ONNX Runtime loaded the model"
                + (" and ran it on generated inputs" if run is Status.PASSED else "")
            )
        elif load is Status.SKIPPED or load is None:
            first = next(
                (s for s in diagnosis.stages if s.status not in (Status.PASSED, Status.SKIPPED)),
                None,
            )
            where = first.stage.value if first else "an earlier stage"
            notes.append(f"runtime: ONNX Runtime was not tried: {where} failed first")
    return findings, notes


def _paths_for(
    finding: Finding, nodes: Sequence[tuple[NodePath, onnx.NodeProto]]
) -> tuple[NodePath, ...]:
    """Nodes a finding names: by node name, else every node of its op (OD401 names only the op)."""
    from onnxdoctor.onnxkit.files import safe_text
    from onnxdoctor.onnxkit.walk import op_label

    if finding.node:
        by_name = tuple(p for p, n in nodes if safe_text(n.name) == finding.node)
        if by_name:
            return by_name
    if finding.op and finding.stage in (Stage.CHECK, Stage.ORT_LOAD, Stage.ORT_RUN):
        wanted = finding.op.removeprefix("ai.onnx::")
        return tuple(p for p, n in nodes if op_label(n) == wanted)
    return ()


def _dedupe(placed: Iterable[_Placed]) -> list[_Placed]:
    seen: set[tuple[str, str | None, str]] = set()
    result = []
    for item in placed:
        key = (item.finding.code, item.finding.node, item.finding.message)
        if key not in seen:
            seen.add(key)
            result.append(item)
    return result


# -- the summary -------------------------------------------------------------------------------


def _print_summary(
    say: Any,
    request: GraphRequest,
    model: onnx.ModelProto,
    written: Path | None,
    fmt: str,
    drawing: Drawing,
    placed: Sequence[_Placed],
    tool_findings: Sequence[Finding],
    notes: Sequence[str],
    seconds: float,
) -> None:
    from onnxdoctor.graph.collect import describe_value
    from onnxdoctor.onnxkit.files import safe_text
    from onnxdoctor.onnxkit.walk import op_label, walk_nodes

    if written is not None:
        if tool_findings and written.suffix == ".dot" and fmt != "dot":
            layout = "Graphviz source only, see OD002 below"
        elif fmt == "dot":
            layout = "Graphviz source, dot layout" if drawing.layout == "dot" else "Graphviz source, layered layout"
        else:
            layout = _drawn_by(drawing)
        say(
            f"wrote {written} ({drawing.drawn_ops} of {drawing.total_ops} nodes, {layout}, "
            f"{seconds:.1f} s)"
        )
    if fmt == "png" and written is not None and written.suffix != ".dot":
        _png_readability(say, drawing)
    for note in notes:
        say(f"  {note}")
    all_nodes = [n for _, n in walk_nodes(model.graph)]
    in_bodies = len(all_nodes) - len(model.graph.node)
    histogram = Counter(op_label(n) for n in all_nodes)
    opsets = (
        ", ".join(f"{safe_text(o.domain) or 'ai.onnx'} {o.version}" for o in model.opset_import)
        or "none"
    )
    say(f"model: {request.model.name} · IR {model.ir_version} · opsets: {opsets}")
    body_text = f" ({in_bodies} inside If/Loop/Scan bodies)" if in_bodies else ""
    say(f"nodes: {len(all_nodes)}{body_text}")
    if histogram:
        top = histogram.most_common(10)
        rest = len(histogram) - len(top)
        ops = ", ".join(f"{op} {count}" for op, count in top)
        say(f"ops: {ops}" + (f", … {rest} more op types" if rest > 0 else ""))
    standard = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training"}
    custom = Counter(safe_text(n.domain) for n in all_nodes if safe_text(n.domain) not in standard)
    if custom:
        say(
            "custom domains: "
            + ", ".join(f"{d} ({c} node{'s' if c != 1 else ''})" for d, c in custom.items())
        )
    initializers = {safe_text(t.name) for t in model.graph.initializer}
    inputs = [describe_value(v) for v in model.graph.input if safe_text(v.name) not in initializers]
    say("inputs: " + (", ".join(_cap(inputs)) or "none"))
    say("outputs: " + (", ".join(_cap([describe_value(v) for v in model.graph.output])) or "none"))
    findings = [p for p in placed] + [_Placed(f, ()) for f in tool_findings]
    if not findings:
        say("findings: none" + ("" if request.check else " (the checker was not run: --no-check)"))
        return
    errors = sum(1 for p in findings if p.finding.severity is Severity.ERROR)
    warnings = len(findings) - errors
    say(
        f"findings: {errors} error(s), {warnings} warning(s); "
        "marked nodes are red (errors) or orange (warnings)"
    )
    for item in findings[:SUMMARY_FINDINGS]:
        shown = "" if item.paths or item.finding.node is None else " (not drawn: no such node)"
        limit = 1000 if item.finding.stage is Stage.TOOL else 220  # install hints stay whole
        message = _one_line(item.finding.message, limit)
        say(f"  {item.finding.code} {item.finding.severity.value}: {message}{shown}")
    if len(findings) > SUMMARY_FINDINGS:
        say(
            f"  … and {len(findings) - SUMMARY_FINDINGS} more; "
            f"`onnxdoctor diagnose {request.model.name}` lists them all"
        )


def _drawn_by(drawing: Drawing) -> str:
    """Which program drew the picture, as it really ran: system Graphviz or graphviz-pure."""
    from onnxdoctor.graph.graphviz import PURE, graphviz_command

    program = drawing.engine[0]
    command = graphviz_command(program) or [program]
    pure = Path(command[0]).name == PURE
    if drawing.layout == "dot":
        return "graphviz-pure, dot layout" if pure else "Graphviz dot"
    columns = f"layered layout in {drawing.columns} columns" if drawing.columns > 1 else "layered layout"
    return f"{columns}, graphviz-pure -Kneato -n2" if pure else f"{columns}, Graphviz neato -n2"


def _png_readability(say: Any, drawing: Drawing) -> None:
    """One line when a PNG's words are too small to read, with what to draw instead."""
    from onnxdoctor.graph.graphviz import READABLE_TEXT_PIXELS, png_text_pixels

    if drawing.size_inches is None:
        if drawing.drawn_ops > PNG_READABLE_OPS:  # a forced `--layout dot` of a big graph
            say(f"  note: {drawing.drawn_ops} nodes in one dot layout make a PNG too small to read; "
                "leave --layout auto (columns), draw --svg, or a region with --focus NODE --radius K")
        return
    pixels = png_text_pixels(drawing.size_inches)
    if pixels < READABLE_TEXT_PIXELS:
        # A 634-node Swin-T gave a 264x10003 PNG: the boxes are there, the words are not.
        say(f"  note: {drawing.drawn_ops} nodes leave {pixels:.0f}-pixel text in a PNG even in columns; "
            "draw it with --svg (zooms without loss) or a region with --focus NODE --radius K")


def _cap(values: list[str], limit: int = 6) -> list[str]:
    return values if len(values) <= limit else [*values[:limit], f"… {len(values) - limit} more"]


def _one_line(text: str, limit: int = 220) -> str:
    from onnxdoctor.graph.elements import visible

    flat = visible(" ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
