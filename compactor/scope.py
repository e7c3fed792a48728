"""Which project a memory belongs to: the client's first root, else the git root of the
server's working directory, else that directory itself; and the state dir a person names,
found from that working directory (even a deleted one) or refused in one sentence."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from urllib.parse import unquote, urlparse


def git_root(start: Path) -> Path | None:
    for candidate in (start, *start.parents):
        try:
            if (candidate / ".git").exists():
                return candidate
        except (OSError, ValueError):  # a path too long, one we may not search, a NUL byte
            return None
    return None


def _working_dir() -> Path:
    """The working directory, or where the shell says it was when it has been deleted (a
    removed worktree): the project it was is still the project."""
    try:
        return Path.cwd()
    except OSError:
        pwd = os.environ.get("PWD", "")
        return Path(pwd) if os.path.isabs(pwd) else Path("/")


def project_scope(cwd: Path | None = None) -> str:
    here = (cwd or _working_dir()).resolve()
    return str(git_root(here) or here)


def scope_from_root_uri(uri: str) -> str | None:
    """A `file://` root becomes its project's scope; other schemes say nothing about a path."""
    parsed = urlparse(uri)
    if parsed.scheme != "file" or not parsed.path:
        return None
    path = unquote(parsed.path)
    if not path.isprintable():  # a scope is one line of text
        return None
    return str(git_root(Path(path)) or Path(path))


def lost_cwd_problem(path: Path) -> str | None:
    """Why a relative --state-dir cannot be found: the working directory it is relative to was
    deleted (a removed worktree). None otherwise."""
    if path.is_absolute():
        return None
    try:
        os.getcwd()
    except OSError:
        return f"--state-dir {path} is relative and the working directory no longer exists. Pass an absolute path."
    return None


def state_dir_arg(text: str) -> Path:
    """--state-dir as given. Empty is refused: `--state-dir "$DIR"` with DIR unset made the
    working directory (a project, say) the state dir, its files there and its mode 0700."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty (an unset variable?); pass the directory to keep memory in")
    return Path(text)
