"""Who may see what on a team server (issue 39, points 7 and 8): a `--tokens-file` of people,
each with projects and read or write access, over the SDK's streamable HTTP client against a
real server process, on the suite's PostgreSQL and on a state dir. The access matrix:

    person  access  projects          may read              may change
    alice   write   projA             projA (+ global)      projA
    bob     read    projA, projB      projA, projB          nothing
    carol   write   *                 everything            everything

Another project's item is "not found", worded as for an id that does not exist.
"""

from __future__ import annotations

import hashlib
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client

from tests.conftest import server_command, server_env
from tests.system.test_http import call, connect, free_port
from tests.system.test_http_edges import ACCEPT, INIT

pytestmark = pytest.mark.slow

PEOPLE = {"alice": ("write", ["projA"]), "bob": ("read", ["projA", "projB"]), "carol": ("write", ["*"])}
WRITE_TOOLS = ("store", "bulk_store", "update", "pin", "unpin", "restore", "forget", "dissolve", "compact", "configure")


def tokens_toml(tokens: dict[str, str], only: tuple[str, ...] | None = None) -> str:
    out = []
    for name, (access, projects) in PEOPLE.items():
        if only is not None and name not in only:
            continue
        digest = hashlib.sha256(tokens[name].encode()).hexdigest()
        listed = ", ".join(f'"{p}"' for p in projects)
        out.append(
            f'[[tokens]]\nname = "{name}"\ntoken_sha256 = "{digest}"\nprojects = [{listed}]\naccess = "{access}"\n'
        )
    return "\n".join(out)


@contextmanager
def team_server(memory: list[str], tokens_file: Path, *extra: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    argv = server_command(
        "--transport", "streamable-http", "--port", str(port), "--tokens-file", str(tokens_file), *memory, *extra
    )
    proc = subprocess.Popen(argv, env=server_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        line = ""
        while "serving MCP at" not in line:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            line = proc.stderr.readline()
        assert "a bearer token is required" in line
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
        assert proc.returncode == 0


async def refused(c: Client, tool: str, **args: Any) -> str:
    with anyio.fail_after(30):
        res = await c.call_tool(tool, args)
    assert res.is_error, (tool, args, res.structured_content)
    return " ".join(getattr(block, "text", "") for block in res.content)


def not_found(text: str, item_id: str) -> bool:
    return f"No item with id {item_id!r}." in text


@pytest.fixture(params=["database", "state_dir"])
def memory(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    if request.param == "database":
        return ["--database", request.getfixturevalue("pg_url")]
    return ["--state-dir", str(tmp_path / "state")]


def test_each_person_reaches_only_their_projects_and_a_reader_changes_nothing(memory: list[str], tmp_path: Path):
    tokens = {name: secrets.token_hex(32) for name in PEOPLE}
    path = tmp_path / "tokens.toml"
    path.write_text(tokens_toml(tokens))
    ids: dict[str, str] = {}

    async def scenario(url: str) -> None:
        async with connect(url, tokens["carol"]) as carol:
            ids["B"] = (await call(carol, "store", content="projB: the deploy key rotates monthly", scope="projB"))[
                "id"
            ]
            ids["X"] = (await call(carol, "store", content="projX: the deploy uses blue green", scope="projX"))["id"]
            ids["G"] = (await call(carol, "store", content="global: deploy on Tuesdays only", scope="global"))["id"]
        async with connect(url, tokens["alice"]) as alice:
            # Her session works in her only project: no scope needed.
            ids["A"] = (await call(alice, "store", content="projA: the deploy script is deploy.sh"))["id"]
            assert "alice's token may not use project 'projB'" in await refused(
                alice, "store", content="x", scope="projB"
            )
            await refused(alice, "store", content="x", scope="global")
            for foreign in ("B", "X"):
                assert not_found(await refused(alice, "get", id=ids[foreign]), ids[foreign])
                assert not_found(await refused(alice, "pin", id=ids[foreign]), ids[foreign])
                assert not_found(await refused(alice, "forget", id=ids[foreign]), ids[foreign])
                assert not_found(await refused(alice, "tree", root=ids[foreign]), ids[foreign])
            assert not_found(await refused(alice, "get", id="nosuchid00"), "nosuchid00")
            seen = await visible(alice)
            assert seen == {ids["A"], ids["G"]}
            await refused(alice, "query", query="deploy", scope="projB")
            await call(alice, "pin", id=ids["A"])
            await call(alice, "update", id=ids["A"], summary="deploy.sh deploys")
        async with connect(url, tokens["bob"]) as bob:
            # Two projects and a session in neither: each call names its scope.
            assert "bob's token may not use project" in await refused(bob, "recall")
            assert (await call(bob, "get", id=ids["A"]))["id"] == ids["A"]
            assert (await call(bob, "get", id=ids["B"]))["id"] == ids["B"]
            assert not_found(await refused(bob, "get", id=ids["X"]), ids["X"])
            assert await visible(bob) == {ids["A"], ids["B"], ids["G"]}
            await call(bob, "recall", scope="projB")
            for tool, args in write_calls(ids["A"]).items():
                assert "bob's token is read-only" in await refused(bob, tool, **args), tool
        async with connect(url, tokens["carol"]) as carol:
            assert await visible(carol) == set(ids.values())
            assert (await call(carol, "get", id=ids["A"]))["pinned"] is True  # bob's unpin refused
            await call(carol, "unpin", id=ids["A"])

    with team_server(memory, path) as (url, _):
        anyio.run(scenario, url)
    shown = show(memory, ids["A"])
    assert "stored by      alice" in shown
    assert "changed by     carol" in shown


def write_calls(item_id: str) -> dict[str, dict[str, Any]]:
    calls: dict[str, dict[str, Any]] = {
        "store": {"content": "bob was here", "scope": "projA"},
        "bulk_store": {"items": [{"content": "bob was here"}]},
        "update": {"id": item_id, "summary": "bob's"},
        "pin": {"id": item_id},
        "unpin": {"id": item_id},
        "restore": {"id": item_id},
        "forget": {"id": item_id},
        "dissolve": {"id": item_id},
        "compact": {},
        "configure": {"token_budget": 50_000},
    }
    assert set(calls) == set(WRITE_TOOLS)
    return calls


async def visible(c: Client) -> set[str]:
    """Every id one person can find by query, list, recall, export and tree with scope='all'."""
    listed = {i["id"] for i in (await call(c, "list", tier="all", scope="all", limit=100))["items"]}
    found = {i["id"] for i in (await call(c, "query", query="deploy", scope="all", limit=50))["items"]}
    recalled = {i["id"] for i in (await call(c, "recall", query="deploy", scope="all"))["items"]}
    exported = {i["id"] for i in (await call(c, "export", format="json", scope="all"))["items"]}
    assert found <= listed and recalled <= listed and exported == listed
    return listed


def show(memory: list[str], item_id: str) -> str:
    out = subprocess.run(
        server_command("show", item_id, *memory), env=server_env(), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_journal_names_who_made_each_change(tmp_path: Path):
    tokens = {name: secrets.token_hex(32) for name in PEOPLE}
    path = tmp_path / "tokens.toml"
    path.write_text(tokens_toml(tokens))
    state = tmp_path / "state"

    async def scenario(url: str) -> str:
        async with connect(url, tokens["alice"]) as alice:
            item_id: str = (await call(alice, "store", content="projA: ninja builds it"))["id"]
        async with connect(url, tokens["carol"]) as carol:
            await call(carol, "pin", id=item_id)
        return item_id

    with team_server(["--state-dir", str(state), "--snapshot-interval", "3600"], path) as (url, _):
        item_id = anyio.run(scenario, url)
        shown = show(["--state-dir", str(state)], item_id)  # the journal, before any snapshot
    assert "stored (put) by alice" in shown
    assert "changed pinned=True by carol" in shown


def test_a_token_removed_from_the_file_opens_nothing_after_sighup(pg_url: str, tmp_path: Path):
    tokens = {name: secrets.token_hex(32) for name in PEOPLE}
    path = tmp_path / "tokens.toml"
    path.write_text(tokens_toml(tokens))

    def works(url: str, name: str) -> bool:
        """Whether the server takes `name`'s token (an initialize answered, not a 401)."""
        headers = {**ACCEPT, "Authorization": f"Bearer {tokens[name]}"}
        status = httpx2.post(url, json=INIT, headers=headers, timeout=30).status_code
        assert status in (200, 401), status
        return status == 200

    with team_server(["--database", pg_url], path) as (url, proc):
        assert works(url, "alice")
        path.write_text(tokens_toml(tokens, only=("bob", "carol")))
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while works(url, "alice"):
            assert time.monotonic() < deadline, "alice's token still opens the server after SIGHUP"
            time.sleep(0.2)
        assert works(url, "carol")


def test_the_servers_tokens_written_into_content_are_redacted(pg_url: str, tmp_path: Path):
    tokens = {name: secrets.token_hex(32) for name in PEOPLE}
    path = tmp_path / "tokens.toml"
    path.write_text(tokens_toml(tokens))
    shared = secrets.token_urlsafe(32)
    shared_file = tmp_path / "token"
    shared_file.write_text(shared)

    async def scenario(url: str) -> None:
        async with connect(url, tokens["carol"]) as carol:
            content = (
                f"curl -H 'Authorization: Bearer {tokens['alice']}' ...\nexport COMPACTOR_TOKEN={shared}\n"
                f"bob uses {tokens['bob']}."
            )
            res = await call(carol, "store", content=content, summary=f"carol's is {tokens['carol']}")
            item = await call(carol, "get", id=res["id"])
            assert "server_token" in {r["kind"] for r in res["redacted"]}
            for token in (*tokens.values(), shared):
                assert token not in item["content"] and token not in (item["summary"] or "")
            assert item["content"].count("[REDACTED:server_token]") == 3

    with team_server(["--database", pg_url, "--token-file", str(shared_file)], path) as (url, _):
        anyio.run(scenario, url)
