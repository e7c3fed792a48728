"""Property test for issue 13: whatever the sequence of calls, nothing not forgotten is lost,
usage ends within budget (unless pinned items alone exceed it), and levels never mix."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from compactor.store import Store, StoreInput
from tests.conftest import FakeClock


def text(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return f"topic{seed % 5} " + " ".join(f"w{rng.randrange(100_000)}" for _ in range(words))


SIZES = st.sampled_from([5, 30, 120, 600, 2_500])  # the last is larger than the smallest budget


class Memory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store = Store(clock=self.clock)
        self.store.configure(token_budget=2_000)
        self.expected: dict[str, str] = {}
        self.seed = 0

    def _text(self, words: int) -> str:
        self.seed += 1
        return text(self.seed, words)

    def _raw(self, data: st.DataObject) -> str:
        # By position, in insertion order: the same draw picks the same item on replay.
        ids = list(self.expected)
        return ids[data.draw(st.integers(0, len(ids) - 1))]

    def _input(self, content: str, **kwargs: object) -> StoreInput:
        # Explicit ids: random ones would change grouping and ids between replays.
        return StoreInput(content, item_id=f"item-{self.seed:05d}", **kwargs)  # type: ignore[arg-type]

    @rule(words=SIZES, pinned=st.booleans(), importance=st.integers(1, 10))
    def store_one(self, words: int, pinned: bool, importance: int) -> None:
        content = self._text(words)
        inp = self._input(content, importance=importance, pinned=pinned and words <= 30)
        item = self.store.bulk_store([inp]).items[0]
        self.expected[item.id] = content

    @rule(n=st.integers(1, 60), words=SIZES)
    def bulk_store(self, n: int, words: int) -> None:
        inputs = []
        for _ in range(n):
            content = self._text(min(words, 120))
            inputs.append(self._input(content))
        for item, inp in zip(self.store.bulk_store(inputs).items, inputs, strict=True):
            self.expected[item.id] = inp.content

    @precondition(lambda self: self.expected)
    @rule(data=st.data(), words=SIZES)
    def update(self, data: st.DataObject, words: int) -> None:
        item_id = self._raw(data)
        content = self._text(words)
        self.store.update(item_id, content=content)
        self.expected[item_id] = content

    @rule(usage=st.sampled_from([0.0, 0.3, 0.6, 0.7, 1.0]))
    def compact(self, usage: float) -> None:
        self.store.compact(usage)

    @rule(
        budget=st.sampled_from([None, 1_000, 2_000, 6_000]),
        max_items=st.sampled_from([None, 10, 40, 100_000]),
        max_archive=st.sampled_from([None, 1_000, 50_000_000]),
    )
    def configure(self, budget: int | None, max_items: int | None, max_archive: int | None) -> None:
        self.store.configure(token_budget=budget, max_items=max_items, max_archive_tokens=max_archive)

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        self.store.restore(self._raw(data))

    @precondition(lambda self: self.expected)
    @rule(data=st.data(), on=st.booleans())
    def pin(self, data: st.DataObject, on: bool) -> None:
        item_id = self._raw(data)
        if on:
            self.store.pin(item_id)
        else:
            self.store.unpin(item_id)

    @rule(data=st.data())
    def dissolve(self, data: st.DataObject) -> None:
        roots = self.store.roots()
        if roots:
            self.store.dissolve(roots[data.draw(st.integers(0, len(roots) - 1))].id)

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        item_id = self._raw(data)
        self.store.forget(item_id)
        del self.expected[item_id]

    @rule(seconds=st.sampled_from([1.0, 600.0, 7_200.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def nothing_is_lost(self) -> None:
        for item_id, content in self.expected.items():
            assert self.store.get(item_id).content == content

    @invariant()
    def within_budget(self) -> None:
        s = self.store
        assert s.tokens_used <= s.budget or s.pinned_tokens > s.budget, (s.tokens_used, s.budget, s.pinned_tokens)

    @invariant()
    def levels_never_mix(self) -> None:
        s = self.store
        for item_id in s.ids():
            node = s.get(item_id)
            for child_id in node.children:
                try:
                    child = s.get(child_id)
                except Exception:
                    continue  # forgotten: recorded in gone_children
                assert child.depth == node.depth - 1, (node.id, node.depth, child.id, child.depth)


Memory.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestMemory = Memory.TestCase
