import random

from compactor.store import Store, StoreInput
from tests.conftest import FakeClock


def words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(1_000_000)}" for _ in range(n))


def test_phase1_promotes_summarised_items_and_keeps_content(store: Store, clock: FakeClock):
    store.configure(token_budget=10_000, auto_compact=False)
    ids = [store.store(words(i, 400), summary=f"short summary {i}").item.id for i in range(5)]
    used = store.tokens_used
    report = store.compact(target_usage=(used * 0.5) / 10_000)
    assert report.promoted and not report.archived
    for item_id in report.promoted:
        it = store.get(item_id)
        assert it.view == "summary" and it.tier == "active"
        assert it.content == words(ids.index(item_id), 400)  # content kept
    assert store.tokens_used <= used * 0.5


def test_phase2_merges_near_duplicates_with_lineage(store: Store):
    base = words(7, 60)
    a = store.store(base, tags="first", importance=7).item
    b = store.store(base + " extra", tags="second", importance=3).item
    c = store.store(words(8, 60)).item
    report = store.compact(target_usage=1.0)
    assert report.deduplicated == [(b.id, a.id)]
    loser, survivor = store.get(b.id), store.get(a.id)
    assert loser.tier == "archived" and loser.merged_into == a.id
    assert loser.content == base + " extra"
    assert "second" in survivor.tags and survivor.tier == "active"
    assert store.get(c.id).tier == "active"


def test_dedup_candidates_are_not_quadratic(store: Store):
    """Only pairs sharing a min-hash bucket are compared: distinct items are never merged."""
    store.bulk_store([StoreInput(words(i, 50)) for i in range(300)])
    report = store.compact(target_usage=1.0)
    assert report.deduplicated == []


def test_phase3_evicts_lowest_value_first(store: Store, clock: FakeClock):
    store.configure(token_budget=5_000, auto_compact=False)
    keep = store.store(words(1, 200), importance=10).item
    old = store.store(words(2, 200), importance=2).item
    clock.advance(3600)
    store.store(words(3, 200), importance=5)
    report = store.compact(target_usage=(store.tokens_used - 100) / 5_000)
    assert report.archived[0] == old.id
    assert store.get(keep.id).tier == "active"


def test_pinned_items_are_never_demoted(store: Store):
    store.configure(token_budget=2_000, auto_compact=False)
    pinned = store.store(words(1, 500), summary="s", pinned=True).item
    store.store(words(2, 500))
    store.compact(0.0)
    it = store.get(pinned.id)
    assert it.tier == "active" and it.view == "content"


def test_store_never_archives_the_item_it_stores(store: Store):
    """Reference bug: the store reply named an item its own auto-compaction had archived."""
    store.configure(token_budget=1_000)
    for i in range(30):
        res = store.store(words(i, 120), importance=1)
        assert store.get(res.item.id).tier == "active"
        if res.compaction:
            assert res.item.id not in res.compaction.archived
    assert store.tokens_used <= 1_000 or all(store.get(i).pinned for i in store.ids())


def test_auto_compaction_triggers_above_threshold_down_to_80(store: Store):
    store.configure(token_budget=10_000)
    report = None
    while report is None:
        report = store.store(words(store.tokens_used, 300)).compaction
    assert report.trigger == "auto"
    assert store.tokens_used <= 8_000 + 400


def test_restore_brings_back_and_is_not_re_archived(store: Store):
    store.configure(token_budget=2_000)
    first = store.store(words(0, 300), importance=1).item
    for i in range(1, 12):
        store.store(words(i, 300), importance=9)
    assert store.get(first.id).tier == "archived"
    item, _report = store.restore(first.id)
    assert item.tier == "active"
    assert store.get(first.id).tier == "active"


def test_tokens_never_negative(store: Store):
    """Reference bug: the token total went negative after update/forget/compaction sequences."""
    store.configure(token_budget=1_000)
    ids = [store.store(words(i, 100), summary="s").item.id for i in range(20)]
    for item_id in ids[::2]:
        store.update(item_id, summary="different summary")
        store.forget(item_id)
    store.compact(0.0)
    for item_id in ids[1::2]:
        store.restore(item_id)
        store.update(item_id, content="tiny")
    assert store.tokens_used >= 0
    assert store.tokens_used == sum(store.get(i).view_tokens for i in store.ids() if store.get(i).tier == "active")
