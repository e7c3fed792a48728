"""The overview's numbers (store/history.py): exact over a small memory, and over a large one
estimated from a bounded sample whose cost does not grow with the memory."""

from __future__ import annotations

from typing import Any

import pytest

from compactor.store import Store, StoreInput
from compactor.store.history import overview
from tests.conftest import FakeClock

SAMPLE = 200  # the test's sample: small, so that a few thousand items are "large"


def filled(clock: FakeClock, n: int) -> Store:
    store = Store(clock=clock)
    store.configure(auto_compact=False, token_budget=2_000_000)
    for start in range(0, n, 250):
        clock.advance(3600)
        store.bulk_store(
            [
                StoreInput(content=f"note {i}: " + "word " * (10 + i % 30), importance=1 + i % 9)
                for i in range(start, min(n, start + 250))
            ]
        )
        if start % 1000 == 0:
            store.configure(token_budget=max(2_000, store.tokens_used // 2))
            store.compact()
            store.configure(token_budget=2_000_000)
    store.pin(store.list_items(limit=1).items[0].id)
    return store


def exact(store: Store) -> tuple[int, dict[int, dict[str, int]], int]:
    items = list(store.iter_items())
    pinned = sum(it.view_tokens for it in items if it.pinned and it.tier == "active")
    raw_tokens = sum(it.content_tokens for it in items if not it.depth)
    return pinned, store.dag_shape(), raw_tokens


class Counting:
    """The Store, counting the items its list calls hand out; a pass over every item fails."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.read = 0

    def list_items(self, **kw: Any) -> Any:
        page = self.store.list_items(**kw)
        self.read += len(page.items)
        return page

    def iter_items(self) -> Any:
        raise AssertionError("the overview read every item")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def test_a_small_memory_is_read_whole_and_exactly(clock: FakeClock):
    store = filled(clock, 600)
    ov = overview(store, sample=SAMPLE * 10)
    pinned, shape, raw_tokens = exact(store)
    assert ov.exact and ov.items == len(store.ids())
    assert ov.pinned_tokens == pinned > 0
    assert ov.per_depth == shape and shape
    assert ov.timeline.tokens[-1] == raw_tokens
    assert sum(ov.timeline.compactions) == sum(c["active"] + c["archived"] for c in shape.values())
    store.close()


def test_a_large_memory_is_estimated_from_a_bounded_sample(clock: FakeClock):
    store = filled(clock, 4_000)
    ov = overview(store, sample=SAMPLE)
    pinned, shape, raw_tokens = exact(store)
    assert not ov.exact and ov.items == len(store.ids()) and ov.read <= 2 * SAMPLE
    assert ov.pinned_tokens == pinned  # kept by the Store: never estimated
    assert ov.timeline.tokens[-1] == pytest.approx(raw_tokens, rel=0.1)
    nodes = sum(c["active"] + c["archived"] for c in shape.values())
    assert sum(c["active"] + c["archived"] for c in ov.per_depth.values()) == pytest.approx(nodes, rel=0.2)
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("n", [2_000, 8_000])
def test_the_overview_reads_as_many_items_at_any_size(clock: FakeClock, n: int):
    store = filled(clock, n)
    counting = Counting(store)
    ov = overview(counting, sample=SAMPLE)  # type: ignore[arg-type]
    # A sample per tier, and one item per tier to learn its size.
    assert counting.read == ov.read + 2 <= 2 * SAMPLE + 2
    store.close()


def test_a_compaction_is_marked_when_it_happened_not_when_its_oldest_item_was_stored(clock: FakeClock):
    """A summary node carries its oldest child's time; the chart marked every compaction at
    the far left, where that child was stored."""
    store = Store(clock=clock)
    store.configure(auto_compact=False, token_budget=2_000_000)
    for day in range(10):
        clock.advance(86_400)
        store.bulk_store([StoreInput(content=f"day {day} note {i}: " + "word " * 40) for i in range(20)])
    store.configure(token_budget=max(2_000, store.tokens_used // 3))
    store.compact()  # on the tenth day: every node made now covers items from the first day on
    store.configure(token_budget=2_000_000)
    ov = overview(store, sample=SAMPLE * 10)
    marks = ov.timeline.compactions
    assert sum(marks) > 0
    assert marks[-1] == sum(marks), f"compactions marked at {[k for k, n in enumerate(marks) if n]}"
    store.close()
