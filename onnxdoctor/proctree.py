"""A process's descendants from /proc, and ending all of them: the parent and the worker share it.

Standard library only: the worker imports it before anything else, and the CLI process may too.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

# Rounds of scan-and-kill before giving up on a process that forks faster than it is killed.
MAX_ROUNDS = 200


def become_subreaper() -> None:
    """Orphaned descendants (a setsid + fork daemon) reparent to this process, not to init, so
    they stay in its tree and none escapes the kill (Linux; elsewhere nothing happens)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def proc_stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks, state) from /proc, or None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces and ')'
    try:
        return int(fields[1]), int(fields[19]), fields[0]
    except (IndexError, ValueError):
        return None


def descendants(root: int, *, born: int = 0) -> list[int]:
    """Every live (not zombie) descendant of `root` started at or after `born` (clock ticks)."""
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[int, int, str]] = {}
    for pid, stat in _processes():
        children.setdefault(stat[0], []).append(pid)
        info[pid] = stat
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), []):
            pending.append(child)
            started, state = info[child][1], info[child][2]
            if started >= born and state not in ("Z", "X"):
                found.append(child)
    return found


def end_descendants(root: int, *, born: int = 0, spare: int | None = None) -> None:
    """SIGKILL every descendant of `root` (from `born` on, but `spare`), and again, until a scan
    finds none: a daemon that keeps forking leaves a new child for every one killed, and those
    reparent to the subreaper `root`. Children of this process are reaped (no zombies)."""
    me = os.getpid()
    for _round in range(MAX_ROUNDS):
        victims = [pid for pid in descendants(root, born=born) if pid != spare]
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGSTOP)  # stopped first: none forks while the others die
            except (ProcessLookupError, PermissionError):
                continue
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        _reap(me, spare)
        time.sleep(0.01)
    _reap(me, spare)


def _reap(me: int, spare: int | None) -> None:
    """Collect this process's ended children (orphans that reparented here), but `spare`."""
    for pid in descendants(me) + _zombies(me):
        if pid == spare:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass


def _zombies(parent: int) -> list[int]:
    return [pid for pid, stat in _processes() if stat[0] == parent and stat[2] == "Z"]


def _processes() -> list[tuple[int, tuple[int, int, str]]]:
    """Every process /proc lists, with its (parent pid, start time, state); none without /proc."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    found = []
    for entry in entries:
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None:
                found.append((int(entry), stat))
    return found
