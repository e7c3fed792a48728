"""``python -m bench``: measure the server(s) and the SDK floor; table on stdout, JSON to --out."""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import logging
import os
import platform
import shlex
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio

from bench.context import measure_context
from bench.import_time import measure_import
from bench.measure import Plan, measure_size
from bench.report import render, write_json

DEFAULT_SIZES = "1000,10000"
LARGE_SIZE = 100_000
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "latest.json"


def compile_bytecode() -> bool:
    """Compile this checkout's package to bytecode first, as `pip install` does for an installed
    copy: an editable install under PYTHONDONTWRITEBYTECODE=1 would otherwise compile every
    module from source at every start and the cold-start figures would measure that."""
    return bool(compileall.compile_dir(Path(__file__).resolve().parent.parent / "compactor", quiet=1))


def default_server() -> str:
    return f"{shlex.quote(sys.executable)} -m compactor"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated item counts (default %(default)s)")
    parser.add_argument("--large", action="store_true", help=f"also measure N={LARGE_SIZE:,}")
    parser.add_argument(
        "--server",
        action="append",
        metavar="CMD",
        help="server command with the compactor's tool names; repeat to compare servers side by side. "
        "{state_dir} and {snapshot_interval} are filled in; without them --state-dir and "
        "--snapshot-interval are appended (default: this python -m compactor)",
    )
    parser.add_argument(
        "--no-server-flags",
        action="store_true",
        help="append no flags to --server commands (no placeholders either)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file (default %(default)s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--client",
        choices=("raw", "sdk"),
        default="raw",
        help="raw: a minimal JSON-RPC client, so latency is the server's; sdk: the official mcp.Client, "
        "which adds its own output-schema validation to every call (default %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="small repetition counts: a smoke run")
    parser.add_argument("--server-log", type=Path, help="file for the servers' stderr (default: a temp file)")
    parser.add_argument("--no-import", action="store_true", help="skip timing `compactor import` of the corpus")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument(
        "--database",
        metavar="URL",
        help="also measure compactor on PostgreSQL (bench/team.py): store/query p50 for stdio + state dir and "
        "stdio + PostgreSQL, each with its floor; fresh databases are created beside URL (needs CREATEDB)",
    )
    parser.add_argument(
        "--transport",
        choices=("stdio", "streamable-http"),
        default="stdio",
        help="with --database, streamable-http adds HTTP + PostgreSQL (with a bearer token) to the same run",
    )
    args = parser.parse_args(argv)
    try:
        sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if not sizes or min(sizes) < 1:
        parser.error("--sizes needs at least one positive size")
    if args.large and LARGE_SIZE not in sizes:
        sizes.append(LARGE_SIZE)
    args.sizes = sizes
    args.server = args.server or [default_server()]
    return args


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "seed": args.seed,
        "quick": args.quick,
        "sizes": args.sizes,
        "servers": args.server,
        "python": platform.python_version(),
        "mcp": version("mcp"),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "client": args.client,
        "transport": (
            "stdio subprocess; "
            + (
                "minimal newline-delimited JSON-RPC client; latency from request written to reply read"
                if args.client == "raw"
                else "mcp.Client(mode='legacy'); latency measured around client.call_tool"
            )
        ),
    }
    meta["bytecode"] = "compiled before measuring" if compile_bytecode() else "compileall failed: see stderr"
    log_path = args.server_log or Path(tempfile.gettempdir()) / f"compactor-bench-{os.getpid()}.log"
    meta["server_log"] = str(log_path)
    context = await measure_context()
    sizes: list[dict[str, Any]] = []
    with log_path.open("a") as errlog:
        for size in args.sizes:
            plan = Plan.for_size(size, args.seed, args.quick, args.client)
            sizes.append(await measure_size(plan, args.server, add_flags=not args.no_server_flags, errlog=errlog))
    imported = None if args.no_import else await anyio.to_thread.run_sync(measure_import, args.server)
    meta["seconds"] = time.perf_counter() - started
    return {"meta": meta, "context": context, "sizes": sizes, **({"import": imported} if imported else {})}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if args.database or args.transport != "stdio":
        if not args.database:
            print("python -m bench: --transport streamable-http needs --database URL", file=sys.stderr)
            return 2
        from bench.team import render_team, run_team

        team = anyio.run(
            run_team, args.database, args.transport == "streamable-http", args.sizes, args.seed, args.quick
        )
        write_json({"meta": {"team": True, "sizes": args.sizes, "quick": args.quick}, "team": team}, args.out)
        print(render_team(team), end="")
        print(f"JSON: {args.out}  server stderr: {team['server_log']}")
        return 0
    report = anyio.run(run, args)
    write_json(report, args.out)
    print(render(report), end="")
    print(f"JSON: {args.out}  server stderr: {report['meta']['server_log']}")
    failed = any(r.get("errors") for block in report["sizes"] for r in [*block["servers"].values(), block["floor"]])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
