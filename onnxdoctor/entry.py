"""The `onnxdoctor` executable: a fast path for the table commands, typer for everything else.

`codes`, `explain` and `--version` only read the code table; answering them before typer (which
imports pydantic and rich's help machinery) keeps them near Python's own start-up time.
"""

from __future__ import annotations

import os
import sys


def _fast(argv: list[str]) -> int | None:
    """Handle `--version`, `codes [--json]` and `explain CODE`; None means "not mine"."""
    if argv == ["--version"]:
        from onnxdoctor import __version__

        print(f"onnxdoctor {__version__}")
        return 0
    if argv in (["codes"], ["codes", "--json"]) and not sys.stdout.isatty():
        from onnxdoctor.render.codes import print_codes

        print_codes(json_out=argv[-1] == "--json")
        return 0
    if len(argv) == 2 and argv[0] == "explain" and not argv[1].startswith("-") and not sys.stdout.isatty():
        from onnxdoctor.errors import UsageError
        from onnxdoctor.render.codes import print_explanation

        try:
            print_explanation(argv[1])
        except UsageError as exc:
            print(f"onnxdoctor: error: {exc}", file=sys.stderr)
            return exc.exit_code
        return 0
    return None


def main() -> None:
    """Console-script entry point."""
    if os.environ.get("ONNXDOCTOR_DEBUG") != "1":
        try:
            code = _fast(sys.argv[1:])
        except BrokenPipeError:
            # The reader went away (`| head`): stop quietly, as a SIGPIPE death would.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            code = 128 + 13
        if code is not None:
            sys.exit(code)
    from onnxdoctor.cli import main as typer_main

    typer_main()
