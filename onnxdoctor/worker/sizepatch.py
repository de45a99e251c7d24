"""The user's forward() with the lines that freeze a size rewritten, for the `rewrite_size` fix.

A SHAPES finding (OD802-OD804) names the lines of the model's forward() that turn a size into a
Python value (`b = int(x.shape[0])`). The fix's snippet shows them rewritten; this module applies
the same rewrite to the class, in the fix's own worker, so the snippet is verified by an export
and a run at every checked size instead of only shown (README, "Other input sizes").
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Any


def rewrite_forward(model: Any, edits: list[tuple[int, str, str]]) -> int:
    """Replace `type(model).forward` by its own source with `edits` applied.

    Args:
        model: the loaded model; its class's forward is the one the SHAPES stage read.
        edits: (line number in the file, the line's text as recorded, its rewrite); a line whose
            text is no longer there is left alone.

    Returns:
        How many lines were rewritten.

    Raises:
        RuntimeError: no line matched, or forward cannot be rebuilt from its source (a closure):
            the fix check then fails with this message instead of passing unchanged code.
    """
    cls = type(model)
    forward = cls.forward
    if forward.__code__.co_freevars:
        raise RuntimeError(f"{cls.__name__}.forward uses names of an enclosing function; rewrite it by hand")
    lines, start = inspect.getsourcelines(forward)
    changed = 0
    for number, old, new in edits:
        index = number - start
        if 0 <= index < len(lines) and old and old in lines[index]:
            lines[index] = lines[index].replace(old, new, 1)
            changed += 1
    if not changed:
        raise RuntimeError(f"none of the recorded lines is in {cls.__name__}.forward any more")
    source = textwrap.dedent("".join(lines))
    # Compiled against forward's own module globals (torch, helpers), defined in a scratch
    # namespace so that nothing is added to the user's module.
    scratch: dict[str, Any] = {}
    filename = inspect.getsourcefile(forward) or "<forward>"
    exec(compile("\n" * (start - 1) + source, filename, "exec"), forward.__globals__, scratch)  # noqa: S102
    rebuilt = scratch.get(forward.__name__)
    if rebuilt is None:
        raise RuntimeError(f"{cls.__name__}.forward could not be rebuilt from its source")
    cls.forward = rebuilt
    return changed
