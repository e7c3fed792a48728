"""A database told not to sync: a commit PostgreSQL acknowledged with `synchronous_commit=off`
(or on a server with `fsync=off`) can be lost on a crash of the database host, so compactor
reads both at start and says so, once on stderr and in `status` (the tool's text and its
`persistence.durability_warning`, and `compactor status --database`)."""

from __future__ import annotations

import json
import logging
import subprocess

import anyio
import psycopg
import pytest
from mcp import Client

from compactor.mcp import build_server
from compactor.store import Store
from tests.conftest import server_command, server_env
from tests.support.stdio_client import StdioServer

ASYNC_COMMIT = "?options=-c%20synchronous_commit%3Doff"  # this session only
WARNING = "runs with synchronous_commit=off: a write compactor acknowledged can be lost"


def test_a_session_with_synchronous_commit_off_is_warned_of_once_and_in_status(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = pg_url + ASYNC_COMMIT
    with caplog.at_level(logging.WARNING, logger="compactor"):
        store = Store(database=url)
    try:
        store.store("acknowledged, but only in the database host's memory for a moment")
        store.status()
        assert sum(WARNING in m for m in caplog.messages) == 1
        assert "fsync=off" not in store.status().persistence["durability_warning"]

        async def status() -> tuple[str, dict[str, object]]:
            async with Client(build_server(store), mode="legacy") as client:
                res = await client.call_tool("status", {})
                assert not res.is_error and res.structured_content is not None
                text = "\n".join(getattr(part, "text", "") for part in res.content)
                return text, res.structured_content["persistence"]

        text, persistence = anyio.run(status)
        assert WARNING in str(persistence["durability_warning"])
        assert "Warning: database" in text and "synchronous_commit = on" in text
    finally:
        store.close()


def test_a_database_that_syncs_says_nothing(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="compactor"):
        store = Store(database=pg_url)
    try:
        assert store.status().persistence["durability_warning"] is None
        assert not [m for m in caplog.messages if "synchronous_commit" in m]
    finally:
        store.close()


@pytest.mark.slow
def test_a_database_set_to_commit_asynchronously_is_warned_of_over_stdio_and_in_the_cli(pg_url: str) -> None:
    """Set on the database (ALTER DATABASE), not in the URL: every session of it is warned."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {pg_url.rsplit('/', 1)[1]} SET synchronous_commit = off")
    server = StdioServer("--database", pg_url)
    try:
        persistence = server.ok("status")["persistence"]
        assert WARNING in persistence["durability_warning"]
        server.ok("store", content="stored while the database commits asynchronously")
        server.close_stdin()
        assert server.wait() == 0
        assert server.proc.stderr is not None
        assert server.proc.stderr.read().decode().count(WARNING) == 1
    finally:
        server.stop()

    text = subprocess.run(
        server_command("status", "--database", pg_url), env=server_env(), capture_output=True, text=True, timeout=60
    )
    assert text.returncode == 0, text.stderr
    assert "Warning: database" in text.stdout and WARNING in text.stdout
    assert WARNING in text.stderr
    as_json = subprocess.run(
        server_command("status", "--database", pg_url, "--json"),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert as_json.returncode == 0, as_json.stderr
    assert WARNING in json.loads(as_json.stdout)["durability_warning"]
