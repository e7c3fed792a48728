"""What every subcommand shares: finding and opening the state dir, printing for people or for
scripts, colour only on a terminal, errors that become exit codes, and the port parser the
server's options use too (so the store, the state dir's files and reports are imported only
where a command opens them: the server's parser is read by a stdio relay that must start fast)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..scope import lost_cwd_problem, project_scope, state_dir_arg
from .progress import Progress

if TYPE_CHECKING:
    from ..report import StateFiles
    from ..store import Store, TierFilter

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C

_ANSI = {"head": "1", "dim": "2", "ok": "32", "warn": "33", "bad": "31", "id": "36"}


class CliError(Exception):
    """A failure to report in one line, with its exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


def wants_color(stream: TextIO) -> bool:
    """Colour only on a terminal, never with NO_COLOR set (no-color.org) or a dumb terminal."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Out:
    """Where a subcommand writes: lines for people, one JSON document for scripts."""

    def __init__(self, stream: TextIO, *, json_mode: bool = False, color: bool | None = None) -> None:
        self.stream = stream
        self.json_mode = json_mode
        self.color = wants_color(stream) if color is None else color
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        self.unicode = encoding.startswith("utf")

    def paint(self, text: str, role: str) -> str:
        code = _ANSI.get(role)
        if not self.color or code is None:
            return text
        return f"\x1b[{code}m{text}\x1b[0m"

    def line(self, text: str = "") -> None:
        self.stream.write(text + "\n")

    def lines(self, texts: list[str]) -> None:
        for text in texts:
            self.line(text)

    def json(self, value: Any) -> None:
        self.stream.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")

    @property
    def width(self) -> int:
        return shutil.get_terminal_size((100, 24)).columns


def add_state_dir(p: argparse.ArgumentParser, *, scope_default: str = "the git root of the current directory") -> None:
    # SUPPRESS: a value given before the subcommand (or from the environment) survives.
    p.add_argument(
        "--state-dir",
        type=state_dir_arg,
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="the state dir a server uses (default: env COMPACTOR_STATE_DIR)",
    )
    p.add_argument(
        "--database",
        default=argparse.SUPPRESS,
        metavar="URL",
        help="the PostgreSQL database a server uses, instead of a state dir (default: env COMPACTOR_DATABASE_URL)",
    )
    p.add_argument(
        "--scope",
        default=argparse.SUPPRESS,
        help=f"project scope (default: {scope_default}; 'all' reads every project)",
    )


def port_number(*, free: bool = False) -> Callable[[str], int]:
    """An argparse type for a TCP port from 1 to 65535; with `free`, 0 too: the system picks a
    free port (only for a command that then says which port it got)."""
    low = 0 if free else 1

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
        if not low <= value <= 65535:
            raise argparse.ArgumentTypeError(f"must be from {low} to 65535")
        return value

    return parse


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON document for scripts")


def database_of(args: argparse.Namespace) -> str | None:
    """The PostgreSQL URL to work on (--database or COMPACTOR_DATABASE_URL), if any: it wins
    over a state dir only when no --state-dir was given on the command line."""
    if getattr(args, "state_dir", None):
        return None
    return getattr(args, "database", None) or os.environ.get("COMPACTOR_DATABASE_URL") or None


def state_dir_of(args: argparse.Namespace) -> Path:
    value = getattr(args, "state_dir", None) or os.environ.get("COMPACTOR_STATE_DIR")
    if not value:
        raise CliError("no state dir given. Pass --state-dir DIR or set COMPACTOR_STATE_DIR", EXIT_USAGE)
    return Path(value).expanduser()


def check_state_dir(path: Path) -> None:
    """A state dir is a directory, or a path where one can be made: say so before a Store fails."""
    lost = lost_cwd_problem(path)
    if lost:
        raise CliError(lost.removesuffix("."), EXIT_USAGE)
    if path.exists() and not path.is_dir():
        raise CliError(
            f"--state-dir {path} is a file, not a directory. Pass a directory (compactor creates it on first write)",
            EXIT_USAGE,
        )
    parent = next((p for p in path.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise CliError(f"--state-dir {path} is inside {parent}, which is a file. Pass a directory", EXIT_USAGE)


def has_state(path: Path) -> bool:
    from ..persistence.statedir import JOURNAL, SNAPSHOT

    return (path / JOURNAL).exists() or (path / SNAPSHOT).exists()


@contextlib.contextmanager
def opened(args: argparse.Namespace, *, create: bool = False, cwd: str | None = None) -> Iterator[Store]:
    """The Store over the state dir (or --database), coordinated with any server running on it
    (the writers' lock + journal), in the same project scope a server started here would use (or
    --scope). Reading never creates a state dir that is not there."""
    from ..store import ALL_SCOPES, GLOBAL_SCOPE, Store

    database = database_of(args)
    where: Path | None = None
    if database is None:
        path = state_dir_of(args)
        check_state_dir(path)
        # A state dir with nothing in it yet (or none at all) is an empty memory: read it as one,
        # without creating anything.
        where = path if create or has_state(path) else None
    scope = getattr(args, "scope", None) or os.environ.get("COMPACTOR_SCOPE")
    # A state dir saved by an older version is indexed again once, at this load: counted on a terminal.
    progress = Progress(getattr(args, "command", None) or "load", "items re-indexed")
    if scope == ALL_SCOPES:
        store = Store(state_dir=where, database=database, scope=GLOBAL_SCOPE, load_progress=progress)
        store.default_read_scope = ALL_SCOPES
    else:
        store = Store(
            state_dir=where,
            database=database,
            scope=scope or project_scope(Path(cwd) if cwd else None),
            load_progress=progress,
        )
    progress.finish()
    # A command reading memory changes no file of it: its queries are no accesses to record
    # (a journal line that made every running server catch up).
    store.record_access = False
    try:
        yield store
    finally:
        store.close()


def state_files(path: Path) -> StateFiles:
    from ..persistence.statedir import JOURNAL, SNAPSHOT
    from ..report import StateFiles

    def size(p: Path) -> int:
        try:
            return p.stat().st_size
        except OSError:
            return 0

    try:
        snap_at: float | None = (path / SNAPSHOT).stat().st_mtime
    except OSError:
        snap_at = None
    return StateFiles(str(path), size(path / JOURNAL), size(path / SNAPSHOT), snap_at)


def item_json(item: Any, *, full: bool = True) -> dict[str, Any]:
    """An item for scripts: every field (content included when `full`)."""
    record: dict[str, Any] = item.to_record()
    record.pop("seq", None)
    if not full:
        record.pop("content", None)
    return record


def scope_note(store: Store, tier: TierFilter, verb: str) -> tuple[int, str | None]:
    """How many items of `tier` the scope filter left out of a CLI view, and a line saying so
    and how to see them (None when it left out nothing)."""
    hidden = store.hidden_by_scope(tier)
    if not hidden:
        return 0, None
    which = "" if tier == "all" else f"{tier} "
    return (
        hidden,
        f"{hidden:,} {which}item(s) of other projects {verb} (scope {store.scope}); --scope all includes them.",
    )
