"""A sweep's report (Markdown, or HTML) and its console lines: formatting of a Summary only.

Every model name and message comes from the user's files: in Markdown it is plain text or a code
span it cannot close, in HTML it is escaped, on the console control characters are escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from onnxdoctor.safetext import markdown_code, markdown_text, printable
from onnxdoctor.sweep.record import Comparison, SweepResult
from onnxdoctor.sweep.summary import Summary

VERDICT_NAMES = {"healthy": "healthy", "failing": "failing", "timed_out": "timed out",
                 "error": "not diagnosed"}


@dataclass(frozen=True)
class _Cell:
    text: str
    code: bool = False  # a name from the user's files, shown as code
    user: bool = False  # text from the user's files or a library's message (escaped in Markdown)
    names: tuple[str, ...] = ()  # a list of such names, shown as code spans
    more: int = 0  # names left out of the list


@dataclass(frozen=True)
class _Section:
    heading: str
    columns: tuple[str, ...]
    rows: tuple[tuple[_Cell, ...], ...]
    note: str = ""


def _sections(summary: Summary, comparison: Comparison | None) -> list[_Section]:
    sections = [_Section("Verdicts", ("verdict", "models"),
                         tuple((_Cell(VERDICT_NAMES[v]), _Cell(str(n))) for v, n in summary.verdicts.items()),
                         note=f"{summary.total} models, {summary.seconds:.1f} s of diagnosis in all.")]
    if summary.codes:
        sections.append(_Section("Codes", ("code", "stage", "severity", "models"), tuple(
            (_Cell(c.code), _Cell(c.stage), _Cell(c.severity), _Cell(str(len(c.models))))
            for c in summary.codes)))
    if summary.failures:
        sections.append(_Section("Failures by code", ("code", "models"), tuple(
            (_Cell(code), _names(models)) for code, models in summary.failures)))
    if summary.fixes:
        sections.append(_Section("Fixes that worked most often", ("code", "fix", "models", "for example"),
                                 tuple((_Cell(f.code), _Cell(f.kind), _Cell(str(f.models)), _Cell(f.example, user=True))
                                       for f in summary.fixes)))
    if summary.errors:
        sections.append(_Section("Not diagnosed", ("model", "why"),
                                 tuple((_Cell(m, code=True), _Cell(why, user=True)) for m, why in summary.errors)))
    if summary.slowest:
        sections.append(_Section("Slowest models", ("model", "seconds", "verdict"), tuple(
            (_Cell(m, code=True), _Cell(f"{s:.1f}"), _Cell(VERDICT_NAMES[v])) for m, s, v in summary.slowest)))
    if comparison is not None:
        sections.append(_Section(
            "Changes since the compared sweep", ("model", "before", "now"),
            tuple((_Cell(c.shown, code=True), _Cell(_verdict(c.old_verdict, c.old_codes)),
                   _Cell(_verdict(c.new_verdict, c.new_codes))) for c in comparison.changes),
            note=f"{len(comparison.changes)} changed, {comparison.same} unchanged, "
                 f"{len(comparison.only_new)} new, {len(comparison.only_old)} only in the compared sweep."))
    return sections


def _names(models: Sequence[str], limit: int = 12) -> _Cell:
    """Several models in one cell, the first `limit` of them by name."""
    return _Cell("", names=tuple(models[:limit]), more=max(0, len(models) - limit))


def _verdict(verdict: str, codes: Sequence[str]) -> str:
    return VERDICT_NAMES.get(verdict, verdict) + (f" ({', '.join(codes)})" if codes else "")


def _md_code(name: str) -> str:
    # A table splits its row at every `|`, inside code spans too, unless it is escaped.
    return markdown_code(name).replace("|", "\\|")


def _md_cell(cell: _Cell) -> str:
    if cell.names:
        more = [f"and {cell.more} more"] if cell.more else []
        return ", ".join([*(_md_code(n) for n in cell.names), *more])
    if cell.code:
        return _md_code(cell.text)
    # Our own words and figures need no escaping ("36.1" is no list item inside a table).
    return markdown_text(cell.text) if cell.user else cell.text


def sweep_markdown(summary: Summary, comparison: Comparison | None = None, *, title: str = "onnxdoctor sweep") -> str:
    """The report as Markdown."""
    lines = [f"# {markdown_text(title)}", ""]
    for section in _sections(summary, comparison):
        lines += [f"## {section.heading}", ""]
        if section.note:
            lines += [section.note, ""]
        if section.rows:
            lines.append("| " + " | ".join(section.columns) + " |")
            lines.append("|" + "---|" * len(section.columns))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in section.rows]
            lines.append("")
    return "\n".join(lines)


def _html_cell(cell: _Cell) -> str:
    def code(name: str) -> str:
        return f"<code>{html.escape(printable(name, one_line=True))}</code>"

    if cell.names:
        more = [f"and {cell.more} more"] if cell.more else []
        return ", ".join([*(code(n) for n in cell.names), *more])
    return code(cell.text) if cell.code else html.escape(printable(cell.text, one_line=True))


def sweep_html(summary: Summary, comparison: Comparison | None = None, *, title: str = "onnxdoctor sweep") -> str:
    """The report as one self-contained HTML page."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    for section in _sections(summary, comparison):
        body.append(f"<h2>{html.escape(section.heading)}</h2>")
        if section.note:
            body.append(f"<p>{html.escape(section.note)}</p>")
        if section.rows:
            head = "".join(f"<th>{html.escape(c)}</th>" for c in section.columns)
            rows = "".join("<tr>" + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>"
                           for row in section.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
    style = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{style}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def result_line(result: SweepResult) -> str:
    """One finished model, as a console line: its mark, verdict, codes, time and name."""
    mark = {"healthy": "✓", "failing": "✗", "timed_out": "⏱", "error": "!"}.get(result.verdict, "?")
    detail = ", ".join(result.codes) if result.codes else (result.error or "")
    name = printable(result.shown, one_line=True)
    return f"{mark} {VERDICT_NAMES.get(result.verdict, result.verdict):<13} {result.seconds:6.1f}s  {name}" + (
        f"  {printable(detail, one_line=True)}" if detail else "")


def summary_lines(summary: Summary, comparison: Comparison | None = None) -> list[str]:
    """The console's closing lines: verdict counts, error codes, and what changed."""
    counts = ", ".join(f"{n} {VERDICT_NAMES[v]}" for v, n in summary.verdicts.items() if n)
    lines = [f"{summary.total} models: {counts or 'none'}"]
    for code, models in summary.failures:
        lines.append(f"  {code}: {len(models)} model(s)")
    if comparison is not None:
        lines.append(f"compared: {len(comparison.changes)} changed, {comparison.same} unchanged, "
                     f"{len(comparison.only_new)} new, {len(comparison.only_old)} gone")
        for change in comparison.changes:
            lines.append(f"  {printable(change.shown, one_line=True)}: {_verdict(change.old_verdict, change.old_codes)}"
                         f" -> {_verdict(change.new_verdict, change.new_codes)}")
    return lines
