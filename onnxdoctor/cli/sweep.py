"""`onnxdoctor sweep`: diagnose many models, resumably, on this machine or on Ray; report, compare.

Only typer is imported at module level (`--help` stays light). The models run in runner processes
or Ray workers, each through `pipeline.diagnose` and its isolated worker: this process imports
neither torch nor onnxruntime.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from onnxdoctor.model import DiagnoseOptions
    from onnxdoctor.sweep.record import Comparison, SweepResult
    from onnxdoctor.sweep.summary import Summary


def sweep_command(
    items: list[str] = typer.Argument(
        None, metavar="PATH...", show_default=False,
        help="Folders (every *.py script and *.onnx file in them), model files, or list files (.txt).",
    ),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Models diagnosed at once (with Ray and no address: its CPUs)."),
    timeout: float = typer.Option(600.0, "--timeout", help="Seconds for each model, fix checks included; a hang is a timed-out result."),
    results: Path | None = typer.Option(
        None, "--results", metavar="R.jsonl",
        help="Append one JSON line per model here; a rerun skips models already in it (same file, versions, options).",
    ),
    report: Path | None = typer.Option(None, "--report", metavar="R.md|R.html", help="Write a report (Markdown, or HTML for .html)."),
    compare_with: Path | None = typer.Option(
        None, "--compare", metavar="OLD.jsonl", help="List the models whose verdict changed since that sweep's results."
    ),
    engine: str = typer.Option("local", "--engine", help="local (runner processes) or ray."),
    ray_address: str | None = typer.Option(None, "--ray-address", metavar="ADDR", help="A Ray cluster's address (default: a private local Ray)."),
    fix: bool = typer.Option(True, "--fix/--no-fix", help="Try the proposed fixes and report which work."),
    fix_budget: float = typer.Option(120.0, "--fix-budget", metavar="SECONDS", help="Seconds per model in which fix checks may start."),
    localize_budget: float = typer.Option(30.0, "--localize-budget", metavar="SECONDS", help="Seconds per model to localize a mismatch (0: skip)."),
    exporter: str | None = typer.Option(None, "--exporter", metavar="NAME", help="dynamo | torchscript | both (default: each script's own)."),
    opset: int | None = typer.Option(None, "--opset", help="Opset version to export at."),
    target_names: list[str] = typer.Option([], "--target", metavar="NAME", help="Deployment target, as for diagnose; repeatable."),
    max_memory_mb: int | None = typer.Option(
        None, "--max-memory-mb", metavar="MB", show_default=False,
        help="Cap on each worker's memory (default: 3/4 of physical memory shared by --jobs).",
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing --report (the results file is always appended to)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the summary, not a line per model."),
) -> None:
    """Diagnose many models (resumable), on this machine or on a Ray cluster, with a report."""
    from onnxdoctor.cli.diagnose import validate_options
    from onnxdoctor.errors import UsageError
    from onnxdoctor.model import DiagnoseOptions

    options = DiagnoseOptions(exporter=exporter, opset=opset, timeout=timeout, fix=fix, fix_budget=fix_budget,
                              localize_budget=localize_budget, targets=tuple(target_names),
                              max_memory_mb=max_memory_mb)
    validate_options(options)
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if engine not in ("local", "ray"):
        raise UsageError(f"--engine must be local or ray, not {engine!r}")
    if ray_address is not None and engine != "ray":
        raise UsageError("--ray-address needs --engine ray")
    code = run_sweep_command(tuple(items or ()), options, jobs=jobs, engine=engine, ray_address=ray_address,
                             results=results, report=report, compare_with=compare_with, force=force, quiet=quiet)
    raise typer.Exit(code)


def run_sweep_command(items: tuple[str, ...], options: DiagnoseOptions, *, jobs: int, engine: str, ray_address: str | None,
                      results: Path | None, report: Path | None, compare_with: Path | None, force: bool,
                      quiet: bool) -> int:
    """Plan, check every path, run, write the report; the exit code (0 all healthy, 1 not all
    healthy, 2 an output not written, 130 interrupted).

    Raises:
        UsageError: a bad PATH item or output path, before any model runs.
    """
    from onnxdoctor.errors import UsageError
    from onnxdoctor.outputs import check_output, open_append
    from onnxdoctor.safetext import printable
    from onnxdoctor.sweep.run import SweepRequest, plan_sweep, run_sweep
    from onnxdoctor.sweep.store import Stored, latest_per_model, read_results

    if not items and results is None:
        raise UsageError("sweep: give PATH items to diagnose, or --results to report on a finished sweep")
    if results is not None and report is not None and results.absolute() == report.absolute():
        raise UsageError(f"--results and --report are both {results}; give two paths")
    old = _read_compared(compare_with)
    stored = read_results(results) if results is not None else Stored((), 0)
    if not items:  # a report (and comparison) of a finished sweep
        if results is not None and not results.exists():
            raise UsageError(f"--results {results}: no such file")
        return _finish(latest_per_model(stored.results), old, report, force=force, protected=(results,),
                       interrupted=False, wrote=None)

    request = SweepRequest(items, options, jobs=jobs, engine=engine, ray_address=ray_address)
    plan = plan_sweep(request, stored)
    from onnxdoctor.target import parse_target

    # The models, and the compared results, are read: no output may replace them.
    protected = tuple(parse_target(j.target).path for j in plan.jobs) + tuple(p for p in (compare_with,) if p)
    if report is not None:
        check_output(report, force=force, what="--report", protected=(*protected, *(p for p in (results,) if p)))
    if engine == "ray":
        from onnxdoctor.sweep.ray_engine import require_ray

        require_ray()
    log = open_append(results, what="--results", protected=protected) if results is not None else None
    if stored.unreadable:
        print(f"onnxdoctor: --results {printable(str(results), one_line=True)}: {stored.unreadable} line(s) that are not results "
              "were skipped (a sweep killed while writing?)", file=sys.stderr)
    todo = len(plan.to_run)
    print(f"onnxdoctor sweep: {len(plan.jobs)} models, {len(plan.kept)} already in {printable(str(results), one_line=True)}, {todo} to run"
          if plan.kept else f"onnxdoctor sweep: {len(plan.jobs)} models to run", file=sys.stderr)
    from onnxdoctor.render.sweep import result_line

    try:
        with _progress(todo) as advance:
            def on_result(result: SweepResult) -> None:
                if not quiet:
                    print(result_line(result), flush=True)
                advance()

            outcome = run_sweep(request, plan, log, on_result)
    finally:
        if log is not None:
            log.close()
    return _finish(outcome.results, old, report, force=force, protected=(*protected, *(p for p in (results,) if p)),
                   interrupted=outcome.interrupted, wrote=results if outcome.ran else None,
                   not_run=len(plan.jobs) - len(outcome.results))


def _read_compared(path: Path | None) -> tuple[SweepResult, ...] | None:
    if path is None:
        return None
    from onnxdoctor.errors import UsageError
    from onnxdoctor.sweep.store import latest_per_model, read_results

    if not path.is_file():
        raise UsageError(f"--compare {path}: no such results file")
    stored = read_results(path, what="--compare")
    if not stored.results:
        raise UsageError(f"--compare {path}: no sweep results in it")
    return latest_per_model(stored.results)


def _finish(results: tuple[SweepResult, ...], old: tuple[SweepResult, ...] | None, report: Path | None, *,
            force: bool, protected: tuple[Path | None, ...], interrupted: bool, wrote: Path | None,
            not_run: int = 0) -> int:
    from onnxdoctor.errors import RefusedWrite
    from onnxdoctor.outputs import OutputError, write_file
    from onnxdoctor.render.sweep import summary_lines, sweep_html, sweep_markdown
    from onnxdoctor.safetext import printable
    from onnxdoctor.sweep.compare import compare
    from onnxdoctor.sweep.summary import summarize

    summary: Summary = summarize(results)
    comparison: Comparison | None = compare(old, results) if old is not None else None
    for line in summary_lines(summary, comparison):
        print(line)
    if wrote is not None:
        print(f"results appended to {printable(str(wrote), one_line=True)}")
    if interrupted:
        print(f"onnxdoctor: interrupted: {not_run} model(s) not run; the same command resumes "
              "(no report written)", file=sys.stderr)
        return 130
    code = 0 if summary.verdicts["healthy"] == summary.total else 1
    if report is not None:
        render = sweep_html if report.suffix.lower() in (".html", ".htm") else sweep_markdown
        try:
            write_file(report, render(summary, comparison), force=force, what="--report",
                       protected=tuple(p for p in protected if p is not None))
            print(f"wrote {printable(str(report), one_line=True)}")
        except (RefusedWrite, OutputError) as exc:
            print(f"onnxdoctor: {printable(str(exc), one_line=True)}", file=sys.stderr)
            return 2
    return code


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Any]:
    """A progress bar with an ETA on stderr, when stderr is a terminal; else nothing."""
    if not sys.stderr.isatty() or total == 0:
        yield lambda: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress("sweep", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), "ETA", TimeRemainingColumn(),
                  console=Console(stderr=True), redirect_stdout=True, transient=True) as progress:
        task = progress.add_task("sweep", total=total)
        yield lambda: progress.advance(task)
