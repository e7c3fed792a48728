"""A background snapshot names the index file of the last full one with the ids changed since;
a start after a kill loads that file and re-indexes just those ids. Whatever happened in
between (stores, edits, re-tags, compaction, forgets, full and background snapshots, kills),
the index and near-duplicate buckets a start ends up with must equal a rebuild from the items."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from unittest.mock import patch

import anyio
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from compactor.errors import InvalidArgumentError
from compactor.search import index as index_mod
from compactor.search import mapped as memory_map
from compactor.store import Store
from compactor.store import journaled as journaled_mod
from tests.support.old_tokenizer import tokenizer_version

# Two state machines of 25 steps: about 15 s of the quick loop.
pytestmark = pytest.mark.slow

WORDS = ["quokka", "wombat", "numbat", "bilby", "dingo", "emu", "koala", "possum"]
WORDS += ["连接池", "トークン", "데이터", "डेटाबेस", "ฐานข้อมูล"]  # what tokenizer version 1 made other terms of
WORDS += ["cafe\u0301", "Re\u0301sume\u0301", "\u1100\u1161\u11ab"]  # and version 2: decomposed (NFD) text
WORDS += ["Running", "src/pools.py", "pool_sizes"]  # version 3 made no stem terms; 4 counted a compound's parts
WORDS += ["went", "Children"]  # and version 5 no base stem for an irregular form
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

    @rule(background_first=st.booleans(), version=st.sampled_from([1, 2, 3, 4, 5]))
    def start_after_an_older_tokenizer(self, background_first: bool, version: int) -> None:
        """The state dir as an older compactor left it, its saved index made by tokenizer
        version 1 (CJK runs as whole terms), 2 (decomposed accents as typed), 3 (no stem terms),
        4 (a field's length counted a compound's parts) or 5 (no base stem for "went"): a start
        re-indexes the items this version tokenizes or measures otherwise on top of it, or
        rebuilds the index."""
        self.store.close()
        with tokenizer_version(version):
            old = Store(state_dir=self.dir)
            old.rebuild_and_snapshot()
            if background_first:
                old.store("a write after the full snapshot 连接池 cafe\u0301")
                anyio.run(old.snapshot_async)
            old.close()
        self.store = Store(state_dir=self.dir)

    @invariant()
    def derived_structures_match_a_rebuild(self) -> None:
        assert self.store.check_derived() == []


TestReindexing = Reindexing.TestCase
TestReindexing.settings = settings(max_examples=80, stateful_step_count=25, deadline=None)


class ReindexingUnderPressure(Reindexing):
    """The same, with this process's pages of the index file unmapped after every op (as a large
    transaction does every INDEX_FILE_RELEASE_OPS), and the index settling, which folds new
    documents' terms into its flat array, once a few terms wait: what a loaded index reads
    after a release, and what it settles onto the file's arrays, must still equal a rebuild."""

    releases = 0

    def __init__(self) -> None:
        release = memory_map.release

        def counted(mapped: object) -> None:
            type(self).releases += 1
            release(mapped)  # type: ignore[arg-type]

        self._patches = [
            patch.object(journaled_mod, "INDEX_FILE_RELEASE_OPS", 1),
            patch.object(index_mod, "INDEX_SETTLE_MIN", 8),
            patch.object(memory_map, "release", counted),
        ]
        for p in self._patches:
            p.start()
        super().__init__()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            for p in reversed(self._patches):
                p.stop()


TestReindexingUnderPressure = ReindexingUnderPressure.TestCase
TestReindexingUnderPressure.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


def test_the_pressured_machine_releases_pages_of_a_loaded_index():
    """The machine above tests reads after a release only if its steps release: a full snapshot
    adopts the file it wrote, and the next write releases its pages."""
    machine = ReindexingUnderPressure()
    try:
        before = ReindexingUnderPressure.releases
        machine.store_some("quokka wombat", 3)
        machine.full_snapshot()
        machine.edit(1, "numbat dingo")
        machine.compact(0.3)
        machine.derived_structures_match_a_rebuild()
        assert ReindexingUnderPressure.releases > before
    finally:
        machine.teardown()
