"""max_items, max_archive_tokens with the forget ledger."""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from compactor.store import Store, StoreInput
from compactor.store import compact as compact_mod


def words(seed: int, n: int = 40) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(1_000_000)}" for _ in range(n))


def test_max_items_archives_oldest_low_value_never_errors(store: Store):
    store.configure(max_items=10, token_budget=1_000_000)
    keep = store.store(words(0), importance=10).item.id
    ids = [store.store(words(i), importance=2).item.id for i in range(1, 30)]
    active = [i for i in store.ids() if store.get(i).tier == "active" and store.get(i).depth == 0]
    assert len(active) <= 10
    assert keep in active and ids[-1] in active  # valuable and just-stored items stay
    assert store.get(ids[0]).tier == "archived"
    assert all(store.get(i).content == words(ids.index(i) + 1) for i in ids)  # nothing lost


def test_max_items_never_archives_a_pinned_item(store: Store):
    """The oldest, least valuable item is the first to go, unless it is pinned."""
    store.configure(max_items=10, token_budget=1_000_000)
    pinned = store.store(words(0), importance=1, pinned=True).item.id
    for i in range(1, 30):
        store.store(words(i), importance=1)
    assert store.status().archived_items > 0
    assert store.get(pinned).tier == "active"


def test_crossing_max_items_archives_a_tenth_more_than_the_excess_at_most_the_slack(
    store: Store, monkeypatch: pytest.MonkeyPatch
):
    """One store at the default limit archived and condensed a tenth of it, 10,000 items
    (3.6 s at 100k items); now never more than MAX_ITEMS_SLACK beyond the excess."""
    store.configure(max_items=100, token_budget=10_000_000)
    store.bulk_store([StoreInput(words(i)) for i in range(100)])
    assert store.status().archived_items == 0
    store.store(words(100))  # 101 active: the excess, 1, and a tenth of the limit, 10
    assert store.status().archived_items == 11
    monkeypatch.setattr(compact_mod, "MAX_ITEMS_SLACK", 3)
    store.bulk_store([StoreInput(words(i)) for i in range(101, 112)])  # back at the limit
    archived = store.status().archived_items
    active = store.status().active_items
    store.bulk_store([StoreInput(words(i)) for i in range(112, 112 + 101 - active)])
    assert store.status().archived_items == archived + (101 - 100) + 3
    assert all(store.get(i).content for i in store.ids())  # nothing lost


def test_max_archive_tokens_deletes_nothing_and_prune_removes_only_when_told(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.configure(token_budget=1_000, max_archive_tokens=2_000)
    ids = [s.store(words(i, 60), importance=1 + i % 9).item.id for i in range(80)]
    # The setting bounds nothing by deleting: every item is still there, nothing in the ledger.
    assert all(s.get(i).content == words(ids.index(i), 60) for i in ids)
    assert s.status().persistence["forget_ledger_entries"] == 0
    assert s._s.archived_tokens > 2_000
    dry = s.prune()
    assert dry.items and not dry.applied and dry.bytes > 0
    assert all(s.get(it.id) for it in dry.items)  # a dry run changes nothing
    assert all(it.tier == "archived" and not it.depth and not it.pinned for it in dry.items)
    done = s.prune(apply=True)
    assert done.applied and [it.id for it in done.items] == [it.id for it in dry.items]
    assert done.bytes == dry.bytes
    assert s._s.archived_tokens <= 2_000
    ledger = [orjson.loads(line) for line in (state_dir / "forget-ledger.jsonl").read_bytes().splitlines()]
    pruned = {e["id"] for e in ledger}
    assert pruned == {it.id for it in done.items}
    assert all(e["reason"] == "prune" and e["at"] > 0 for e in ledger)
    present = set(s.ids())
    assert set(ids) == (set(ids) & present) | pruned and not pruned & present
    for node_id in present:
        node = s.get(node_id)
        assert all(c in node.gone_children for c in node.children if c in pruned)
    s.close()
    # Gone from disk too: a fresh process does not see them.
    again = Store(state_dir=state_dir)
    assert not pruned & set(again.ids())
    assert not again.prune().items


def test_forget_is_recorded_in_the_ledger_without_content(state_dir: Path):
    s = Store(state_dir=state_dir)
    item = s.store("secret-ish words zq9").item
    s.forget(item.id)
    raw = (state_dir / "forget-ledger.jsonl").read_bytes()
    assert item.id.encode() in raw and b"zq9" not in raw
    assert s.forget_ledger()[-1]["reason"] == "forget"
