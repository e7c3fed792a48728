"""max_items, max_archive_tokens with the forget ledger, and degraded mode on disk failure."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import orjson
import pytest

from compactor.errors import PersistenceError
from compactor.store import Store, StoreInput


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


def _fail_writes(monkeypatch: pytest.MonkeyPatch, err: int, state_dir: Path) -> None:
    """Every write into the state dir fails, as on a full or read-only disk."""
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).startswith(str(state_dir)) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_disk_failure_errors_once_then_serves_from_memory_and_recovers(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, err: int
):
    s = Store(state_dir=state_dir)
    first = s.store("saved before the failure").item.id
    on_disk = {p.name: p.read_bytes() for p in state_dir.iterdir()}
    _fail_writes(monkeypatch, err, state_dir)
    with pytest.raises(PersistenceError, match="not applied"):
        s.store("this call fails")
    assert s.ids() == [first]
    assert s.degraded
    # Later calls keep working from memory and say so in status.
    mem = s.store("kept in memory while the disk is bad").item.id
    st = s.status().persistence
    assert st["degraded"] is True and st["unsaved_calls"] >= 1
    # Nothing on disk was corrupted meanwhile.
    for name, data in on_disk.items():
        if name != "lock":
            assert (state_dir / name).read_bytes() == data
    monkeypatch.undo()
    # The disk is back: the next call saves everything and degraded mode ends.
    after = s.store("after recovery").item.id
    assert s.degraded is None and s.status().persistence["unsaved_calls"] == 0
    s.close()
    again = Store(state_dir=state_dir)
    assert set(again.ids()) == {first, mem, after}


def test_failed_bulk_store_is_all_or_nothing(state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    s = Store(state_dir=state_dir)
    _fail_writes(monkeypatch, errno.ENOSPC, state_dir)
    with pytest.raises(PersistenceError):
        s.bulk_store([StoreInput(words(i)) for i in range(10)])
    assert len(s) == 0


def test_writes_kept_in_memory_survive_another_process_rotating_the_journal(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    a = Store(state_dir=state_dir)
    b = Store(state_dir=state_dir)
    a.store("before")
    real_append = type(a._dir).append  # type: ignore[union-attr]

    def failing_append(self, ops, *, sync=True):  # type: ignore[no-untyped-def]
        if self is a._dir:
            raise PersistenceError("No space left on device (simulated)")
        return real_append(self, ops, sync=sync)

    monkeypatch.setattr(type(a._dir), "append", failing_append)
    monkeypatch.setattr(a, "_recover", lambda: False)
    with pytest.raises(PersistenceError):
        a.store("fails once")
    kept = a.store("acknowledged while degraded").item.id
    b.store("from the other process")
    b.snapshot()  # rotates the journal: a must reload
    a.query("anything")
    assert a.get(kept).content == "acknowledged while degraded"
    monkeypatch.undo()
    assert a._recover()
    a.close()
    b.close()
    again = Store(state_dir=state_dir)
    contents = {again.get(i).content for i in again.ids()}
    assert {"before", "acknowledged while degraded", "from the other process"} <= contents
