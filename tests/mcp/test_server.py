"""Every tool through the SDK's in-process client, including its error paths."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import Implementation

from compactor.mcp import INSTRUCTIONS, build_server
from compactor.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def connect(store: Store, client_name: str = "pytest") -> AsyncIterator[Client]:
    server = build_server(store)
    async with Client(server, mode="legacy", client_info=Implementation(name=client_name, version="1")) as c:
        yield c


async def call(c: Client, tool: str, **args: Any) -> dict[str, Any]:
    with anyio.fail_after(10):
        res = await c.call_tool(tool, args)
    assert not res.is_error, res.content[0].text  # type: ignore[union-attr]
    assert res.structured_content is not None
    assert res.content and res.content[0].text  # type: ignore[union-attr]
    return res.structured_content


async def error(c: Client, tool: str, **args: Any) -> str:
    with anyio.fail_after(10):
        res = await c.call_tool(tool, args)
    assert res.is_error
    return res.content[0].text  # type: ignore[union-attr]


def snapshot_of(store: Store) -> list[tuple[Any, ...]]:
    items = sorted(
        (i.id, i.content, i.summary, i.tags, i.tier, i.view, i.pinned, i.importance) for i in store.iter_items()
    )
    return [*items, (store.tokens_used, store.budget)]


async def assert_unchanged(store: Store, fn: Callable[[], Any]) -> str:
    before = snapshot_of(store)
    msg = await fn()
    assert snapshot_of(store) == before
    return msg


async def test_tools_are_listed_with_schemas_and_true_annotations(store: Store):
    async with connect(store) as c:
        assert c.instructions == INSTRUCTIONS
        assert "recall" in INSTRUCTIONS and "pin" in INSTRUCTIONS
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert set(tools) == {
            "recall",
            "store",
            "bulk_store",
            "query",
            "get",
            "status",
            "compact",
            "update",
            "pin",
            "unpin",
            "restore",
            "forget",
            "list",
            "export",
            "configure",
            "expand",
            "dissolve",
            "tree",
        }
        for t in tools.values():
            assert t.description and len(t.description) > 40
            assert t.output_schema is not None
            assert t.annotations is not None
        for name in ("get", "status", "list", "export", "recall", "expand", "tree"):
            assert tools[name].annotations.read_only_hint is True
        assert tools["forget"].annotations.destructive_hint is True
        for name in ("store", "bulk_store", "compact", "update", "pin", "configure", "restore"):
            assert tools[name].annotations.read_only_hint is False
            assert tools[name].annotations.destructive_hint is False
        assert tools["store"].annotations.idempotent_hint is False
        props = tools["store"].input_schema["properties"]
        assert {"content", "summary", "tags", "importance", "pinned"} <= set(props)


async def test_store_get_query_recall_list(store: Store):
    async with connect(store) as c:
        r = await call(
            c,
            "store",
            content="We decided to use Redis for sessions because of TTLs.",
            summary="redis for sessions",
            tags="infra,cache",
            importance=8,
        )
        item_id = r["id"]
        assert r["content_type"] == "decision" and r["tags"][:2] == ["infra", "cache"]
        assert r["budget"]["tokens_used"] > 0
        g = await call(c, "get", id=item_id)
        assert {"id", "content", "summary", "tier", "view"} <= set(g)
        assert g["tier"] == "active" and g["view"] == "content" and g["summary"] == "redis for sessions"
        q = await call(c, "query", query="redis sessions")
        assert q["items"][0]["id"] == item_id
        assert q["items"][0]["score"] > 0 and "redis" in q["items"][0]["matched_terms"]
        rc = await call(c, "recall")
        assert rc["items"][0]["id"] == item_id and "Budget:" in rc["text"]
        rq = await call(c, "recall", query="sessions", limit=5)
        assert rq["items"][0]["id"] == item_id
        lst = await call(c, "list", tier="all")
        assert [i["id"] for i in lst["items"]] == [item_id] and lst["total"] == 1


async def test_store_errors_leave_store_unchanged(store: Store):
    async with connect(store) as c:
        await call(c, "store", content="keep me")
        assert "non-empty" in await assert_unchanged(store, lambda: error(c, "store", content="   "))
        assert "1 MiB" in await assert_unchanged(store, lambda: error(c, "store", content="x" * (1024 * 1024 + 5)))
        assert "importance" in await assert_unchanged(store, lambda: error(c, "store", content="x", importance=11))
        assert "content" in await assert_unchanged(store, lambda: error(c, "store"))
        await assert_unchanged(store, lambda: error(c, "store", content=["not", "a", "string"]))


async def test_bulk_store_json_string_and_all_or_nothing(store: Store):
    async with connect(store) as c:
        r = await call(
            c, "bulk_store", items=json.dumps([{"content": "a1 alpha"}, {"content": "b2 beta", "tags": ["x"]}])
        )
        assert len(r["ids"]) == 2 and r["stored"] == 2
        r2 = await call(c, "bulk_store", items=[{"content": "c3 gamma", "importance": 9}])
        assert len(r2["ids"]) == 1
        msg = await assert_unchanged(
            store,
            lambda: error(
                c, "bulk_store", items=[{"content": "ok"}, {"content": "ok2"}, {"content": "x", "importance": 0}]
            ),
        )
        assert "items[2].importance" in msg and "Nothing was stored" in msg
        msg = await assert_unchanged(store, lambda: error(c, "bulk_store", items="[{bad json"))
        assert "not valid JSON" in msg
        msg = await assert_unchanged(store, lambda: error(c, "bulk_store", items=[{"content": "a", "bogus": 1}]))
        assert "items[0].bogus" in msg
        msg = await assert_unchanged(store, lambda: error(c, "bulk_store", items=[{"content": "  "}]))
        assert "non-empty" in msg


async def test_get_update_pin_unpin_restore_forget_errors_on_unknown_id(store: Store):
    async with connect(store) as c:
        for tool in ("get", "pin", "unpin", "restore", "forget"):
            msg = await assert_unchanged(store, lambda tool=tool: error(c, tool, id="nosuchid"))
            assert "No item with id 'nosuchid'" in msg
        msg = await assert_unchanged(store, lambda: error(c, "update", id="nosuchid", summary="s"))
        assert "No item" in msg


async def test_update_pin_unpin_forget(store: Store):
    async with connect(store) as c:
        item_id = (await call(c, "store", content="content about sockets"))["id"]
        msg = await assert_unchanged(store, lambda: error(c, "update", id=item_id))
        assert "at least one" in msg
        u = await call(c, "update", id=item_id, summary="sockets", tags=["net"], importance=9)
        assert u["importance"] == 9 and u["tags"][0] == "net"
        assert (await call(c, "pin", id=item_id))["pinned"] is True
        assert (await call(c, "unpin", id=item_id))["pinned"] is False
        f = await call(c, "forget", id=item_id)
        assert f["forgotten"] is True and f["budget"]["tokens_used"] == 0
        assert "No item" in await error(c, "get", id=item_id)


async def test_compact_restore_status_configure(store: Store):
    async with connect(store) as c:
        await call(c, "configure", token_budget=1_000, auto_compact=False)
        ids = []
        for i in range(6):
            ids.append((await call(c, "store", content=" ".join(f"t{i}x{j}" for j in range(150))))["id"])
        s = await call(c, "status")
        assert {"token_budget", "tokens_used", "active_items", "archived_items"} <= set(s)
        assert s["tokens_used"] > 1_000 and s["active_items"] == 6
        assert s["token_counter"].startswith("tiktoken")
        assert s["persistence"]["enabled"] is False
        r = await call(c, "compact", target_usage=0.5)
        assert {"promoted", "deduplicated", "archived", "tokens_before", "tokens_after", "needs_summary"} <= set(r)
        assert r["tokens_after"] <= 500 and r["archived"] >= 1
        assert r["needs_summary"] and len(r["needs_summary"]) <= 10
        archived_id = r["archived_ids"][0]
        g = await call(c, "get", id=archived_id)
        assert g["tier"] == "archived" and g["content"].startswith("t")
        back = await call(c, "restore", id=archived_id)
        assert back["tier"] == "active"
        assert "target_usage" in await assert_unchanged(store, lambda: error(c, "compact", target_usage=1.5))
        await assert_unchanged(store, lambda: error(c, "configure", token_budget=5))
        await assert_unchanged(store, lambda: error(c, "configure", auto_compact_threshold=0.05))
        cfg = await call(c, "configure", recall_tokens=500)
        assert cfg["recall_tokens"] == 500


async def test_configure_lower_budget_compacts_at_once(store: Store):
    async with connect(store) as c:
        for i in range(10):
            await call(c, "store", content=" ".join(f"q{i}z{j}" for j in range(100)))
        used = (await call(c, "status"))["tokens_used"]
        r = await call(c, "configure", token_budget=max(1_000, used // 2))
        assert r["compaction"] is not None and r["compaction"]["archived"] > 0
        assert r["budget"]["tokens_used"] <= 0.8 * r["token_budget"]


async def test_list_and_export_paging_is_bounded(store: Store):
    async with connect(store) as c:
        for i in range(40):
            await call(c, "store", content=f"entry {i} " + ("lorem ipsum dolor " * 300))
        lst = await call(c, "list", limit=15)
        assert len(lst["items"]) == 15 and lst["next_offset"] == 15 and lst["total"] == 40
        await assert_unchanged(store, lambda: error(c, "list", limit=0))
        await assert_unchanged(store, lambda: error(c, "list", tier="bogus"))
        seen, cursor, pages = [], None, 0
        while True:
            args: dict[str, Any] = {"format": "json"}
            if cursor:
                args["cursor"] = cursor
            res = await c.call_tool("export", args)
            assert len(res.content[0].text) < 40_000  # type: ignore[union-attr]
            page = res.structured_content
            assert page is not None
            seen.extend(r["id"] for r in page["items"])
            pages += 1
            cursor = page["next_cursor"]
            if not cursor:
                break
        assert len(seen) == 40 and len(set(seen)) == 40 and pages > 1
        md = await call(c, "export", format="markdown", summaries_only=True)
        assert md["text"].startswith("## ") and md["count"] > 0


async def test_tags_only_word_found_over_protocol(store: Store):
    async with connect(store) as c:
        item_id = (await call(c, "store", content="plain words", tags=["okapi"]))["id"]
        q = await call(c, "query", query="okapi")
        assert [i["id"] for i in q["items"]] == [item_id]


async def test_client_name_sets_budget_but_configure_wins(store: Store):
    async with connect(store, "claude-code") as c:
        assert (await call(c, "status"))["token_budget"] == 80_000
        await call(c, "configure", token_budget=33_000)
    # A later initialize (new session, another client) never overwrites it.
    async with connect(store, "cursor-vscode") as c:
        assert (await call(c, "status"))["token_budget"] == 33_000


async def test_cursor_budget(store: Store):
    async with connect(store, "cursor-vscode") as c:
        assert (await call(c, "status"))["token_budget"] == 60_000


async def test_store_reply_reports_auto_compaction(store: Store):
    async with connect(store) as c:
        await call(c, "configure", token_budget=1_000)
        seen = None
        for i in range(20):
            res = await c.call_tool("store", {"content": " ".join(f"a{i}b{j}" for j in range(80))})
            sc = res.structured_content
            assert sc is not None
            if sc["compaction"]:
                seen = (sc, res.content[0].text)  # type: ignore[union-attr]
                archived_now = store.get(sc["id"]).tier
                assert archived_now == "active"
                break
        assert seen is not None
        assert "Auto-compaction ran" in seen[1] and seen[0]["compaction"]["archived"] >= 1


async def test_expand_dissolve_tree_and_their_errors(store: Store):
    async with connect(store) as c:
        await call(c, "configure", token_budget=2_000, auto_compact=False)
        raw = []
        for i in range(25):
            raw.append(
                (
                    await call(
                        c, "store", content=f"note {i} on module_{i % 3}.py " + " ".join(f"k{i}x{j}" for j in range(30))
                    )
                )["id"]
            )
        r = await call(c, "compact", target_usage=0.3)
        assert r["condensed"] >= 1 and r["needs_text"]
        t = await call(c, "tree")
        assert t["roots"]
        assert "d1" in t["text"]
        root = t["roots"][0]
        e = await call(c, "expand", id=root, limit=3)
        assert e["total"] >= 2 and len(e["children"]) <= 3 and e["children"][0]["id"]
        g = await call(c, "get", id=e["children"][0]["id"])
        assert root in g["parents"]
        q = await call(c, "query", query="k3x7", include_archived=True)
        hit = next(i for i in q["items"] if i["id"] == raw[3])
        assert hit["archived"] and hit["covered_by"] in t["roots"] and hit["path"][-1] == hit["covered_by"]
        with anyio.fail_after(10):
            res = await c.call_tool("dissolve", {"id": root})
        d = res.structured_content
        assert d is not None and len(d["children"]) == e["total"]
        text = res.content[0].text  # type: ignore[union-attr]
        assert re.match(rf"Dissolved {root}: {e['total']} children back in (active memory|the archive)\.\n", text)
        assert "No item" in await error(c, "get", id=root)
        for ch in d["children"]:
            assert root not in (await call(c, "get", id=ch["id"]))["parents"]
        assert "No item" in await assert_unchanged(store, lambda: error(c, "expand", id="nosuch"))
        assert "not a summary" in await assert_unchanged(store, lambda: error(c, "expand", id=raw[0]))
        assert "not a summary" in await assert_unchanged(store, lambda: error(c, "dissolve", id=raw[0]))
        assert "No item" in await assert_unchanged(store, lambda: error(c, "tree", root="nosuch"))
        await assert_unchanged(store, lambda: error(c, "tree", max_depth=0))


def test_serve_moves_the_loaded_store_out_of_the_collectors_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full gc pass over a 100k-item store was a ~190 ms pause inside some call."""
    import gc

    from compactor.mcp import server as server_module

    store = Store()
    store.store("an item loaded before serving")
    seen: list[int] = []

    async def fake_run(mcp: object) -> None:
        seen.append(gc.get_freeze_count())
        tracked = {id(o) for o in gc.get_objects()}
        assert id(store._s) not in tracked  # frozen objects are not collected (or listed)

    gc.unfreeze()
    try:
        monkeypatch.setattr(server_module, "_run_stdio", fake_run)
        anyio.run(lambda: server_module.serve(store, snapshot_interval=3600))
    finally:
        gc.unfreeze()
    assert seen
    assert seen[0] > 0


def test_settling_the_heap_after_a_snapshot_does_not_freeze_cyclic_garbage() -> None:
    import gc
    import weakref

    from compactor.runtime import settle_heap

    class Node:
        pass

    def garbage_cycle() -> weakref.ref[Node]:
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        return weakref.ref(a)

    gc.unfreeze()
    try:
        kept = garbage_cycle()
        settle_heap(collect=False)  # at start: frozen as it is, garbage included
        assert kept() is not None
        gc.unfreeze()
        gone = garbage_cycle()
        settle_heap(collect=True)  # after a snapshot: collected first
        assert gone() is None
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.collect()


def test_query_records_are_exactly_the_scored_item_model_dumped() -> None:
    """The query tool builds its structured items as dicts (no pydantic round trip); they must
    be what ScoredItem would give, for every kind of hit."""
    from compactor.mcp import schemas as S
    from compactor.models import Item

    base = {
        "id": "m1",
        "seq": 1,
        "content": "line one\nline two " + "x" * 400,
        "summary": None,
        "tags": ("a", "b"),
        "importance": 7,
        "content_type": "code",
        "pinned": False,
        "created_at": 1.0,
        "last_accessed_at": 2.0,
        "access_count": 0,
        "content_tokens": 120,
        "summary_tokens": 0,
    }
    items = [
        Item(**base),  # type: ignore[arg-type]
        Item(**{**base, "summary": "a summary", "summary_tokens": 3, "view": "summary", "pinned": True}),  # type: ignore[arg-type]
        Item(**{**base, "tier": "archived", "depth": 1, "children": ("c1",), "tags": ()}),  # type: ignore[arg-type]
    ]
    for item in items:
        for path in ([], ["s1", "s2"]):
            want = S.scored(item, 1.23456789, ("line", "two"), path=path).model_dump(mode="json")
            assert S.scored_record(item, 1.23456789, ("line", "two"), path=path) == want
            assert S.QueryResult.model_validate({"items": [want], "count": 1}).items[0].model_dump(mode="json") == want


async def test_recall_layout_through_the_client(store: Store) -> None:
    """ISSUE 19 / ISSUE 17.5 through the in-memory client: groups with one ordering and one kind
    of score each, ids in the text and the structured items, no item twice, the cap used."""
    from tests.support.recall_layout import groups_of

    store.configure(token_budget=1_000_000)
    store.store("Always run the linter before committing.", pinned=True)
    for i in range(300):
        store.store(f"step {i}: the tokenizer handles case {i} of the invoice importer", summary=f"step {i}")
    async with connect(store) as c:
        r = await call(c, "recall", query="invoice importer")
    groups = groups_of(r["text"])
    assert list(groups)[:3] == ["Pinned", "Related to the task", "Recent work"]
    ids = [it["id"] for it in r["items"]]
    assert ids == [i for v in groups.values() for i in v] and len(ids) == len(set(ids))
    assert r["pinned"] == 1
    cap = store.settings.recall_tokens
    assert cap * 0.8 <= r["tokens"] <= cap


def test_store_replies_count_one_token_and_one_item_in_the_singular():
    async def main() -> None:
        async with Client(build_server(Store()), mode="legacy") as c:
            one = await c.call_tool("store", {"content": "x"})
            assert "(prose, 1 token, " in one.content[0].text  # type: ignore[union-attr]
            many = await c.call_tool("store", {"content": "two words and some more of them"})
            assert re.search(r"\(prose, \d+ tokens, ", many.content[0].text)  # type: ignore[union-attr]
            bulk = await c.call_tool("bulk_store", {"items": [{"content": "y"}]})
            assert bulk.content[0].text.startswith("Stored 1 item (1 token): ")  # type: ignore[union-attr]

    anyio.run(main)


def test_pinning_an_archived_or_summarised_item_keeps_it_in_full_in_active_memory():
    """pin keeps an item in full for good: one already archived comes back to the active tier,
    one shown by its summary goes back to its content, and compaction then leaves both."""
    store = Store()
    store.configure(token_budget=1_000)

    async def main() -> None:
        async with Client(build_server(store), mode="legacy") as c:
            ids = []
            for i in range(30):
                text = f"fact {i}: the zebra{i} service calls the giraffe broker over grpc with retries " * 2
                ids.append((await c.call_tool("store", {"content": text})).structured_content["id"])  # type: ignore[index]
            archived = next(i for i in ids if store.get(i).tier == "archived")
            pinned = await c.call_tool("pin", {"id": archived})
            assert pinned.structured_content is not None and not pinned.is_error
            assert (pinned.structured_content["tier"], pinned.structured_content["pinned"]) == ("active", True)
            summarised = (
                await c.call_tool(
                    "store", {"content": "long notes on the okapi rollout " * 40, "summary": "okapi rollout"}
                )
            ).structured_content["id"]  # type: ignore[index]
            await c.call_tool("compact", {"target_usage": 0.1})
            assert store.get(summarised).view == "summary" or store.get(summarised).tier == "archived"
            again = await c.call_tool("pin", {"id": summarised})
            assert again.structured_content is not None
            assert (again.structured_content["tier"], again.structured_content["view"]) == ("active", "content")
            await c.call_tool("compact", {"target_usage": 0.1})
            recall = await c.call_tool("recall", {})
            for item_id in (archived, summarised):
                it = store.get(item_id)
                assert (it.tier, it.view, it.pinned) == ("active", "content", True)
                assert item_id in recall.content[0].text  # type: ignore[union-attr]

    anyio.run(main)


async def test_a_page_header_says_which_items_it_shows_and_when_an_offset_is_past_the_end(store: Store):
    """It said "items 0-100000000 of 3" for an offset past the end."""

    async def header(tool: str, **args: Any) -> str:
        with anyio.fail_after(10):
            res = await c.call_tool(tool, args)
        assert not res.is_error
        return res.content[0].text.splitlines()[0]  # type: ignore[union-attr]

    async with connect(store) as c:
        assert await header("list") == "active: no items"
        for i in range(3):
            await call(c, "store", content=f"entry {i}")
        assert await header("list", offset=1, limit=1) == "active: items 2-2 of 3 (newest first)"
        assert await header("list", offset=100_000_000) == "active: no items from offset 100,000,000: there are 3"
        store.configure(token_budget=1_000)
        for i in range(40):
            store.store(f"filler {i} " + "lorem ipsum dolor sit amet " * 30)
        node = next(it for it in store.iter_items() if it.depth)
        total = len(node.children)
        assert (await header("expand", id=node.id, offset=1, limit=2)).endswith(f"children 2-3 of {total}")
        assert (await header("expand", id=node.id, offset=99_999)).endswith(
            f"no children from offset 99,999: there are {total}"
        )


async def test_status_names_the_snapshot_on_disk_that_an_earlier_run_wrote(tmp_path: Any) -> None:
    """Issue 38 point 11: a snapshot another process (or a previous run) wrote is not "never"."""
    first = Store(state_dir=tmp_path / "state")
    first.store("kept across runs")
    first.close_with_snapshot()  # as a clean stop of a server does
    assert (tmp_path / "state" / "snapshot.json").exists()
    store = Store(state_dir=tmp_path / "state")
    try:
        async with connect(store) as c:
            res = await c.call_tool("status", {})
            text = res.content[0].text  # type: ignore[union-attr]
            assert res.structured_content is not None
        assert "last snapshot never" not in text
        assert re.search(r"last snapshot \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text), text
        assert res.structured_content["persistence"]["snapshot_at"]
    finally:
        store.close()
