"""``python -m bench --database URL [--transport streamable-http]``: store and query p50 for the
team configurations, with their floors, in one run.

Configurations, each a real server subprocess loaded with the same N items (the corpus of the
main benchmark) and then timed over 300 single `store` and 300 `query` calls:

- stdio + state dir (the single-machine default),
- stdio + PostgreSQL (`--database`),
- streamable HTTP + PostgreSQL (with `--transport streamable-http`), with a bearer token.

Every configuration is driven by the official SDK client (`mcp.Client`, stdio or streamable
HTTP), so the client's own cost is the same for all; the floor is `bench/noop_server.py` (one
tool that does nothing) on the same transport and client, its calls paired in alternation with
the measured ones. Each PostgreSQL configuration gets a fresh database, created next to the one
`--database` names (so the user needs CREATEDB) and dropped at the end.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from bench import corpus
from bench.stats import summarize

QUERY_LIMIT = 10
ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("COMPACTOR_DATABASE_URL", None)
    return env


@contextlib.contextmanager
def fresh_database(url: str, name: str) -> Iterator[str]:
    """A new empty database beside the one `url` names; dropped afterwards."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    info = conninfo_to_dict(url)
    info["dbname"] = name
    try:
        yield make_conninfo(**info)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@asynccontextmanager
async def stdio_session(command: list[str], errlog: Any) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=command[0], args=command[1:], env=_env())
    async with Client(stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=600) as c:
        yield c


@asynccontextmanager
async def http_session(command: list[str], errlog: Any) -> AsyncIterator[Client]:
    """Start an HTTP server process, wait for its port, connect with the token."""
    token = secrets.token_hex(32)
    port = _free_port()
    env = {**_env(), "COMPACTOR_TOKEN": token}
    proc = subprocess.Popen([*command, "--port", str(port)], env=env, stdout=errlog, stderr=errlog)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"HTTP server exited ({proc.returncode}): {shlex.join(command)}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("HTTP server did not listen within 60 s") from None
                await anyio.sleep(0.1)
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
            Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http), mode="legacy") as c,
        ):
            yield c
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _timed(c: Client, tool: str, args: dict[str, Any]) -> float:
    started = time.perf_counter()
    res = await c.call_tool(tool, args)
    ms = (time.perf_counter() - started) * 1000
    if res.is_error:
        raise RuntimeError(f"{tool} failed: {res.content}")
    return ms


async def measure(
    server: Client, floor: Client, items: list[corpus.Item], size: int, queries: list[corpus.Query], calls: int
) -> dict[str, Any]:
    """Load `size` items, then `calls` stores and queries, each paired with a floor noop."""
    await server.call_tool("configure", {"auto_compact": False, "token_budget": 50_000_000})
    loaded = [i.store_args() for i in items[:size]]
    for start in range(0, len(loaded), 100):
        await _timed(server, "bulk_store", {"items": loaded[start : start + 100]})
    store_ms: list[float] = []
    query_ms: list[float] = []
    floor_store: list[float] = []
    floor_query: list[float] = []
    for n, item in enumerate(items[size : size + calls]):
        args = item.store_args()
        first, second = (server, floor) if n % 2 else (floor, server)
        for c in (first, second):
            if c is server:
                store_ms.append(await _timed(server, "store", args))
            else:
                floor_store.append(await _timed(floor, "noop", {"payload": args["content"]}))
    for n, q in enumerate(queries[:calls]):
        first, second = (server, floor) if n % 2 else (floor, server)
        for c in (first, second):
            if c is server:
                query_ms.append(await _timed(server, "query", {"query": q.text, "limit": QUERY_LIMIT}))
            else:
                floor_query.append(await _timed(floor, "noop", {"payload": q.text, "text_bytes": 600}))
    return {
        "store": summarize(store_ms),
        "query": summarize(query_ms),
        "floor_store": summarize(floor_store),
        "floor_query": summarize(floor_query),
    }


async def run_team(database: str | None, http: bool, sizes: list[int], seed: int, quick: bool) -> dict[str, Any]:
    py = sys.executable
    calls = 30 if quick else 300
    results: dict[str, Any] = {"sizes": {}}
    log = Path(tempfile.gettempdir()) / f"compactor-bench-team-{os.getpid()}.log"
    results["server_log"] = str(log)
    with log.open("a") as errlog, tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            items = corpus.generate(seed, size + calls)
            queries = corpus.make_queries(items, range(size), calls, seed)
            rows: dict[str, Any] = {}
            floor_stdio = [py, "-m", "bench.noop_server"]
            floor_http = [py, "-m", "bench.noop_server", "--transport", "streamable-http"]
            configs: list[tuple[str, str, list[str] | None]] = [("stdio + state dir", "stdio", None)]
            if database:
                configs.append(("stdio + PostgreSQL", "stdio", []))
                if http:
                    configs.append(("HTTP + PostgreSQL", "http", []))
            for n, (label, transport, _) in enumerate(configs):
                with contextlib.ExitStack() as stack:
                    if label.endswith("state dir"):
                        where = ["--state-dir", str(Path(tmp) / f"state-{size}")]
                    else:
                        assert database is not None
                        url = stack.enter_context(fresh_database(database, f"compactor_bench_{os.getpid()}_{n}"))
                        where = ["--database", url]
                    cmd = [py, "-m", "compactor", *where]
                    if transport == "http":
                        cmd += ["--transport", "streamable-http"]
                        async with http_session(cmd, errlog) as srv, http_session(floor_http, errlog) as floor:
                            rows[label] = await measure(srv, floor, items, size, queries, calls)
                    else:
                        async with stdio_session(cmd, errlog) as srv, stdio_session(floor_stdio, errlog) as floor:
                            rows[label] = await measure(srv, floor, items, size, queries, calls)
            results["sizes"][size] = rows
    return results


def render_team(results: dict[str, Any]) -> str:
    out = []
    for size, rows in results["sizes"].items():
        out.append(
            f"\nTeam configurations at N={int(size):,} (SDK client; ms, p50; floor = noop on the same transport)"
        )
        out.append(f"{'configuration':<22} {'store':>8} {'floor':>7} {'query':>8} {'floor':>7}")
        for label, r in rows.items():
            out.append(
                f"{label:<22} {r['store']['p50']:>8.2f} {r['floor_store']['p50']:>7.2f} "
                f"{r['query']['p50']:>8.2f} {r['floor_query']['p50']:>7.2f}"
            )
        base = rows.get("stdio + state dir")
        http = rows.get("HTTP + PostgreSQL")
        if base and http:
            ratio = http["query"]["p50"] / base["query"]["p50"]
            out.append(f"query p50, HTTP + PostgreSQL / stdio + state dir: {ratio:.2f}x (goal <= 2x)")
    return "\n".join(out) + "\n"
