"""The forget ledger: what `forget` and `prune` removed (ids, when, why, and who where a caller
is known; never content), read newest last, at a cost of the entries asked for."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from compactor.persistence import files
from compactor.store import Store
from compactor.store.access import Caller


def test_a_forget_made_by_a_person_names_them_and_one_made_by_anyone_does_not(tmp_path: Path):
    store = Store(state_dir=tmp_path / "state")
    try:
        a = store.store("note one about the cache keys").item.id
        b = store.store("note two about the retry budget").item.id
        with store.serving(caller=Caller.of("alice", ["*"], write=True)):
            store.forget(a)
        store.forget(b)
        newest = store.forget_ledger()
        assert [(e["id"], e["reason"], e.get("by")) for e in newest] == [(a, "forget", "alice"), (b, "forget", None)]
        assert all("cache" not in str(e) and "retry" not in str(e) for e in newest)
    finally:
        store.close()
    reopened = Store(state_dir=tmp_path / "state")  # the same from disk
    try:
        assert [e.get("by") for e in reopened.forget_ledger()] == ["alice", None]
    finally:
        reopened.close()


def test_the_newest_entries_are_read_from_the_end_of_a_long_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A state dir's ledger holds a line per item ever forgotten or pruned: reading the newest
    few read the whole file (20 MB here) on every call of the page and the tool."""
    store = Store(state_dir=tmp_path / "state")
    try:
        backend = store._backend
        assert backend is not None
        entries = [{"id": f"id{n:07d}", "reason": "prune", "at": 1_700_000_000.0 + n} for n in range(300_000)]
        for k in range(0, len(entries), 50_000):
            backend.append_ledger(entries[k : k + 50_000])
        ledger = tmp_path / "state" / "forget-ledger.jsonl"
        assert ledger.stat().st_size > 15_000_000, sorted(p.name for p in (tmp_path / "state").iterdir())
        read = 0
        real_fdopen = os.fdopen

        class Counting(io.RawIOBase):
            def __init__(self, fh: Any) -> None:
                self.fh = fh

            def read(self, n: int = -1) -> bytes:
                nonlocal read
                data = self.fh.read(n)
                read += len(data)
                return data

            def seek(self, offset: int, whence: int = 0) -> int:
                return int(self.fh.seek(offset, whence))

            def __exit__(self, *exc: object) -> None:
                self.fh.close()

        monkeypatch.setattr(files.os, "fdopen", lambda fd, mode="r": Counting(real_fdopen(fd, mode)))
        newest = store.forget_ledger(limit=25)
        assert newest == entries[-25:]
        assert read < 200_000, read
        assert store.forget_ledger(limit=100_000) == entries[-100_000:]
    finally:
        store.close()
