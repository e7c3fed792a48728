"""A process catches up across another's checkpoint from the journal it replaced, without a
reload (issue 38, point 13), and still reloads after a purge: a state machine of two stores on
one state dir, one writing and snapshotting, the other reading, checked against a fresh load."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from compactor.persistence import statedir
from compactor.store import Store


class TwoProcesses(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="compactor-catchup-"))
        self.writer = Store(state_dir=self.dir)
        self.reader = Store(state_dir=self.dir)
        self.reloads = 0
        self.purged = False
        real = self.reader._reload

        def counted() -> None:
            self.reloads += 1
            real()

        self.reader._reload = counted  # type: ignore[method-assign]
        self.n = 0

    @rule(count=st.integers(1, 3))
    def store(self, count: int) -> None:
        for _ in range(count):
            self.n += 1
            self.writer.store(f"note {self.n} about the invoice service")

    @precondition(lambda self: bool(self.writer.ids()))
    @rule(data=st.data())
    def update(self, data: st.DataObject) -> None:
        self.writer.update(data.draw(st.sampled_from(sorted(self.writer.ids()))), summary="changed")

    @precondition(lambda self: bool(self.writer.ids()))
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        self.writer.forget(data.draw(st.sampled_from(sorted(self.writer.ids()))))
        self.purged = True

    @rule()
    def snapshot(self) -> None:
        self.writer.snapshot()

    @rule()
    def background_snapshot(self) -> None:
        anyio.run(self.writer.snapshot_async)

    @rule()
    def reader_writes(self) -> None:
        self.n += 1
        self.reader.store(f"note {self.n} written by the reader")

    @invariant()
    def the_reader_sees_what_is_on_disk_and_reloads_only_after_a_purge(self) -> None:
        before = self.reloads
        seen = {i: (self.reader.get(i).content, self.reader.get(i).summary) for i in self.reader.ids()}
        fresh = Store(state_dir=self.dir)
        try:
            assert seen == {i: (fresh.get(i).content, fresh.get(i).summary) for i in fresh.ids()}
            # The reader's search index was kept up by the ops it applied, not rebuilt.
            assert {h.item.id for h in self.reader.query("invoice", limit=100)} == {
                h.item.id for h in fresh.query("invoice", limit=100)
            }
        finally:
            fresh.close()
        if not self.purged:
            assert self.reloads == before == 0, "reloaded after a checkpoint"
        self.purged = False
        self.reloads = 0

    def teardown(self) -> None:
        self.writer.close()
        self.reader.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TwoProcesses.TestCase.settings = settings(
    max_examples=30, stateful_step_count=15, deadline=None, suppress_health_check=list(HealthCheck)
)
test_a_reader_catches_up_across_checkpoints_and_reloads_after_purges = pytest.mark.slow(TwoProcesses.TestCase)


def test_a_purge_leaves_no_copy_of_the_journal_it_replaced(state_dir: Path):
    s = Store(state_dir=state_dir)
    secret = s.store("the vault phrase is quokka-sunrise-42").item.id
    s.snapshot()  # a checkpoint keeps the journal it replaced ...
    [kept] = [p for p in state_dir.iterdir() if p.name.startswith("journal.prev.")]
    assert b"quokka-sunrise-42" in kept.read_bytes()
    s.forget(secret)  # ... and a purge drops it
    s.close()
    for path in state_dir.iterdir():
        assert b"quokka-sunrise-42" not in path.read_bytes(), path.name


def test_a_reader_a_few_rotations_behind_catches_up_and_one_further_behind_reloads(state_dir: Path):
    writer, reader = Store(state_dir=state_dir), Store(state_dir=state_dir)
    reloads: list[int] = []
    real = reader._reload
    reader._reload = lambda: (reloads.append(1), real())[-1]  # type: ignore[method-assign]
    for rotations, reloaded in ((4, False), (5, True)):
        for k in range(rotations):
            writer.store(f"written before rotation {k} of {rotations}")
            writer.snapshot() if k % 2 else anyio.run(writer.snapshot_async)
        reloads.clear()
        assert sorted(reader.ids()) == sorted(writer.ids())
        assert bool(reloads) is reloaded, rotations
    writer.close()
    reader.close()


def test_the_kept_generations_stay_under_their_byte_bound(state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(statedir, "KEPT_JOURNAL_BYTES", 3_000)
    writer, reader = Store(state_dir=state_dir), Store(state_dir=state_dir)
    for k in range(6):
        writer.store(f"note {k} " + "word " * 150)  # ~1 KB a generation
        writer.snapshot()
        kept = [p for p in state_dir.iterdir() if p.name.startswith("journal.prev.")]
        assert sum(p.stat().st_size for p in kept) <= 3_000
    writer.store("too big to keep " + "word " * 1_000)
    writer.snapshot()
    assert sorted(reader.ids()) == sorted(writer.ids())  # further behind than kept: a reload, still right
    writer.close()
    reader.close()
