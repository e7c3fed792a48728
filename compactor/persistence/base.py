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

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import WouldWaitError, WriteLockTimeoutError
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
    """The writers' lock: one thread of a process holds it at a time (re-entrant in that
    thread), and only its outermost hold takes it from other processes (`_acquire`) and gives
    it back (`_release`).

    A read may be a `guest` of another thread's hold instead of waiting for it to end: that is
    safe because every hold of a Store is used and ended under the Store's call lock, which the
    guest holds meanwhile (so the holder is parked until the guest leaves), and it is needed,
    because a write holding this lock waits for that call lock, which the read holds. A guest
    never joins a hold still being taken (the holder may not get it). Any other thread waits
    for the hold to end, at most `lock_wait_s` when that is set, then WriteLockTimeoutError
    (WouldWaitError when it was asked not to wait at all: `wait_s=0`)."""

    _lock_depth: int = 0  # the holder's nesting; 0 when nobody holds the lock
    _holder: int | None = None  # the thread that holds it, or is taking it
    _taking: bool = False  # the holder is still waiting for other processes
    # How long taking the lock may wait for another holder (another thread, and where the
    # backend can bound it another process); the Store sets it before each hold.
    lock_wait_s: float | None = None
    # What is left of the wait when the holder takes the lock from other processes: written by
    # the holder alone (one at a time), read by `_acquire`.
    _acquire_wait_s: float | None = None
    _asked_wait_s: float | None = None  # the whole wait of that call, for its message
    # How many holds in a row may pass from one thread of this process to the next in line
    # without letting other processes in (0: every hold takes the lock from them anew). A
    # backend whose taking and giving back cost round trips sets it.
    hand_offs_max: int = 0
    _hand_offs: int = 0  # holds passed on in a row so far
    _warm: bool = False  # a hold was passed on: the next taker holds it from other processes already

    def _acquire(self, exclusive: bool) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError

    @property
    def held_here(self) -> bool:
        """Whether the calling thread holds the lock (not as a guest)."""
        return self._holder == threading.get_ident() and not self._taking

    def hand_over(self, thread: int) -> None:
        """Make `thread` the holder of this hold: a coroutine's hold is taken on one worker
        thread, used on the event loop's and ended on another worker thread."""
        with _HOLDS:
            if self._holder is not None and not self._taking:
                self._holder = thread

    @contextlib.contextmanager
    def locked(self, exclusive: bool = True, *, guest: bool = False, wait_s: float | None = None) -> Iterator[None]:
        """Hold the writers' lock around a critical section (see the class docstring), waiting
        at most `wait_s` (given per call: threads ask for different waits), else `lock_wait_s`."""
        me = threading.get_ident()
        wait = self.lock_wait_s if wait_s is None else wait_s
        deadline = None if wait is None else time.monotonic() + wait
        ticket: _Ticket | None = None  # this thread's place in line, once it has to wait
        with _HOLDS:
            line: collections.deque[_Ticket] = self.__dict__.setdefault("_line", collections.deque())
            while True:
                if self._holder == me:
                    self._lock_depth += 1
                    how = "nested"
                    break
                # First come, first served: with dozens of writers waiting, taking turns at
                # random left some waiting for seconds.
                if self._holder is None and (not line or line[0] is ticket):
                    if ticket is not None:
                        line.popleft()
                    self._holder, self._taking = me, True
                    how = "take"
                    warm, self._warm = self._warm, False
                    break
                if guest and self._holder is not None and not self._taking:
                    if ticket is not None:  # in line no more: a guest takes nothing
                        self._leave_line(line, ticket)
                    how = "guest"
                    break
                if ticket is None:
                    ticket = _Ticket(guest)
                    line.append(ticket)
                # A guest waits for a hold being taken, which that taker's own wait bounds,
                # unless it gives a wait of its own.
                left = None if deadline is None or (guest and wait_s is None) else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._leave_line(line, ticket)
                    raise (WouldWaitError if wait == 0 else WriteLockTimeoutError)(
                        f"Another call of this server held the writers' lock for more than {wait:g} s; "
                        "this call was not applied. Retry it in a moment."
                    )
                ticket.wait(left)
        if how == "guest":
            yield
            return
        if how == "nested":
            try:
                yield
            finally:
                with _HOLDS:
                    self._lock_depth -= 1
            return
        try:
            if not warm:
                # What is left of the wait is the other processes' share.
                self._asked_wait_s = wait
                # 0: not at all (`_acquire` then tries once).
                self._acquire_wait_s = (
                    0.0 if wait == 0 else None if deadline is None else max(deadline - time.monotonic(), 0.001)
                )
                self._acquire(exclusive)
        except BaseException:
            self._let_go()
            raise
        with _HOLDS:
            self._taking, self._lock_depth = False, 1
            for waiting in self.__dict__.get("_line", ()):
                if waiting.guest:  # they may join the hold now
                    waiting.notify()
        ended_well = False
        try:
            yield
            ended_well = True
        finally:
            self._lock_depth = 0
            if not (ended_well and self._hand_off()):
                self._hand_offs = 0
                try:
                    self._release()
                finally:
                    self._let_go()

    def _hand_off(self) -> bool:
        """Pass the hold to the next thread in line, still held from other processes, when one
        waits and fewer than `hand_offs_max` holds were passed on in a row (then the other
        processes get their turn). The thread woken takes it at once: it is first in line."""
        with _HOLDS:
            line = self.__dict__.get("_line")
            if not line or self._hand_offs >= self.hand_offs_max or not self._still_held():
                self._hand_offs = 0
                return False
            self._hand_offs += 1
            self._warm = True
            self._holder, self._taking, self._lock_depth = None, False, 0
            line[0].notify()
            return True

    def _still_held(self) -> bool:
        """Whether the hold can be passed on as it is (its session, if any, is up)."""
        return True

    def _let_go(self) -> None:
        with _HOLDS:
            self._holder, self._taking, self._lock_depth = None, False, 0
            line = self.__dict__.get("_line")
            if line:
                line[0].notify()  # the next in line takes it; the others wait on

    @staticmethod
    def _leave_line(line: collections.deque[_Ticket], ticket: _Ticket) -> None:
        """Under _HOLDS: `ticket` gives up its place; the one behind it may be first now."""
        was_first = line[0] is ticket
        line.remove(ticket)
        if was_first and line:
            line[0].notify()


# Guards every lock's holder and line (shared by every lock of the process: they are few).
_HOLDS_MUTEX = threading.RLock()
_HOLDS = threading.Condition(_HOLDS_MUTEX)


class _Ticket:
    """A thread's place in a lock's line, woken alone when it may go on: waking every waiter
    on each change cost a server with dozens of writers waiting a sixth of its CPU."""

    __slots__ = ("_cond", "guest")

    def __init__(self, guest: bool) -> None:
        self.guest = guest
        self._cond = threading.Condition(_HOLDS_MUTEX)

    def wait(self, timeout: float | None) -> None:
        self._cond.wait(timeout)

    def notify(self) -> None:
        self._cond.notify()


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
    # Whether catching up is a round trip (a database): such a read never runs on an event loop.
    remote: bool

    @property
    def is_open(self) -> bool: ...

    def close(self) -> None: ...

    def locked(
        self, exclusive: bool = True, *, guest: bool = False, wait_s: float | None = None
    ) -> AbstractContextManager[None]:
        """Hold the writers' lock (re-entrant; `ReentrantLock`): no other process appends
        meanwhile."""
        ...

    def reading(self, wait_s: float | None = None) -> AbstractContextManager[None]:
        """What a read-only call holds while it catches up (waiting at most `wait_s` when given)."""
        ...

    @property
    def held_here(self) -> bool:
        """Whether the calling thread holds the writers' lock (`ReentrantLock`)."""
        ...

    def hand_over(self, thread: int) -> None:
        """Make `thread` the holder of the current hold (`ReentrantLock`)."""
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

    def read_ledger(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` ledger entries, oldest first."""
        ...

    def ledger_count(self) -> int: ...

    def describe(self) -> dict[str, Any]:
        """Where memory is kept and how big its journal is, for `status`."""
        ...
