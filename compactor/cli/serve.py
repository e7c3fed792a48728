"""`compactor [--budget N] [--state-dir DIR] ...` without a command: the server's parser, its
start-up checks, and running the stdio MCP server."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from .. import constants as C
from ..errors import CompactorError
from ..scope import lost_cwd_problem, project_scope, state_dir_arg
from .common import port_number
from .progress import Progress

if TYPE_CHECKING:
    from ..store import Store


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not C.BUDGET_MIN <= value <= C.BUDGET_MAX:
        raise argparse.ArgumentTypeError(f"must be from {C.BUDGET_MIN:,} to {C.BUDGET_MAX:,}")
    return value


def _listen_problem(host: str, port: int) -> str | None:
    """Why HTTP could not be served on host:port (in use, not an address here), said before the
    store loads; uvicorn would say it in a log line after. None when a listener can bind."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"cannot serve on {host}: {exc.strerror}. Pass an address of this machine with --host."
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            fix = (
                "Pass another --port or stop what uses it."
                if exc.errno == errno.EADDRINUSE
                else "Pass an address of this machine with --host."
                if exc.errno == errno.EADDRNOTAVAIL
                else "Pass another --host or --port."
            )
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}. {fix}"
    return None


def _seconds(low: float, high: float) -> Callable[[str], float]:
    """An option's parser for a number of seconds from `low` to `high`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low:g} to {high:g} seconds")
        return value

    return parse


def _scope_name(text: str) -> str:
    if not text.strip() or not text.isprintable():
        raise argparse.ArgumentTypeError("expected a project name on one line, got an empty or multi-line one")
    if len(text) > C.SCOPE_MAX_CHARS:
        raise argparse.ArgumentTypeError(f"must be at most {C.SCOPE_MAX_CHARS:,} characters")
    if text == "all":
        raise argparse.ArgumentTypeError("'all' is for reading; name a project or 'global'")
    return text


def serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="compactor",
        description="Lossless working memory for LLM agents: an MCP server on stdio or streamable HTTP.",
    )
    p.add_argument("--version", action="version", version=f"compactor {__version__}")
    p.add_argument("--budget", type=_positive_int, help="token budget (default: by client, else 100,000)")
    p.add_argument(
        "--state-dir",
        type=state_dir_arg,
        default=os.environ.get("COMPACTOR_STATE_DIR") or None,
        help="directory that keeps state across restarts (default: memory only; env COMPACTOR_STATE_DIR)",
    )
    p.add_argument(
        "--database",
        default=os.environ.get("COMPACTOR_DATABASE_URL") or None,
        metavar="URL",
        help="PostgreSQL database shared by several servers, instead of --state-dir "
        "(postgresql://user:password@host/db; env COMPACTOR_DATABASE_URL; needs compactor[postgres])",
    )
    p.add_argument(
        "--transport",
        choices=["stdio", "streamable-http"],
        default="stdio",
        help="stdio (default: the client starts this process) or streamable-http (clients connect to --host:--port)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to serve HTTP on (default 127.0.0.1)")
    p.add_argument(
        "--port", type=port_number(), default=C.HTTP_PORT_DEFAULT, help=f"HTTP port (default {C.HTTP_PORT_DEFAULT})"
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host header to accept besides this machine's own names (repeatable): the name clients reach a "
        "reverse proxy by, which it forwards (e.g. memory.example.com, or NAME:PORT)",
    )
    p.add_argument(
        "--public-url",
        metavar="URL",
        help="the URL clients reach this server by through a proxy (e.g. https://memory.example.com/mcp): its "
        "host is accepted as with --allowed-host",
    )
    p.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="file holding the bearer token HTTP clients must send (default: env COMPACTOR_TOKEN); required to "
        "serve on a non-loopback address",
    )
    p.add_argument(
        "--tokens-file",
        type=Path,
        metavar="FILE",
        help="TOML file of people: each token's sha256, the projects it may use and read or write access "
        "(docs/team.md); re-read on SIGHUP",
    )
    p.add_argument(
        "--snapshot-interval",
        type=_seconds(C.SNAPSHOT_INTERVAL_MIN_S, C.SNAPSHOT_INTERVAL_MAX_S),
        default=C.SNAPSHOT_INTERVAL_S,
        help=f"seconds between background snapshots (default {C.SNAPSHOT_INTERVAL_S:g})",
    )
    p.add_argument(
        "--lock-wait",
        type=_seconds(C.LOCK_WAIT_MIN_S, C.LOCK_WAIT_MAX_S),
        default=C.LOCK_WAIT_S,
        metavar="SECONDS",
        help="how long a write waits for the writers' lock (held by another call or server) before it fails "
        f"with a message (default {C.LOCK_WAIT_S:g})",
    )
    p.add_argument("--max-items", type=int, help="active items kept before the oldest low-value ones are archived")
    p.add_argument(
        "--max-archive-tokens",
        type=int,
        help="archive size past which `compactor prune` proposes removing low-value items (nothing is deleted "
        "automatically)",
    )
    p.add_argument(
        "--no-redact",
        action="store_true",
        help="keep credentials in stored text (default: they are replaced with [REDACTED:<kind>])",
    )
    p.add_argument(
        "--no-share",
        action="store_true",
        default=os.environ.get("COMPACTOR_NO_SHARE", "") not in ("", "0"),
        help="serve this client in a process of its own: by default the stdio servers on one --state-dir "
        "share one store process, which exits with its last client (env COMPACTOR_NO_SHARE=1)",
    )
    p.add_argument(
        "--scope",
        default=os.environ.get("COMPACTOR_SCOPE") or None,
        help="project scope for this server (default: the client's root, else the git root of the cwd)",
    )
    p.add_argument(
        "--default-scope",
        type=_scope_name,
        default=os.environ.get("COMPACTOR_DEFAULT_SCOPE") or None,
        metavar="SCOPE",
        help="project scope of a client that sends no roots (default: the git root of the cwd, else the cwd; env "
        "COMPACTOR_DEFAULT_SCOPE); unlike --scope, a client's roots still choose its own",
    )
    p.add_argument(
        "--log-level",
        default=os.environ.get("COMPACTOR_LOG_LEVEL", "WARNING"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        type=str.upper,
        help="log level (logs go to stderr; stdout is the protocol)",
    )
    return p


def setup_logging(level: str) -> None:
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def state_dir_problem(path: Path) -> str | None:
    """Why the server could not keep state in `path`, said with what to do; None when it can.
    In a container, a bind-mounted host directory is owned by the host user, not the image's."""
    lost = lost_cwd_problem(path)
    if lost:
        return lost
    try:
        st = path.stat()
    except FileNotFoundError:
        return None  # created on first start
    except OSError as exc:
        return (
            f"cannot reach --state-dir {path} ({exc.strerror}). Make it and its parents accessible to uid "
            f"{os.getuid()}, or pass another directory."
        )
    if not path.is_dir():
        return f"--state-dir {path} is a file, not a directory. Pass a directory (compactor creates it)."
    if not os.access(path, os.W_OK | os.X_OK):
        return (
            f"--state-dir {path} is owned by uid {st.st_uid} and this process (uid {os.getuid()}) cannot write it. "
            f"Run as its owner (in Docker: `docker run --user $(id -u):$(id -g) ...`), or `chown {os.getuid()} {path}`."
        )
    return None


def run_server(argv: Sequence[str]) -> int:
    args = serve_parser().parse_args(argv)
    setup_logging(args.log_level)
    if args.database is not None and not args.database.strip():
        print(
            "compactor: cannot start: --database is empty (an unset variable?); pass the database URL.", file=sys.stderr
        )
        return 2
    if args.state_dir is not None and args.database is not None:
        print("compactor: cannot start: give --state-dir or --database, not both.", file=sys.stderr)
        return 2
    if args.state_dir is not None:
        problem = state_dir_problem(Path(args.state_dir))
        if problem:
            print(f"compactor: cannot start: {problem}", file=sys.stderr)
            return 1
    if args.transport == "stdio" and sys.stdin.isatty():
        # A person typed `compactor` to try it: without a word it looks hung.
        print(
            "compactor: serving MCP on stdio, for an MCP client to start and talk to (see the README to "
            "register it). `compactor --help` lists the commands for people; Ctrl-D stops this.",
            file=sys.stderr,
        )
    if args.transport == "stdio" and args.state_dir is not None and not args.no_share:
        code = _serve_shared(args)
        if code is not None:
            return code
    from ..runtime import PROCESS

    PROCESS.pause_for_start()  # this process serves: no collection until it is built
    import anyio

    from ..mcp import serve

    token = None
    if args.transport == "streamable-http":
        from ..mcp.http_server import is_loopback, load_token

        # "[::1]", as a URL spells it, is the address ::1.
        args.host = args.host.strip("[]") if args.host.startswith("[") else args.host
        problem = _proxy_problem(args.allowed_host, args.public_url)
        if problem:
            print(f"compactor: cannot start: {problem}", file=sys.stderr)
            return 2

        try:
            token = load_token(args.token_file)
            if args.tokens_file is not None:
                from ..mcp.people import load_people

                load_people(args.tokens_file)  # refused now, in one sentence, rather than at the first call
        except CompactorError as exc:
            print(f"compactor: cannot start: {exc}.", file=sys.stderr)
            return 2
        if token is None and args.tokens_file is None and not is_loopback(args.host):
            print(
                f"compactor: cannot start: refusing to serve on {args.host} without a token: anyone who can reach "
                "it could read and change memory. Pass --token-file FILE or set COMPACTOR_TOKEN (make one with "
                "`openssl rand -hex 32`), or use --host 127.0.0.1.",
                file=sys.stderr,
            )
            return 2
        problem = _listen_problem(args.host, args.port)
        if problem:
            print(f"compactor: cannot start: {problem}", file=sys.stderr)
            return 1
    store = _load_store(
        args,
        state_dir=args.state_dir,
        database=args.database,
        scope=args.scope or args.default_scope or project_scope(),
    )
    if store is None:
        return 1
    if args.transport == "streamable-http":
        from ..mcp.http_server import serve_http

        anyio.run(
            lambda: serve_http(
                store,
                host=args.host,
                port=args.port,
                token=token,
                snapshot_interval=args.snapshot_interval,
                scope_fixed=bool(args.scope),
                allowed_hosts=args.allowed_host,
                public_url=args.public_url,
                tokens_file=args.tokens_file,
            )
        )
        return 0
    anyio.run(lambda: serve(store, snapshot_interval=args.snapshot_interval, scope_fixed=bool(args.scope)))
    return 0


def _proxy_problem(allowed_hosts: list[str], public_url: str | None) -> str | None:
    """Why --allowed-host or --public-url cannot be used, said in one sentence; None when fine."""
    from urllib.parse import urlsplit

    for name in allowed_hosts:
        if not name or "/" in name or not name.isprintable() or " " in name:
            return f"--allowed-host {name!r} is not a host name; pass the name alone, e.g. memory.example.com."
    if public_url is not None:
        parts = urlsplit(public_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return f"--public-url {public_url!r} is not an http(s) URL; pass e.g. https://memory.example.com/mcp."
    return None


def _serve_shared(args: argparse.Namespace) -> int | None:
    """Relay this client to the shared host for its state dir and settings (sharing/relay.py);
    None when sharing is unavailable here, and this process serves the client itself."""
    from ..sharing.relay import serve_shared

    return serve_shared(
        args.state_dir,
        scope=args.scope,
        default_scope=args.default_scope,
        snapshot_interval=args.snapshot_interval,
        settings={
            "budget": args.budget,
            "redact": not args.no_redact,
            "max_items": args.max_items,
            "max_archive_tokens": args.max_archive_tokens,
            "log_level": args.log_level,
        },
        # The path as given, as a server in its own process has it (`status` shows it). A relative
        # one resolves in the host as it did for the starting relay: the host runs in its directory.
        load_store=lambda scope: _load_store(args, state_dir=args.state_dir, database=None, scope=scope),
    )


def _load_store(args: argparse.Namespace, *, state_dir: Any, database: str | None, scope: str) -> Store | None:
    """The server's Store as the options say, or None after saying on stderr why it cannot start."""
    from ..runtime import long_lived, tune_allocator
    from ..store import Store

    tune_allocator()  # before the load: its temporaries are the first large blocks
    # A state dir saved by an older version is indexed again once, at this load: counted on a
    # terminal (stderr; stdout is the protocol).
    progress = Progress("serve", "items re-indexed")
    try:
        with long_lived():
            store = Store(
                budget=args.budget,
                state_dir=state_dir,
                database=database,
                scope=scope,
                redact_secrets=not args.no_redact,
                load_progress=progress,
            )
        progress.finish()
        store.lock_wait_s = args.lock_wait
        if args.max_items is not None or args.max_archive_tokens is not None:
            store.configure(max_items=args.max_items, max_archive_tokens=args.max_archive_tokens)
    except CompactorError as exc:
        print(f"compactor: cannot start: {exc}", file=sys.stderr)
        return None
    return store
