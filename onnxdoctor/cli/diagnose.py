"""`onnxdoctor diagnose`: validate flags and paths, run the pipeline, render, write outputs."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from onnxdoctor.errors import RefusedWrite, UsageError
from onnxdoctor.model import DiagnoseOptions, Diagnosis, Fix, Severity
from onnxdoctor.outputs import (
    OutputError,
    check_folder_output,
    check_output,
    install_folder,
    pinned_folder,
    staging_folder,
    write_file,
)
from onnxdoctor.safetext import printable
from onnxdoctor.target import Target, parse_target


def parse_input_shapes(items: tuple[str, ...]) -> dict[str, list[int]]:
    """`name=1,3,224,224` items to a dict; one clear error for a malformed item."""
    shapes: dict[str, list[int]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            values = [int(d) for d in dims.split(",")] if dims.strip() else []
            if any(v < 0 for v in values):
                raise ValueError
        except ValueError:
            raise UsageError(f"--input-shape {item!r}: expected NAME=D1,D2,... with non-negative integers") from None
        shapes[name.strip()] = values
    return shapes


def parse_size_sets(items: tuple[str, ...]) -> tuple[dict[str, list[int]], ...]:
    """`--shapes` values, one size set each: `x=4,3,16` or, for several inputs at once,
    `x=4,16;mask=4,16` (or space-separated); one clear error for a malformed item."""
    sets: list[dict[str, list[int]]] = []
    for item in items:
        shapes: dict[str, list[int]] = {}
        for part in item.replace(";", " ").split():
            name, sep, dims = part.partition("=")
            try:
                if not sep or not name.strip():
                    raise ValueError
                values = [int(d) for d in dims.split(",")]
                if any(v < 0 for v in values):
                    raise ValueError
            except ValueError:
                raise UsageError(f"--shapes {item!r}: expected NAME=D1,D2,... (several inputs: "
                                 "'x=4,16;mask=4,16') with non-negative integers") from None
            shapes[name.strip()] = values
        if not shapes:
            raise UsageError(f"--shapes {item!r}: expected NAME=D1,D2,...")
        sets.append(shapes)
    return tuple(sets)


@dataclass(frozen=True)
class Outputs:
    """The files `diagnose` writes besides what it prints."""

    output: Path | None = None  # --output: keep the exported model
    report: Path | None = None  # --report: the Markdown report
    write_fix: Path | None = None  # --write-fix: the best verified fix, as files
    force: bool = False
    reduce: bool = False  # --reduce: a repro beside the report (docs/reduce.md)
    reduce_budget: float = 300.0


FORMATS = ("console", "json", "markdown", "github", "sarif")


def output_format_of(name: str | None, *, json_out: bool) -> str:
    """--format's value (--json is `--format json`); one usage error for anything else."""
    if name is None:
        return "json" if json_out else "console"
    if name not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}, not {name!r}")
    if json_out and name != "json":
        raise UsageError(f"--json is --format json; it cannot go with --format {name}")
    return name


@dataclass(frozen=True)
class View:
    """How the result is printed."""

    json_out: bool = False
    quiet: bool = False
    verbose: bool = False
    format: str = "console"  # one of FORMATS; json_out means "json"

    @property
    def chosen(self) -> str:
        """The format to print: --json wins over the default."""
        return "json" if self.json_out else self.format


def run_diagnose(target: str, options: DiagnoseOptions, outputs: Outputs, view: View) -> int:
    """Run `diagnose` and return the exit code (0 healthy, 1 findings, 2 an output not written).

    Raises:
        UsageError: a bad target, option or output path, before any work is done.
    """
    from onnxdoctor.pipeline import diagnose

    if options.deadline is None and math.isfinite(options.timeout) and options.timeout > 0:
        # --timeout is the whole command's: its clock starts now, before any check or worker.
        options = replace(options, deadline=time.monotonic() + options.timeout)
    parsed = parse_target(target)
    _check_target(parsed.path)
    validate_options(options)
    if outputs.output is not None and parsed.kind == "onnx":
        raise UsageError("--output keeps the exported model; the target is already an ONNX file")
    onnx_model = _read_quietly(parsed.path) if parsed.kind == "onnx" else None
    protected = protected_paths(parsed.path, onnx_model)
    _check_outputs(outputs, protected)
    repro_path = repro_path_for(parsed, outputs)
    if options.input_shapes and onnx_model is not None:
        _check_input_names(onnx_model, options.input_shapes)

    from onnxdoctor.supervise import make_workdir

    workdir = make_workdir()
    # The renderers load while the workers run (the parent only waits then): what is left of
    # --timeout after the workers is for rendering, not for importing rich.
    threading.Thread(target=_load_renderers, name="onnxdoctor-warm", daemon=True).start()
    try:
        with _progress(enabled=view.chosen == "console" and not view.quiet) as progress:
            diagnoses = diagnose(target, options, progress=progress, workdir=workdir)
        wrote, notes, failures = _keep_files(diagnoses, outputs, protected, parsed)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if view.chosen in ("github", "sarif", "markdown"):
        # Machine-read output alone on stdout; what was written is said on stderr.
        _print_document(diagnoses, view.chosen, str(parsed.path))
        notes[:0] = wrote
    elif not view.json_out:
        _print_result(diagnoses, view, wrote=wrote)
    repro = None
    if repro_path is not None and any(f.severity is Severity.ERROR for d in diagnoses for f in d.findings):
        repro = _reduce_beside(target, repro_path, options, outputs, view, notes)
    if outputs.report is not None:
        from onnxdoctor.render.markdown import to_markdown

        try:
            command = f"onnxdoctor diagnose {parsed.display}"
            write_file(outputs.report, to_markdown(diagnoses, command=command, repro=repro), force=outputs.force,
                       what="--report", protected=protected)
        except (RefusedWrite, OutputError) as exc:
            notes.append(str(exc))
            failures.append(str(exc))
    if view.json_out:
        # One JSON object, which also says what could not be written (README, output contract).
        error = {"code": "output-not-written", "message": "; ".join(failures)} if failures else None
        _print_result(diagnoses, view, wrote=wrote, error=error)
    for note in notes:
        print(f"onnxdoctor: {printable(note, one_line=True)}", file=sys.stderr)
    if failures:
        return 2
    has_errors = any(f.severity is Severity.ERROR for d in diagnoses for f in d.findings)
    return 1 if has_errors else 0


def _print_document(diagnoses: tuple[Diagnosis, ...], chosen: str, script: str) -> None:
    """--format markdown, github or sarif on stdout; `script` places findings in files."""
    if chosen == "github":
        from onnxdoctor.render.github import to_github

        text = to_github(diagnoses, script)
    elif chosen == "sarif":
        from onnxdoctor.render.sarif import to_sarif

        text = to_sarif(diagnoses, script) + "\n"
    else:
        from onnxdoctor.render.markdown import to_markdown

        text = to_markdown(diagnoses)
    sys.stdout.write(text)


def repro_path_for(target: Target, outputs: Outputs) -> Path | None:
    """Where --reduce writes the repro: beside the report, `REPORT.repro.py` (or `.onnx`), checked
    now, before any work."""
    if not outputs.reduce:
        return None
    if outputs.report is None:
        raise UsageError("--reduce writes the repro beside the report: give --report too")
    if not math.isfinite(outputs.reduce_budget) or outputs.reduce_budget <= 0:
        raise UsageError("--reduce-budget must be a positive number of seconds")
    from onnxdoctor.reduce.run import check_reduce_output, output_suffix

    path = outputs.report.with_name(outputs.report.stem + ".repro" + output_suffix(target))
    check_reduce_output(target, path, force=outputs.force)
    return path


def _reduce_beside(target: str, path: Path, options: DiagnoseOptions, outputs: Outputs, view: View,
                   notes: list[str]) -> Any:
    """Run `reduce` for the failure just diagnosed; the Markdown report's repro, or None."""
    from onnxdoctor.protocol import REDUCED
    from onnxdoctor.reduce.run import ReduceOptions, describe, reduce
    from onnxdoctor.render.markdown import Repro

    exporter = options.exporter if options.exporter in ("dynamo", "torchscript") else None
    reduce_options = ReduceOptions(budget=outputs.reduce_budget, exporter=exporter, opset=options.opset,
                                   custom_op_libraries=options.custom_op_libraries, atol=options.atol,
                                   rtol=options.rtol, input_shapes=dict(options.input_shapes),
                                   max_memory_mb=options.max_memory_mb)
    from onnxdoctor.render.reduce_progress import ReduceProgress

    show = ReduceProgress(enabled=not view.json_out and not view.quiet and sys.stderr.isatty())
    try:
        outcome = reduce(target, path, reduce_options, force=outputs.force, progress=show)
    except (RefusedWrite, OutputError) as exc:
        notes.append(str(exc))
        return None
    finally:
        show.close()
    if not view.json_out:
        for line in describe(outcome):
            print(line, file=sys.stderr)
    if outcome.status != REDUCED:
        return None
    written = Path(outcome.path)
    if written.suffix == ".onnx":
        import onnx
        import onnx.printer

        text, language = onnx.printer.to_text(onnx.load(str(written))), "text"
    else:
        text, language = written.read_text("utf-8"), "python"
    return Repro(name=written.name, text=text, language=language,
                 summary=f"{outcome.what_before} -> {outcome.what_after}",
                 confirmed=outcome.verified)


def _load_renderers() -> None:
    import importlib

    for name in ("rich.console", "rich.syntax", "onnxdoctor.render.console", "onnxdoctor.render.jsonout",
                 "onnxdoctor.render.markdown"):
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def validate_options(options: DiagnoseOptions) -> None:
    """One clear usage error for a flag value the pipeline cannot use."""
    from onnxdoctor.pipeline import EXPORTERS

    if options.exporter is not None and options.exporter not in EXPORTERS:
        raise UsageError(f"--exporter must be one of {', '.join(EXPORTERS)}, not {options.exporter!r}")
    if options.targets:
        from onnxdoctor.targets import UnknownTargetError, resolve_targets

        try:
            resolve_targets(options.targets)
        except UnknownTargetError as exc:
            raise UsageError(f"--target: {exc}") from None
    if options.opset is not None and not 1 <= options.opset <= 100:
        raise UsageError(f"--opset {options.opset} is not an opset version")
    if not math.isfinite(options.timeout) or options.timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    if not math.isfinite(options.fix_budget) or options.fix_budget < 0:
        raise UsageError("--fix-budget must be zero or a positive number of seconds")
    if options.fix_timeout is not None and (not math.isfinite(options.fix_timeout) or options.fix_timeout <= 0):
        raise UsageError("--fix-timeout must be a positive number of seconds")
    if not math.isfinite(options.localize_budget) or options.localize_budget < 0:
        raise UsageError("--localize-budget must be zero or a positive number of seconds")
    if options.max_input_bytes <= 0:
        raise UsageError("--max-input-mb must be a positive number")
    if options.max_memory_mb is not None and (options.max_memory_mb < 0 or 0 < options.max_memory_mb < 256):
        raise UsageError("--max-memory-mb must be 0 (no cap) or at least 256 (Python and ONNX Runtime "
                         "alone need about 200 MB)")
    for name, value in (("--atol", options.atol), ("--rtol", options.rtol)):
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"{name} must be a finite, non-negative number")
    for text in options.custom_op_libraries:
        library = Path(text)
        if library.is_dir():
            raise UsageError(f"--custom-op-library {library} is a folder; give the library file (.so)")
        if not library.is_file():
            raise UsageError(f"--custom-op-library {library}: no such file")


def input_bytes(megabytes: float) -> int:
    """--max-input-mb as bytes; 0 (refused by validate_options) for a value that is no size."""
    return int(megabytes * 1024 * 1024) if math.isfinite(megabytes) and megabytes > 0 else 0


def _keep_files(
    diagnoses: tuple[Diagnosis, ...], outputs: Outputs, protected: tuple[Path, ...], target: Target
) -> tuple[list[str], list[str], list[str]]:
    """Write --output and --write-fix: what was written, what was not (and why), and the writes
    that failed (a missing verified fix is a note, not a failed write)."""
    wrote: list[str] = []
    notes: list[str] = []
    failed: list[str] = []
    writers: list[tuple[Path | None, Callable[[], str]]] = [
        (outputs.output, lambda: _keep_output(diagnoses, outputs.output, force=outputs.force,
                                              protected=protected)),
        (outputs.write_fix, lambda: _write_fix(diagnoses, outputs.write_fix, target, force=outputs.force,
                                               protected=protected)),
    ]
    for wanted, write in writers:
        if wanted is None:
            continue
        try:
            wrote.append(write())
        except (RefusedWrite, OutputError) as exc:
            notes.append(str(exc))
            failed.append(str(exc))
        except UsageError as exc:
            notes.append(str(exc))
        except (OSError, UnicodeError) as exc:  # whatever else a write meets: the diagnosis still prints
            notes.append(f"{wanted} was not written: {type(exc).__name__}: {exc}")
            failed.append(notes[-1])
    return wrote, notes, failed


def _check_target(path: Path) -> None:
    """The target exists and is a file; a name the OS refuses is a usage error, not a crash."""
    try:
        path.stat()
    except FileNotFoundError:
        raise UsageError(f"{path.name}: no such file (OD101)") from None
    except OSError as exc:
        raise UsageError(f"{path.name}: {exc.strerror or exc} (OD101)") from None
    if path.is_dir():
        raise UsageError(f"{path.name} is a directory; pass a model script or an .onnx file (OD102)")


def _read_quietly(path: Path) -> Any:
    """The ONNX file's model without weights, or None when it is unreadable (LOAD's finding)."""
    try:
        from onnxdoctor.onnxkit.files import read_onnx

        return read_onnx(path)
    except Exception:  # noqa: BLE001 - an unreadable file is LOAD's finding, not ours
        return None


def protected_paths(target: Path, onnx_model: Any = None) -> tuple[Path, ...]:
    """The files a diagnosis reads and no output may replace: the target and its external data."""
    if onnx_model is None:
        return (target,)
    from onnxdoctor.onnxkit.files import OnnxFileError, external_refs

    try:
        refs = [ref.location for ref in external_refs(onnx_model) if ref.location]
    except OnnxFileError:  # a malformed reference is LOAD's finding (OD112)
        return (target,)
    # A symlinked model reads its weights from its real folder; protect both readings.
    folders = {target.parent, target.resolve().parent}
    return (target, *(folder / location for folder in folders for location in refs))


def _check_outputs(outputs: Outputs, protected: tuple[Path, ...]) -> None:
    """Every output path is checked before the run, so a bad one costs no export."""
    output, report, write_fix, force = outputs.output, outputs.report, outputs.write_fix, outputs.force
    if output is not None and report is not None and os.path.abspath(output) == os.path.abspath(report):
        raise UsageError(f"--output and --report are both {output}; give two paths")
    for path, what in ((output, "--output"), (report, "--report")):
        if path is not None:
            check_output(path, force=force, what=what, protected=protected)
    if output is not None:
        check_output(output.with_name(output.name + ".data"), force=force, what="--output's weights",
                     protected=protected)
    if write_fix is not None:
        check_folder_output(write_fix, force=force, what="--write-fix")


def _check_input_names(onnx_model: Any, shapes: dict[str, list[int]]) -> None:
    """--input-shape must name inputs the model has (a typo would be silently ignored)."""
    from onnxdoctor.onnxkit.files import safe_text

    graph = onnx_model.graph
    initializers = {safe_text(t.name) for t in graph.initializer}
    names = [safe_text(i.name) for i in graph.input if safe_text(i.name) not in initializers]
    unknown = sorted(set(shapes) - set(names))
    if unknown:
        have = ", ".join(names) or "none"
        raise UsageError(f"--input-shape names {', '.join(map(repr, unknown))}, which the model does "
                         f"not have; its inputs are: {have}")


def _print_result(diagnoses: tuple[Diagnosis, ...], view: View, *, wrote: list[str],
                  error: dict[str, str] | None = None) -> None:
    if view.json_out:
        from onnxdoctor.render.jsonout import to_json

        sys.stdout.write(to_json(diagnoses, error) + "\n")
        return
    from rich.console import Console

    from onnxdoctor.render.console import plain_line, render_diagnoses

    # Piped output is not wrapped: wrapped code snippets would not paste back as Python.
    console = Console(highlight=False)
    piped = not console.is_terminal
    if piped:
        console = Console(highlight=False, width=400)
    with console.capture() if piped else contextlib.nullcontext() as captured:
        if view.quiet:
            for diagnosis in diagnoses:
                for finding in diagnosis.findings:
                    console.print(plain_line(finding), soft_wrap=True)
        else:
            render_diagnoses(console, diagnoses, verbose=view.verbose)
            for line in wrote:
                console.print(f"\n{printable(line, one_line=True)}", markup=False, highlight=False)
    if captured is not None:
        # rich pads blocks to the console's width: drop that, a pipe or a file wants plain lines.
        sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


class _progress:
    """A spinner on stderr naming the stage, only when stderr is a terminal."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._status = None

    def __enter__(self) -> Callable[[str], None]:
        if not self.enabled:
            return lambda _message: None
        from rich.console import Console

        self._status = Console(stderr=True).status("starting the worker")
        self._status.__enter__()
        return lambda message: self._status.update(message) if self._status else None

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)


def _keep_output(
    diagnoses: tuple[Diagnosis, ...], output: Path, *, force: bool, protected: tuple[Path, ...]
) -> str:
    source = diagnoses[0].facts.get("onnx_path")
    if not source or not Path(source).exists():
        raise UsageError(f"--output {output}: the export failed, so there is no model to keep")
    names = _save_model(Path(source), output, force=force, protected=protected, what="--output")
    weights = [output.with_name(n) for n in names if n != output.name]
    return f"wrote {output}" + "".join(f" and its weights {w}" for w in weights)


def _save_model(
    source: Path, destination: Path, *, force: bool, protected: tuple[Path, ...], what: str
) -> list[str]:
    """Save the exported model under the user's name, weights inline or in `<name>.data` beside it.

    The exporter names its external-data file after its own temporary file, so a plain copy would
    leave a model pointing at a file that does not exist. Both files are made in a private folder
    and moved into place by the rules of onnxdoctor.outputs; the names written come back.
    """
    import onnx

    model = onnx.load(str(source), load_external_data=True)
    large = model.ByteSize() > 1_800_000_000
    with staging_folder(destination.parent, name=destination.name) as staging:
        try:
            onnx.save(model, str(staging / destination.name), save_as_external_data=large,
                      location=destination.name + ".data" if large else None)
        except OSError as exc:
            raise OutputError(f"cannot write {destination}: {exc.strerror or exc}") from None
        return install_folder(staging, destination.parent, force=force, what=what, protected=protected)


def best_verified_fix(diagnoses: tuple[Diagnosis, ...]) -> Fix | None:
    """The first working fix of the first finding that has one (fixes are ranked best first)."""
    for diagnosis in diagnoses:
        for finding in diagnosis.findings:
            for fix in finding.fixes:
                if fix.check is not None and fix.check.works:
                    return fix
    return None


def _write_fix(
    diagnoses: tuple[Diagnosis, ...], folder: Path, target: Target, *, force: bool, protected: tuple[Path, ...]
) -> str:
    fix = best_verified_fix(diagnoses)
    if fix is None:
        raise UsageError("--write-fix: no fix was verified, so nothing was written")
    # Checked again now: the folder may have changed during the run (replaced by a link to
    # another folder, filled); the files go only into the folder itself, never through a link.
    check_folder_output(folder, force=force, what="--write-fix")
    created = False
    try:
        folder.mkdir(parents=True)
        created = True
    except FileExistsError:
        pass
    except OSError as exc:
        raise OutputError(f"--write-fix {folder}: {exc.strerror or exc}") from None
    try:
        return _write_fix_files(fix, diagnoses, folder, target, force=force, protected=protected)
    except BaseException:
        if created:  # leave no empty folder behind (files already moved in stay, named in the note)
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _write_fix_files(
    fix: Fix, diagnoses: tuple[Diagnosis, ...], folder: Path, target: Target, *, force: bool,
    protected: tuple[Path, ...],
) -> str:
    with pinned_folder(folder, what="--write-fix"):
        artifact = fix.check.artifact if fix.check else None
        # `--write-fix .` next to model.onnx must not replace the user's model with the fixed one.
        model_name = "model.onnx"
        if any(os.path.abspath(folder / model_name) == os.path.abspath(p) for p in protected):
            model_name = "model.fixed.onnx"
        has_model = bool(artifact and Path(artifact).exists())
        from onnxdoctor.analysis.fixes.program import fix_program

        files = {"fix.py": fix_program(fix, str(target.path.resolve()), target.factory, target.kind),
                 "README.md": _fix_readme(fix, diagnoses[0].target, model_name if has_model else None)}
        with staging_folder(folder, name="write-fix") as staging:
            for name, text in files.items():
                try:
                    # A lone surrogate (a file name that is not UTF-8) is written as its escape.
                    (staging / name).write_text(text, "utf-8", errors="backslashreplace")
                except OSError as exc:
                    raise OutputError(f"--write-fix: cannot write {folder / name}: {exc.strerror or exc}") from None
            written = install_folder(staging, folder, force=force, what="--write-fix", protected=protected)
        if has_model:
            written += _save_model(Path(artifact), folder / model_name, force=force, protected=protected,
                                   what="--write-fix")
    return f"wrote the fix ({fix.title}) to {folder}: {', '.join(written)}"


def _fix_readme(fix: Fix, target: str, model_name: str | None) -> str:
    from onnxdoctor.safetext import markdown_code, markdown_text

    check = fix.check
    figures = ""
    if check is not None and check.max_abs_diff is not None:
        figures = f" (max abs diff {check.max_abs_diff:.3g})"
    kernel = "register_custom_ops_library" in fix.snippet or "onnx_op" in fix.snippet
    shown = model_name or "model.onnx"
    load = (
        "```python\nimport onnxruntime\n# first define the @onnx_op kernel from fix.py's docstring in this process\n"
        "from onnxruntime_extensions import get_library_path\n\n"
        "options = onnxruntime.SessionOptions()\noptions.register_custom_ops_library(get_library_path())\n"
        f"session = onnxruntime.InferenceSession({shown!r}, options)\n```\n"
        if kernel
        else f"```python\nimport onnxruntime\n\nsession = onnxruntime.InferenceSession({shown!r})\n```\n"
    )
    if target.endswith(".onnx"):
        verified = f"the fixed model {markdown_text(check.detail) if check else 'was verified'}{figures}"
        files = ("- `fix.py`: a program that applies the same change to a copy of the file and runs it in "
                 "ONNX Runtime (`python fix.py [OUT.onnx]`; your file is not edited); its docstring holds the "
                 "code to carry into your own tooling.\n")
        model_line = f"- `{model_name}`: the fixed model onnxdoctor checked and ran.\n"
    else:
        verified = f"the fixed model reached parity with PyTorch{figures}"
        files = ("- `fix.py`: a program that builds the model through your script, applies the fix step by "
                 "step, exports, and checks the result against PyTorch in ONNX Runtime (`python fix.py "
                 "[OUT.onnx]`; your script is not edited); its docstring holds the change to carry into "
                 "your own code.\n")
        model_line = f"- `{model_name}`: the model onnxdoctor exported with the fix applied.\n"
    if model_name:
        files += model_line
    # The target's name, the fix's title and cost (a script's module names) are the user's text.
    return (
        f"# Fix for {markdown_code(target)}: {markdown_text(fix.title)}\n\n"
        f"onnxdoctor verified this fix: {verified}.\n\n"
        f"{files}\n"
        f"Cost: {markdown_text(fix.cost) if fix.cost else 'none noted'}\n\nLoad it in ONNX Runtime:\n\n{load}"
    )
