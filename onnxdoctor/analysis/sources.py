"""The user's own code, read by the `file.py:N` a finding names (standard library only).

A finding's source is a path relative to the model's folder and a line (normalize writes paths
inside the folder so). The analyses that look at the line itself (a branch's condition, an
unpacking, a len() call) read it here, so each reads the same file the same way: only files
inside the model's folder, as UTF-8 text, None or "" where the file is gone or unreadable.
"""

from __future__ import annotations

import ast
from pathlib import Path


def split_source(source: str | None) -> tuple[str, int] | None:
    """`("model.py", 12)` from `"model.py:12"`; None where the source has no line number."""
    name, _, line = (source or "").rpartition(":")
    return (name, int(line)) if name and line.isascii() and line.isdigit() else None


def folder_file(folder: str | Path | None, name: str) -> str | None:
    """The text of `name` (relative to the model's folder), None where it is not a readable file
    inside that folder: a source never sends a read outside it."""
    if not folder or not name:
        return None
    try:
        base = Path(folder).resolve()
        path = (base / name).resolve()
        if not path.is_relative_to(base):
            return None
        return path.read_text("utf-8", errors="replace")
    except (OSError, ValueError):  # unreadable, or a name no path can hold (a NUL byte)
        return None


def source_text(source: str | None, folder: str | Path | None) -> tuple[str, int] | None:
    """The whole text of the file a `file.py:N` source names, and N."""
    split = split_source(source)
    text = folder_file(folder, split[0]) if split else None
    return (text, split[1]) if text is not None and split else None


def source_lines(source: str | None, folder: str | Path | None, count: int = 1) -> list[str]:
    """The source's line and the `count - 1` after it (a call spread over several lines); []
    where unreadable or past the file's end."""
    found = source_text(source, folder)
    if found is None or found[1] < 1:
        return []
    return found[0].splitlines()[found[1] - 1:found[1] - 1 + count]



def parsed_source(source: str | None, folder: str | Path | None) -> tuple[ast.Module, int] | None:
    """The syntax tree of the file a `file.py:N` source names, and N; None where the file is
    unreadable or does not parse."""
    found = source_text(source, folder)
    if found is None:
        return None
    try:
        return ast.parse(found[0]), found[1]
    except (SyntaxError, ValueError):
        return None


def innermost_function(source: str | None, folder: str | Path | None,
                       ) -> tuple[ast.Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
    """The file's tree and the innermost function holding the source's line; None where there is
    none (or the file cannot be read)."""
    parsed = parsed_source(source, folder)
    if parsed is None:
        return None
    tree, line = parsed
    holding = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               and node.lineno <= line <= (node.end_lineno or node.lineno)]
    innermost = max(holding, key=lambda node: node.lineno, default=None)
    return (tree, innermost) if innermost is not None else None


def function_span(source: str | None, folder: str | Path | None) -> tuple[int, int] | None:
    """The first and last lines of the innermost function holding the source's line."""
    found = innermost_function(source, folder)
    return (found[1].lineno, found[1].end_lineno or found[1].lineno) if found else None
