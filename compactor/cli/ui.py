"""`compactor ui`: the command that serves the memory page (the page itself is `compactor.ui`,
loaded only when this command runs, as the doctor is)."""

from __future__ import annotations

import argparse
import importlib
import os
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError
from ..persistence.pg_sql import display_url
from ..store import ALL_SCOPES
from .common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Out,
    add_state_dir,
    database_of,
    opened,
    port_number,
    state_dir_of,
)

DEFAULT_PORT = 8766  # next to the team server's 8765


def register(sub: Any) -> None:
    p = sub.add_parser("ui", help="serve a local web page to see and steer memory", description=cmd_ui.__doc__)
    add_state_dir(p, scope_default="every project")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    p.add_argument(
        "--port",
        type=port_number(free=True),
        default=DEFAULT_PORT,
        help=f"port (default: {DEFAULT_PORT}; 0 picks a free one, and the address printed says which)",
    )
    p.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="a file holding the token a browser must give (default: env COMPACTOR_TOKEN); needed off loopback",
    )
    p.set_defaults(func=cmd_ui)


def cmd_ui(args: argparse.Namespace, out: Out) -> int:
    """Serve a page on http://127.0.0.1:8766/ showing the memory a server keeps in the state dir
    (or database): the budget, the newest items, search, each item with its lineage and history,
    the summary tree and the forget ledger; pin, unpin, restore, dissolve and forget from it.
    It reads the memory live, beside running servers. Every project's items unless --scope is
    given. Stops on Ctrl-C."""
    http = importlib.import_module("compactor.mcp.http_server")
    ui = importlib.import_module("compactor.ui")
    try:
        token = http.load_token(args.token_file) if args.token_file or os.environ.get("COMPACTOR_TOKEN") else None
    except InvalidArgumentError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc
    if not http.is_loopback(args.host) and token is None:
        raise CliError(
            f"refusing to serve on {args.host} without a token: anyone who can reach it could read and change "
            "memory. Pass --token-file FILE or set COMPACTOR_TOKEN, or serve on 127.0.0.1",
            EXIT_USAGE,
        )
    if not getattr(args, "scope", None) and not os.environ.get("COMPACTOR_SCOPE"):
        args.scope = ALL_SCOPES
    database = database_of(args)
    state_dir = None if database is not None else state_dir_of(args)
    source = f"database {display_url(database)}" if database else f"state dir {state_dir}"
    options = ui.UIOptions(
        host=args.host, port=args.port, token=token, source=source, state_dir=state_dir, database=database
    )
    # create: a page that may pin or forget is a writer, and a server started later shares the dir.
    with opened(args, create=True) as store:
        try:
            ui.serve_ui(store, options)
        except OSError as exc:
            raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
        except KeyboardInterrupt:
            pass
    return EXIT_OK
