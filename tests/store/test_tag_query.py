"""A query by tags alone reads the tag's items best bound first and stops early (issue 38,
point 14): the same hits, in the same order, as scoring every item the tags have, through
writes, access, pins, archiving, forgets and compaction."""

from __future__ import annotations

import heapq
import json
import random
from typing import Any

import anyio
import pytest
from mcp import Client

from compactor.mcp import build_server
from compactor.search import scoring
from compactor.store import Store, StoreInput
from compactor.store import state as state_module
from compactor.store.state import scope_key
from tests.conftest import FakeClock
from tests.support.stdio_client import StdioServer

TAGS = ["alpha", "beta", "gamma"]


def scoring_every_item(store: Store, tags: list[str], limit: int, include_archived: bool) -> list[str]:
    """What a tag-only query returned before: every item of the tags scored."""
    now = store._clock()
    scopes = store._scopes(None)
    pool = [
        it
        for it in store.iter_items()
        if set(it.tags) & set(tags)
        and (include_archived or it.tier == "active")
        and (scopes is None or scope_key(it.scope) in scopes)
    ]
    best = heapq.nlargest(limit, pool, key=lambda it: (scoring.rank_score(1.0, it, now), it.seq))
    return [it.id for it in best]


def _check(store: Store) -> None:
    for tags in (["alpha"], ["beta", "gamma"], ["ALPHA"]):
        for limit, archived in ((3, True), (10, False)):
            want = scoring_every_item(store, [t.lower() for t in tags], limit, archived)
            got = [h.item.id for h in store.query(tags=tags, limit=limit, include_archived=archived)]
            assert got == want, (tags, limit, archived)


@pytest.mark.parametrize(
    ("seed", "changes_max", "fresh_max"),
    [*((s, 2_000, 1_000) for s in range(12)), *((s, 2, 1_000) for s in range(4)), *((s, 2_000, 3) for s in range(6))],
)
def test_a_query_by_tags_alone_ranks_as_scoring_every_item(
    seed: int, changes_max: int, fresh_max: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded random walks (item ids are random, so a hypothesis machine could not replay);
    with a small `changes_max` the ranks are also dropped and made again between queries, with
    a small `fresh_max` the keys filed since are merged into them."""
    monkeypatch.setattr(state_module, "TAG_RANK_CHANGES_MAX", changes_max)
    monkeypatch.setattr(state_module, "TAG_RANK_FRESH_MAX", fresh_max)
    rng = random.Random(seed)
    clock = FakeClock()
    store = Store(clock=clock, budget=4_000)
    for step in range(60):
        ids = sorted(store.ids())
        action = rng.choice(["store", "store", "time", "pin", "importance", "retag", "forget", "get", "compact"])
        if action == "store" or not ids:
            tags = rng.sample(TAGS, rng.randint(1, 2))
            store.store(f"note {step} " + "word " * rng.randint(3, 200), tags=tags, importance=rng.randint(1, 10))
        elif action == "time":
            clock.advance(rng.choice([1, 600, 86_400, 30 * 86_400]))
        elif action == "pin":
            store.pin(rng.choice(ids))
        elif action == "importance":
            store.update(rng.choice(ids), importance=rng.randint(1, 10))
        elif action == "retag":
            store.update(rng.choice(ids), tags=rng.sample(TAGS, rng.randint(1, 2)))
        elif action == "forget":
            store.forget(rng.choice(ids))
        elif action == "get":
            store.query(f"note {rng.randint(0, step)}")  # an access: its hits' scores change
        else:
            store.compact(0.3)
        _check(store)


def _filled(store: Store) -> dict[int, str]:
    return {
        imp: store.store(f"observation of importance {imp}", tags="observation", importance=imp).item.id
        for imp in range(1, 10)
    }


@pytest.mark.slow
def test_a_query_by_tags_alone_over_the_sdk_and_stdio_puts_the_most_important_first(store: Store):
    by_importance = _filled(store)

    async def go() -> list[str]:
        async with Client(build_server(store), mode="legacy") as c:
            res = await c.call_tool("query", {"tags": "observation", "limit": 3})
            assert res.structured_content is not None
            return [i["id"] for i in res.structured_content["items"]]

    assert anyio.run(go) == [by_importance[9], by_importance[8], by_importance[7]]
    with StdioServer() as server:
        ids = {
            imp: server.ok("store", content=f"observation of importance {imp}", tags="observation", importance=imp)[
                "id"
            ]
            for imp in range(1, 10)
        }
        got = server.ok("query", tags="observation", limit=3)["items"]
        assert [i["id"] for i in got] == [ids[9], ids[8], ids[7]], json.dumps(got)[:300]


def test_a_query_by_tags_alone_scores_a_few_items_not_every_item_of_the_tag(monkeypatch: pytest.MonkeyPatch):
    store = Store(budget=100_000_000)
    for start in (0, 1_000):
        store.bulk_store(
            [
                StoreInput(f"observation {i} of the build", tags="observation", importance=1 + i % 9)
                for i in range(start, start + 1_000)
            ]
        )
    store.query(tags="observation", limit=10)  # the first one files every item by its bound
    scored = 0
    real = scoring.rank_score

    def counting(*args: Any, **kwargs: Any) -> float:
        nonlocal scored
        scored += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(scoring, "rank_score", counting)
    hits = store.query(tags="observation", limit=10)
    assert len(hits) == 10 and {h.item.importance for h in hits} == {9}
    assert scored < 300, f"{scored} of 2,000 items scored"
