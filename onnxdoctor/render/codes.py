"""Print the code table (a table, plain lines or JSON) and one code's explanation."""

from __future__ import annotations

import json
import sys

from onnxdoctor.codes import CODES, explanation, find_code, group
from onnxdoctor.errors import UsageError


def codes_as_dicts() -> list[dict[str, str]]:
    """Every code as plain data (the `codes --json` schema)."""
    return [
        {
            "code": c.code,
            "slug": c.slug,
            "stage": c.stage.value,
            "group": group(c),  # the hundreds digit's name: `environment` for OD0xx
            "severity": c.severity.value,
            "summary": c.summary,
        }
        for c in CODES
    ]


def print_codes(json_out: bool) -> None:
    """Print every code, as a table on a terminal or JSON when asked."""
    if json_out:
        print(json.dumps({"schema": 1, "codes": codes_as_dicts()}, indent=2))
        return
    rows = codes_as_dicts()
    if not sys.stdout.isatty():
        # A pipe gets one unwrapped line per code, for grep and friends.
        widths = {k: max(len(r[k]) for r in rows) for k in ("code", "slug", "group", "severity")}
        for r in rows:
            cells = [r[k].ljust(widths[k]) for k in widths]
            print("  ".join([*cells, r["summary"]]))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True, header_style="bold", box=None)
    for column in ("code", "slug", "stage", "severity"):
        table.add_column(column, no_wrap=True)  # codes and slugs are identifiers: never cut
    table.add_column("summary")
    for row in codes_as_dicts():
        table.add_row(row["code"], row["slug"], row["group"], row["severity"], row["summary"])
    Console().print(table)


def explanation_as_printed(code: str) -> str:
    """A code's explanation as `explain` prints it: OD202's also lists what the op-rewrite library
    covers, generated from the library's table so that it never drifts from it."""
    text = explanation(code)
    if code == "OD202":
        from onnxdoctor.rewrites import coverage_markdown

        head, sep, tail = text.partition("\n## Example")
        text = head.rstrip("\n") + "\n" + coverage_markdown() + sep + tail
    return text


def print_explanation(code: str) -> None:
    """Print what a code means: rendered Markdown on a terminal, the plain text when piped.

    Raises:
        UsageError: no code or slug by that name.
    """
    match = find_code(code)
    if match is None:
        raise UsageError(f"unknown code {code.strip()!r}; `onnxdoctor codes` lists them")
    text = explanation_as_printed(match.code)
    if not sys.stdout.isatty():
        sys.stdout.write(text)
        return
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(text))
