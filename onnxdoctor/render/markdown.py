"""The Markdown report (`diagnose --report out.md`): the same content as the console view."""

from __future__ import annotations

from dataclasses import dataclass

from onnxdoctor import __version__
from onnxdoctor.codes import slug
from onnxdoctor.model import Diagnosis, Finding, Severity, Status
from onnxdoctor.safetext import markdown_code, markdown_fence, markdown_text, printable


@dataclass(frozen=True)
class Repro:
    """A repro `diagnose --reduce` wrote beside the report (docs/reduce.md), for the issue body.

    `name`: its file name; `text`: what to paste (the script, or an ONNX file's text form);
    `language`: the code block's; `summary`: what was reduced; `confirmed`: it was checked to
    fail the same way in a fresh worker.
    """

    name: str
    text: str
    language: str
    summary: str
    confirmed: bool


def to_markdown(diagnoses: tuple[Diagnosis, ...], *, command: str = "", repro: Repro | None = None) -> str:
    """Render every run as one Markdown document.

    Given the `command` that ran, and with an error finding, the document ends with a
    ready-to-paste issue body: the error, the repro (when `repro` is given), the command, and
    the versions.
    """
    # Names and messages come from the model and the script: each is made safe for Markdown where
    # it lands (text, code span, code block), so none can open a heading, HTML or a fence.
    lines: list[str] = [f"# onnxdoctor report: {markdown_code(diagnoses[0].target)}", ""]
    versions = diagnoses[0].versions
    if versions:
        lines.append("Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
        lines.append("")
    for diagnosis in diagnoses:
        title = f"{diagnosis.exporter} exporter" if diagnosis.exporter else "ONNX file"
        lines += [f"## {title}", "", "| stage | status | seconds |", "|---|---|---|"]
        for outcome in diagnosis.stages:
            seconds = f"{outcome.seconds:.2f}" if outcome.status is not Status.SKIPPED else ""
            status = "not reached" if outcome.status is Status.SKIPPED else outcome.status.value
            lines.append(f"| {outcome.stage.value} | {status} | {seconds} |")
        lines.append("")
        if diagnosis.shapes:
            from onnxdoctor.render.sizes import size_rows

            names, rows = size_rows(diagnosis)
            lines += ["| " + " | ".join(markdown_text(n) for n in names) + " | status | max abs diff | error |",
                      "|" + "---|" * (len(names) + 3)]
            lines += ["| " + " | ".join(markdown_text(v) for v in row) + " |" for row in rows]
            lines.append("")
        if diagnosis.targets:
            from onnxdoctor.targets.matrix import STATIC_LINE, document_lines, matrix_rows

            lines += ["| target | check | reached | verdict | unsupported nodes | restricted nodes |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {markdown_text(r.target)} | {r.kind} | {r.reached} | {markdown_text(r.verdict)} "
                      f"| {r.unsupported} | {r.partly} |"
                      for r in matrix_rows(diagnosis.targets)]
            lines += ["", f"_{STATIC_LINE}._", ""]
            documents = document_lines(diagnosis.targets)
            lines += [*(f"- {line}" for line in documents), *([""] if documents else [])]
        if not diagnosis.findings:
            lines += ["Healthy: exports, passes the checker, loads and runs in ONNX Runtime, matches PyTorch.", ""]
        for finding in diagnosis.findings:
            lines += _finding(finding)
    lines += issue_body(diagnoses, command=command, repro=repro)
    lines.append(f"_onnxdoctor {__version__}_")
    return "\n".join(lines) + "\n"


def issue_body(diagnoses: tuple[Diagnosis, ...], *, command: str = "", repro: Repro | None = None) -> list[str]:
    """The report's "Issue body" section: Markdown to paste into an upstream issue, inside one
    code block (so it is copied as written); nothing when no run has an error, or without the
    command that found it."""
    found = next(((d, f) for d in diagnoses for f in d.findings if f.severity is Severity.ERROR), None)
    if found is None or not command:
        return []
    diagnosis, finding = found
    where = f" ({printable(finding.op, one_line=True)})" if finding.op else ""
    body = [f"### {finding.code} at {finding.stage.value}{where}: {printable(finding.message, one_line=True)[:160]}", ""]
    error = [printable(finding.message), *(printable(e) for e in finding.evidence[:2])]
    opening, closing = markdown_fence("\n".join(error), "text")
    body += ["**Error**", "", opening, *error, closing, ""]
    if repro is not None:
        state = "fails the same way when run alone" if repro.confirmed else "not confirmed to fail the same way alone"
        body += [f"**Repro** ({markdown_code(repro.name)}, {printable(repro.summary, one_line=True)}; {state})", ""]
        opening, closing = markdown_fence(repro.text, repro.language)
        body += [opening, *printable(repro.text.rstrip()).split("\n"), closing, ""]
    if command:
        run = f"onnxdoctor diagnose {repro.name}" if repro is not None else command
        body += ["**Command**", "", "```bash", printable(run, one_line=True), "```", ""]
    versions = diagnosis.versions
    if versions:
        body += ["**Versions**", "", *(f"- {k}: {v}" for k, v in versions.items()), ""]
    text = "\n".join(body)
    outer, outer_close = markdown_fence(text, "markdown")
    return ["## Issue body (ready to paste)", "", outer, *body, outer_close, ""]


def _finding(finding: Finding) -> list[str]:
    lines = [f"### {finding.code} `{slug(finding.code)}` ({finding.severity.value}, {finding.stage.value})", "",
             markdown_text(finding.message), ""]
    for key, value in (("op", finding.op_label), ("node", finding.node), ("source", finding.source),
                       ("opset", finding.opset)):
        if value is not None:
            lines.append(f"- **{key}**: {markdown_code(str(value))}")
    lines.append("")
    if finding.evidence:
        evidence = [printable(item) for item in finding.evidence]
        opening, closing = markdown_fence("\n".join(evidence), "text")
        lines += ["<details><summary>evidence</summary>", "", opening, *evidence, closing, "",
                  "</details>", ""]
    for number, fix in enumerate(finding.fixes, 1):
        check = fix.check
        if check is None:
            status = "not verified"
        elif check.works:
            diff = f", max abs diff {check.max_abs_diff:.2g}" if check.max_abs_diff is not None else ""
            status = f"verified: reached {check.reached.value if check.reached else '?'}{diff} in {check.seconds:.1f} s"
            if check.sizes:
                status += f", and at {markdown_text(', '.join(check.sizes))}"
        else:
            status = f"tried: {check.failure} ({markdown_text(check.detail)})"
        lines += [f"{number}. **{markdown_text(fix.title)}** — {status}", ""]
        if check is not None and check.targets:
            lines += ["   Targets: " + ", ".join(f"{markdown_text(t)}: {markdown_text(v)}" for t, v in check.targets), ""]
        if fix.cost:
            lines += [f"   Cost: {markdown_text(fix.cost)}", ""]
        if fix.snippet:
            snippet = printable(fix.snippet.rstrip())
            opening, closing = markdown_fence(snippet, "python")
            lines += [f"   {opening}", *("   " + line for line in snippet.split("\n")), f"   {closing}", ""]
    for note in finding.notes:
        lines += [f"> Note: {markdown_text(note)}", ""]
    return lines
