"""Every file onnxdoctor writes goes through here: no clobbering, no writing through links.

The rules (README, "Robustness"), in one place for `diagnose`, `graph`, `scaffold` and `--write-fix`:

- a path is checked before any work (`check_output`), so a bad path costs seconds, not a run;
- content is written to a private temporary file in the destination folder (`mkstemp`, never a
  predictable name) and then moved onto the path, so an existing symlink is replaced, never
  written through, and a reader never sees half a file;
- without `force` the move is a hard link, which fails if anything appeared at the path meanwhile
  (the check ran minutes before the write); with `force` only a regular file or a link is replaced:
  a device, FIFO, socket or folder is refused either way;
- the files being diagnosed (a script, a model and its external data) are never written over.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from onnxdoctor.errors import RefusedWrite, UsageError

# The folders a writer holds (pinned_folder): absolute path -> (device, inode) when pinned.
_PINNED: dict[str, tuple[int, int]] = {}


class OutputError(UsageError):
    """A file could not be written (a full disk, a read-only folder, a name too long)."""


def _describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _lstat(path: Path, what: str) -> os.stat_result | None:
    """lstat that maps every failure but "not there" to a one-line usage error."""
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise UsageError(f"{what} {path}: a part of the path is not a folder") from None
    except OSError as exc:
        raise UsageError(f"{what} {path}: {_describe(exc)}") from None


def _same_file(path: Path, other: Path) -> bool:
    try:
        return os.path.samefile(path, other)
    except (OSError, ValueError):
        return False


def is_protected(path: Path, protected: Sequence[Path]) -> bool:
    """Whether writing `path` would replace (or write through a link onto) a protected file."""
    absolute = Path(os.path.abspath(path))
    for item in protected:
        if absolute == Path(os.path.abspath(item)) or _same_file(path, item):
            return True
    return False


def check_output(
    path: Path, *, force: bool, what: str, protected: Sequence[Path] = ()
) -> None:
    """Refuse an output path before any work is done.

    Raises:
        RefusedWrite: the path is a file being diagnosed, or exists and `force` is off, or is a
            folder, device, FIFO or socket (refused even with `force`).
        UsageError: the folder is missing or not writable, or the name is too long.
    """
    if is_protected(path, protected):
        raise RefusedWrite(f"{what} {path} is the model itself (the file onnxdoctor reads); choose another path")
    info = _lstat(path, what)
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise RefusedWrite(f"{what} {path} is a folder; give a file name")
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
            raise RefusedWrite(f"{what} {path} is not a regular file; onnxdoctor writes only files")
        if not force:
            raise RefusedWrite(f"{what} {path} exists; pass --force to overwrite it")
    check_folder(path.parent, what=f"{what} {path}:")


def check_folder(folder: Path, *, what: str, create: bool = False) -> None:
    """The folder outputs go into exists (or, with `create`, its nearest existing parent does)."""
    probe = folder
    while create and _lstat(probe, what) is None and probe.parent != probe:
        probe = probe.parent
    info = _lstat(probe, what)
    if info is None:
        raise UsageError(f"{what} folder {probe} does not exist")
    if stat.S_ISLNK(info.st_mode):
        try:
            info = os.stat(probe)
        except OSError as exc:
            raise UsageError(f"{what} folder {probe} is a broken link ({_describe(exc)})") from None
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{what} {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{what} folder {probe} is not writable")


def check_folder_output(folder: Path, *, force: bool, what: str) -> None:
    """A folder the command fills (--write-fix): absent, or empty, or `force`."""
    info = _lstat(folder, what)
    if info is None:
        check_folder(folder.parent, what=f"{what} {folder}:", create=True)
        return
    if stat.S_ISLNK(info.st_mode):
        raise RefusedWrite(f"{what} {folder} is a link; give the folder itself")
    if not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{what} {folder} is a file; give a folder")
    if any(folder.iterdir()) and not force:
        raise RefusedWrite(f"{what} {folder} is not empty; pass --force to write into it")
    check_folder(folder, what=f"{what} {folder}:")


def install(
    source: Path, path: Path, *, force: bool, what: str, protected: Sequence[Path] = ()
) -> None:
    """Move the finished file `source` (in the same folder) onto `path` by the rules above.

    Raises:
        RefusedWrite, UsageError: as `check_output`, checked again now; or the move failed.
    """
    check_output(path, force=force, what=what, protected=protected)
    _still_pinned(path, what)
    try:
        if force:
            os.replace(source, path)  # replaces a link itself, never its target
            return
        try:
            os.link(source, path, follow_symlinks=False)
        except FileExistsError:
            raise RefusedWrite(f"{what} {path} exists; pass --force to overwrite it") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            # No hard links on this file system: the check above is the best left.
            os.replace(source, path)
            return
        os.unlink(source)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_describe(exc)}") from None


@contextlib.contextmanager
def staged(path: Path, *, what: str) -> Iterator[Path]:
    """A private temporary path beside `path` for a producer to write into; removed afterwards."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_describe(exc)}") from None
    temp = Path(name)
    try:
        yield temp
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)


def _usual_mode(path: Path) -> None:
    # mkstemp makes files 0600; an output should get the permissions the user's umask gives.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def write_file(
    path: Path,
    content: str | bytes | Callable[[Path], None],
    *,
    force: bool,
    what: str,
    protected: Sequence[Path] = (),
) -> None:
    """Write `content` (text, bytes, or a producer that writes the given path) to `path` safely.

    Raises:
        RefusedWrite: see `check_output`.
        OutputError: the write itself failed (disk full, read-only folder ...).
    """
    check_output(path, force=force, what=what, protected=protected)
    with staged(path, what=what) as temp:
        try:
            if callable(content):
                content(temp)
            elif isinstance(content, str):
                # A lone surrogate (from a file name or a JSON escape) is written as its escape.
                temp.write_text(content, encoding="utf-8", errors="backslashreplace")
            else:
                temp.write_bytes(content)
            _usual_mode(temp)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {_describe(exc)}") from None
        install(temp, path, force=force, what=what, protected=protected)


@contextlib.contextmanager
def staging_folder(parent: Path, *, name: str) -> Iterator[Path]:
    """A private temporary folder in `parent` for outputs made of several files; removed after."""
    try:
        folder = Path(tempfile.mkdtemp(prefix=f".{name[:40]}.", dir=parent))
    except OSError as exc:
        raise OutputError(f"cannot write under {parent}: {_describe(exc)}") from None
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def pinned_folder(folder: Path, *, what: str) -> Iterator[None]:
    """Hold `folder` for a writer that fills it: it must be a real folder (not a link) now, and
    `install` checks before every move that it is still that same folder.

    A folder swapped for a link to another one while a run went on is refused, never written
    through.
    """
    info = _lstat(folder, what)
    if info is None or stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise RefusedWrite(f"{what} {folder} is not a folder (a link?); nothing was written")
    key = os.path.abspath(folder)
    _PINNED[key] = (info.st_dev, info.st_ino)
    try:
        yield
    finally:
        _PINNED.pop(key, None)


def _still_pinned(path: Path, what: str) -> None:
    """The folder `path` goes into is the one `pinned_folder` saw, if it was pinned."""
    expected = _PINNED.get(os.path.abspath(path.parent))
    if expected is None:
        return
    info = _lstat(path.parent, what)
    if info is None or stat.S_ISLNK(info.st_mode) or (info.st_dev, info.st_ino) != expected:
        raise RefusedWrite(f"{what} {path.parent} was replaced while onnxdoctor ran (a link?); "
                           f"{path.name} was not written")


def install_folder(
    staging: Path, folder: Path, *, force: bool, what: str, protected: Sequence[Path] = ()
) -> list[str]:
    """Move every file of `staging` into `folder` by the rules above; the names moved, in order."""
    names = sorted(p.name for p in staging.iterdir())
    for name in names:
        _usual_mode(staging / name)
        install(staging / name, folder / name, force=force, what=what, protected=protected)
    return names


class AppendLog:
    """A file that only grows by whole lines, each on disk (flush + fsync) before the next starts,
    so an interrupted writer leaves every line it finished (`sweep --results`)."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self.path = path

    def append(self, line: str) -> None:
        """Write `line` and a line end, then fsync.

        Raises:
            OutputError: the write failed (a full disk).
        """
        data = line.encode("utf-8", errors="backslashreplace") + b"\n"
        try:
            while data:
                data = data[os.write(self._fd, data):]
            os.fsync(self._fd)
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {_describe(exc)}") from None

    def close(self) -> None:
        """Close the file (once; later calls do nothing)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def open_append(path: Path, *, what: str, protected: Sequence[Path] = ()) -> AppendLog:
    """Open `path` to add lines at its end, creating it if absent: the one output that is extended
    rather than replaced, so it needs no `force`. Never a file being read, never through a link,
    never anything but a regular file. A last line cut short (a killed writer) is ended first, so
    the next line starts on its own.

    Raises:
        RefusedWrite: a protected file, a link, a folder, a device, FIFO or socket.
        UsageError: the folder is missing or not writable.
    """
    if is_protected(path, protected):
        raise RefusedWrite(f"{what} {path} is a file onnxdoctor reads; choose another path")
    info = _lstat(path, what)
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            raise RefusedWrite(f"{what} {path} is a link; give the file itself")
        if not stat.S_ISREG(info.st_mode):
            raise RefusedWrite(f"{what} {path} is not a regular file; onnxdoctor writes only files")
    check_folder(path.parent, what=f"{what} {path}:")
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {_describe(exc)}") from None
    log = AppendLog(fd, path)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RefusedWrite(f"{what} {path} is not a regular file; onnxdoctor writes only files")
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            log.append("")
    except OSError as exc:
        log.close()
        raise OutputError(f"cannot write {path}: {_describe(exc)}") from None
    except BaseException:
        log.close()
        raise
    return log
