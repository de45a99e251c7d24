"""Text that is safe to print on a terminal, whatever names a model or a path holds."""

from __future__ import annotations

import re

# C0/C1 controls and the bidirectional overrides (U+202A-U+202E, U+2066-U+2069) can move the
# cursor, recolour the terminal or reorder what a name appears to say.
# Lone surrogates (undecodable bytes of a file name) cannot be encoded for printing at all.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_UNPRINTABLE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str, *, one_line: bool = False) -> str:
    """`text` with control characters shown as escapes (`\\x1b`), safe to print on a terminal.

    Newlines and tabs stay unless `one_line` is set (file names, one-line errors).
    """
    pattern = _UNPRINTABLE_ONE_LINE if one_line else _UNPRINTABLE
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


# Characters that start Markdown or HTML syntax inside a line; at the start of a line, these too.
_MD_INLINE = re.compile(r"([\\`*\[\]<>|&])")
_MD_LINE_START = re.compile(r"^(\s*)([#>+=-]|\d+[.)])")


def markdown_text(text: str) -> str:
    """`text` (a name or message from the model or script) as one line of plain Markdown text:
    controls escaped, no new line, no emphasis, link, table cell, HTML or heading it could open."""
    line = printable(text, one_line=True)
    line = _MD_INLINE.sub(lambda m: "&amp;" if m.group() == "&" else "\\" + m.group(), line)
    return _MD_LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), line)


def markdown_code(text: str) -> str:
    """`text` as a Markdown code span (one line): delimited by more backticks than it holds."""
    line = printable(text, one_line=True)
    longest = max((len(run) for run in re.findall(r"`+", line)), default=0)
    fence = "`" * (longest + 1)
    padded = f" {line} " if line.startswith("`") or line.endswith("`") or longest else line
    return f"{fence}{padded}{fence}"


def markdown_fence(text: str, language: str = "") -> tuple[str, str]:
    """The opening and closing lines of a fenced code block that `text` cannot close early."""
    longest = max((len(run) for run in re.findall(r"`{3,}|~{3,}", text)), default=2)
    fence = "`" * max(3, longest + 1)
    return fence + language, fence


def comment_safe(text: str) -> str:
    """`text` as lines that are safe after a `#` in Python source and in a docstring: controls and
    characters Python would end a line on are escaped, and no backslash escape or quote is live."""
    return printable(text).replace("\\", "\\\\").replace('"', '\\"')
