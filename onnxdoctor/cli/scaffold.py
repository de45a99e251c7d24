"""`onnxdoctor scaffold`: validate, render and write a custom-op package (no torch/onnx imports)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from onnxdoctor.errors import RefusedWrite, UsageError
from onnxdoctor.outputs import check_output, install_folder, staging_folder


def scaffold_command(
    name: str = typer.Argument(..., help="Op name, e.g. MYSELU (an ASCII identifier; the folder is its lowercase)."),
    namespace: str | None = typer.Option(None, "--namespace", help="torch.library namespace = ONNX domain (default: mynamespace)."),
    expr: str | None = typer.Option(
        None, "--expr", help='Elementwise math over the inputs and attributes, e.g. "x * sigmoid(beta * x)".'
    ),
    attr: list[str] = typer.Option([], "--attr", help="Attribute NAME:float=DEFAULT or NAME:int=DEFAULT; repeatable."),
    inputs: str | None = typer.Option(None, "--inputs", help="Comma-separated input names (default: x)."),
    opset: int | None = typer.Option(None, "--opset", help="ONNX opset to export at (18-20; default 18)."),
    out: Path = typer.Option(Path("."), "--out", help="Parent folder; the package goes to OUT/<name lowercase>/."),
    force: bool = typer.Option(False, "--force", help="Overwrite the package's files if the folder has files."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the files that would be written; write nothing."),
) -> None:
    """Write a complete custom-op package: torch op, both ONNX exports, ORT kernels, CUDA, tests."""
    from onnxdoctor.scaffold.generate import EXECUTABLE, build_spec, render_package

    spec = build_spec(name, namespace=namespace, expression=expr, attrs=attr, inputs=inputs, opset=opset)
    files = render_package(spec)
    target = out / spec.lname
    if dry_run:
        for file_name in sorted(files):
            typer.echo(str(target / file_name))
        return
    write_package(target, files, force=force, executable=EXECUTABLE)
    typer.echo(f"wrote {len(files)} files to {target}/")
    typer.echo(f"test: cd {target} && bash build.sh && python test_{spec.lname}.py")
    if not spec.has_math:
        typer.echo("the math is missing: fill the places marked WRITE THE MATH (the tests say so until then)")


def write_package(target: Path, files: dict[str, str], force: bool, executable: frozenset[str]) -> None:
    """Write `files` into `target`, all or nothing, by the rules of onnxdoctor.outputs.

    Raises:
        RefusedWrite: `target` is not a folder, or holds files and `force` is off, or one of the
            package's names there is not a regular file.
        UsageError: the parent cannot be created or written.
    """
    try:
        os.lstat(target)
    except FileNotFoundError:
        pass
    except OSError as exc:  # a name too long, a path through a file
        raise UsageError(f"--out {target}: {exc.strerror or exc}") from None
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise RefusedWrite(f"{target} exists and is not a folder")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise RefusedWrite(f"{target} exists and has files; use --force to overwrite the package's files")
    parent = target.parent
    if parent.exists() and not parent.is_dir():
        raise RefusedWrite(f"--out {parent} is not a folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write under {parent}: {exc.strerror or exc}") from None
    if target.exists():
        for file_name in files:  # refuse before writing anything: all or nothing
            check_output(target / file_name, force=True, what="--out")
    # Render into a sibling temporary folder first, so a failure leaves nothing half-written.
    with staging_folder(parent, name=target.name) as staging:
        try:
            for file_name, content in files.items():
                path = staging / file_name
                path.write_text(content, encoding="utf-8", newline="\n")
        except OSError as exc:
            raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
        if not target.exists():
            try:
                staging.chmod(0o755)  # mkdtemp makes it private; the package folder should not be
                for path in staging.iterdir():
                    _set_mode(path, path.name in executable)
                staging.rename(target)
            except OSError as exc:
                raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
            return
        install_folder(staging, target, force=True, what="--out")
        for file_name in executable & files.keys():
            _set_mode(target / file_name, True)


def _set_mode(path: Path, executable: bool) -> None:
    umask = os.umask(0)
    os.umask(umask)
    mode = (0o777 if executable else 0o666) & ~umask
    os.chmod(path, mode)
