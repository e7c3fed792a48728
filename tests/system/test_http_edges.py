"""The HTTP transport's edges (issue 39, points 9-12 and 14), against real server processes and
the suite's PostgreSQL, over the SDK's streamable HTTP client: behind a proxy that forwards its
own Host header, IPv6 loopback with and without a token, the Host/Origin check on every loopback
address, the body limit said in a JSON-RPC error, and what the server says when it starts."""

from __future__ import annotations

import secrets
import subprocess
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

from tests.conftest import server_command, server_env
from tests.system.test_http import call, free_port

pytestmark = pytest.mark.slow

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@contextmanager
def served(*args: str, host: str = "127.0.0.1") -> Iterator[tuple[str, str]]:
    """A server on `host`; yields its base URL (http://HOST:PORT) and the line it printed on
    start, once it printed it (it then listens)."""
    port = free_port()
    argv = server_command("--transport", "streamable-http", "--host", host, "--port", str(port), *args)
    proc = subprocess.Popen(argv, env=server_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        line = ""
        while "serving MCP at" not in line:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            line = proc.stderr.readline()
        bare = host.strip("[]")
        yield (f"http://[{bare}]:{port}" if ":" in bare else f"http://{bare}:{port}"), line
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
        assert proc.returncode == 0


@asynccontextmanager
async def client(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    async with (
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url + "/mcp", http_client=http), mode="legacy") as c,
    ):
        yield c


def token_file(tmp_path: Path) -> tuple[Path, str]:
    token = secrets.token_hex(32)
    path = tmp_path / "token"
    path.write_text(token)
    return path, token


def test_behind_a_proxy_that_forwards_its_host_the_tools_work(pg_url: str, tmp_path: Path):
    # The README's `caddy reverse-proxy --from memory.example.com --to 127.0.0.1:8765` forwards
    # "Host: memory.example.com" and the browser-style Origin of that name.
    path, token = token_file(tmp_path)
    args = ("--database", pg_url, "--token-file", str(path), "--allowed-host", "memory.example.com")
    with served(*args) as (url, _):
        proxied = {"Authorization": f"Bearer {token}", "Host": "memory.example.com"}
        reply = httpx2.post(
            url + "/mcp", json=INIT, headers={**ACCEPT, **proxied, "Origin": "https://memory.example.com"}
        )
        assert reply.status_code == 200, reply.text
        for host in ("attacker.example", "memory.example.com.attacker.example"):
            reply = httpx2.post(url + "/mcp", json=INIT, headers={**ACCEPT, **proxied, "Host": host})
            assert reply.status_code == 421, host

        async def drive() -> None:
            async with client(url, proxied) as c:
                stored = await call(c, "store", content="proxied: the deploy runs on Fridays")
                assert (await call(c, "get", id=stored["id"]))["content"].startswith("proxied")

        anyio.run(drive)
    with served("--database", pg_url, "--token-file", str(path), "--public-url", "https://mem.example.org/mcp") as (
        url,
        line,
    ):
        headers = {**ACCEPT, "Authorization": f"Bearer {token}", "Host": "mem.example.org"}
        assert httpx2.post(url + "/mcp", json=INIT, headers=headers).status_code == 200
        assert "public URL https://mem.example.org/mcp" in line


@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_ipv6_loopback_serves_with_and_without_a_token(pg_url: str, tmp_path: Path, host: str):
    path, token = token_file(tmp_path)
    for args, headers in (((), None), (("--token-file", str(path)), {"Authorization": f"Bearer {token}"})):
        with served("--database", pg_url, *args, host=host) as (url, line):
            assert url.startswith("http://[::1]:") and "http://[::1]:" in line

            async def drive() -> None:
                async with client(url, headers) as c:  # noqa: B023 - used at once
                    await call(c, "store", content=f"over IPv6 {args!r}")  # noqa: B023

            anyio.run(drive)


def test_every_loopback_address_checks_host_and_origin(pg_url: str):
    with served("--database", pg_url, host="127.0.0.2") as (url, _):
        evil = {**ACCEPT, "Host": "attacker.example", "Origin": "http://attacker.example"}
        assert httpx2.post(url + "/mcp", json=INIT, headers=evil).status_code == 421
        own = {**ACCEPT, "Origin": "http://attacker.example"}
        assert httpx2.post(url + "/mcp", json=INIT, headers=own).status_code == 403
        assert httpx2.post(url + "/mcp", json=INIT, headers=ACCEPT).status_code == 200


def test_a_body_over_the_limit_gets_an_error_that_names_it(pg_url: str):
    with served("--database", pg_url) as (url, _):

        async def drive() -> Any:
            async with client(url) as c:
                items = [{"content": f"{k} " + "x" * 990_000} for k in range(5)]
                with pytest.raises(Exception, match=r"over the 4 MiB limit of compactor's HTTP transport"):
                    await c.call_tool("bulk_store", {"items": items})
                return await call(c, "status")

        status = anyio.run(drive)
        assert status["active_items"] == 0 and status["archived_items"] == 0


def test_the_server_says_where_it_listens_what_memory_and_whether_a_token_is_needed(pg_url: str, tmp_path: Path):
    path, _ = token_file(tmp_path)
    secret_url = pg_url.replace("compactor@", "compactor:hunter2@")
    with served("--database", secret_url, "--token-file", str(path)) as (url, line):
        assert f"serving MCP at {url}/mcp" in line
        assert "database postgresql://compactor@127.0.0.1:" in line and "hunter2" not in line
        assert "a bearer token is required" in line
    with served("--database", pg_url) as (url, line):
        assert "no token required (loopback only)" in line
