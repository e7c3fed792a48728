"""Writing an export: memory holds whatever the agent stored, so an export file is private
(0600), never written through a symlink, and never replaces a file unless told to."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from .errors import OutputRefusedError


def exists_not_link(path: Path) -> bool:
    """Whether `path` exists (as anything but a symlink, which is refused)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise OutputRefusedError(
            f"{path} is a symbolic link; refusing to write through it. Remove it or pick another path."
        )
    return True


def write_private(path: Path, text: str, *, overwrite: bool = False) -> None:
    """Write `text` to `path` as a 0600 file. An existing regular file is replaced (atomically, by
    a new file: a link at `path` is refused, never followed) only with `overwrite`; anything else
    at `path` (a directory, a device node, a pipe, a socket) never is."""
    data = text.encode("utf-8")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    if exists_not_link(path):
        mode = os.lstat(path).st_mode
        if stat.S_ISDIR(mode):
            raise OutputRefusedError(f"{path} is a directory; give a file name.")
        if not stat.S_ISREG(mode):
            # A device node, a pipe or a socket: replacing it would break whatever uses it.
            raise OutputRefusedError(
                f"{path} is not a regular file (a device, pipe or socket); --force replaces regular files only."
            )
        if not overwrite:
            raise OutputRefusedError(f"{path} already exists; pass --force to replace it.")
    target = path.with_name(f".{path.name}.{os.getpid()}.tmp") if overwrite else path
    try:
        fd = os.open(target, flags, 0o600)
    except FileExistsError:
        raise OutputRefusedError(f"{path} already exists; pass --force to replace it.") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o600)  # the mode os.open gives is cut by the umask, never widened
            fh.write(data)
        if target != path:
            os.replace(target, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise
