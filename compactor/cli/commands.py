"""The CLI's subcommand registry and dispatch. Each module registers its parsers; `dispatch`
runs one and turns errors into exit codes: 0 ok, 1 error, 2 usage."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from typing import Any, cast

from ..errors import CompactorError, StateCorruptError
from . import doctor, edit, hook, transfer, ui, view
from .common import EXIT_ERROR, EXIT_USAGE, CliError, Out

log = logging.getLogger(__name__)


def register(sub: Any) -> None:
    view.register(sub)
    edit.register(sub)
    transfer.register(sub)
    doctor.register(sub)
    hook.register(sub)
    ui.register(sub)


def message(name: str, text: str) -> str:
    """Every CLI error has one shape: `compactor <command>: <what happened>. <what to do>.`"""
    text = text.strip()
    return f"compactor {name}: {text}" + ("" if text.endswith((".", "?", "!")) else ".")


def dispatch(args: argparse.Namespace) -> int:
    name = args.command if args.command != "hook" else f"hook {args.hook_event}"
    out = Out(sys.stdout, json_mode=bool(getattr(args, "json", False)))
    try:
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
