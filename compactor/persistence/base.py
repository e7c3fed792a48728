"""Where the Store keeps its journal and snapshots: the one small interface the core persists
through (`Persistence`), what a load reads (`Loaded`), and the re-entrant writers' lock both
implementations share (`ReentrantLock`). The implementations are the state dir
(`compactor.persistence.statedir.StateDir`) and PostgreSQL
(`compactor.persistence.postgres.PgBackend`); the Store never asks which one it has.

Both keep the same event-sourced design: every call's ops are one journal entry, written after
the writer caught up with every entry before it, under a lock the writers share; a snapshot
plus the entries after it is the whole state; a snapshot of the next generation that drops
history (`snapshot_now`, used by forget and repairs) makes every other process reload.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..models import Item, Op


@dataclass(slots=True)
class Loaded:
    """What startup (or a reload after another process rotated the journal) reads from disk."""

    snapshot: dict[str, Any] | None
    batches: list[list[Op]]
    gen: int
    offset: int
    warnings: list[str] = field(default_factory=list)


class ReentrantLock:
    """The writers' lock, re-entrant within one process and thread: only the outermost hold
    takes it (`_acquire`) and gives it back (`_release`)."""

    _lock_depth: int = 0
    # How long taking the lock may wait, where the backend can bound it (PostgreSQL); the
    # Store sets it before each hold.
    lock_wait_s: float | None = None

    def _acquire(self, exclusive: bool) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def locked(self, exclusive: bool = True, *, own: bool = False) -> Iterator[None]:
        """Hold the writers' lock around a critical section; re-entrant. A hold by another
        thread of this process is joined, unless `own`: a write (whose call lock is let go
        while it waits, `store.journaled._locked`) must not ride on a read's hold, which ends
        when the read does, so it waits for that hold to end and takes the lock itself. (A read
        may join a write's hold: the write waits for the call lock the read holds.)"""
        me = threading.get_ident()
        if own:
            # Bounded: a hold that does not end soon is one this write's own work depends on (a
            # snapshot thread's), which it joins as before.
            deadline = time.monotonic() + OWN_WAIT_S
            with _RELEASED:
                while self._lock_depth and self.__dict__.get("_owner") != me:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    _RELEASED.wait(left)
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        self._acquire(exclusive)
        self._lock_depth = 1
        self.__dict__["_owner"] = me
        try:
            yield
        finally:
            self._lock_depth = 0
            self.__dict__["_owner"] = None
            self._release()
            with _RELEASED:
                _RELEASED.notify_all()


# How long a write waits for another thread's hold to end before it joins it (a read's takes
# milliseconds).
OWN_WAIT_S = 1.0
# Signalled whenever an outer hold ends, for writes waiting to take the lock themselves.
_RELEASED = threading.Condition()


class Persistence(Protocol):
    """What `store.journaled` needs of a place to keep memory. `gen` and `offset` say how far
    this process has read: a generation that changes only when history was rewritten, and a
    position inside it (journal bytes, or the last sequence number applied)."""

    gen: int
    offset: int
    last_snapshot_at: float | None
    last_snapshot_seconds: float | None
    # How long the next `locked()` may wait for another writer, where the backend can bound it.
    lock_wait_s: float | None

    @property
    def is_open(self) -> bool: ...

    def close(self) -> None: ...

    def locked(self, exclusive: bool = True, *, own: bool = False) -> AbstractContextManager[None]:
        """Hold the writers' lock (re-entrant): no other process appends meanwhile."""
        ...

    def reading(self) -> AbstractContextManager[None]:
        """What a read-only call holds while it catches up."""
        ...

    def load(self) -> Loaded:
        """Snapshot + every journal entry after it. Call under the lock."""
        ...

    def journal_changed(self) -> bool:
        """Whether another process wrote since we last read (cheap: no full read)."""
        ...

    def read_new(self) -> list[list[Op]] | None:
        """Entries other processes wrote since ours; None if history was rewritten and the
        caller must reload."""
        ...

    def read_across_rotation(self) -> list[list[Op]] | None:
        """After `read_new` returned None: the entries that bring memory to the new history
        without a reload (another process's checkpoint held nothing we had not seen or
        will not read here); None if memory must be reloaded."""
        ...

    def append(self, ops: list[Op], *, sync: bool = True) -> None:
        """One call's ops as one entry, durable before returning when `sync`; raises
        PersistenceError (and stores nothing) if it cannot."""
        ...

    def snapshot_now(self, header: dict[str, Any], items: list[Item]) -> None:
        """Under the lock: save a snapshot of everything applied and start generation
        `gen + 1` with no history before it; no older snapshot or entry keeps any byte."""
        ...

    def write_pending_snapshot(self, header: dict[str, Any], items: list[Item]) -> None:
        """In a worker thread, without the lock: write a snapshot not yet in use."""
        ...

    def install_pending_snapshot(
        self, gen: int, offset: int, keep_index: str | None = None
    ) -> Callable[[], None] | None:
        """Under the lock, once caught up and still at generation `gen`: put the pending
        snapshot (which holds everything up to `offset`, and names the index file
        `keep_index` if not None) in use. Returns cleanup to run off the event loop, or None:
        deleting what no snapshot names any more (the replaced snapshot, index files) frees
        blocks, which every call's journal fsync would wait behind if it were done under the
        lock."""
        ...

    def discard_pending_snapshot(self) -> None: ...

    def remove_dead_temp_files(self) -> None:
        """Drop pending snapshots whose writer is gone."""
        ...

    def purge_kept_aside(self, needles: Sequence[bytes]) -> list[str]:
        """Under the lock, after a forget: take every line holding one of `needles` out of the
        files `compactor doctor --repair` kept aside, so no file keeps a forgotten item.
        Returns the names of the files changed."""
        ...

    def save_index(self, gen: int, arrays: Mapping[str, memoryview]) -> dict[str, Any]:
        """Save the search index's arrays for the snapshot of generation `gen` and return the
        small reference the snapshot's header keeps (`"index_file"`: name, size, CRC-32). A
        snapshot whose header names a reference keeps those arrays for as long as it is in
        use, a background snapshot naming an older one included. The arrays are read no later
        than the `snapshot_now` that follows. Raises OSError."""
        ...

    def load_index(self, ref: Mapping[str, Any], *, verify: bool = True) -> dict[str, memoryview]:
        """The arrays `save_index` saved under `ref`, read-only; raises IndexFileError if they
        are missing or damaged (the index is then rebuilt from the items). `verify=False`:
        arrays this process has just saved, whose checksum need not be read back."""
        ...

    def keep_only_index(self, name: str | None) -> None:
        """Drop saved index arrays other than `name`'s: no snapshot names them any more."""
        ...

    def append_ledger(self, entries: list[dict[str, Any]]) -> None: ...

    def read_ledger(self) -> list[dict[str, Any]]: ...

    def ledger_count(self) -> int: ...

    def describe(self) -> dict[str, Any]:
        """Where memory is kept and how big its journal is, for `status`."""
        ...
