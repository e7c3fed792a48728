"""Projects sharing one state dir never see each other's items by default."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp_types import Implementation, ListRootsResult, Root

from compactor.errors import InvalidArgumentError
from compactor.mcp import build_server
from compactor.scope import project_scope, scope_from_root_uri
from compactor.store import Store
from tests.stdio_client import StdioServer


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
    assert store.scope == str(proj)


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
