"""`--default-scope` (env COMPACTOR_DEFAULT_SCOPE): the project of a client that sends no roots,
chosen by whoever runs the server instead of its working directory (`/app` in the image). A
client that sends roots still gets its own project. Real server processes, over stdio (shared
and not) and streamable HTTP."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import Implementation, ListRootsResult, Root

from tests.conftest import server_command, server_env
from tests.support.stdio_client import StdioServer
from tests.system.test_http import call, http_server

pytestmark = pytest.mark.slow  # server processes


@pytest.mark.parametrize("share", [True, False])
def test_a_rootless_stdio_client_lands_in_the_default_scope(tmp_path: Path, share: bool):
    where = tmp_path / "elsewhere"
    where.mkdir()
    state = str(tmp_path / "state")
    extra = [] if share else ["--no-share"]
    with StdioServer("--state-dir", state, "--default-scope", "team-x", *extra, cwd=where) as srv:
        assert srv.ok("status")["scope"] == "team-x"
        stored = srv.ok("store", content="the deploy runs from the release branch")["id"]
    env = {**server_env(), "COMPACTOR_DEFAULT_SCOPE": "team-x"}
    with StdioServer("--state-dir", state, *extra, cwd=where, env=env) as srv:
        assert srv.ok("status")["scope"] == "team-x"
        assert [i["id"] for i in srv.ok("list")["items"]] == [stored]
    with StdioServer("--state-dir", state, *extra, cwd=where) as srv:  # without it: the working directory
        assert srv.ok("status")["scope"] == str(where.resolve())
        assert srv.ok("list")["items"] == []


def test_over_http_a_rootless_client_lands_in_the_default_scope_and_roots_still_choose(tmp_path: Path):
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)

    async def roots(_ctx: object) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=project.as_uri(), name="repo")])  # type: ignore[arg-type]

    def client(url: str, http: Any, **kw: Any) -> Client:
        info = Implementation(name="pytest-http", version="1")
        return Client(streamable_http_client(url, http_client=http), mode="legacy", client_info=info, **kw)

    with http_server("--state-dir", str(tmp_path / "state"), "--default-scope", "team-x") as url:

        async def drive() -> None:
            async with create_mcp_http_client() as http:
                async with client(url, http) as rootless:
                    assert (await call(rootless, "status"))["scope"] == "team-x"
                async with client(url, http, list_roots_callback=roots) as rooted:
                    assert (await call(rooted, "status"))["scope"] == str(project)

        anyio.run(drive)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("", "expected a project name on one line"),
        ("two\nlines", "expected a project name on one line"),
        ("all", "'all' is for reading"),
        ("x" * 4097, "must be at most 4,096 characters"),
    ],
)
def test_a_default_scope_that_names_no_project_is_refused_in_one_sentence(tmp_path: Path, value: str, said: str):
    done = subprocess.run(
        server_command("--state-dir", str(tmp_path / "state"), "--default-scope", value),
        input="",
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1].startswith("compactor: error: argument --default-scope: " + said)
    assert not (tmp_path / "state").exists()
