"""The SHAPES stage's size matrix as rows of text, for the console and the Markdown report."""

from __future__ import annotations

from onnxdoctor.model import Diagnosis


def size_rows(diagnosis: Diagnosis) -> tuple[list[str], list[list[str]]]:
    """The SHAPES stage as a matrix: one column per input, one row per size checked (the
    example's first), then status, max abs diff and the first error's reason."""
    names = [name for name, _shape in diagnosis.shapes[0].inputs]
    example = next((o.facts for o in diagnosis.stages if o.stage.value == "load"), {}).get("inputs") or []
    rows: list[list[str]] = []
    if len(example) >= len(names):
        rows.append(["x".join(str(v) for v in e.get("shape", ())) for e in example[: len(names)]]
                    + ["example", "", ""])
    shown_error = False
    for check in diagnosis.shapes:
        shapes = dict(check.inputs)
        error = "" if shown_error or not check.error else check.error
        shown_error = shown_error or bool(error)
        diff = f"{check.max_abs_diff:.2g}" if check.max_abs_diff is not None else "-"
        rows.append(["x".join(str(v) for v in shapes.get(n, ())) for n in names] + [check.status, diff, error])
    return names, rows
