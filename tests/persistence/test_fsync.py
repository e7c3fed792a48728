"""An acknowledged write is on the disk: the fsyncs a Store makes, recorded (tests/support/fsync_log.py).

A killed process's writes survive in the operating system's cache, so the kill tests cannot see
a missing fsync; these tests read the calls instead. Through the store API, after every call:
the journal bytes past its last fsync are access times only, a journal line with a change is
synced before the next one is written, and every state file created or renamed is followed by
an fsync of the state dir."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from compactor.persistence import statedir as statedir_mod
from compactor.persistence.statedir import JOURNAL, LOCK, SNAPSHOT
from compactor.store import Store, StoreInput
from tests.conftest import FakeClock
from tests.support.fsync_log import Log, check_dir_synced, check_reply, check_unsynced_writes, recorders


@pytest.fixture
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Log:
    path = tmp_path / "fsync.log"
    for name, fn in recorders(path).items():
        monkeypatch.setattr(os, name, fn)
    return Log(path)


def check_all(log: Log, state_dir: Path, what: str) -> None:
    check_reply(log, state_dir, what)
    check_unsynced_writes(log)
    check_dir_synced(log, state_dir)


def test_each_acknowledged_store_is_synced_before_it_returns(log: Log, state_dir: Path, clock: FakeClock) -> None:
    s = Store(state_dir=state_dir, clock=clock)
    try:
        for i in range(5):
            s.store(f"decision {i}: keep the journal fsynced", tags="durability")
            check_reply(log, state_dir, f"store {i}")
        s.bulk_store([StoreInput(f"bulk {i}") for i in range(3)])
        check_reply(log, state_dir, "bulk_store")
        assert check_unsynced_writes(log) == 6  # one synced journal line per call
    finally:
        s.close()


def test_access_times_are_written_unsynced_and_are_never_the_only_record_of_a_change(
    log: Log, state_dir: Path, clock: FakeClock
) -> None:
    s = Store(state_dir=state_dir, clock=clock)
    try:
        item = s.store("the access time of this item changes on every query").item
        size = (state_dir / JOURNAL).stat().st_size
        assert [h.item.id for h in s.query("access time")] == [item.id]
        # The query's access-time line was written without an fsync: the check sees an unsynced
        # tail, and it holds access times only.
        assert (state_dir / JOURNAL).stat().st_size > size
        unsynced = [e for e in log.events() if e["ev"] == "write"][-1]
        assert '"last_accessed_at"' in unsynced["data"]
        check_all(log, state_dir, "query")
        s.update(item.id, importance=9)  # a change after an unsynced line syncs both
        check_all(log, state_dir, "update")
    finally:
        s.close()


def test_rotation_snapshot_and_lock_file_are_followed_by_a_directory_sync(
    log: Log, state_dir: Path, clock: FakeClock
) -> None:
    s = Store(state_dir=state_dir, clock=clock)
    try:
        a = s.store("forgotten soon").item
        s.store("kept")
        s.snapshot()
        assert JOURNAL in check_dir_synced(log, state_dir)  # the rotation's rename, synced by itself
        s.forget(a.id)  # a snapshot, a rotation and the forget ledger's first line
        names = check_dir_synced(log, state_dir)
        assert {LOCK, JOURNAL, SNAPSHOT, statedir_mod.FORGET_LEDGER} <= set(names), names
        check_all(log, state_dir, "forget")
    finally:
        s.close()


def test_a_lock_file_made_again_at_start_is_followed_by_a_directory_sync(
    log: Log, state_dir: Path, clock: FakeClock
) -> None:
    """A fresh state dir syncs its directory when it writes its first journal anyway; a state dir
    copied without its lock file writes no journal at start, so the lock's own sync is all."""
    s = Store(state_dir=state_dir, clock=clock)
    s.store("in the journal")
    s.close()
    (state_dir / LOCK).unlink()
    log.path.unlink()
    s = Store(state_dir=state_dir, clock=clock)
    try:
        assert check_dir_synced(log, state_dir) == [LOCK]
    finally:
        s.close()


class Durability(RuleBasedStateMachine):
    """Any sequence of calls, with background-free snapshots and restarts between them: after
    each, what it acknowledged is synced and every new name in the state dir is too."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="compactor-fsync-"))
        self.state_dir = self.tmp / "state"
        self.log = Log(self.tmp / "fsync.log")
        self.saved = {name: getattr(os, name) for name in recorders(self.log.path)}
        for name, fn in recorders(self.log.path).items():
            setattr(os, name, fn)
        self.clock = FakeClock()
        self.store = Store(state_dir=self.state_dir, clock=self.clock)
        self.ids: list[str] = []
        self.last = "open"

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            for name, fn in self.saved.items():
                setattr(os, name, fn)
            shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(text=st.text(alphabet="abcdefgh xyz", min_size=1, max_size=40).filter(str.strip))
    def store_one(self, text: str) -> None:
        self.ids.append(self.store.store(text).item.id)
        self.last = "store"

    @rule(n=st.integers(1, 4))
    def bulk(self, n: int) -> None:
        self.ids += [it.id for it in self.store.bulk_store([StoreInput(f"bulk item {k}") for k in range(n)]).items]
        self.last = "bulk_store"

    @rule(word=st.sampled_from(["abc", "bulk", "item", "xyz"]))
    def query(self, word: str) -> None:
        self.store.query(word)
        self.last = "query"

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def update(self, data: Any) -> None:
        item_id = data.draw(st.sampled_from(self.ids))
        if item_id in self.store._s.items:
            self.store.update(item_id, importance=data.draw(st.integers(1, 10)))
        self.last = "update"

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def forget(self, data: Any) -> None:
        item_id = data.draw(st.sampled_from(self.ids))
        self.ids.remove(item_id)
        if item_id in self.store._s.items:
            self.store.forget(item_id)
        self.last = "forget"

    @rule()
    def snapshot(self) -> None:
        self.store.snapshot()
        self.last = "snapshot"

    @rule()
    def restart(self) -> None:
        self.store.close()
        self.store = Store(state_dir=self.state_dir, clock=self.clock)
        self.last = "restart"

    @invariant()
    def acknowledged_is_synced(self) -> None:
        check_all(self.log, self.state_dir, self.last)


Durability.TestCase.settings = settings(max_examples=12, stateful_step_count=12, deadline=None)
test_durability_of_any_sequence_of_calls = Durability.TestCase
