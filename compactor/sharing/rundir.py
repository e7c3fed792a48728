"""Where a shared host is found: its key, the private runtime dir that holds its socket and
lock, and the lock a host holds from its start until it stops listening.

The host is named by a key of everything that shapes how it serves (state dir, settings, this
code), so different settings get different hosts, which share the state dir as separate
processes always could. Its Unix socket and lock live in a private directory under the temp dir
(socket paths are limited to ~100 bytes).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any


class SharingUnavailable(Exception):
    """The relay cannot reach or start a host here: the caller serves in its own process."""


def host_key(settings: dict[str, Any]) -> str:
    """The name of the host that serves these settings with this code. The code's files (each
    one's time and size) are part of it: an edited or upgraded install must not be served by a
    host that still runs the old code (under 1 ms: a stat per module)."""
    from .. import __file__ as package_file
    from .. import __version__

    code = os.path.dirname(package_file)
    stamp: list[tuple[str, int, int]] = []
    for root, dirs, files in os.walk(code):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            st = os.stat(os.path.join(root, name))
            stamp.append((os.path.join(root, name), st.st_mtime_ns, st.st_size))
    named = {**settings, "version": __version__, "code": code, "stamp": stamp, "python": sys.executable}
    return hashlib.sha256(json.dumps(named, sort_keys=True, default=str).encode()).hexdigest()[:24]


def runtime_dir() -> Path:
    """A directory only this user can use, for host sockets and locks: $COMPACTOR_RUNTIME_DIR,
    else compactor-UID in the temp dir (runs that must not meet each other's hosts, such as
    concurrent test runs, each name their own). Raises SharingUnavailable when another user
    owns it or can write it: a socket there could be someone else's host."""
    chosen = os.environ.get("COMPACTOR_RUNTIME_DIR")
    path = Path(chosen) if chosen else Path(tempfile.gettempdir()) / f"compactor-{os.getuid()}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SharingUnavailable(f"cannot make {path}: {exc.strerror}") from exc
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise SharingUnavailable(f"{path} is not a private directory of uid {os.getuid()}")
    return path


def try_lock(path: Path, *, create: bool) -> int | None:
    """The lock file at `path` open and exclusively locked, or None when someone holds it or a
    stopping host has removed it (the file we locked is no longer the one named `path`: the
    caller tries again). OSError for anything else."""
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        named, mine = os.stat(path), os.fstat(fd)
        if (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
    except FileNotFoundError:
        pass
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    os.close(fd)
    return None


def release_host_lock(sock_path: str, lock_fd: int) -> None:
    """How a host stops listening: its socket's name goes, then its lock file (a relay that
    locked the removed file sees it is no longer named and tries again), then the lock."""
    for path in (sock_path, sock_path.removesuffix(".sock") + ".lock"):
        with contextlib.suppress(OSError):
            os.unlink(path)
    with contextlib.suppress(OSError):
        os.close(lock_fd)


def sweep(base: Path, keep: Path) -> None:
    """Remove what killed hosts left: a lock nobody holds, and its socket. Rare (a relay does it
    only when it starts a host) and safe: a relay that locked a removed file tries again."""
    for lock_path in base.glob("*.lock"):
        if lock_path == keep:
            continue
        try:
            fd = try_lock(lock_path, create=False)
        except OSError:
            continue  # gone meanwhile
        if fd is not None:  # nobody holds it: no host runs or starts
            release_host_lock(str(lock_path.with_suffix(".sock")), fd)
