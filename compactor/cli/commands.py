"""The CLI's subcommand registry and dispatch. Each module registers its parsers; `dispatch`
runs one and turns errors into exit codes: 0 ok, 1 error, 2 usage."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, cast

from ..errors import CompactorError, StateCorruptError
from . import edit, hook, transfer, ui, view
from .common import EXIT_ERROR, EXIT_USAGE, CliError, Out, add_json, add_state_dir
from .progress import Progress

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    view.register(sub)
    edit.register(sub)
    transfer.register(sub)
    p = sub.add_parser(
        "doctor",
        help="check a state dir (or a database) and say how to fix what is wrong",
        description="Check the state dir's files, lock and journal; other flags go to the doctor as they are.",
    )
    add_state_dir(p)
    add_json(p)
    p.set_defaults(func=None)
    hook.register(sub)
    ui.register(sub)


def run_doctor(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        # Imported only when asked for: the doctor ships separately from the CLI.
        module = importlib.import_module("compactor.doctor.checks")
    except ImportError as exc:
        raise CliError(f"doctor is not available in this installation ({exc}). Reinstall compactor") from exc
    doctor_main = cast(Callable[..., int], module.main)
    argv = list(extra)
    database = getattr(args, "database", None) or os.environ.get("COMPACTOR_DATABASE_URL")
    given = any(a.startswith(("--state-dir", "--database")) for a in argv)
    if database and not given and not getattr(args, "state_dir", None):
        argv = ["--database", str(database), *argv]
    elif not any(a == "--state-dir" or a.startswith("--state-dir=") for a in argv):
        state_dir = getattr(args, "state_dir", None) or os.environ.get("COMPACTOR_STATE_DIR")
        if state_dir:
            argv = ["--state-dir", str(state_dir), *argv]
    if getattr(args, "json", False) and "--json" not in argv:
        argv.append("--json")
    progress = Progress("doctor")
    return doctor_main(argv, step=progress.step, done=progress.clear)


def message(name: str, text: str) -> str:
    """Every CLI error has one shape: `compactor <command>: <what happened>. <what to do>.`"""
    text = text.strip()
    return f"compactor {name}: {text}" + ("" if text.endswith((".", "?", "!")) else ".")


def dispatch(args: argparse.Namespace, extra: list[str]) -> int:
    name = args.command if args.command != "hook" else f"hook {args.hook_event}"
    out = Out(sys.stdout, json_mode=bool(getattr(args, "json", False)))
    try:
        if args.command == "doctor":
            return run_doctor(args, extra)
        func = cast(Callable[[argparse.Namespace, Out], int], args.func)
        return func(args, out)
    except CliError as exc:
        print(message(name, str(exc)), file=sys.stderr)
        return exc.code
    except StateCorruptError as exc:
        print(message(name, str(exc)), file=sys.stderr)
        return EXIT_ERROR
    except CompactorError as exc:
        print(message(name, str(exc)), file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            # Output piped into `head` and cut short: no traceback, and none at exit either.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_ERROR
        where = f" ({exc.filename})" if exc.filename else ""
        print(
            message(name, f"{exc.strerror or exc}{where}. Check the path, its permissions and free space"),
            file=sys.stderr,
        )
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


__all__ = ["EXIT_USAGE", "dispatch", "register"]
