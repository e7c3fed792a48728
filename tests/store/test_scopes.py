"""Projects sharing one state dir never see each other's items by default."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import Implementation, ListRootsResult, Root

from compactor.errors import InvalidArgumentError
from compactor.mcp import build_server
from compactor.scope import project_scope, scope_from_root_uri
from compactor.store import Store
from tests.conftest import server_command, server_env
from tests.support.stdio_client import StdioServer


def test_two_projects_share_a_dir_but_not_their_items(state_dir: Path):
    a = Store(state_dir=state_dir, scope="/work/alpha")
    b = Store(state_dir=state_dir, scope="/work/beta")
    in_a = a.store("alpha uses postgres for billing").item.id
    in_b = b.store("beta uses postgres for search").item.id
    shared = a.store("the user prefers tabs over spaces, postgres fan", scope="global").item.id
    assert {h.item.id for h in a.query("postgres")} == {in_a, shared}
    assert {h.item.id for h in b.query("postgres")} == {in_b, shared}
    assert {it.id for it in b.list_items(tier="all").items} == {in_b, shared}
    assert {it.id for it, _ in b.recall().items} | {it.id for it in b.recall().pinned} == {in_b, shared}
    assert {h.item.id for h in b.query("postgres", scope="all")} == {in_a, in_b, shared}
    assert {it.id for it in b.export(scope="/work/alpha").items} == {in_a, shared}
    # Items keep their scope across restarts.
    a.close()
    b.close()
    again = Store(state_dir=state_dir, scope="/work/beta")
    assert {h.item.id for h in again.query("postgres")} == {in_b, shared}


def test_summaries_never_mix_scopes(clock):
    s = Store(clock=clock, scope="/p/one")
    s.configure(token_budget=2_000, auto_compact=False)
    for i in range(15):
        s.store(f"one note {i} " + "alpha " * 30)
    for i in range(15):
        s.store(f"two note {i} " + "beta " * 30, scope="/p/two")
    s.compact(0.0)
    for item_id in s.ids():
        node = s.get(item_id)
        if node.depth:
            assert len({s.get(c).scope for c in node.children}) == 1
            assert node.scope == s.get(node.children[0]).scope


def test_scope_validation(store: Store):
    with pytest.raises(InvalidArgumentError, match="for reading"):
        store.store("x", scope="all")
    with pytest.raises(InvalidArgumentError):
        store.query("x", scope="bad\nscope")


def test_project_scope_is_the_git_root(tmp_path: Path):
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "src" / "pkg").mkdir(parents=True)
    assert project_scope(tmp_path / "repo" / "src" / "pkg") == str((tmp_path / "repo").resolve())
    assert scope_from_root_uri((tmp_path / "repo" / "src").as_uri()) == str(tmp_path / "repo")
    assert scope_from_root_uri("https://example.com/x") is None


def test_scope_from_client_roots(tmp_path: Path):
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    store = Store(scope="/somewhere/else")

    async def roots(_ctx: object) -> ListRootsResult:
        return ListRootsResult(roots=[Root(uri=proj.as_uri(), name="proj")])  # type: ignore[arg-type]

    async def main() -> None:
        with anyio.fail_after(20):
            async with Client(
                build_server(store),
                mode="legacy",
                list_roots_callback=roots,
                client_info=Implementation(name="t", version="1"),
            ) as c:
                res = await c.call_tool("store", {"content": "rooted"})
                assert not res.is_error
                st = await c.call_tool("status", {})
                assert st.structured_content is not None
                assert st.structured_content["scope"] == str(proj)

    anyio.run(main)
    assert store.get(store.ids()[0]).scope == str(proj)
    # The session's scope is its own: the store's, which other sessions start from, is unchanged.
    assert store.scope == "/somewhere/else"


@pytest.mark.slow
def test_stdio_servers_in_two_projects(tmp_path: Path, state_dir: Path):
    for name in ("one", "two"):
        (tmp_path / name / ".git").mkdir(parents=True)
    with (
        StdioServer("--state-dir", str(state_dir), cwd=tmp_path / "one") as one,
        StdioServer("--state-dir", str(state_dir), cwd=tmp_path / "two") as two,
    ):
        a = one.ok("store", content="shared word zanzibar in one")["id"]
        b = two.ok("store", content="shared word zanzibar in two")["id"]
        assert [i["id"] for i in one.ok("query", query="zanzibar")["items"]] == [a]
        assert [i["id"] for i in two.ok("query", query="zanzibar")["items"]] == [b]
        assert {i["id"] for i in two.ok("query", query="zanzibar", scope="all")["items"]} == {a, b}


def test_each_in_process_client_keeps_its_own_scope_and_is_asked_for_roots_once(tmp_path: Path):
    """The SDK makes a new session object for every request: keyed by it, the roots were asked
    before every call, and a client without roots ran in the scope the last rooted client set."""
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    store = Store(scope="/the/server/project")
    asked: list[int] = []

    async def roots(_ctx: object) -> ListRootsResult:
        asked.append(1)
        return ListRootsResult(roots=[Root(uri=proj.as_uri(), name="proj")])  # type: ignore[arg-type]

    async def main() -> None:
        server = build_server(store)
        with anyio.fail_after(20):
            async with (
                Client(server, mode="legacy", list_roots_callback=roots) as rooted,
                Client(server, mode="legacy") as plain,
            ):
                ids = {}
                for name, client in (("rooted", rooted), ("plain", plain)) * 2:
                    res = await client.call_tool("store", {"content": f"{name} note about the yak shave"})
                    assert res.structured_content is not None
                    ids.setdefault(name, []).append(res.structured_content["id"])
                for client, scope in ((rooted, str(proj)), (plain, "/the/server/project")):
                    st = await client.call_tool("status", {})
                    assert st.structured_content is not None and st.structured_content["scope"] == scope
                hits = await plain.call_tool("query", {"query": "yak shave"})
                assert hits.structured_content is not None
                assert {h["id"] for h in hits.structured_content["items"]} == set(ids["plain"])

        assert {store.get(i).scope for i in ids["rooted"]} == {str(proj)}
        assert {store.get(i).scope for i in ids["plain"]} == {"/the/server/project"}

    anyio.run(main)
    assert len(asked) == 1


@pytest.mark.slow
@pytest.mark.parametrize("sharing", [(), ("--no-share",)], ids=["shared host", "own process"])
def test_a_stdio_client_is_asked_for_its_roots_once(tmp_path: Path, state_dir: Path, sharing: tuple[str, ...]):
    """Over real stdio: the first tool call asks the client for its roots, later calls do not
    wait for that round trip again, and every call runs in the root's project."""
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    proc = subprocess.Popen(
        server_command("--state-dir", str(state_dir), *sharing),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(),
        cwd=tmp_path,
    )
    assert proc.stdin is not None and proc.stdout is not None
    asked = 0

    def send(message: dict[str, object]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    def reply(request_id: int) -> dict[str, Any]:
        nonlocal asked
        while True:
            assert proc.stdout is not None
            message = json.loads(proc.stdout.readline())
            if message.get("method") == "roots/list":
                asked += 1
                send({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": [{"uri": proj.as_uri()}]}})
            elif message.get("id") == request_id:
                return message

    try:
        capabilities = {"roots": {"listChanged": False}}
        info = {"name": "rooted", "version": "1"}
        params = {"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": info}
        send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
        reply(0)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for n in range(1, 5):
            call = {"name": "store", "arguments": {"content": f"note {n}"}} if n < 4 else {"name": "status"}
            send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": call})
            result = reply(n)["result"]
            assert not result.get("isError"), result
        assert result["structuredContent"]["scope"] == str(proj)
        assert asked == 1
    finally:
        proc.stdin.close()
        code = proc.wait(30)
        proc.stdout.close()
        assert proc.stderr is not None
        errors = proc.stderr.read().decode()
        proc.stderr.close()
    assert code == 0, errors[-2000:]


def test_a_root_no_project_can_be_made_of_is_passed_over(tmp_path: Path):
    """A root whose path is longer than the system allows raised ENAMETOOLONG while its git
    root was looked for, and one with a NUL byte ValueError: the client's first call failed
    with that error. A root whose parents cannot be searched is its own scope; the server
    passes over one that cannot be a scope (not one line, longer than a scope may be)."""
    long_root = "file:///" + "a/" * 3000 + "proj"  # longer than a scope may be, too
    assert scope_from_root_uri(long_root) == "/" + "a/" * 3000 + "proj"
    deep = "file:///" + "a/" * 2000 + "proj"  # a scope, but longer than a path may be
    assert scope_from_root_uri(deep) == "/" + "a/" * 2000 + "proj"
    assert scope_from_root_uri("file:///tmp/a%00b") is None
    assert scope_from_root_uri("file:///tmp/a%0Ab") is None
    store = Store(scope="/the/server/project")

    async def roots(_ctx: object) -> ListRootsResult:
        return ListRootsResult(  # type: ignore[arg-type]
            roots=[
                Root(uri="file:///tmp/a%00b", name="nul"),
                Root(uri=long_root, name="long"),
                Root(uri=deep, name="deep"),
            ]
        )

    async def main() -> None:
        with anyio.fail_after(20):
            async with Client(build_server(store), mode="legacy", list_roots_callback=roots) as c:
                res = await c.call_tool("store", {"content": "stored by a client with odd roots"})
                assert not res.is_error, res.content
                st = await c.call_tool("status", {})
                assert st.structured_content["scope"] == "/" + "a/" * 2000 + "proj"  # type: ignore[index]

    anyio.run(main)


@pytest.mark.slow
def test_a_server_started_in_a_deleted_directory_serves_that_project(tmp_path: Path, state_dir: Path):
    """Path.cwd() raises there (a removed worktree): the server died with a traceback, and the
    CLI said "No such file or directory". The scope is where the shell says it was; a relative
    --state-dir, which cannot be found, is refused in one sentence."""
    import shlex
    import subprocess

    from tests.conftest import ROOT, server_command, server_env

    gone = tmp_path / "gone"
    gone.mkdir()

    def in_gone(*args: str) -> str:
        command = " ".join(shlex.quote(a) for a in server_command(*args))
        return f"cd {shlex.quote(str(gone))} && rmdir {shlex.quote(str(gone))} && exec {command}"

    # PYTHONPATH without an empty entry: Python cannot start at all with one (the working
    # directory) once that directory is gone.
    env = {**server_env(), "PWD": str(gone), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        ["sh", "-c", in_gone("--state-dir", str(state_dir))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    with StdioServer(process=proc) as srv:
        assert srv.ok("status")["scope"] == str(gone)
        item = srv.ok("store", content="stored from a deleted directory")["id"]
        assert srv.ok("get", id=item)["content"] == "stored from a deleted directory"
    (gone).mkdir()
    done = subprocess.run(
        ["sh", "-c", in_gone("status", "--state-dir", "relative/state")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "compactor status: --state-dir relative/state is relative and the working directory no longer exists. "
        "Pass an absolute path."
    )


def _compacted_in_a(a: Store) -> list[str]:
    """Summary nodes made over project A's items (a budget that forces them)."""
    a.configure(token_budget=2_000, auto_compact=False)
    for i in range(15):
        a.store(f"alphasecret note {i} " + "alpha " * 30)
    a.compact(0.5)  # leaves an active node of stand-in text, which recall asks to write
    return [i for i in a.ids() if a.get(i).depth]


def test_another_projects_summaries_are_not_listed(state_dir: Path):
    a = Store(state_dir=state_dir, scope="projA")
    b = Store(state_dir=state_dir, scope="projB")
    mine = b.store("beta keeps its own notes").item.id
    nodes = _compacted_in_a(a)
    assert nodes and a.roots(scope=None) and a.needs_text_blocks()
    assert b.roots(scope=None) == [] and b.needs_text_blocks() == [] and b.dag_shape(scope=None) == {}
    assert "alphasecret" not in b.recall().text and not set(nodes) & set(b.recall().needs_text)
    assert b.tree(scope=None).startswith("No summary nodes yet")
    assert {r.id for r in b.roots()} == {r.id for r in a.roots(scope=None)}  # by default: every project
    assert mine in b.recall().text


async def _replies_of_b(state_dir: Path) -> dict[str, str]:
    a = Store(state_dir=state_dir, scope="projA")
    b = Store(state_dir=state_dir, scope="projB")
    b.store("beta keeps its own notes")
    _compacted_in_a(a)
    out: dict[str, str] = {}
    async with Client(build_server(b), mode="legacy") as c:
        for tool in ("recall", "tree", "compact"):
            res = await c.call_tool(tool, {})
            assert not res.is_error
            out[tool] = res.content[0].text + json.dumps(res.structured_content)  # type: ignore[union-attr]
    return out


def test_another_projects_summaries_are_not_in_the_replies_over_the_sdk(state_dir: Path):
    replies = anyio.run(_replies_of_b, state_dir)
    for tool, text in replies.items():
        assert "alphasecret" not in text, tool
    assert "No summary nodes yet" in replies["tree"]


@pytest.mark.slow
def test_another_projects_summaries_are_not_in_the_replies_over_stdio_or_the_cli(state_dir: Path):
    args = ("--state-dir", str(state_dir), "--no-share")
    with StdioServer(*args, "--scope", "projA") as a, StdioServer(*args, "--scope", "projB") as b:
        b.ok("store", content="beta keeps its own notes")
        a.ok("configure", token_budget=2_000, auto_compact=False)
        for i in range(15):
            a.ok("store", content=f"alphasecret note {i} " + "alpha " * 30)
        a.ok("compact", target_usage=0.5)
        assert a.ok("tree")["roots"]
        for tool in ("recall", "tree"):
            reply = b.call(tool)
            assert "alphasecret" not in json.dumps(reply), tool
        assert b.ok("tree")["roots"] == []
    cli = subprocess.run(
        server_command("tree", "--state-dir", str(state_dir), "--scope", "projB"),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0 and "alphasecret" not in cli.stdout and "No summary nodes" in cli.stdout


@pytest.mark.slow
def test_two_git_repositories_through_the_shared_host_do_not_see_each_others_summaries(tmp_path: Path):
    state = tmp_path / "state"
    repos = []
    for name in ("alpha", "beta"):
        repo = tmp_path / name
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        repos.append(repo)
    with (
        StdioServer("--state-dir", str(state), cwd=repos[0]) as a,
        StdioServer("--state-dir", str(state), cwd=repos[1]) as b,
    ):
        b.ok("store", content="beta keeps its own notes")
        a.ok("configure", token_budget=2_000, auto_compact=False)
        for i in range(15):
            a.ok("store", content=f"alphasecret note {i} " + "alpha " * 30)
        a.ok("compact", target_usage=0.5)
        assert a.ok("tree")["roots"] and "alphasecret" in json.dumps(a.call("recall"))
        for tool in ("recall", "tree"):
            assert "alphasecret" not in json.dumps(b.call(tool)), tool
