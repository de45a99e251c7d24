"""`onnxdoctor reduce`: options -> ReduceOptions -> onnxdoctor.reduce.run -> lines -> exit code."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer


def reduce_command(
    target: str = typer.Argument(..., metavar="TARGET", help="model.py[:factory] or model.onnx"),
    output: Path = typer.Option(..., "--output", "-o", help="Where to write the reduced repro (.py or .onnx)."),
    budget: float = typer.Option(300.0, "--budget", metavar="SECONDS", help="Seconds for the search; the best so far is kept."),
    exporter: str | None = typer.Option(None, "--exporter", metavar="NAME", help="dynamo | torchscript (default: the script's)."),
    opset: int | None = typer.Option(None, "--opset", help="Opset version to export at."),
    custom_op_library: list[Path] = typer.Option(
        [], "--custom-op-library", metavar="LIB.so", help="ONNX Runtime custom-op library (.so); repeatable."),
    input_shape: list[str] = typer.Option(
        [], "--input-shape", metavar="NAME=DIMS", help="For .onnx targets: name=1,3,224,224 (repeatable)."),
    atol: float = typer.Option(1e-4, "--atol", help="Absolute tolerance for parity."),
    rtol: float = typer.Option(1e-3, "--rtol", help="Relative tolerance for parity."),
    json_out: bool = typer.Option(False, "--json", help="Print the outcome as JSON and nothing else."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing output files."),
) -> None:
    """Write the smallest standalone model that fails the way TARGET does (docs/reduce.md)."""
    from dataclasses import asdict

    from onnxdoctor.cli.diagnose import parse_input_shapes
    from onnxdoctor.errors import UsageError
    from onnxdoctor.protocol import REDUCED  # protocol imports recipe: not on the start-up path
    from onnxdoctor.reduce.run import ReduceOptions, describe, reduce
    from onnxdoctor.safetext import printable

    if budget <= 0:
        raise UsageError("--budget must be a positive number of seconds")
    if exporter not in (None, "dynamo", "torchscript"):
        raise UsageError(f"--exporter must be dynamo or torchscript, not {exporter!r}")
    options = ReduceOptions(budget=budget, exporter=exporter, opset=opset,
                            custom_op_libraries=tuple(str(p) for p in custom_op_library),
                            input_shapes=parse_input_shapes(tuple(input_shape)), atol=atol, rtol=rtol)
    from onnxdoctor.render.reduce_progress import ReduceProgress

    show = ReduceProgress(enabled=not json_out and sys.stderr.isatty())
    try:
        outcome = reduce(target, output, options, force=force, progress=show)
    finally:
        show.close()
    if json_out:
        typer.echo(json.dumps({"schema": 1, **asdict(outcome)}, indent=2))
    else:
        for line in describe(outcome):
            typer.echo(line)
        if outcome.status == REDUCED:
            typer.echo(printable(f"  check it: onnxdoctor diagnose {outcome.path}", one_line=True))
    raise typer.Exit(0 if outcome.status == REDUCED else 1)
