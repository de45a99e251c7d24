"""`onnxdoctor diagnose`: validate flags and paths, run the pipeline, render, write outputs."""

from __future__ import annotations

import contextlib
import math
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from onnxdoctor.errors import RefusedWrite, UsageError
from onnxdoctor.model import Diagnosis, Fix, Severity


def parse_input_shapes(items: tuple[str, ...]) -> dict[str, list[int]]:
    """`name=1,3,224,224` items to a dict; one clear error for a malformed item."""
    shapes: dict[str, list[int]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            values = [int(d) for d in dims.split(",")] if dims.strip() else []
            if any(v < 0 for v in values):
                raise ValueError
        except ValueError:
            raise UsageError(f"--input-shape {item!r}: expected NAME=D1,D2,... with non-negative integers") from None
        shapes[name.strip()] = values
    return shapes


def check_writable(path: Path, *, force: bool, what: str) -> None:
    """Refuse to overwrite without --force, and refuse paths whose folder does not exist."""
    if path.exists() and not force:
        raise RefusedWrite(f"{what} {path} exists; pass --force to overwrite it")
    if path.exists() and path.is_dir():
        raise UsageError(f"{what} {path} is a directory")
    if not path.parent.is_dir():
        raise UsageError(f"{what} {path}: folder {path.parent} does not exist")


def run_diagnose(
    *,
    target: str,
    exporter: str | None,
    opset: int | None,
    custom_op_libraries: tuple[Path, ...],
    atol: float,
    rtol: float,
    output: Path | None,
    input_shapes: tuple[str, ...],
    fix: bool,
    all_fixes: bool,
    write_fix: Path | None,
    json_out: bool,
    report: Path | None,
    timeout: float,
    force: bool,
    quiet: bool,
    verbose: bool,
) -> int:
    """Run `diagnose` and return the exit code (0 healthy, 1 findings; usage errors raise)."""
    from onnxdoctor.pipeline import EXPORTERS, DiagnoseOptions, diagnose, parse_target

    parsed = parse_target(target)
    if not parsed.path.exists():
        raise UsageError(f"{parsed.path.name}: no such file (OD101)")
    if parsed.path.is_dir():
        raise UsageError(f"{parsed.path.name} is a directory; pass a model script or an .onnx file (OD102)")
    if exporter is not None and exporter not in EXPORTERS:
        raise UsageError(f"--exporter must be one of {', '.join(EXPORTERS)}, not {exporter!r}")
    if opset is not None and not 1 <= opset <= 100:
        raise UsageError(f"--opset {opset} is not an opset version")
    if not math.isfinite(timeout) or timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    for name, value in (("--atol", atol), ("--rtol", rtol)):
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"{name} must be a finite, non-negative number")
    for library in custom_op_libraries:
        if not library.is_file():
            raise UsageError(f"--custom-op-library {library}: no such file")
    for path, what in ((output, "--output"), (report, "--report")):
        if path is not None:
            check_writable(path, force=force, what=what)
    if write_fix is not None and write_fix.exists() and not write_fix.is_dir():
        raise UsageError(f"--write-fix {write_fix} is a file; give a folder")
    if write_fix is not None and write_fix.exists() and any(write_fix.iterdir()) and not force:
        raise RefusedWrite(f"--write-fix {write_fix} is not empty; pass --force to write into it")
    if output is not None and parsed.kind == "onnx":
        raise UsageError("--output keeps the exported model; the target is already an ONNX file")

    options = DiagnoseOptions(
        exporter=exporter,
        opset=opset,
        custom_op_libraries=tuple(str(p) for p in custom_op_libraries),
        atol=atol,
        rtol=rtol,
        input_shapes=parse_input_shapes(input_shapes),
        timeout=timeout,
        fix=fix,
        all_fixes=all_fixes,
    )
    workdir = Path(tempfile.mkdtemp(prefix="onnxdoctor-"))
    notes: list[str] = []  # outputs that could not be written; the diagnosis is still shown
    wrote: list[str] = []
    try:
        with _progress(enabled=not json_out and not quiet) as progress:
            diagnoses = diagnose(target, options, progress=progress, workdir=workdir)
        for wanted, write in ((output, lambda: _keep_output(diagnoses, output)),
                              (write_fix, lambda: _write_fix(diagnoses, write_fix, force=force))):
            if wanted is not None:
                try:
                    wrote.append(write())
                except UsageError as exc:
                    notes.append(str(exc))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    if json_out:
        from onnxdoctor.render.jsonout import to_json

        sys.stdout.write(to_json(diagnoses) + "\n")
    else:
        from rich.console import Console

        from onnxdoctor.render.console import plain_line, render_diagnoses

        # Piped output is not wrapped: wrapped code snippets would not paste back as Python.
        console = Console(highlight=False)
        piped = not console.is_terminal
        if piped:
            console = Console(highlight=False, width=400)
        with console.capture() if piped else contextlib.nullcontext() as captured:
            if quiet:
                for diagnosis in diagnoses:
                    for finding in diagnosis.findings:
                        console.print(plain_line(finding), soft_wrap=True)
            else:
                render_diagnoses(console, diagnoses, verbose=verbose)
                for line in wrote:
                    console.print(f"\n{line}", markup=False, highlight=False)
        if captured is not None:
            # rich pads blocks to the console's width: drop that, a pipe or a file wants plain lines.
            sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    if report is not None:
        from onnxdoctor.render.markdown import to_markdown

        report.write_text(to_markdown(diagnoses), "utf-8", errors="surrogateescape")
    for note in notes:
        print(f"onnxdoctor: {note}", file=sys.stderr)
    has_errors = any(f.severity is Severity.ERROR for d in diagnoses for f in d.findings)
    return 1 if has_errors else 0


class _progress:
    """A spinner on stderr naming the stage, only when stderr is a terminal."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._status = None

    def __enter__(self) -> Callable[[str], None]:
        if not self.enabled:
            return lambda _message: None
        from rich.console import Console

        self._status = Console(stderr=True).status("starting the worker")
        self._status.__enter__()
        return lambda message: self._status.update(message) if self._status else None

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)


def _keep_output(diagnoses: tuple[Diagnosis, ...], output: Path) -> str:
    source = diagnoses[0].facts.get("onnx_path")
    if not source or not Path(source).exists():
        raise UsageError(f"--output {output}: the export failed, so there is no model to keep")
    _copy_model(Path(source), output)
    return f"wrote {output}"


def _copy_model(source: Path, destination: Path) -> None:
    """Save the exported model under the user's name, weights inline or in `<name>.data` beside it.

    The exporter names its external-data file after its own temporary file, so a plain copy would
    leave a model pointing at a file that does not exist.
    """
    import onnx

    model = onnx.load(str(source), load_external_data=True)
    large = model.ByteSize() > 1_800_000_000
    onnx.save(model, str(destination), save_as_external_data=large,
              location=destination.name + ".data" if large else None)


def best_verified_fix(diagnoses: tuple[Diagnosis, ...]) -> Fix | None:
    """The first working fix of the first finding that has one (fixes are ranked best first)."""
    for diagnosis in diagnoses:
        for finding in diagnosis.findings:
            for fix in finding.fixes:
                if fix.check is not None and fix.check.works:
                    return fix
    return None


def _write_fix(diagnoses: tuple[Diagnosis, ...], folder: Path, *, force: bool) -> str:
    fix = best_verified_fix(diagnoses)
    if fix is None:
        raise UsageError("--write-fix: no fix was verified, so nothing was written")
    folder.mkdir(parents=True, exist_ok=True)
    files = {"fix.py": _fix_module(fix), "README.md": _fix_readme(fix, diagnoses[0].target)}
    for name, text in files.items():
        path = folder / name
        if path.exists() and not force:
            raise RefusedWrite(f"{path} exists; pass --force to overwrite it")
        path.write_text(text, "utf-8")
    if fix.check and fix.check.artifact and Path(fix.check.artifact).exists():
        target = folder / "model.onnx"
        if target.exists() and not force:
            raise RefusedWrite(f"{target} exists; pass --force to overwrite it")
        _copy_model(Path(fix.check.artifact), target)
        files["model.onnx"] = ""
    return f"wrote the fix ({fix.title}) to {folder}: {', '.join(files)}"


def _fix_module(fix: Fix) -> str:
    header = f'"""{fix.title}.\n\nVerified by onnxdoctor: {fix.check.detail if fix.check else ""}\n"""\n\n'
    return header + fix.snippet


def _fix_readme(fix: Fix, target: str) -> str:
    check = fix.check
    figures = ""
    if check is not None and check.max_abs_diff is not None:
        figures = f" (max abs diff {check.max_abs_diff:.3g})"
    kernel = "register_custom_ops_library" in fix.snippet or "onnx_op" in fix.snippet
    load = (
        "```python\nimport onnxruntime\nimport fix  # registers the Python kernel\n"
        "from onnxruntime_extensions import get_library_path\n\n"
        "options = onnxruntime.SessionOptions()\noptions.register_custom_ops_library(get_library_path())\n"
        "session = onnxruntime.InferenceSession('model.onnx', options)\n```\n"
        if kernel
        else "```python\nimport onnxruntime\n\nsession = onnxruntime.InferenceSession('model.onnx')\n```\n"
    )
    if target.endswith(".onnx"):
        verified = f"the fixed model {check.detail if check else 'was verified'}{figures}"
        files = (
            "- `fix.py`: the code that applies the same change to the file (your file is not edited).\n"
            "- `model.onnx`: the fixed model onnxdoctor checked and ran.\n\n"
        )
    else:
        verified = f"the fixed model reached parity with PyTorch{figures}"
        files = (
            "- `fix.py`: the code to add before `torch.onnx.export` (your script is not edited).\n"
            "- `model.onnx`: the model onnxdoctor exported with the fix applied.\n\n"
        )
    return (
        f"# Fix for {target}: {fix.title}\n\n"
        f"onnxdoctor verified this fix: {verified}.\n\n"
        f"{files}"
        f"Cost: {fix.cost or 'none noted'}\n\nLoad it in ONNX Runtime:\n\n{load}"
    )
