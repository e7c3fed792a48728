"""compactor over streamable HTTP, driven by the official SDK's streamable HTTP client against
real server processes: the bearer token (401 without it or with a wrong one, the tools with the
right one), the refusal to serve a non-loopback address without a token, and one PostgreSQL
database shared by servers over HTTP and over stdio at once with no acknowledged write lost."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import Implementation, ListRootsResult, Root

from tests.conftest import server_command, server_env
from tests.support.stdio_client import StdioServer

# Every test here starts a server process of its own.
pytestmark = pytest.mark.slow

SERVERS = 3
WRITES = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_server(
    *args: str, token_file: Path | None = None, env: dict[str, str] | None = None, argv: list[str] | None = None
) -> Iterator[str]:
    """A real `compactor --transport streamable-http` process; yields its /mcp URL. `argv`
    replaces the transport and port arguments (then `args` must carry the port)."""
    if argv is None:
        port = free_port()
        argv = ["--transport", "streamable-http", "--port", str(port)]
    else:
        port = int(args[len(args) - 1 - list(reversed(args)).index("--port") + 1])
    argv = [*argv, *args]
    if token_file is not None:
        argv += ["--token-file", str(token_file)]
    proc = subprocess.Popen(
        server_command(*argv), env=env or server_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"the HTTP server exited: {proc.communicate()[1]}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the HTTP server did not start listening"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        assert proc.returncode == 0, err
    return


@asynccontextmanager
async def connect(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="legacy",
            client_info=Implementation(name="pytest-http", version="1"),
        ) as c,
    ):
        yield c


async def call(c: Client, tool: str, **args: Any) -> dict[str, Any]:
    with anyio.fail_after(30):
        res = await c.call_tool(tool, args)
    assert not res.is_error, res.content
    assert res.structured_content is not None
    return res.structured_content


@pytest.fixture
def token_file(tmp_path: Path) -> tuple[Path, str]:
    token = secrets.token_hex(32)
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path, token


def test_the_token_is_required_and_the_tools_work_with_it(pg_url: str, token_file: tuple[Path, str]):
    path, token = token_file
    with http_server("--database", pg_url, token_file=path) as url:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        accept = {"Accept": "application/json, text/event-stream"}
        for headers in ({}, {"Authorization": "Bearer " + "0" * 64}, {"Authorization": f"Bearer {token}x"}):
            reply = httpx2.post(url, json=init, headers={**accept, **headers})
            assert reply.status_code == 401, (headers, reply.status_code)
            assert token not in reply.text

        async def unauthorised(t: str | None) -> None:
            with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK raises its own wrapper of the 401
                async with connect(url, t) as c:
                    await c.list_tools()

        async def drive() -> tuple[str, str]:
            await unauthorised(None)
            await unauthorised("wrong-" + token)
            async with connect(url, token) as c:
                stored = await call(c, "store", content="the team decided: use PostgreSQL for shared memory")
                hits = await call(c, "query", query="PostgreSQL shared memory")
                got = await call(c, "get", id=stored["id"])
                return hits["items"][0]["id"], got["content"]

        first, content = anyio.run(drive)
        assert content == "the team decided: use PostgreSQL for shared memory"
        assert first == stored_id(pg_url)


def stored_id(url: str) -> str:
    from compactor.store import Store

    s = Store(database=url)
    try:
        return s.ids()[0]
    finally:
        s.close()


def test_a_non_loopback_address_without_a_token_is_refused(tmp_path: Path):
    env = {k: v for k, v in server_env().items() if k != "COMPACTOR_TOKEN"}
    done = subprocess.run(
        server_command("--transport", "streamable-http", "--host", "0.0.0.0", "--port", str(free_port())),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "refusing to serve on 0.0.0.0 without a token" in done.stderr and "--token-file" in done.stderr


def test_each_http_session_keeps_the_project_scope_of_its_own_roots(
    pg_url: str, token_file: tuple[Path, str], tmp_path: Path
):
    """Two clients with different roots on one HTTP server: each stores into, and reads from,
    its own project (the roots come over the server-to-client channel of streamable HTTP)."""
    path, token = token_file
    projects = []
    for name in ("alpha", "beta"):
        (tmp_path / name / ".git").mkdir(parents=True)
        projects.append(tmp_path / name)

    def roots_of(project: Path) -> Any:
        async def roots(_ctx: object) -> ListRootsResult:
            return ListRootsResult(roots=[Root(uri=project.as_uri(), name=project.name)])  # type: ignore[arg-type]

        return roots

    with http_server("--database", pg_url, token_file=path) as url:

        async def drive() -> None:
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as h1,
                create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as h2,
                Client(
                    streamable_http_client(url, http_client=h1),
                    mode="legacy",
                    list_roots_callback=roots_of(projects[0]),
                ) as a,
                Client(
                    streamable_http_client(url, http_client=h2),
                    mode="legacy",
                    list_roots_callback=roots_of(projects[1]),
                ) as b,
            ):
                ida = (await call(a, "store", content="zanzibar note of alpha"))["id"]
                idb = (await call(b, "store", content="zanzibar note of beta"))["id"]
                assert [i["id"] for i in (await call(a, "query", query="zanzibar"))["items"]] == [ida]
                assert [i["id"] for i in (await call(b, "query", query="zanzibar"))["items"]] == [idb]
                assert (await call(a, "status"))["scope"] == str(projects[0])
                both = await call(b, "query", query="zanzibar", scope="all")
                assert {i["id"] for i in both["items"]} == {ida, idb}

        anyio.run(drive)


def content_for(server: str, k: int) -> str:
    return f"server {server} write {k}: marker {server}w{k} about the shared team memory"


@pytest.mark.timeout(600)
def test_servers_over_http_and_stdio_share_one_database_and_lose_nothing(pg_url: str, token_file: tuple[Path, str]):
    """3 HTTP servers and 3 stdio servers on one database, 300 stores each, all at once: every
    acknowledged id is there with its exact content, read back through every server."""
    path, token = token_file
    acked: dict[str, str] = {}
    lock = threading.Lock()
    errors: list[str] = []
    start = threading.Barrier(2 * SERVERS)

    def http_driver(url: str, name: str) -> None:
        async def go() -> None:
            async with connect(url, token) as c:
                start.wait()
                for k in range(WRITES):
                    text = content_for(name, k)
                    res = await call(c, "store", content=text)
                    with lock:
                        acked[res["id"]] = text

        try:
            anyio.run(go)
        except Exception as exc:
            errors.append(f"{name}: {exc!r}")

    def stdio_driver(srv: StdioServer, name: str) -> None:
        try:
            start.wait()
            for k in range(WRITES):
                text = content_for(name, k)
                res = srv.ok("store", content=text)
                with lock:
                    acked[res["id"]] = text
        except Exception as exc:
            errors.append(f"{name}: {exc!r}")

    budget = ("--budget", "10000000")
    with (
        http_server("--database", pg_url, *budget, token_file=path) as u0,
        http_server("--database", pg_url, *budget, token_file=path) as u1,
        http_server("--database", pg_url, *budget, token_file=path) as u2,
    ):
        urls = [u0, u1, u2]
        stdio = [StdioServer("--database", pg_url, *budget) for _ in range(SERVERS)]
        try:
            threads = [threading.Thread(target=http_driver, args=(u, f"h{n}")) for n, u in enumerate(urls)]
            threads += [threading.Thread(target=stdio_driver, args=(s, f"s{n}")) for n, s in enumerate(stdio)]
            began = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join(500)
            elapsed = time.monotonic() - began
            assert not errors, errors
            assert len(acked) == 2 * SERVERS * WRITES

            async def read_back(url: str) -> dict[str, str]:
                async with connect(url, token) as c:
                    return await export_all(c)

            seen = [anyio.run(read_back, u) for u in urls] + [export_stdio(s) for s in stdio]
        finally:
            for s in stdio:
                s.stop()
    lost = [len(acked.keys() - got.keys()) for got in seen]
    assert lost == [0] * (2 * SERVERS), f"acknowledged writes missing per server: {lost}"
    for got in seen:
        assert {i: got[i] for i in acked} == acked
    print(
        f"\n{SERVERS} HTTP + {SERVERS} stdio servers x {WRITES} stores on one database in {elapsed:.1f} s: "
        f"{len(acked)} acknowledged, lost per server {lost}"
    )


async def export_all(c: Client) -> dict[str, str]:
    out: dict[str, str] = {}
    cursor: str | None = None
    while True:
        args: dict[str, Any] = {"tier": "all"}
        if cursor:
            args["cursor"] = cursor
        page = await call(c, "export", **args)
        out.update({rec["id"]: rec["content"] for rec in page["items"]})
        cursor = page["next_cursor"]
        if not cursor:
            return out


def export_stdio(srv: StdioServer) -> dict[str, str]:
    return {rec["id"]: rec["content"] for rec in srv.export_records()}


def _refused(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        server_command("--transport", "streamable-http", *args),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_port_out_of_range_is_refused_by_the_parser():
    """--port 99999 ended in an exception-group traceback from the event loop; 0 bound a
    random port nobody was told of."""
    for port in ("99999", "0", "http"):
        done = _refused("--port", port)
        assert done.returncode == 2, done.stderr[-300:]
        assert "argument --port:" in done.stderr and "Traceback" not in done.stderr


def test_a_port_in_use_or_an_address_not_here_is_said_in_one_sentence(tmp_path: Path):
    """uvicorn said it in a log line after the store had loaded; it is checked first."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _refused("--port", str(port), "--state-dir", str(tmp_path / "state"))
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"compactor: cannot start: cannot listen on 127.0.0.1:{port}: Address already in use. "
        "Pass another --port or stop what uses it."
    )
    assert not (tmp_path / "state").exists()  # refused before anything was made
    token = tmp_path / "token"
    token.write_text("a-token-long-enough-for-the-check\n")
    token.chmod(0o600)
    done = _refused("--host", "no-such-host.invalid", "--port", str(free_port()), "--token-file", str(token))
    assert done.returncode == 1 and "cannot serve on no-such-host.invalid" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"hunter2\n", "shorter than 16"),
        ("0123456789abcdef0123".encode("utf-16"), "is not UTF-8 text"),  # PowerShell 5's `>` writes this
        ("0123456789abcdef\u00e9xyz\n".encode(), "other than printable ASCII"),
        (b"0123456789abcdef\x07xyz\n", "other than printable ASCII"),
    ],
    ids=["short", "utf-16", "non-ascii", "control"],
)
def test_a_token_file_a_client_could_never_send_is_refused_without_quoting_it(tmp_path: Path, raw: bytes, said: str):
    path = tmp_path / "token"
    path.write_bytes(raw)
    done = subprocess.run(
        server_command("--transport", "streamable-http", "--port", str(free_port()), "--token-file", str(path)),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "hunter2" not in done.stderr and "0123456789" not in done.stderr


def test_a_token_file_with_a_byte_order_mark_serves_the_token_without_it(tmp_path: Path):
    """An editor on Windows starts a UTF-8 file with U+FEFF: it was read as part of the token,
    which no client sends, so every call was refused."""
    token = secrets.token_hex(32)
    path = tmp_path / "token"
    path.write_bytes(b"\xef\xbb\xbf" + token.encode() + b"\r\n")
    with http_server("--state-dir", str(tmp_path / "state"), token_file=path) as url:

        async def go() -> None:
            async with connect(url, token) as c:
                assert (await call(c, "store", content="stored over HTTP with the token"))["id"]

        anyio.run(go)


@pytest.mark.parametrize("given", ["--token-file", "COMPACTOR_TOKEN"])
def test_the_servers_own_token_written_into_memory_by_a_client_is_redacted(
    tmp_path: Path, token_file: tuple[Path, str], given: str
):
    """Issue 38: a client that stored the server's bearer token (a config it read, a curl line)
    left it in memory for every other client to read. Its text looks like no credential format."""
    path, _ = token_file
    token = "team-memory-" + "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(24))
    path.write_text(token + "\n")
    env = server_env()
    if given == "COMPACTOR_TOKEN":
        env["COMPACTOR_TOKEN"] = token
    state = tmp_path / "state"
    with http_server("--state-dir", str(state), token_file=path if given == "--token-file" else None, env=env) as url:

        async def go() -> list[str]:
            async with connect(url, token) as c:
                stored = await call(
                    c, "store", content=f"the server is at {url} with token {token}", summary=f"uses {token}"
                )
                got = await call(c, "get", id=stored["id"])
                hits = await call(c, "query", query="server token")
                page = await call(c, "export")
                return [json.dumps(r) for r in (stored, got, hits, page)]

        replies = anyio.run(go)
        for reply in replies:
            assert token not in reply
        assert '"server_token"' in replies[0] and "[REDACTED:server_token]" in replies[1]
    for f in state.rglob("*"):
        if f.is_file():
            assert token.encode() not in f.read_bytes(), f
