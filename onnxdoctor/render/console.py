"""Console view: the stage ladder, then findings with their fixes (rich; plain when piped)."""

from __future__ import annotations

from rich.console import Console, Group
from rich.markup import escape
from rich.padding import Padding
from rich.syntax import Syntax
from rich.text import Text

from onnxdoctor.codes import slug
from onnxdoctor.model import Diagnosis, Finding, Fix, Status, drawn_in_distribution
from onnxdoctor.render.sizes import size_rows
from onnxdoctor.safetext import printable

_MARKS = {
    Status.PASSED: ("✓", "green"),
    Status.FAILED: ("✗", "red"),
    Status.CRASHED: ("✗", "red"),
    Status.TIMED_OUT: ("⏱", "red"),
    Status.SKIPPED: ("·", "dim"),
}


def render_diagnoses(console: Console, diagnoses: tuple[Diagnosis, ...], *, quiet: bool = False,
                     verbose: bool = False) -> None:
    """Print every run (one per exporter) to `console`."""
    for index, diagnosis in enumerate(diagnoses):
        if index:
            console.print()
        render_diagnosis(console, diagnosis, quiet=quiet, verbose=verbose)


def render_diagnosis(console: Console, diagnosis: Diagnosis, *, quiet: bool = False, verbose: bool = False) -> None:
    """Print one diagnosis: the stage ladder, then each finding with its fixes."""
    exporter = f" ({diagnosis.exporter} exporter)" if diagnosis.exporter else ""
    if not quiet:
        console.print(Text.assemble(("onnxdoctor diagnose ", "bold"), (printable(diagnosis.target, one_line=True), "bold cyan"), exporter))
        console.print(_ladder(diagnosis))
        if diagnosis.shapes:
            console.print(_size_matrix(diagnosis))
        if diagnosis.targets:
            console.print(_target_matrix(diagnosis))
    # Healthy with warnings only (a fixed-size export, OD801) still says so, then the warnings.
    if not diagnosis.findings or (diagnosis.healthy and not quiet):
        if diagnosis.exporter is None:
            verdict = "healthy: passes the checker, loads and runs in ONNX Runtime"
        else:
            verdict = ("healthy: exports, passes the checker, loads and runs in ONNX Runtime, "
                       "and matches PyTorch")
            drawn = drawn_in_distribution(diagnosis.stages)
            if drawn:
                verdict += f" in distribution ({drawn})"
            sizes = 1 + sum(c.status == "passed" for c in diagnosis.shapes)
            if sizes > 1:
                verdict += f" (at {sizes} input sizes)"
        if diagnosis.findings:
            verdict += f"; {len(diagnosis.findings)} warning(s):"
        console.print(Text(verdict, style="green"))
        if not diagnosis.findings:
            return
    for finding in diagnosis.findings:
        console.print()
        console.print(_finding(finding, verbose=verbose))


def _ladder(diagnosis: Diagnosis) -> Text:
    text = Text()
    for outcome in diagnosis.stages:
        mark, style = _MARKS[outcome.status]
        label = outcome.status.value.replace("_", " ") if outcome.status is not Status.SKIPPED else "not reached"
        seconds = f"{outcome.seconds:6.2f}s" if outcome.status is not Status.SKIPPED else " " * 7
        text.append(f"  {mark} ", style=style)
        text.append(f"{outcome.stage.value:<9}", style="bold" if outcome.status is not Status.SKIPPED else "dim")
        text.append(f" {seconds}  ", style="dim")
        text.append(label + "\n", style=style)
    text.rstrip()
    return text


_SIZE_STYLES = {"passed": "green", "failed": "red", "refused": "yellow"}


def _size_matrix(diagnosis: Diagnosis) -> Text:
    names, rows = size_rows(diagnosis)
    widths = [max(len(printable(n, one_line=True)), *(len(r[i]) for r in rows)) for i, n in enumerate(names)]
    seconds = diagnosis.facts.get("shapes_seconds")
    origin = {"declared": "declared dynamic dims", "probed": "dims PyTorch runs at other sizes",
              "explicit": "--shapes", "fix": "a fix's sizes"}.get(str(diagnosis.facts.get("shapes_origin")), "")
    title = "\n  sizes" + (f" ({origin})" if origin else "") + (f"  {seconds:.2f}s" if isinstance(seconds, float) else "")
    text = Text(title + "\n", style="bold")
    text.append("    " + "  ".join(printable(n, one_line=True).ljust(w) for n, w in zip(names, widths))
                + "  status   max abs diff\n", style="dim")
    for row in rows:
        status = row[len(names)]
        text.append("    " + "  ".join(v.ljust(w) for v, w in zip(row, widths)) + "  ")
        text.append(f"{status:<8}", style=_SIZE_STYLES.get(status, "dim"))
        text.append(f" {row[len(names) + 1]:<12}")
        if row[-1]:
            text.append("  " + printable(row[-1], one_line=True)[:90], style="dim")
        text.append("\n")
    text.rstrip()
    return text


def _target_matrix(diagnosis: Diagnosis) -> Text:
    from onnxdoctor.targets.matrix import STATIC_LINE, document_lines, matrix_rows

    text = Text("\n  target     check   reached  verdict          unsupported  partly\n", style="bold")
    for row in matrix_rows(diagnosis.targets):
        style = "red" if row.unsupported or row.verdict == "failed" else ("yellow" if row.partly or row.verdict == "skipped" else "green")
        text.append(f"  {row.target:<10} {row.kind:<7} {row.reached:<8} ")
        text.append(f"{row.verdict:<16}", style=style)
        text.append(f" {row.unsupported:>11}  {row.partly:>6}\n")
    text.append(f"  ({STATIC_LINE})", style="dim")
    for line in document_lines(diagnosis.targets):
        text.append(f"\n  {printable(line)}", style="dim")
    return text


def _indented(renderable: object, left: int) -> Padding:
    """Indent a block so that wrapped lines keep the indentation."""
    return Padding(renderable, (0, 0, 0, left), expand=False)


def _finding(finding: Finding, *, verbose: bool) -> Group:
    style = {"error": "bold red", "warning": "bold yellow", "info": "bold blue"}[finding.severity.value]
    parts: list[object] = []
    header = Text()
    header.append(f"{finding.code} ", style=style)
    header.append(f"{slug(finding.code)}", style="bold")
    header.append(f"  [{finding.severity.value}, {finding.stage.value}]", style="dim")
    parts.append(header)
    # One line each: a newline in a node name must not print a line of its own (a forged
    # "verified ✓" fix line); names and messages come from the model and the script.
    parts.append(_indented(Text(printable(finding.message, one_line=True)), 2))
    where = [("op", finding.op_label), ("node", finding.node), ("source", finding.source),
             ("opset", str(finding.opset) if finding.opset is not None else None)]
    located = "   ".join(f"{k}: {v}" for k, v in where if v)
    if located:
        parts.append(_indented(Text(printable(located, one_line=True), style="cyan"), 2))
    evidence = finding.evidence if verbose else finding.evidence[:1]
    for item in evidence:
        lines = item.splitlines()
        shown = lines if verbose else lines[:3]
        parts.append(_indented(Text(printable("\n".join(shown)), style="dim"), 4))
    if finding.fixes:
        parts.append(_indented(Text("fixes:", style="bold"), 2))
        for number, fix in enumerate(finding.fixes, 1):
            parts.extend(_fix(number, fix, show_snippet=verbose or number == 1 or bool(fix.verified)))
    for note in finding.notes:
        parts.append(_indented(Text("note: " + printable(note, one_line=True), style="yellow"), 2))
    parts.append(_indented(Text(f"more: onnxdoctor explain {finding.code}", style="dim"), 2))
    return Group(*parts)


def _fix(number: int, fix: Fix, *, show_snippet: bool) -> list[object]:
    check = fix.check
    line = Text(f"{number}. ")
    if check is None:
        label = "not tried " if fix.recipe else "suggestion "
        line.append(label, style="yellow" if fix.recipe else "dim")
    elif check.works:
        figures = f", max abs diff {check.max_abs_diff:.2g}" if check.max_abs_diff is not None else ""
        reached = check.reached.value if check.reached else "?"
        line.append(f"verified ✓ ({reached}{figures}, {check.seconds:.1f}s) ", style="green")
    else:
        line.append(f"tried ✗ ({check.failure}) ", style="red")
    line.append(printable(fix.title, one_line=True), style="bold" if check is not None and check.works else "")
    parts: list[object] = [_indented(line, 3)]
    if check is not None and not check.works and check.detail:
        parts.append(_indented(Text(printable(check.detail, one_line=True), style="dim"), 6))
    elif check is not None and check.works and check.sizes:
        parts.append(_indented(Text("sizes: example, " + printable(", ".join(check.sizes), one_line=True),
                                    style="dim"), 6))
    elif check is not None and check.works and "; " in check.detail:
        # What a verified fix was checked at beyond the example (other input sets): its proof.
        parts.append(_indented(Text(printable(check.detail.split("; ", 1)[1], one_line=True), style="dim"), 6))
    if check is not None and check.targets:
        parts.append(_indented(Text("targets: " + printable(" · ".join(f"{t} {v}" for t, v in check.targets),
                                                            one_line=True),
                                    style="dim"), 6))
    if fix.cost:
        parts.append(_indented(Text(f"cost: {printable(fix.cost, one_line=True)}", style="dim"), 6))
    if show_snippet and fix.snippet:
        parts.append(_indented(Syntax(printable(fix.snippet.rstrip()), "python", theme="ansi_dark",
                                      background_color="default", word_wrap=True), 6))
    return parts


def plain_line(finding: Finding) -> str:
    """One line per finding, for --quiet."""
    where = f" [{finding.op}]" if finding.op else ""
    return f"{finding.code} {slug(finding.code)}{where}: {escape(printable(finding.message, one_line=True))}"
