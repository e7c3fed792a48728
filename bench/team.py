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
import site
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


def _other_root() -> str | None:
    """BENCH_COMPACTOR_ROOT: run the servers from another checkout (a "before" measurement)."""
    root = os.environ.get("BENCH_COMPACTOR_ROOT")
    return root if root and Path(root).resolve() != ROOT else None


def _python() -> list[str]:
    # An editable install's import hook, and the working directory, come ahead of PYTHONPATH:
    # another checkout's server starts without site (-S) or the directory (-P), the installed
    # packages put on PYTHONPATH after that checkout instead.
    return [sys.executable, "-S", "-P"] if _other_root() else [sys.executable]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    root = _other_root()
    paths = [root, *site.getsitepackages()] if root else [str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
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
                    cmd = [*_python(), "-m", "compactor", *where]
                    if transport == "http":
                        cmd += ["--transport", "streamable-http"]
                        async with http_session(cmd, errlog) as srv, http_session(floor_http, errlog) as floor:
                            rows[label] = await measure(srv, floor, items, size, queries, calls)
                    else:
                        async with stdio_session(cmd, errlog) as srv, stdio_session(floor_stdio, errlog) as floor:
                            rows[label] = await measure(srv, floor, items, size, queries, calls)
            results["sizes"][size] = rows
        if database and http:
            results["scaling"] = await run_scaling(database, errlog, seed, quick)
    return results


SCALING_CLIENTS = (1, 4, 16, 64)
SCALING_CALLS = 24  # per client: half stores, half queries, alternating


@asynccontextmanager
async def http_servers(command: list[str], count: int, errlog: Any) -> AsyncIterator[tuple[list[str], str]]:
    """`count` HTTP server processes on one database; yields their /mcp URLs and the token."""
    token = secrets.token_hex(32)
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for _ in range(count):
            port = _free_port()
            env = {**_env(), "COMPACTOR_TOKEN": token}
            procs.append(subprocess.Popen([*command, "--port", str(port)], env=env, stdout=errlog, stderr=errlog))
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or procs[-1].poll() is not None:
                        raise RuntimeError(f"HTTP server did not listen: {shlex.join(command)}") from None
                    await anyio.sleep(0.1)
            urls.append(f"http://127.0.0.1:{port}/mcp")
        yield urls, token
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def scaling_run(
    urls: list[str], token: str, clients: int, items: list[corpus.Item], calls: int = SCALING_CALLS
) -> dict[str, Any]:
    """`clients` sessions spread over the servers, all at once, each alternating store and
    query: calls per second over the whole run, and the latency of every call."""
    latencies: list[float] = []
    by_tool: dict[str, list[float]] = {"store": [], "query": []}
    refusals: list[str] = []  # the first few, to say why
    errors = 0
    ready = anyio.Event()
    connected = 0

    async def one(k: int) -> None:
        nonlocal errors, connected
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
            Client(streamable_http_client(urls[k % len(urls)], http_client=http), mode="legacy") as c,
        ):
            connected += 1
            if connected == clients:
                ready.set()
            await ready.wait()
            for n in range(calls):
                item = items[(k * calls + n) % len(items)]
                tool, args = (
                    ("store", item.store_args()) if n % 2 == 0 else ("query", {"query": item.content[:60], "limit": 5})
                )
                started = time.perf_counter()
                res = await c.call_tool(tool, args)
                latencies.append((time.perf_counter() - started) * 1000)
                by_tool[tool].append(latencies[-1])
                if res.is_error:
                    errors += 1
                    if len(refusals) < 5:
                        refusals.append(" ".join(getattr(c, "text", "") for c in res.content)[:300])

    began = 0.0
    async with anyio.create_task_group() as tg:
        for k in range(clients):
            tg.start_soon(one, k)
        await ready.wait()
        began = time.perf_counter()
    elapsed = time.perf_counter() - began
    stats = summarize(latencies)
    per_tool = {f"{tool}_{q}": summarize(ms)[q] for tool, ms in by_tool.items() for q in ("p50", "p99")}
    totals = {"calls_per_s": len(latencies) / elapsed, "p50": stats["p50"], "p99": stats["p99"], "errors": errors}
    return totals | per_tool | {"refusals": refusals}


async def run_scaling(database: str, errlog: Any, seed: int, quick: bool = False) -> dict[str, Any]:
    """The team run: 1, 4, 16 and 64 clients on one and on two HTTP servers sharing a database
    (`quick`: 1 and 4 clients, a few calls each: a smoke run)."""
    counts = SCALING_CLIENTS[:2] if quick else SCALING_CLIENTS
    calls = SCALING_CALLS // 4 if quick else SCALING_CALLS
    items = corpus.generate(seed, max(counts) * calls)
    rows: dict[str, Any] = {}
    for servers in (1, 2):
        for clients in counts:
            with fresh_database(database, f"compactor_bench_{os.getpid()}_scale") as url:
                cmd = [*_python(), "-m", "compactor", "--database", url, "--transport", "streamable-http"]
                async with http_servers(cmd, servers, errlog) as (urls, token):
                    rows[f"{servers}x{clients}"] = await scaling_run(urls, token, clients, items, calls)
    return rows


def render_scaling(rows: dict[str, Any]) -> str:
    out = ["\nTeam run: HTTP + PostgreSQL, clients alternating store and query (calls/s; ms)"]
    out.append(
        f"{'servers':>7} {'clients':>7} {'calls/s':>8} {'p50':>8} {'p99':>8} {'errors':>6}"
        f" {'store p50':>9} {'p99':>8} {'query p50':>9} {'p99':>8}"
    )
    for key, r in rows.items():
        servers, clients = key.split("x")
        out.append(
            f"{servers:>7} {clients:>7} {r['calls_per_s']:>8.1f} {r['p50']:>8.1f} {r['p99']:>8.1f} {r['errors']:>6}"
            f" {r['store_p50']:>9.1f} {r['store_p99']:>8.1f} {r['query_p50']:>9.1f} {r['query_p99']:>8.1f}"
        )
    return "\n".join(out) + "\n"


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
    text = "\n".join(out) + "\n"
    if "scaling" in results:
        text += render_scaling(results["scaling"])
    return text
