"""A record of what a process made durable, and the checks that read it.

A killed process's writes survive in the operating system's cache, so no kill test can tell a
missing fsync; only the calls can. `recorders(log)` wraps os.fsync, os.fdatasync, os.write
(of a journal), os.replace, os.rename and os.open (when it creates a file) so that each
appends one JSON line to `log`, by the real functions, after the call returned: in this
process by monkeypatching `os`, in a server subprocess by `subprocess_env`, whose
sitecustomize.py installs them before `compactor.cli.main` runs (a forked shared host
inherits them).

The checks, run when a call was acknowledged (a store method returned, a reply arrived):
- `check_reply`: every journal byte past the last fsync of the journal's file is an
  access-time line: an acknowledged change is synced before its reply.
- `check_unsynced_writes`: a journal write that no fsync of its file follows before the next
  write holds access times only (they are written with `sync=False`).
- `check_dir_synced`: a state file created or renamed into the state dir is followed by an
  fsync of the directory itself, or the new name may be gone after a power cut.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compactor.persistence.codec import parse_line
from compactor.persistence.statedir import FORGET_LEDGER, JOURNAL, LOCK, SNAPSHOT

ENV = "COMPACTOR_TEST_FSYNC_LOG"
# The fields a query's access-time patch sets: losing them on a power cut loses no write.
ACCESS_FIELDS = frozenset({"last_accessed_at", "access_count"})
# The files memory is kept in (not a log file, which the shared host writes there too).
STATE_FILES = re.compile(
    rf"({re.escape(SNAPSHOT)}|{re.escape(JOURNAL)}|{LOCK}|{re.escape(FORGET_LEDGER)}|index\.\d+\.bin)"
)

SITECUSTOMIZE = f"""\
import os
if os.environ.get({ENV!r}):
    from tests.support.fsync_log import recorders
    for _name, _fn in recorders(os.environ[{ENV!r}]).items():
        setattr(os, _name, _fn)
"""


def recorders(log: str | Path) -> dict[str, Callable[..., Any]]:
    """Replacements for the `os` functions named by the keys, each logging to `log`."""
    real_open, real_write, real_close = os.open, os.write, os.close
    real_fsync = os.fsync
    real_fdatasync = getattr(os, "fdatasync", os.fsync)
    real_replace, real_rename = os.replace, os.rename
    log_path = os.fspath(log)

    def emit(**event: Any) -> None:
        event["pid"] = os.getpid()
        fd = real_open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            real_write(fd, json.dumps(event).encode() + b"\n")
        finally:
            real_close(fd)

    def fd_path(fd: int) -> str:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return ""

    def synced(kind: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            real(fd)
            st = os.fstat(fd)
            emit(ev=kind, path=fd_path(fd), ino=st.st_ino, size=st.st_size, dir=stat.S_ISDIR(st.st_mode))

        return sync

    def write(fd: int, data: Any) -> int:
        n = real_write(fd, data)
        path = fd_path(fd)
        if os.path.basename(path) == JOURNAL:
            st = os.fstat(fd)
            emit(ev="write", path=path, ino=st.st_ino, end=st.st_size, data=bytes(data[:n]).decode("latin-1"))
        return n

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        created = bool(flags & os.O_CREAT) and dir_fd is None and not os.path.lexists(path)
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        if created:
            emit(ev="create", path=os.path.abspath(os.fspath(path)))
        return fd

    def moved(kind: str, real: Callable[..., None]) -> Callable[..., None]:
        def move(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            real(src, dst, *args, **kwargs)
            emit(ev=kind, path=os.path.abspath(os.fspath(dst)))

        return move

    out: dict[str, Callable[..., Any]] = {
        "fsync": synced("fsync", real_fsync),
        "write": write,
        "open": open_,
        "replace": moved("replace", real_replace),
        "rename": moved("rename", real_rename),
    }
    if hasattr(os, "fdatasync"):
        out["fdatasync"] = synced("fdatasync", real_fdatasync)
    return out


def subprocess_env(base: dict[str, str], log: Path, site_dir: Path) -> dict[str, str]:
    """`base` (a server's environment) with the recorders installed at interpreter start."""
    site_dir.mkdir(parents=True, exist_ok=True)
    (site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(base)
    env["PYTHONPATH"] = str(site_dir) + os.pathsep + env.get("PYTHONPATH", "")
    env[ENV] = str(log)
    return env


@dataclass
class Log:
    path: Path

    def events(self) -> list[dict[str, Any]]:
        try:
            raw = self.path.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in raw.splitlines()]


def _access_only(ops: list[dict[str, Any]]) -> bool:
    return all(op.get("op") == "patch" and set(op.get("set", {})) <= ACCESS_FIELDS for op in ops)


def _changes(chunk: bytes) -> list[str]:
    """The ops (as `kind id`) in complete journal lines of `chunk` that are not access times."""
    out: list[str] = []
    for line in chunk.split(b"\n"):
        if not line.strip() or line.startswith(b'{"journal"'):
            continue
        ops = parse_line(line, 2)
        if not _access_only(ops):
            out.extend(f"{op.get('op')} {op.get('id', '')}".strip() for op in ops)
    return out


def check_reply(log: Log, state_dir: Path, what: str) -> None:
    """At the moment `what` was acknowledged: the journal's unsynced bytes hold no change."""
    fd = os.open(state_dir / JOURNAL, os.O_RDONLY)
    try:
        st = os.fstat(fd)  # the file first, then the log: a rotation logs its fsync before its rename
        data = b""
        while chunk := os.read(fd, 1 << 20):
            data += chunk
    finally:
        os.close(fd)
    synced = [e["size"] for e in log.events() if e["ev"] in ("fsync", "fdatasync") and e["ino"] == st.st_ino]
    # The last fsync of this file: an earlier file with the same (reused) inode synced before it.
    upto = synced[-1] if synced else 0
    lost = _changes(data[upto:])
    assert not lost, (
        f"{what} was acknowledged with journal bytes {upto:,}..{len(data):,} of {state_dir / JOURNAL} "
        f"never synced; a power cut would lose: {lost[:5]}"
    )


def check_unsynced_writes(log: Log) -> int:
    """Every journal write not followed by an fsync of its file (before the next journal write)
    holds access times only. Returns how many writes were synced."""
    events = log.events()
    synced_writes = 0
    for k, event in enumerate(events):
        if event["ev"] != "write":
            continue
        covered = False
        for later in events[k + 1 :]:
            if later["ev"] in ("fsync", "fdatasync") and later["ino"] == event["ino"] and later["size"] >= event["end"]:
                covered = True
                break
            if later["ev"] == "write" and later["pid"] == event["pid"]:
                break
        if covered:
            synced_writes += 1
            continue
        lost = _changes(event["data"].encode("latin-1"))
        assert not lost, f"a journal line with changes was written without an fsync after it: {lost[:5]}"
    return synced_writes


def check_dir_synced(log: Log, state_dir: Path, *, running: bool = False) -> list[str]:
    """Each state file created or renamed into `state_dir` is followed by an fsync of the dir.
    Returns the names checked. `running`: the writer may still be between its rename and the
    directory's fsync (a background snapshot after a reply): a rename with nothing logged
    after it by its process is not checked yet."""
    events = log.events()
    where = os.path.realpath(state_dir)
    names: list[str] = []
    for k, event in enumerate(events):
        if event["ev"] not in ("create", "replace", "rename"):
            continue
        path = os.path.realpath(event["path"])
        if os.path.dirname(path) != where or not STATE_FILES.fullmatch(os.path.basename(path)):
            continue  # a temp file is made durable under its final name
        if running and not any(later["pid"] == event["pid"] for later in events[k + 1 :]):
            continue
        names.append(os.path.basename(path))
        assert any(
            later["ev"] in ("fsync", "fdatasync") and later["dir"] and os.path.realpath(later["path"]) == where
            for later in events[k + 1 :]
        ), f"{os.path.basename(path)} was {event['ev']}d in {state_dir} but the directory was not synced after"
    return names


def fsyncs_of(log: Log, suffix: str) -> int:
    return sum(1 for e in log.events() if e["ev"] in ("fsync", "fdatasync") and e["path"].endswith(suffix))
