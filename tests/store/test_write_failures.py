"""A write that fails at any step leaves memory and disk as they were (issue 38, point 1): a
state machine stores, forgets and snapshots while the Nth file write from now fails, and after
every step what a fresh load reads from the state dir equals what the store holds in memory."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from compactor.errors import PersistenceError
from compactor.store import Store

_REAL_OPEN = os.open


class _FailingDisk:
    """Fails the `after`-th file opened for writing in `root` from now, and every one after it
    until `heal`: a disk that fills up at that step (renames need no new blocks and go on)."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.left: int | None = None

    def fail_after(self, writes: int) -> None:
        self.left = writes

    def heal(self) -> None:
        self.left = None

    def _writing(self, path: Any) -> None:
        if self.left is None or not str(path).startswith(self.root) or str(path).endswith("lock"):
            return
        if self.left <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        self.left -= 1

    def open(self, path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR):
            self._writing(path)
        return _REAL_OPEN(path, flags, *args, **kwargs)


def _contents(store: Store) -> dict[str, str]:
    return {i: store.get(i).content for i in store.ids()}


def _on_disk(state_dir: Path) -> dict[str, str]:
    fresh = Store(state_dir=state_dir)
    try:
        return _contents(fresh)
    finally:
        fresh.close()


class WriteFailures(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="compactor-writefail-"))
        self.disk = _FailingDisk(self.dir)
        os.open = self.disk.open  # type: ignore[assignment]
        self.store = Store(state_dir=self.dir)
        self.model: dict[str, str] = {}
        self.n = 0

    def _attempt(self, fails_after: int | None, action: Any, *, write: bool = True) -> bool:
        """Run `action` with the disk failing after `fails_after` writes; True if it succeeded."""
        before = _contents(self.store)
        if fails_after is not None:
            self.disk.fail_after(fails_after)
        try:
            action()
            return True
        except PersistenceError:
            if fails_after is None:
                raise
            assert _contents(self.store) == before  # memory as it was
            if write:  # a refused write says so in status (a snapshot is no write of its own)
                assert self.store.status().persistence["state"] == "read-only"
            return False
        finally:
            self.disk.heal()

    @rule(fails_after=st.none() | st.integers(0, 6))
    def store_one(self, fails_after: int | None) -> None:
        self.n += 1
        text = f"note {self.n} about the invoice service"
        out: list[str] = []
        if self._attempt(fails_after, lambda: out.append(self.store.store(text).item.id)):
            self.model[out[0]] = text

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), fails_after=st.none() | st.integers(0, 8))
    def forget(self, data: st.DataObject, fails_after: int | None) -> None:
        victim = data.draw(st.sampled_from(sorted(self.model)))
        if self._attempt(fails_after, lambda: self.store.forget(victim)):
            del self.model[victim]

    @rule(fails_after=st.none() | st.integers(0, 8))
    def snapshot(self, fails_after: int | None) -> None:
        self._attempt(fails_after, self.store.snapshot, write=False)

    @invariant()
    def memory_is_what_was_acknowledged_and_what_is_on_disk(self) -> None:
        assert _contents(self.store) == self.model
        assert _on_disk(self.dir) == self.model

    def teardown(self) -> None:
        os.open = _REAL_OPEN
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


WriteFailures.TestCase.settings = settings(
    max_examples=25, stateful_step_count=12, deadline=None, suppress_health_check=list(HealthCheck)
)
test_a_write_failing_at_any_step_leaves_memory_equal_to_disk = pytest.mark.slow(WriteFailures.TestCase)


def test_a_refused_forget_deletes_nothing_and_says_why(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Store(state_dir=state_dir)
    ids = [s.store(f"invoice {i} due friday").item.id for i in range(20)]
    on_disk = {p.name: p.read_bytes() for p in state_dir.iterdir() if p.name != "lock"}
    disk = _FailingDisk(state_dir)
    monkeypatch.setattr(os, "open", disk.open)
    disk.fail_after(0)
    with pytest.raises(PersistenceError, match=r"^Could not forget .*nothing was deleted.*read-only") as refused:
        s.forget(ids[3])
    assert str(refused.value).count(". ") == 0 and str(refused.value).endswith("retry.")  # one sentence
    assert sorted(s.ids()) == sorted(ids) and s.get(ids[3]).content == "invoice 3 due friday"
    assert {h.item.id for h in s.query("invoice friday", limit=50)} == set(ids)  # the index was undone too
    assert s.status().persistence["state"] == "read-only"
    assert s.forget_ledger() == []
    assert {p.name: p.read_bytes() for p in state_dir.iterdir() if p.name != "lock"} == on_disk
    with pytest.raises(PersistenceError, match="read-only"):  # refused while the disk is full
        s.forget(ids[4])
    disk.heal()
    s.forget(ids[3])  # and done once it is not
    assert s.status().persistence["state"] == "saving"
    s.close()
    assert sorted(Store(state_dir=state_dir).ids()) == sorted(i for i in ids if i != ids[3])


def test_a_forget_refused_because_another_server_moved_on_is_not_a_full_disk(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore (or another writer) noticed while a forget wrote its snapshot: nothing was
    deleted and the call may be retried at once. It said memory was read-only and to free disk
    space, and stayed read-only."""
    from compactor.errors import WriteConflictError
    from compactor.store.journaled import _Journaled

    s = Store(state_dir=state_dir)
    ids = [s.store(f"invoice {i} due friday").item.id for i in range(5)]
    real = _Journaled._write_snapshot_locked
    calls = 0

    def moved_on(self: _Journaled, *args: object, **kwargs: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise WriteConflictError(
                "Memory moved on under this call (a restore?); this call was not applied. Retry it."
            )
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_Journaled, "_write_snapshot_locked", moved_on)
    with pytest.raises(WriteConflictError, match="Retry it"):
        s.forget(ids[1])
    assert sorted(s.ids()) == sorted(ids) and s.status().persistence["state"] == "saving"
    assert s.forget_ledger() == []
    s.forget(ids[1])
    assert ids[1] not in s.ids() and [e["id"] for e in s.forget_ledger()] == [ids[1]]
    s.close()
