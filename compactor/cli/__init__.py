"""The command line: `compactor [--budget N] [--state-dir DIR] ...` runs the stdio MCP server
(`serve`); `compactor COMMAND ...` runs one of the subcommands for a person (`commands`
registers them: `view`, `edit`, `transfer`, `doctor`, `hook`)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .serve import run_server, serve_parser


def build_parser() -> argparse.ArgumentParser:
    from . import commands

    p = serve_parser()
    p.epilog = "Without a command, compactor runs the MCP server on stdio. `compactor COMMAND --help` for more."
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    commands.register(sub)
    return p


def _server_only(args_list: list[str]) -> bool:
    """Whether the arguments are the server's options alone, read by the server's parser only."""
    if {"-h", "--help"} & set(args_list):
        return False
    parser = serve_parser()
    # A value the server refuses may be a command's (`ui --port 0`): the full parser judges it.
    parser.exit_on_error = False
    try:
        return not parser.parse_known_args(args_list)[1]
    except argparse.ArgumentError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if _server_only(args_list):
        # The server's options alone: skip the commands' parsers, whose imports (the whole
        # store) a stdio relay to the shared host must not pay for (sharing/relay.py).
        return run_server(args_list)
    parser = build_parser()
    args, extra = parser.parse_known_args(args_list)
    if args.command is None:
        return run_server(args_list)
    if extra:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub = action.choices[args.command]
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    # A person reads this: a warning is a message like any other, not a log line.
    name = args.command if args.command != "hook" else f"hook {getattr(args, 'hook_event', '')}".strip()
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format=f"compactor {name}: %(message)s")
    from .commands import dispatch

    return dispatch(args)


__all__ = ["build_parser", "main"]
