"""Running Graphviz on a drawing: finding the program, bounded PNG sizes, safe output."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from onnxdoctor.outputs import install

if TYPE_CHECKING:
    from onnxdoctor.graph.drawing import Drawing


class GraphvizMissing(Exception):
    """Neither the Graphviz program needed nor graphviz-pure is on PATH."""


class GraphvizError(Exception):
    """Graphviz ran but failed or timed out (one-line message)."""


# PNG: Graphviz scales the drawing down to about this many pixels (cairo's cost grows with them).
PNG_DPI = 72
PNG_MAX_PIXELS = 12_000_000
PNG_MAX_SIDE = 30_000  # cairo refuses surfaces above 32767 pixels a side
# Text below about 7 pixels is not read, only guessed: 0.8 keeps 10-point labels at 8 pixels.
READABLE_SCALE = 0.8
READABLE_TEXT_PIXELS = 7.0
TEXT_POINTS = 10.0  # the boxes' font size (elements.NODE_DEFAULTS)
PNG_SMALL_SIDE = 10_000  # pixels a side at most for a `dot` layout
# A Rust port of Graphviz's command line on PyPI (a dependency): `pip install` alone can draw.
PURE = "graphviz-pure"


def find_graphviz(program: str = "dot") -> str | None:
    """The Graphviz program (`dot`, `neato`) on PATH, else graphviz-pure; None when neither is."""
    return shutil.which(program) or shutil.which(PURE)


def graphviz_command(program: str) -> list[str] | None:
    """The command that runs `program`'s layout: the system Graphviz when installed (Debian's
    2.42 is what the pictures were tuned on), else graphviz-pure with that layout engine."""
    system = shutil.which(program)
    if system is not None:
        return [system]
    pure = shutil.which(PURE)
    return [pure, f"-K{program}"] if pure is not None else None


def render(
    drawing: Drawing, fmt: str, out: Path, *, timeout: float = 300.0, force: bool = True,
    protected: tuple[Path, ...] = (),
) -> None:
    """Run Graphviz on the drawing and write `out` (svg or png) by the rules of onnxdoctor.outputs.

    Raises:
        GraphvizMissing: the program is not on PATH.
        GraphvizError: Graphviz failed or ran past `timeout` seconds.
    """
    program, *flags = drawing.engine
    command = graphviz_command(program)
    if command is None:
        raise GraphvizMissing(program)
    args = [*command, *flags, f"-T{fmt}"]
    if fmt == "png":
        args += _png_size_flags(drawing)
    out = Path(out)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    args += ["-o", tmp_name]
    try:
        try:
            proc = subprocess.run(
                args,
                input=drawing.dot_text.encode("utf-8", "backslashreplace"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=timeout,
                start_new_session=True,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GraphvizError(
                f"Graphviz `{program}` did not finish within {timeout:.0f} s; "
                "draw less (--focus NODE --radius K, --max-nodes N) or use --svg"
            ) from None
        if proc.returncode != 0:
            message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            first = next((m for m in message if m.strip()), f"exit status {proc.returncode}")
            raise GraphvizError(f"Graphviz `{program}` failed: {first}")
        # mkstemp creates the file 0600; the output should get the usual permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_name, 0o666 & ~umask)
        install(Path(tmp_name), out, force=force, what="-o", protected=protected)
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)


def _png_size_flags(drawing: Drawing) -> list[str]:
    """Bound a PNG: Graphviz scales the drawing down to fit `size` (inches) at `dpi`.

    The layered layout's size is known: scale it to about PNG_MAX_PIXELS at PNG_DPI. A `dot`
    layout (at most DOT_LAYOUT_LIMIT nodes) is only known after layout: draw it sharper, at 96
    dpi, and let `size` cap each side at PNG_SMALL_SIDE pixels.
    """
    if drawing.size_inches is None:
        side = PNG_SMALL_SIDE / 96
        return ["-Gdpi=96", f"-Gsize={side:.1f},{side:.1f}"]
    width, height = drawing.size_inches
    scale = png_scale(drawing.size_inches)
    w_in = width * scale + 0.5
    h_in = height * scale + 0.5
    return [f"-Gdpi={PNG_DPI}", f"-Gsize={w_in:.1f},{h_in:.1f}"]


def png_scale(size_inches: tuple[float, float]) -> float:
    """How much a layered drawing of this size is scaled down in its PNG (1.0: not at all).

    About PNG_MAX_PIXELS, but never below READABLE_SCALE while the picture fits cairo's sides:
    a bigger file beats words nobody can read.
    """
    width, height = size_inches
    area = max(width * height, 1e-6) * PNG_DPI * PNG_DPI
    scale = max(min(1.0, math.sqrt(PNG_MAX_PIXELS / area)), READABLE_SCALE)
    fits = min(PNG_MAX_SIDE / PNG_DPI / max(width, 1e-6), PNG_MAX_SIDE / PNG_DPI / max(height, 1e-6))
    return min(scale, fits, 1.0)


def png_text_pixels(size_inches: tuple[float, float]) -> float:
    """The height of a box's 10-point text in the PNG, in pixels."""
    return TEXT_POINTS * PNG_DPI / 72 * png_scale(size_inches)
