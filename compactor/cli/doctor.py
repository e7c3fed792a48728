"""`compactor doctor`: check a state dir (or a database) and say what is wrong and how to fix it;
with `--repair`, first fix what can be fixed (doctor/repair.py). Exit status: 0 healthy
(warnings allowed), 1 at least one error, 2 usage error."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ..doctor import DoctorReport, check, check_database, render, repair, repair_database
from ..errors import CompactorError
from .common import EXIT_ERROR, EXIT_USAGE, CliError, Out, add_json, add_state_dir, database_of
from .progress import Progress

DESCRIPTION = "Check a compactor state dir (read-only) and say what is wrong and how to repair it."


def register(sub: Any) -> None:
    p = sub.add_parser(
        "doctor", help="check a state dir (or a database) and say how to fix what is wrong", description=DESCRIPTION
    )
    _arguments(p)
    p.set_defaults(func=cmd_doctor)


def _arguments(p: argparse.ArgumentParser) -> None:
    add_state_dir(p)
    add_json(p)
    p.add_argument(
        "--repair",
        action="store_true",
        help="fix what can be fixed under the writers' lock: cut a damaged journal (kept aside, not deleted), "
        "accept lost writes, rebuild the index; in a database, set aside the journal entries that cannot be "
        "used and record a missing schema version; then check again",
    )


def parser() -> argparse.ArgumentParser:
    """The doctor's options on their own, as `compactor doctor` takes them (for `main`)."""
    p = argparse.ArgumentParser(prog="compactor doctor", description=DESCRIPTION)
    _arguments(p)
    return p


def cmd_doctor(args: argparse.Namespace, out: Out) -> int:
    progress = Progress("doctor")
    return run(args, step=progress.step, done=progress.clear)


def _no_step(text: str) -> None:
    return None


def main(argv: Sequence[str], step: Callable[[str], None] = _no_step, done: Callable[[], None] = lambda: None) -> int:
    """`compactor doctor ARGV` without the rest of the command line: the exit status. `step` is
    told each phase of a check as it starts and `done` when the check ends, before the report
    is printed (the CLI shows them on a terminal)."""
    try:
        args = parser().parse_args(list(argv))
    except SystemExit as exc:  # argparse: --help exits 0, a usage error 2
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return run(args, step=step, done=done)
    except CliError as exc:
        sys.stderr.write(f"compactor doctor: {exc}.\n")
        return exc.code


def run(args: argparse.Namespace, *, step: Callable[[str], None], done: Callable[[], None]) -> int:
    """Check (after `--repair`, repair first) and print the report: 0 healthy, 1 problems found.
    Raises CliError for a usage error. A --state-dir given wins over a database, as for every
    command; the environment fills in what the command line left out."""
    database = database_of(args)
    mend: Callable[[], Iterable[str]]
    examine: Callable[[Callable[[str], None]], DoctorReport]
    if database is not None:
        mend, examine = partial(repair_database, database), partial(check_database, database)
    else:
        given = getattr(args, "state_dir", None) or os.environ.get("COMPACTOR_STATE_DIR")
        if not given:
            raise CliError(
                "no state dir given. Pass --state-dir DIR or --database URL, or set COMPACTOR_STATE_DIR", EXIT_USAGE
            )
        mend, examine = partial(repair, Path(given)), partial(check, Path(given))
    if args.repair:
        try:
            for line in mend():
                sys.stdout.write(f"repaired: {line}\n")
        except CompactorError as exc:
            sys.stderr.write(f"compactor doctor --repair: {exc}\n")
            return EXIT_ERROR
    try:
        report = examine(step)
    finally:
        done()
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render(report))
    sys.stdout.flush()
    return 0 if report.healthy else EXIT_ERROR
