"""The models a sweep's PATH items name: folders, files and list files, each model once.

- a folder: every `*.py` script and `*.onnx` file directly in it (not below), in name order; names
  starting with `_` or `.`, `conftest.py` and `setup.py` are not models;
- a file: `model.py[:factory]` or `model.onnx`;
- a list file (`.txt`, `.list`, `.lst`): one PATH item per line (a file or a folder), relative to
  the list's folder; blank lines and `#` comments are skipped.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from onnxdoctor.errors import UsageError
from onnxdoctor.model import DiagnoseOptions
from onnxdoctor.sweep.record import Job, resume_key
from onnxdoctor.target import ONNX_SUFFIXES, parse_target

LIST_SUFFIXES = (".txt", ".list", ".lst")
MODEL_SUFFIXES = (".py", ".onnx")
NOT_MODELS = ("conftest.py", "setup.py")


def discover(items: Sequence[str], versions: dict[str, str], options: dict[str, Any]) -> tuple[Job, ...]:
    """Every model the PATH items name, once each, with its resume key.

    Raises:
        UsageError: an item that does not exist, is not a model, a folder or a list file, or
            names no model at all.
    """
    targets: list[tuple[str, str]] = []  # (target text, as shown)
    for item in items:
        targets += _expand(item, Path.cwd(), seen_lists=())
    if not targets:
        raise UsageError(f"no model scripts (*.py) or ONNX files (*.onnx) in {', '.join(items)}")
    jobs: dict[str, Job] = {}
    for text, shown in targets:
        target = parse_target(text)
        key_text = str(target.path) + (f":{target.factory}" if target.factory else "")
        if key_text in jobs:
            continue
        digest = content_hash(target.path, shown)
        jobs[key_text] = Job(target=key_text, shown=shown, content_hash=digest,
                             key=resume_key(digest, target.factory, versions, options))
    return tuple(jobs.values())


def _expand(item: str, base: Path, *, seen_lists: tuple[Path, ...]) -> list[tuple[str, str]]:
    path_text, factory = _split_factory(item, base)
    path = base / Path(path_text).expanduser()
    # As the user named it: the item itself, or a list entry's path from here.
    shown = path_text if base == Path.cwd() else os.path.relpath(path, Path.cwd())
    tail = f":{factory}" if factory else ""
    try:
        info = path.stat()
    except OSError as exc:
        raise UsageError(f"sweep: {item}: {exc.strerror or 'cannot be read'}") from None
    if stat.S_ISDIR(info.st_mode):
        if factory:
            raise UsageError(f"sweep: {item}: a ':factory' applies to a script, not a folder")
        return [(str(p), os.path.normpath(os.path.join(shown, p.name))) for p in _folder_models(path)]
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"sweep: {item} is not a regular file or a folder")
    suffix = path.suffix.lower()
    if suffix in LIST_SUFFIXES and not factory:
        resolved = path.resolve()
        if resolved in seen_lists:
            raise UsageError(f"sweep: list file {item} includes itself")
        return [found for line in _list_lines(path)
                for found in _expand(line, path.parent, seen_lists=(*seen_lists, resolved))]
    if suffix not in (".py", *ONNX_SUFFIXES):
        raise UsageError(f"sweep: {item} is not a model script (.py), an ONNX file (.onnx), a folder "
                         f"or a list file ({', '.join(LIST_SUFFIXES)})")
    return [(str(path) + tail, shown + tail)]


def _split_factory(item: str, base: Path) -> tuple[str, str | None]:
    """`model.py:factory` -> (model.py, factory), unless the whole text is an existing path."""
    head, sep, tail = item.rpartition(":")
    if sep and head and tail.isidentifier() and not (base / item).exists():
        return head, tail
    return item, None


def _folder_models(folder: Path) -> list[Path]:
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise UsageError(f"sweep: {folder}: {exc.strerror or 'cannot be listed'}") from None
    return [p for p in entries
            if p.suffix.lower() in MODEL_SUFFIXES and not p.name.startswith(("_", "."))
            and p.name not in NOT_MODELS and p.is_file()]


def _list_lines(path: Path) -> Iterable[str]:
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeError) as exc:
        raise UsageError(f"sweep: list file {path}: {exc}") from None
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            yield line


def content_hash(path: Path, shown: str) -> str:
    """sha256 of the file's bytes (the script alone: modules it imports are not hashed)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise UsageError(f"sweep: {shown}: {exc.strerror or 'cannot be read'}") from None
    return digest.hexdigest()


def options_record(options: DiagnoseOptions) -> dict[str, Any]:
    """The options a result depends on, as JSON data (the command's own clock left out)."""
    record = asdict(options)
    record.pop("deadline", None)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in record.items()}


def sweep_versions() -> dict[str, str]:
    """The versions a result depends on: onnxdoctor's and the stack's (package metadata only)."""
    from onnxdoctor import __version__
    from onnxdoctor.envinfo import package_versions

    return {"onnxdoctor": __version__, **package_versions()}
