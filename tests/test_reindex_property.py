"""A background snapshot names the index file of the last full one with the ids changed since;
a start after a kill loads that file and re-indexes just those ids. Whatever happened in
between (stores, edits, re-tags, compaction, forgets, full and background snapshots, kills),
the index and near-duplicate buckets a start ends up with must equal a rebuild from the items."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

import anyio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from compactor.errors import InvalidArgumentError
from compactor.store import Store

WORDS = ["quokka", "wombat", "numbat", "bilby", "dingo", "emu", "koala", "possum"]
text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join)


class Reindexing(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="compactor-reindex-"))
        self.store = Store(state_dir=self.dir)
        self.store.configure(token_budget=1_000)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _pick(self, n: int) -> str | None:
        ids = sorted(self.store.ids())
        return ids[n % len(ids)] if ids else None

    @rule(body=text, n=st.integers(0, 3))
    def store_some(self, body: str, n: int) -> None:
        for k in range(n + 1):
            self.store.store(f"{body} note{k} " + "filler words to fill the budget " * 8)

    @rule(pick=st.integers(0, 99), body=text)
    def edit(self, pick: int, body: str) -> None:
        item_id = self._pick(pick)
        if item_id is not None:
            with contextlib.suppress(InvalidArgumentError):  # a summary node takes summary=, not content
                self.store.update(item_id, content=f"{body} edited")

    @rule(pick=st.integers(0, 99), tag=st.sampled_from(["red", "blue", "green"]))
    def retag(self, pick: int, tag: str) -> None:
        item_id = self._pick(pick)
        if item_id is not None:
            with contextlib.suppress(InvalidArgumentError):
                self.store.update(item_id, tags=[tag])

    @rule(usage=st.sampled_from([0.3, 0.6]))
    def compact(self, usage: float) -> None:
        self.store.compact(usage)

    @rule(pick=st.integers(0, 99))
    def forget(self, pick: int) -> None:
        item_id = self._pick(pick)
        if item_id is not None:
            with contextlib.suppress(InvalidArgumentError):  # a summary a parent covers is refused
                self.store.forget(item_id)

    @rule()
    def full_snapshot(self) -> None:
        self.store.snapshot()

    @rule()
    def background_snapshot(self) -> None:
        anyio.run(self.store.snapshot_async)

    @rule(background_first=st.booleans())
    def kill_and_start(self, background_first: bool) -> None:
        """No final snapshot: the next start takes what the last snapshot names (after a
        background one: the older index file and the ids changed since), and the journal."""
        if background_first:
            anyio.run(self.store.snapshot_async)
        self.store.close()
        self.store = Store(state_dir=self.dir)

    @invariant()
    def derived_structures_match_a_rebuild(self) -> None:
        assert self.store.check_derived() == []


TestReindexing = Reindexing.TestCase
TestReindexing.settings = settings(max_examples=80, stateful_step_count=25, deadline=None)
