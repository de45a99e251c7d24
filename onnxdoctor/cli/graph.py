"""`onnxdoctor graph`: draw an ONNX graph with its problems on it.

Only typer is imported at module level: onnx and pydot load inside the command, onnxruntime and
torch never in this process (`--runtime` asks the worker subprocess through the pipeline, which this
command layer hands to graph/).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from onnxdoctor.model import DiagnoseOptions, Diagnosis

# Repeated from onnxdoctor.graph.drawing (a test keeps them equal) so that --help imports nothing more.
DEFAULT_MAX_NODES = 5000


def graph_command(
    model: Path = typer.Argument(..., help="The .onnx file to draw.", show_default=False),
    png: bool = typer.Option(
        False, "--png", help="Write a PNG (scaled to at most about 12 Mpixels)."
    ),
    svg: bool = typer.Option(
        False, "--svg", help="Write an SVG (the default; best for big graphs)."
    ),
    dot: bool = typer.Option(False, "--dot", help="Write the Graphviz .dot source only."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Output file (default: next to the model, same name)."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output file."),
    tensors: bool = typer.Option(
        False, "--tensors", help="Draw tensors as ellipses (net_drawer style) instead of edges."
    ),
    initializers: bool = typer.Option(
        False, "--initializers", help="Also draw initializers (weights)."
    ),
    rankdir: str = typer.Option(
        "TB", "--rankdir", help="TB (top to bottom) or LR (left to right)."
    ),
    check: bool = typer.Option(
        True,
        "--check/--no-check",
        help="Run the ONNX checker and shape inference; mark failing nodes.",
    ),
    runtime: bool = typer.Option(
        False,
        "--runtime",
        help="Also load the model in ONNX Runtime (worker subprocess); mark what it refuses.",
    ),
    custom_op_library: list[Path] = typer.Option(
        [],
        "--custom-op-library",
        metavar="<path>",
        help="ONNX Runtime custom-op library for --runtime; repeatable.",
    ),
    from_json: Path | None = typer.Option(
        None, "--from", help="Mark the nodes named in a saved `diagnose --json` result."
    ),
    focus: str | None = typer.Option(
        None, "--focus", help="Draw only the neighbourhood of this node or tensor name."
    ),
    radius: int = typer.Option(2, "--radius", help="With --focus: how many ops away to draw."),
    max_nodes: int = typer.Option(
        DEFAULT_MAX_NODES,
        "--max-nodes",
        help="Draw at most this many nodes (0: all); says what was cut.",
    ),
    layout: str = typer.Option(
        "auto", "--layout", help="auto, dot (Graphviz layout) or layered (fast, for big graphs)."
    ),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds Graphviz may take."),
    max_memory_mb: int | None = typer.Option(
        None, "--max-memory-mb", metavar="MB", show_default=False,
        help="Cap on the checks' memory (default: 3/4 of physical memory; 0: no cap).",
    ),
    target_names: list[str] = typer.Option(
        [], "--target", metavar="NAME",
        help="Mark the nodes a deployment target does not support (ort-cuda, openvino, tensorrt, coreml, ort-web, all).",
    ),
) -> None:
    """Draw an ONNX graph; nodes the checker or runtime rejects are red, with their codes.

    Exit status: 0 drawn and healthy, 1 drawn with findings (or Graphviz missing), 2 bad input.
    """
    from onnxdoctor.graph.run import GraphRequest, run_graph

    code = run_graph(
        GraphRequest(
            model=model,
            formats=tuple(f for f, on in (("png", png), ("svg", svg), ("dot", dot)) if on),
            output=output,
            force=force,
            tensors=tensors,
            initializers=initializers,
            rankdir=rankdir,
            check=check,
            runtime=runtime,
            custom_op_libraries=tuple(custom_op_library),
            from_json=from_json,
            focus=focus,
            radius=radius,
            max_nodes=max_nodes,
            layout=layout,
            timeout=timeout,
            targets=tuple(target_names),
            max_memory_mb=max_memory_mb,
        ),
        typer.echo,
        # The command layer runs the pipeline for --runtime and the run targets; graph/ only draws.
        diagnose=_diagnose,
    )
    raise typer.Exit(code)


def _diagnose(target: str, options: DiagnoseOptions) -> tuple[Diagnosis, ...]:
    """The pipeline's run, imported only when --runtime or a run target asks for one."""
    from onnxdoctor.pipeline import diagnose

    return diagnose(target, options)
