"""`onnxdoctor graph` (placeholder until the graph drawer lands)."""

from __future__ import annotations

import typer


def graph_command(model: str = typer.Argument(..., help="model.onnx")) -> None:
    """Draw an ONNX graph with its problems highlighted."""
    raise typer.Exit(3)
