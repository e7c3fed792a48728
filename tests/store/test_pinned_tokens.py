"""The pinned tokens every write's reply states are kept as a running total: after any mix of
writes they equal a scan of the active pinned items, in memory and after a reload."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from compactor.errors import CompactorError
from compactor.store import Store
from tests.conftest import FakeClock


def scanned(store: Store) -> int:
    items = [store.get(i) for i in store.ids()]
    return sum(it.view_tokens for it in items if it.tier == "active" and it.pinned)


@pytest.mark.parametrize("seed", range(4))
def test_pinned_tokens_follow_every_write(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock()
    store = Store(state_dir=tmp_path, budget=4_000, clock=clock)
    ids: list[str] = []
    for _ in range(120):
        clock.advance(60)
        action = rng.choice(["store", "store", "pin", "unpin", "summary", "forget", "compact", "restore"])
        try:
            if action == "store" or not ids:
                words = " ".join(rng.choice(["auth", "retry", "cache", "queue", "lock", "db"]) for _ in range(60))
                ids.append(store.store(words, pinned=rng.random() < 0.3).item.id)
            elif action == "pin":
                store.pin(rng.choice(ids))
            elif action == "unpin":
                store.unpin(rng.choice(ids))
            elif action == "summary":
                store.update(rng.choice(ids), summary="short")
            elif action == "forget":
                store.forget(ids.pop(rng.randrange(len(ids))))
            elif action == "compact":
                store.compact(rng.choice([0.3, 0.7]))
            else:
                store.restore(rng.choice(ids))
        except CompactorError:
            pass  # an id forgotten or merged meanwhile: the total must still agree
        assert store.pinned_tokens == scanned(store), action
        assert store.check_derived() == []
    store.close()
    assert Store(state_dir=tmp_path, clock=clock).pinned_tokens == scanned(store)
