"""Issue 13 points 2-4 through the real protocol and the CLI: limits never delete, every call
ends within budget, summary levels never mix."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from compactor import cli
from compactor.store import Store, StoreInput
from tests.mcp.test_server import call, connect
from tests.support.stdio_client import StdioServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def words(seed: int, n: int = 40) -> str:
    rng = random.Random(seed)
    return f"topic{seed % 7} " + " ".join(f"w{rng.randrange(1_000_000)}" for _ in range(n))


def mixed_nodes(store: Store) -> list[str]:
    """Nodes with a child whose depth is not the node's minus one."""
    present = set(store.ids())
    bad = []
    for item_id in present:
        node = store.get(item_id)
        if node.depth and any(store.get(c).depth != node.depth - 1 for c in node.children if c in present):
            bad.append(item_id)
    return bad


def within(budget: dict[str, Any]) -> bool:
    return bool(budget["tokens_used"] <= budget["token_budget"])


# --- point 2: no setting deletes -------------------------------------------------------------
async def test_configure_limits_delete_nothing(store: Store):
    async with connect(store) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert tools["configure"].annotations.destructive_hint is False  # type: ignore[union-attr]
        assert tools["forget"].annotations.destructive_hint is True  # type: ignore[union-attr]
        await call(c, "configure", token_budget=5_000)
        ids = (await call(c, "bulk_store", items=[{"content": words(i)} for i in range(300)]))["ids"]
        res = await c.call_tool("configure", {"max_archive_tokens": 1_000, "max_items": 10})
        text = res.content[0].text  # type: ignore[union-attr]
        assert "max_archive_tokens 1,000" in text and "nothing is deleted" in text
        await call(c, "store", content="one more")
        for i, item_id in enumerate(ids):
            assert (await call(c, "get", id=item_id))["content"] == words(i)  # was: 300 of 300 gone
        st = await call(c, "status")
        assert st["active_items"] <= 10 + 1
        assert st["tokens_used"] <= st["token_budget"]
    assert store.forget_ledger() == []


@pytest.mark.slow
def test_cli_limit_flags_delete_nothing_over_stdio(state_dir: Path):
    with StdioServer("--state-dir", str(state_dir), "--budget", "5000") as srv:
        ids = srv.ok("bulk_store", items=[{"content": words(i)} for i in range(300)])["ids"]
    flags = ("--max-archive-tokens", "1000", "--max-items", "10", "--snapshot-interval", "3600")
    with StdioServer("--state-dir", str(state_dir), *flags) as srv:
        srv.ok("store", content="one more")
        for i, item_id in enumerate(ids):
            assert srv.ok("get", id=item_id)["content"] == words(i)
        assert srv.ok("query", query="topic3", include_archived=True)["items"]
    assert not (state_dir / "forget-ledger.jsonl").exists() or not (state_dir / "forget-ledger.jsonl").read_bytes()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


def test_cli_prune_is_a_dry_run_unless_told(state_dir: Path, capsys: pytest.CaptureFixture[str]):
    s = Store(state_dir=state_dir)
    s.configure(token_budget=2_000)
    ids = [it.id for it in s.bulk_store([StoreInput(words(i, 60)) for i in range(200)]).items]
    archived = s._s.archived_tokens
    s.close()
    code, out = _cli(capsys, "prune", "--state-dir", str(state_dir), "--max-archive-tokens", "20000")
    assert code == 0 and "Would remove" in out and "bytes" in out and "Nothing was removed" in out
    code, out = _cli(capsys, "prune", "--json", "--state-dir", str(state_dir), "--max-archive-tokens", "20000")
    dry = json.loads(out)
    assert not dry["applied"] and dry["count"] > 0 and dry["bytes"] > 0 and dry["archived_tokens"] == archived
    s = Store(state_dir=state_dir)
    assert set(ids) <= set(s.ids())  # the dry runs removed nothing
    s.close()
    code, out = _cli(capsys, "prune", "--yes", "--json", "--state-dir", str(state_dir), "--max-archive-tokens", "20000")
    done = json.loads(out)
    assert done["applied"] and done["items"] == dry["items"] and done["bytes"] == dry["bytes"]
    ledger = [orjson.loads(x) for x in (state_dir / "forget-ledger.jsonl").read_bytes().splitlines()]
    assert [e["id"] for e in ledger] == dry["items"] and {e["reason"] for e in ledger} == {"prune"}
    for path in state_dir.iterdir():  # purged from every file
        if path.is_file() and path.name != "forget-ledger.jsonl":
            data = path.read_bytes()
            assert not any(words(ids.index(i), 60).encode() in data for i in dry["items"][:5])
    s = Store(state_dir=state_dir)
    assert not set(dry["items"]) & set(s.ids()) and s._s.archived_tokens <= 20_000
    s.close()
    code, out = _cli(capsys, "prune", "--apply", "--state-dir", str(state_dir), "--max-archive-tokens", "20000")
    assert code == 0 and "Nothing to prune" in out


# --- point 3: every call ends within budget -----------------------------------------------------
async def test_every_write_ends_within_budget(store: Store):
    async with connect(store) as c:
        await call(c, "configure", token_budget=5_000)
        res = await call(c, "bulk_store", items=[{"content": words(i, 60)} for i in range(600)])
        assert within(res["budget"]), res["budget"]  # was 46,257 / 5,000
        big = await call(c, "store", content=words(10_000, 8_000))  # larger than the budget alone
        assert within(big["budget"])
        assert (await call(c, "get", id=big["id"]))["tier"] == "archived"
        small = await call(c, "store", content="a short note that fits")
        assert (await call(c, "get", id=small["id"]))["tier"] == "active"
        grown = await call(c, "update", id=small["id"], content=words(10_001, 6_000))
        assert grown["tier"] == "archived"
        got = await call(c, "get", id=small["id"])  # its first page: `get` returns one at a time
        assert got["content_chars"] == len(words(10_001, 6_000)) and words(10_001, 6_000).startswith(got["content"])
        back = await c.call_tool("restore", {"id": big["id"]})
        assert "still archived" in back.content[0].text  # type: ignore[union-attr]
        for args in ({"token_budget": 1_000}, {"auto_compact_threshold": 0.3}):
            res = await call(c, "configure", **args)
            assert within(res["budget"]), (args, res["budget"])
        st = await call(c, "status")
        assert st["tokens_used"] <= st["token_budget"]
    assert not mixed_nodes(store)


async def test_pinned_items_alone_over_budget_are_reported(store: Store):
    async with connect(store) as c:
        await call(c, "configure", token_budget=1_000)
        await call(c, "store", content=words(1, 900), pinned=True)
        res = await c.call_tool("store", {"content": words(2, 900), "pinned": True})
        assert "OVER BUDGET: pinned items alone" in res.content[0].text  # type: ignore[union-attr]
        assert res.structured_content["budget"]["pinned_over_budget"] is True  # type: ignore[index]
        ok = await call(c, "store", content="unpinned")
        assert ok["budget"]["pinned_over_budget"] is True
        assert (await call(c, "get", id=ok["id"]))["content"] == "unpinned"


@pytest.mark.slow
def test_bulk_store_within_budget_over_stdio():
    with StdioServer("--budget", "5000") as srv:
        res = srv.ok("bulk_store", items=[{"content": words(i, 60)} for i in range(600)])
        assert within(res["budget"]), res["budget"]
        tree = srv.ok("tree")
        assert tree["roots"]


@pytest.mark.slow
def test_cli_import_ends_within_budget_and_tree_shows_nodes(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    s = Store(state_dir=state_dir)
    s.configure(token_budget=2_000)
    s.close()
    export = tmp_path / "export.json"
    export.write_text(json.dumps({"items": [{"content": words(i, 50), "id": f"imp-{i}"} for i in range(2_500)]}))
    code, out = _cli(capsys, "import", str(export), "--state-dir", str(state_dir))
    assert code == 0 and "Imported 2500" in out
    code, out = _cli(capsys, "status", "--json", "--state-dir", str(state_dir))
    st = json.loads(out)
    assert st["tokens_used"] <= st["token_budget"] == 2_000, st  # was 101-148%
    code, out = _cli(capsys, "tree", "--state-dir", str(state_dir))
    assert code == 0 and "No summary nodes yet" not in out and " d" in out
    s = Store(state_dir=state_dir)
    assert not mixed_nodes(s)
    assert s.roots() and all(s.get(f"imp-{i}").content == words(i, 50) for i in range(0, 2_500, 97))
    s.close()


# --- point 4: summary levels never mix ------------------------------------------------------------
@pytest.mark.slow
async def test_levels_never_mix_after_repeated_compactions(store: Store):
    async with connect(store) as c:
        await call(c, "configure", token_budget=20_000)
        for start in range(0, 3_000, 1_000):
            items = [{"content": words(i, 30), "tags": f"t{i % 5}"} for i in range(start, start + 1_000)]
            res = await call(c, "bulk_store", items=items)
            assert within(res["budget"])
        for target in (0.6, 0.4, 0.3):
            await call(c, "compact", target_usage=target)
    nodes = [store.get(i) for i in store.ids() if store.get(i).depth]
    assert nodes and not mixed_nodes(store)  # was 11 of 193


async def test_dissolving_a_deep_node_brings_its_summaries_back(store: Store):
    # A budget smaller than the summaries: compact(0.0) archives them, and archived summaries
    # are re-covered at their own level by a node whose children were archived.
    store.configure(token_budget=1_000, auto_compact=False)
    deep = None
    for r in range(40):
        store.bulk_store([StoreInput(words(r * 25 + i, 60)) for i in range(25)])
        store.compact(0.0)
        assert not mixed_nodes(store)
        deep = next((n for n in store.roots() if n.depth >= 2 and n.children_tier == "archived"), None)
        if deep:
            break
    assert deep is not None
    store.configure(token_budget=20_000, auto_compact=True)
    async with connect(store) as c:
        res = await call(c, "dissolve", id=deep.id)
        assert res["children"] and all(k["depth"] == deep.depth - 1 for k in res["children"])
        assert all(k["tier"] == "active" for k in res["children"])  # were left archived
        assert within(res["budget"])
    assert not mixed_nodes(store)
