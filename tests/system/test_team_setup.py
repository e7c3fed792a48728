"""docs/team.md's "Running it", copied as a team would: its SQL block, run as written by a
superuser on the suite's PostgreSQL, makes a role with no privilege beyond its own schema; its
server lines then start a server as that role, which makes its tables there and serves a
rootless client in the page's default scope; `compactor status --database` reads it back."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from tests.conftest import ROOT, server_command, server_env
from tests.system.test_http import call, connect, free_port, http_server

PAGE = (ROOT / "docs" / "team.md").read_text(encoding="utf-8")


def block(marker: str, lang: str) -> str:
    """The fenced block right after `<!-- marker: ... -->` on the page."""
    after = PAGE.split(f"<!-- {marker}:", 1)[1].split("-->", 1)[1]
    match = re.match(rf"\s*```{lang}\n(.*?)```", after, re.S)
    assert match, f"no ```{lang} block after the {marker} marker"
    return match.group(1)


@pytest.fixture
def team_sql(pg_cluster: Any) -> Iterator[str]:
    """The page's SQL, run by the superuser; its role and database are dropped afterwards."""
    sql = block("team-sql", "sql")
    [role] = re.findall(r"CREATE ROLE (\w+) LOGIN", sql)
    [db] = re.findall(r"CREATE DATABASE (\w+);", sql)
    done = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", pg_cluster.url()],
        input=sql,
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        assert done.returncode == 0, done.stderr
        yield sql
    finally:
        with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")  # names the page chose: \w+ only
            conn.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.mark.slow  # a server process and a CLI process
def test_the_page_takes_an_empty_postgresql_to_a_serving_least_privileged_server(
    pg_cluster: Any, team_sql: str, tmp_path: Path
):
    lines = block("team-server", "bash").strip().splitlines()
    [export] = [ln for ln in lines if ln.startswith("export COMPACTOR_DATABASE_URL=")]
    [token_line] = [ln for ln in lines if "openssl rand" in ln]
    [serve] = [ln for ln in lines if ln.startswith("compactor --transport")]
    # The page's URL, as this machine reaches the suite's cluster (trust auth: the password is not asked).
    url = export.split("=", 1)[1].replace("@db.example.com/", f"@127.0.0.1:{pg_cluster.port}/")
    role = url.split("//", 1)[1].split(":", 1)[0]
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["bash", "-c", token_line], env={**os.environ, "HOME": str(home)}, check=True, timeout=30)
    token = (home / ".config" / "compactor-token").read_text().strip()
    assert len(token) == 64

    argv = [a.replace("~", str(home), 1) if a.startswith("~/") else a for a in shlex.split(serve)[1:]]
    argv[argv.index("--port") + 1] = str(port := free_port())
    default_scope = argv[argv.index("--default-scope") + 1]
    env = {**server_env(), "COMPACTOR_DATABASE_URL": url}
    with http_server(*argv, env=env, argv=[]) as mcp_url:
        assert mcp_url.endswith(f":{port}/mcp")

        async def drive() -> None:
            async with connect(mcp_url, token) as c:
                assert (await call(c, "status"))["scope"] == default_scope
                await call(c, "store", content="the team decided: staging deploys need two approvals")

        anyio.run(drive)

    status = subprocess.run(
        server_command("status", "--database", url, "--scope", "all"),
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "1 active (0 pinned)" in status.stdout

    # What the role is, and where its tables went: its own schema, nowhere else.
    with psycopg.connect(pg_cluster.url(url.rsplit("/", 1)[1]), autocommit=True) as conn:
        flags = conn.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolbypassrls FROM pg_roles WHERE rolname = %s", (role,)
        ).fetchone()
        assert flags == (False, False, False, False)
        tables = conn.execute(
            "SELECT DISTINCT schemaname, tableowner FROM pg_tables WHERE tablename LIKE 'compactor%%'"
        ).fetchall()
        assert tables == [(role, role)]
    with psycopg.connect(url) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("CREATE TABLE public.not_ours (x int)")
