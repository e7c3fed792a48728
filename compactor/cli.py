"""Command line: `compactor [--budget N] [--state-dir DIR] ...` runs the stdio MCP server."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from . import constants as C
from .errors import CompactorError, StateCorruptError

log = logging.getLogger("compactor")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not C.BUDGET_MIN <= value <= C.BUDGET_MAX:
        raise argparse.ArgumentTypeError(f"must be from {C.BUDGET_MIN:,} to {C.BUDGET_MAX:,}")
    return value


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0.05 <= value <= 86_400:
        raise argparse.ArgumentTypeError("must be from 0.05 to 86400 seconds")
    return value


def serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="compactor",
        description="Lossless working memory for LLM agents: an MCP server on stdio.",
    )
    p.add_argument("--version", action="version", version=f"compactor {__version__}")
    p.add_argument("--budget", type=_positive_int, help="token budget (default: by client, else 100,000)")
    p.add_argument(
        "--state-dir",
        type=Path,
        default=os.environ.get("COMPACTOR_STATE_DIR") or None,
        help="directory that keeps state across restarts (default: memory only; env COMPACTOR_STATE_DIR)",
    )
    p.add_argument(
        "--snapshot-interval",
        type=_interval,
        default=C.SNAPSHOT_INTERVAL_S,
        help=f"seconds between background snapshots (default {C.SNAPSHOT_INTERVAL_S:g})",
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


def run_server(argv: Sequence[str]) -> int:
    args = serve_parser().parse_args(argv)
    setup_logging(args.log_level)
    import anyio

    from .server import serve
    from .store import Store

    try:
        store = Store(budget=args.budget, state_dir=args.state_dir)
    except StateCorruptError as exc:
        print(f"compactor: cannot start: {exc}", file=sys.stderr)
        return 1
    except CompactorError as exc:
        print(f"compactor: cannot start: {exc}", file=sys.stderr)
        return 1
    anyio.run(lambda: serve(store, snapshot_interval=args.snapshot_interval))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["doctor"]:
        from .doctor import main as doctor_main

        return doctor_main(args[1:])
    return run_server(args)


if __name__ == "__main__":
    sys.exit(main())
