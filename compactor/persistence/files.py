"""The state dir's file primitives: a file written and fsynced in chunks, its directory synced
so a new or renamed name lasts, reads that never follow a planted symlink, and which process
wrote a temp file. No knowledge of journals or snapshots: `statedir.py` is built on these."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

# O_NOFOLLOW: a symlink planted in the state dir must not redirect our writes (or our chmod).
NOFOLLOW = os.O_NOFOLLOW
# A snapshot being written is flushed to disk every this many bytes (see write_fsynced).
SNAPSHOT_SYNC_BYTES: Final = 4 << 20


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def datasync(fd: int) -> None:
    """fdatasync, or fsync where Python has no fdatasync (macOS: CPython declined to stand
    fsync in for it, so calling it there raised AttributeError)."""
    getattr(os, "fdatasync", os.fsync)(fd)


def write_fsynced(path: Path, chunks: Iterator[bytes] | list[bytes]) -> None:
    """Write `chunks` to a new 0600 file and fsync it; on failure leave no file behind."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb", closefd=True) as fh:
            unsynced = 0
            for chunk in chunks:
                fh.write(chunk)
                unsynced += len(chunk)
                if unsynced >= SNAPSHOT_SYNC_BYTES:
                    # A journal fsync on the same file system waits for the data of every file
                    # dirty at that moment (ext4's ordered mode): flushing a 350 MB snapshot
                    # as we go keeps that wait at a few MB's worth instead of ~50 ms.
                    fh.flush()
                    datasync(fh.fileno())
                    unsynced = 0
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(path, 0o600)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def temp_file_pid(name: str) -> int | None:
    """The writer's pid in a temp file's name (`snapshot.json.PID.tmp`, `.PID.old.tmp`)."""
    parts = name.split(".")
    for part in parts[2:-1]:
        if part.isdigit():
            return int(part)
    return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def read_nofollow(path: Path) -> bytes:
    with os.fdopen(os.open(path, os.O_RDONLY | NOFOLLOW), "rb") as fh:
        return fh.read()


# Read back from a file's end in steps of this many bytes: a few dozen ledger lines each.
_TAIL_STEP = 1 << 16


def tail_lines(path: Path, limit: int) -> list[bytes]:
    """The last `limit` complete lines of a file, oldest first (not following a symlink), read
    from its end: a cost of the lines asked for, not of the file."""
    with os.fdopen(os.open(path, os.O_RDONLY | NOFOLLOW), "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        start, data = end, b""
        while start > 0 and data.count(b"\n") <= limit:
            step = min(_TAIL_STEP, start)
            start -= step
            fh.seek(start)
            data = fh.read(step) + data
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # begun mid-line
    return [line for line in lines if line][-limit:] if limit > 0 else []
