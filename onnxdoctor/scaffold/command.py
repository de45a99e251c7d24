"""`onnxdoctor scaffold` (placeholder until the generator lands)."""

from __future__ import annotations

import typer


def scaffold_command(name: str = typer.Argument(..., help="Op name, e.g. MYSELU")) -> None:
    """Write a complete custom-op package."""
    raise typer.Exit(3)
