"""The `onnxdoctor` command: parse, call the library, render, exit.

Heavy imports (onnx, pydot, the pipeline) happen inside commands so that `--help`, `codes` and
`explain` start fast; torch and onnxruntime are never imported in this process.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from typer.exceptions import Abort, TyperException

from onnxdoctor import __version__
from onnxdoctor.cli.graph import graph_command
from onnxdoctor.cli.reduce import reduce_command
from onnxdoctor.cli.scaffold import scaffold_command
from onnxdoctor.cli.sweep import sweep_command
from onnxdoctor.errors import OnnxDoctorError
from onnxdoctor.safetext import printable

app = typer.Typer(
    name="onnxdoctor",
    help="A doctor for PyTorch -> ONNX exports that fail: export, check, run, compare, fix.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)



def _guarded(func: Callable[..., None]) -> Callable[..., None]:
    """Turn known errors into one line and their exit code (tracebacks with ONNXDOCTOR_DEBUG=1)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            func(*args, **kwargs)
        except BrokenPipeError:
            raise typer.Exit(_quiet_broken_pipe()) from None
        except OnnxDoctorError as exc:
            if os.environ.get("ONNXDOCTOR_DEBUG") == "1":
                raise
            typer.echo(f"onnxdoctor: error: {printable(str(exc), one_line=True)}", err=True)
            if kwargs.get("json_out") or kwargs.get("output_format") == "json":
                print_json_error(error_code(exc), str(exc))
            raise typer.Exit(exc.exit_code) from None

    return wrapper


def error_code(exc: BaseException) -> str:
    """The `error.code` of `--json`'s error object: a stable name, or the problem's OD code."""
    from onnxdoctor.errors import CodedError, RefusedWrite, UsageError

    if isinstance(exc, CodedError) and exc.code:
        return exc.code
    if isinstance(exc, RefusedWrite):
        return "refused-write"
    if isinstance(exc, (UsageError, TyperException)):
        return "usage"
    if isinstance(exc, (KeyboardInterrupt, Abort)):
        return "interrupted"
    return "internal"


def print_json_error(code: str, message: str) -> None:
    """`--json` promises one JSON object on stdout even when there is no diagnosis to print."""
    from onnxdoctor.render.jsonout import error_json

    sys.stdout.write(error_json(code, message) + "\n")
    sys.stdout.flush()


def _wants_json(argv: list[str]) -> bool:
    """`--json` among the options (not after `--`, where it would be an argument)."""
    options = argv[: argv.index("--")] if "--" in argv else argv
    formats = [b for a, b in itertools.pairwise(options) if a == "--format"]
    formats += [a.split("=", 1)[1] for a in options if a.startswith("--format=")]
    return "--json" in options or "json" in formats


def _quiet_broken_pipe() -> int:
    """The reader went away (`| head`): stop quietly, with the code a SIGPIPE death gives."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the interpreter's final flush must not fail again
    except (OSError, ValueError):
        pass
    return 128 + signal.SIGPIPE


def ascii_safe_streams() -> None:
    """Print `\u2713` instead of dying when the locale cannot encode ✓ (LC_ALL=C, PYTHONUTF8=0)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            "✓⏱·…".encode(stream.encoding or "ascii")
        except (UnicodeEncodeError, LookupError):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="backslashreplace")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"onnxdoctor {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """A doctor for PyTorch -> ONNX exports that fail."""


@app.command()
@_guarded
def diagnose(
    target: str = typer.Argument(..., metavar="TARGET", help="model.py[:factory] or model.onnx"),
    exporter: str | None = typer.Option(
        None, "--exporter", metavar="NAME", help="dynamo | torchscript | both (default: the script's `dynamo`, else torch's)"
    ),
    opset: int | None = typer.Option(None, "--opset", help="Opset version to export at."),
    custom_op_library: list[Path] = typer.Option(
        [], "--custom-op-library", metavar="LIB.so", help="ONNX Runtime custom-op library (.so); repeatable."
    ),
    atol: float = typer.Option(1e-4, "--atol", help="Absolute tolerance for parity."),
    rtol: float = typer.Option(1e-3, "--rtol", help="Relative tolerance for parity."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Keep the exported model here."),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", metavar="NAME=DIMS", help="For .onnx targets: name=1,3,224,224 (repeatable)."
    ),
    shapes: list[str] = typer.Option(
        [], "--shapes", metavar="NAME=DIMS",
        help="Check the export at these input sizes (name=4,3,16; several inputs: 'x=4,16;mask=4,16'); repeatable.",
    ),
    check_shapes: bool = typer.Option(
        True, "--shapes-check/--no-shapes", help="Run the exported model at other input sizes after parity.",
    ),
    max_input_mb: float = typer.Option(
        256.0, "--max-input-mb", metavar="MB", help="For .onnx targets: cap on the generated inputs, all together."
    ),
    fix: bool = typer.Option(True, "--fix/--no-fix", help="Try the proposed fixes and report which work."),
    all_fixes: bool = typer.Option(False, "--all-fixes", help="Verify every fix, not just until one is exact."),
    fix_budget: float = typer.Option(
        120.0, "--fix-budget", metavar="SECONDS",
        help="Seconds in which fix checks and fix chains (up to 3 steps) may start; within --timeout.",
    ),
    fix_timeout: float | None = typer.Option(
        None, "--fix-timeout", metavar="SECONDS",
        help="Seconds one fix check may run (default: 4x the diagnosis's own stages, at least 180).",
    ),
    localize_budget: float = typer.Option(
        30.0, "--localize-budget", metavar="SECONDS",
        help="Seconds to search for a mismatch's first diverging value (0: skip the search).",
    ),
    write_fix: Path | None = typer.Option(None, "--write-fix", help="Write the best verified fix here."),
    json_out: bool = typer.Option(False, "--json", help="Print the JSON result (schema 2) and nothing else (= --format json)."),
    output_format: str | None = typer.Option(
        None, "--format", metavar="FORMAT",
        help="console (default) | json | markdown | github (workflow annotations) | sarif (SARIF 2.1.0).",
    ),
    report: Path | None = typer.Option(None, "--report", help="Also write a Markdown report here."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds for the whole command, fix checks included; workers still running then are killed."),
    max_memory_mb: int | None = typer.Option(
        None, "--max-memory-mb", metavar="MB", show_default=False,
        help="Cap on each worker's memory (default: 3/4 of physical memory; 0: no cap).",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite existing output files."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the findings."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Evidence and the script's output too."),
    target_names: list[str] = typer.Option(
        [], "--target", metavar="NAME",
        help="Deployment target: ort-cpu (default), ort-cuda, openvino, tensorrt, coreml, ort-web, or all; repeatable.",
    ),
    reduce: bool = typer.Option(False, "--reduce", help="On a failure, write a minimal repro beside --report (docs/reduce.md)."),
    reduce_budget: float = typer.Option(300.0, "--reduce-budget", metavar="SECONDS", help="Seconds for --reduce's search."),
) -> None:
    """Export, check, load, run and compare a model; name the first thing that breaks."""
    from onnxdoctor.cli.diagnose import (
        Outputs,
        View,
        input_bytes,
        output_format_of,
        parse_input_shapes,
        parse_size_sets,
        run_diagnose,
    )
    from onnxdoctor.model import DiagnoseOptions

    chosen = output_format_of(output_format, json_out=json_out)

    options = DiagnoseOptions(
        exporter=exporter,
        opset=opset,
        custom_op_libraries=tuple(str(p) for p in custom_op_library),
        atol=atol,
        rtol=rtol,
        input_shapes=parse_input_shapes(tuple(input_shape)),
        max_input_bytes=input_bytes(max_input_mb),
        timeout=timeout,
        fix=fix,
        all_fixes=all_fixes,
        fix_budget=fix_budget,
        fix_timeout=fix_timeout,
        localize_budget=localize_budget,
        targets=tuple(target_names),
        max_memory_mb=max_memory_mb,
        check_shapes=check_shapes,
        size_sets=parse_size_sets(tuple(shapes)),
    )
    code = run_diagnose(
        target,
        options,
        Outputs(output=output, report=report, write_fix=write_fix, force=force, reduce=reduce,
                reduce_budget=reduce_budget),
        View(json_out=chosen == "json", quiet=quiet, verbose=verbose, format=chosen),
    )
    raise typer.Exit(code)


# Registered after `diagnose`, so that `--help` lists the main command first (the README's order).
app.command("graph")(_guarded(graph_command))
app.command("scaffold")(_guarded(scaffold_command))
app.command("sweep")(_guarded(sweep_command))
app.command("reduce")(_guarded(reduce_command))


@app.command()
@_guarded
def explain(code: str = typer.Argument(..., metavar="CODE", help="A code such as OD203, or its slug.")) -> None:
    """Print what a code means, why it happens, how to fix it, and an example."""
    from onnxdoctor.render.codes import print_explanation

    print_explanation(code)


@app.command()
@_guarded
def codes(json_out: bool = typer.Option(False, "--json", help="Machine-readable list.")) -> None:
    """List every code with its slug, stage and summary."""
    from onnxdoctor.render.codes import print_codes

    print_codes(json_out=json_out)


@app.command()
@_guarded
def env(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Installed versions, the opsets each piece supports, and mismatches between them."""
    import json

    from onnxdoctor.envinfo import collect_env

    facts = collect_env()
    if json_out:
        typer.echo(json.dumps(facts, indent=2))
    else:
        from rich.console import Console

        from onnxdoctor.render.env import render_env

        render_env(facts, Console())
    # Warnings are mismatches the user should act on: exit 1, like findings.
    raise typer.Exit(1 if facts["warnings"] else 0)


def main() -> None:
    """Entry point: known errors become one line and an exit code; tracebacks need ONNXDOCTOR_DEBUG=1."""
    debug = os.environ.get("ONNXDOCTOR_DEBUG") == "1"
    # Turn SIGTERM/SIGHUP into SystemExit so `finally` blocks kill the worker group and clean up.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda number, _frame: sys.exit(128 + number))
    ascii_safe_streams()
    json_out = _wants_json(sys.argv[1:])
    try:
        if not json_out:
            app(standalone_mode=True)
        else:
            # Not standalone: click's usage errors come here instead of exiting, so that stdout
            # still gets its one JSON object.
            code = app(standalone_mode=False)
            sys.exit(code if isinstance(code, int) else 0)
    except BrokenPipeError:
        sys.exit(_quiet_broken_pipe())
    except TyperException as exc:  # click's usage errors; only without standalone mode (--json)
        show = getattr(exc, "show", None)
        if show is not None:
            show()  # the usage line and the error, as standalone mode prints them
        print_json_error(error_code(exc), exc.format_message())
        sys.exit(exc.exit_code)
    except Abort as exc:
        typer.echo("Aborted!", err=True)
        print_json_error(error_code(exc), "aborted")
        sys.exit(1)
    except OnnxDoctorError as exc:
        if debug:
            raise
        typer.echo(f"onnxdoctor: error: {printable(str(exc), one_line=True)}", err=True)
        if json_out:
            print_json_error(error_code(exc), str(exc))
        sys.exit(exc.exit_code)
    except KeyboardInterrupt as exc:
        typer.echo("onnxdoctor: interrupted", err=True)
        if json_out:
            print_json_error(error_code(exc), "interrupted")
        sys.exit(130)
    except Exception as exc:  # our own bug: one line, exit 3
        if debug:
            raise
        message = f"internal error: {type(exc).__name__}: {exc}"
        typer.echo(f"onnxdoctor: {message} (set ONNXDOCTOR_DEBUG=1 for the traceback)", err=True)
        if json_out:
            print_json_error(error_code(exc), message)
        sys.exit(3)


if __name__ == "__main__":
    main()
