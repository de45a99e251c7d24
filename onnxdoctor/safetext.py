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
