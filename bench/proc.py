"""Finding the server's process and reading its peak memory from /proc (Linux, no psutil)."""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")


def _stat_field(pid: int, index: int) -> int | None:
    """A numeric field of /proc/<pid>/stat after the command name (1: parent pid, 3: session id)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    return int(stat.rsplit(")", 1)[1].split()[index])


def parent_of(pid: int) -> int | None:
    return _stat_field(pid, 1)


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and parent_of(int(entry.name)) == pid:
            found.add(int(entry.name))
    return found


def descendants_of(pid: int) -> list[int]:
    """All live descendants, breadth first; a wrapper script's real server is among them."""
    out: list[int] = []
    frontier = [pid]
    while frontier:
        nxt: list[int] = []
        for p in frontier:
            kids = sorted(children_of(p))
            out.extend(kids)
            nxt.extend(kids)
        frontier = nxt
    return out


def _identity(pid: int) -> tuple[bytes, str] | None:
    try:
        return (_PROC / str(pid) / "cmdline").read_bytes(), os.readlink(_PROC / str(pid) / "cwd")
    except OSError:
        return None


def _session_of(pid: int) -> int | None:
    return _stat_field(pid, 3)


def shared_hosts(pids: list[int]) -> list[int]:
    """Processes outside `pids` that serve them: a server that forked a detached process
    (another session, same command line and working directory) and relays to it, as
    compactor's stdio servers do with the shared host of a state dir. Their memory is the
    server's too, so it is counted with it."""
    wanted: dict[tuple[bytes, str], set[int | None]] = {}
    for pid in pids:
        ident = _identity(pid)
        if ident is not None:
            wanted.setdefault(ident, set()).add(_session_of(pid))
    if not wanted:
        return []
    found: list[int] = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in pids:
            continue
        pid = int(entry.name)
        ident = _identity(pid)
        if ident in wanted and _session_of(pid) not in wanted[ident]:
            found.append(pid)
    return sorted(found)


def status_kib(pid: int, field: str) -> int | None:
    """A ``kB`` field of /proc/<pid>/status (VmHWM, VmRSS), or None if the process is gone."""
    try:
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_rss_mib(pids: list[int]) -> float | None:
    """The largest VmHWM among the given processes: the server, not its launcher shell."""
    values = [v for v in (status_kib(p, "VmHWM") for p in pids) if v is not None]
    return max(values) / 1024.0 if values else None


def pss_mib(pids: list[int]) -> float | None:
    """Proportional set size of the given processes together (/proc/<pid>/smaps_rollup):
    each page counted once across all processes sharing it, so the sum over several servers
    is the memory they take together, and a new server's share is what it adds."""
    total = 0
    found = False
    for pid in sorted(set(pids)):  # a host several servers share counts once
        try:
            text = (_PROC / str(pid) / "smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
                found = True
                break
    return total / 1024.0 if found else None


def my_children() -> set[int]:
    return children_of(os.getpid())
