"""Memory backed by a `Persistence` (a state dir or PostgreSQL; this module does not know which):
load and replay, catching up with other processes (`_sync`), transactions that journal their
ops or undo them (`_Txn`), read-only mode while the store refuses writes, and snapshots.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Self

import anyio
import anyio.to_thread

from .. import constants as C
from ..errors import (
    AmbiguousCommitError,
    CompactorError,
    PersistenceError,
    StateCorruptError,
    WouldWaitError,
    WriteConflictError,
)
from ..models import Item, Op, Settings
from ..persistence.base import Persistence
from ..persistence.codec import SCHEMA_VERSION, ItemRecords
from ..persistence.indexfile import IndexFileError
from ..runtime import Runtime
from ..search.analyze import TERMS_VERSION, terms_changed
from ..search.index import saved_terms_version
from .access import ACCESS_FIELDS, Caller
from .state import _State, _StateOps, dedup_arrays, dedup_state, stale_limit

# A transaction unmaps the index file's pages it has read every this many ops it applies, and at
# its commit if it applied as many (`search.mapped.release`): a compaction's merge of a
# near-duplicate reads ~110 KiB of scattered pages of the file, so at most ~30 MiB of them stay
# resident; a release costs ~2 ms.
INDEX_FILE_RELEASE_OPS: Final = 256

log = logging.getLogger(__name__)


class _IndexLoad:
    """`load` run on a thread of its own from the start; `result` waits for what it returned
    or raises what it raised."""

    def __init__(self, load: Callable[[], dict[str, memoryview]]) -> None:
        self._arrays: dict[str, memoryview] = {}
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._arrays = load()
            except BaseException as exc:  # handed to the thread that waits for it
                self._error = exc

        self._thread = threading.Thread(target=run, name="compactor-index-load", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def result(self) -> dict[str, memoryview]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._arrays


@dataclass(slots=True)
class SavedIndex:
    """The index file on disk, as a snapshot names it: a background snapshot (which writes no
    index) names it again with the ids changed since (`index_stale`), and a load re-indexes
    just those on top of it instead of every item."""

    ref: dict[str, Any]  # header "index_file"
    index: dict[str, Any]  # header "index": the saved index's JSON part, as read (never changed)
    dedup: dict[str, Any]  # header "dedup" (format 2: the buckets' arrays are in the file)


def _ids_or_none(value: object) -> list[str] | None:
    """A snapshot's list of changed ids, or None when it is not one (a damaged header)."""
    return value if isinstance(value, list) and all(isinstance(i, str) for i in value) else None


def _sign(op: Op, caller: Caller) -> None:
    """Record who made `op` (in the journal entry, and on the item: who stored it, who last
    changed it), or refuse a change by a read-only caller. An access a read records is no
    change: it is signed on the entry only."""
    kind = op["op"]
    if kind == "patch" and op["set"].keys() <= ACCESS_FIELDS:
        op["who"] = caller.name
        return
    caller.check_write()
    op["who"] = caller.name
    if kind == "put" and not op["item"].get("stored_by"):
        op["item"]["stored_by"] = caller.name
    elif kind == "patch":
        op["set"]["changed_by"] = caller.name


class _Txn:
    """Ops applied to memory with their undo, journaled together on commit."""

    def __init__(self, store: _Journaled) -> None:
        self._store = store
        self.ops: list[Op] = []
        # What each op replaced, as two lists rather than one of pairs: a compaction applies
        # thousands of ops, and each pair would be one more object for the cyclic collector.
        self._undo_keys: list[str] = []
        self._undo_prev: list[Any] = []
        # Ops applied so far: a large transaction unmaps the index file's pages it has read
        # every INDEX_FILE_RELEASE_OPS of them, and once more at its end.
        self._applied = 0

    def apply(self, ops: list[Op]) -> None:
        store = self._store
        items = store._s.items
        run: list[Op] = []  # consecutive puts of new items, indexed together (`_put_new`)
        run_ids: set[str] = set()
        caller = store._caller
        for op in ops:
            if caller is not None:
                _sign(op, caller)
            self._applied += 1
            if self._applied % INDEX_FILE_RELEASE_OPS == 0:
                store._s.release_index_pages()
            if op["op"] == "put" and (item_id := op["item"]["id"]) not in items and item_id not in run_ids:
                run.append(op)
                run_ids.add(item_id)
                continue
            self._apply_new(run)
            run, run_ids = [], set()
            self._note_undo(op)
            store._apply(op)
            self.ops.append(op)
        self._apply_new(run)

    def _apply_new(self, run: list[Op]) -> None:
        """Puts of items not present: the undo of each is to remove it, whenever it is noted."""
        if not run:
            return
        self._undo_keys.extend(op["item"]["id"] for op in run)
        self._undo_prev.extend([None] * len(run))
        self.ops.extend(run)
        self._store._put_new(run)

    def _note_undo(self, op: Op) -> None:
        store = self._store
        if op["op"] == "config":
            self._undo_keys.append("\x00config")
            self._undo_prev.append(store.settings.to_record())
        else:
            item_id = op["id"] if "id" in op else op["item"]["id"]
            self._undo_keys.append(item_id)
            self._undo_prev.append(store._s.items.get(item_id))

    def commit(self, sync: bool = True) -> None:
        self._store._persist_ops(self.ops, sync)
        if self._applied >= INDEX_FILE_RELEASE_OPS:
            self._store._s.release_index_pages()

    def rollback(self) -> None:
        store = self._store
        for key, prev in zip(reversed(self._undo_keys), reversed(self._undo_prev), strict=True):
            if key == "\x00config":
                store._apply({"op": "config", "set": prev})
                continue
            current = store._s.items.get(key)
            if current is not None:
                store._drop(store._s, current)
            if prev is not None:
                store._put(store._s, prev)
        self._undo_keys.clear()
        self._undo_prev.clear()
        self.ops.clear()


# Set for a call that must not wait (`Store.at_once`): a lock it would wait for raises
# WouldWaitError instead, before the call has done anything.
_AT_ONCE: ContextVar[bool] = ContextVar("compactor_at_once", default=False)
# The holder of a coroutine's hold between two of its threads: no thread has this ident.
_PARKED: Final = -1


class CallLock:
    """The lock every call into memory holds (calls run on worker threads, so sessions
    overlap): re-entrant in its thread, and `suspended` while a write waits for the writers'
    lock, so that reads go on meanwhile."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._depth = 0

    def __enter__(self) -> None:
        me = threading.get_ident()
        if self._owner == me:
            self._depth += 1
            return
        if not self._lock.acquire(blocking=not _AT_ONCE.get()):
            raise WouldWaitError("Another call is using memory; this call was not applied. Retry it in a moment.")
        self._owner, self._depth = me, 1

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if not self._depth:
            self._owner = None
            self._lock.release()

    @property
    def held(self) -> bool:
        return self._owner == threading.get_ident()

    @property
    def depth(self) -> int:
        """How deep the calling thread's holds are nested (0: it holds none)."""
        return self._depth if self.held else 0

    def hand_over(self, thread: int) -> None:
        """Make `thread` the holder (see `_Journaled._locked_off_loop`)."""
        if self._owner is not None:
            self._owner = thread

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Let other threads in for the block (no-op if this thread does not hold it)."""
        if not self.held:
            yield
            return
        depth, self._depth, self._owner = self._depth, 0, None
        self._lock.release()
        try:
            yield
        finally:
            self._lock.acquire()
            self._owner, self._depth = threading.get_ident(), depth


class _ReadGuard:
    """Shared lock + catch-up for read-only calls."""

    def __init__(self, store: _Journaled) -> None:
        self._store = store
        self._cm: Any = None

    def __enter__(self) -> None:
        self._store._calls.__enter__()
        sd = self._store._backend
        if sd is None or not sd.is_open:  # closed: memory as it was last seen
            return
        try:
            # A guest of another thread's hold, if any (`ReentrantLock`); at once, not waiting.
            self._cm = sd.reading(wait_s=0.0 if _AT_ONCE.get() else None)
            self._cm.__enter__()
            self._store._sync()
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            if self._cm is not None:
                self._cm.__exit__(*exc)
        finally:
            self._store._calls.__exit__()


class _Journaled(_StateOps):
    """Memory kept in step with its persistence (state dir or database)."""

    _backend: Persistence | None
    _dirty: bool
    _index_saved: bool = True
    _on_disk: SavedIndex | None
    # Why the last journal write failed; while set, memory is read-only.
    _degraded: str | None
    load_warnings: list[str]
    # Process-wide policy (gc pauses, GIL switch interval) is asked of it, never set here.
    runtime: Runtime
    # Calls run on worker threads (sessions overlap): each holds `_calls` while it uses
    # memory; one thread at a time holds the writers' lock (`ReentrantLock`).
    _calls: CallLock
    # Accesses of queries that found the writers' lock busy, journaled by the next hold.
    _access_pending: Counter[str]
    _access_guard: threading.Lock
    _access_at: float = 0.0
    lock_wait_s: float = C.LOCK_WAIT_S  # how long a write waits for the writers' lock
    # Told (done, total) items while a load indexes items again (an index of an older
    # tokenizer, or none saved): seconds per 10,000 items, worth a progress line on a terminal.
    load_progress: Callable[[int, int], None] | None = None

    def _reload(self) -> None:
        """(Re)build memory from the persistence. Call under the lock."""
        with self.runtime.bulk_work():  # hundreds of thousands of new objects, none of them cyclic garbage
            self._load_state()

    def _load_state(self) -> None:
        assert self._backend is not None
        loaded = self._backend.load()
        snap = loaded.snapshot
        state, settings, derived, on_disk = self._state_from_snapshot(snap)
        saved, changed = on_disk if on_disk is not None else (None, [])
        old_state, old_settings, old_stale = self._s, self.settings, self._index_stale
        self._s, self.settings = state, settings
        self._index_stale = set(changed)
        try:
            for batch in loaded.batches:
                for op in batch:
                    self._apply(op)
        except Exception as exc:
            self._s, self.settings, self._index_stale = old_state, old_settings, old_stale
            if isinstance(exc, CompactorError):
                raise
            raise StateCorruptError(
                f"A journal entry cannot be applied ({type(exc).__name__}: {exc!s:.120}), so compactor will not "
                "build on it: if a newer compactor also serves this memory, upgrade this one; otherwise `compactor "
                "doctor --repair` (with this --state-dir or --database) sets the entry aside. Nothing was changed."
            ) from exc
        self._on_disk = saved
        if snap is not None:  # what a start cost, in the server's log (`--log-level INFO`)
            how = f"the saved one, {len(changed)} re-indexed" if derived else "rebuilt from the items"
            log.info("loaded %d items; search index: %s", len(self._s.items), how)
        for warning in loaded.warnings:
            log.warning("%s", warning)
        self.load_warnings = loaded.warnings
        # A snapshot saved with no index makes the next start rebuild it, and one naming an
        # older index file makes it re-index what changed since: either way the index is
        # worth saving again.
        # An index saved by an older tokenizer is worth saving again too, as this version's.
        older = saved is not None and saved_terms_version(saved.index) != TERMS_VERSION
        self._index_saved = ((derived and not changed) or not self._s.items) and not older

    def _state_from_snapshot(
        self, snap: dict[str, Any] | None
    ) -> tuple[_State, Settings, bool, tuple[SavedIndex, list[str]] | None]:
        """Memory as a snapshot describes it: (state, settings, whether the index saved with
        it was used, and then the index file it used with the ids changed since that file was
        written, re-indexed here). Its items are read one at a time, each freed once its Item
        is made."""
        state = _State()
        settings = Settings(token_budget=C.BUDGET_DEFAULT)
        if not snap:
            return state, settings, False, None
        records: ItemRecords = snap.pop("items")
        on_disk = self._saved_index_of(snap)
        changed = _ids_or_none(snap.pop("index_stale", []))
        loading: _IndexLoad | None = None
        try:
            for key, value in (snap.get("settings") or {}).items():
                if hasattr(settings, key):
                    setattr(settings, key, value)
            loading = self._load_index_file(snap)
            read_ids: list[str] = []
            for record in records:
                item = Item.from_record(record)
                read_ids.append(item.id)
                self._put(state, item, derived=False)
        finally:
            records.close()
            if loading is not None:
                loading.join()
        self._attach_index_file(snap, loading)
        derived = self._restore_derived(state, snap)
        if derived and changed is None:
            log.warning("the snapshot's list of changed ids is damaged; rebuilding the index")
            derived = False
        if derived and changed is not None and state.index.terms_version != TERMS_VERSION:
            changed = [*changed, *self._retokenized(state)]
            state.index.terms_version = TERMS_VERSION  # those are indexed again below, or all rebuilt
        if derived and changed and not self._reindex(state, changed):
            derived = False
        # Checked once all are read, as they arrive one at a time.
        if derived and not self._index_holds(state.index, read_ids):
            log.warning("saved index does not match the items; rebuilding it")
            derived = False
        if not derived:
            self._rebuild_derived(state, self.load_progress)
        return state, settings, derived, ((on_disk, changed or []) if derived and on_disk is not None else None)

    @staticmethod
    def _saved_index_of(snap: dict[str, Any]) -> SavedIndex | None:
        """What a later background snapshot needs to name the same index file, if it can."""
        ref, index, dedup = snap.get("index_file"), snap.get("index"), snap.get("dedup")
        if not (isinstance(ref, dict) and isinstance(index, dict) and isinstance(dedup, dict)):
            return None
        if dedup.get("format") != 2:
            return None
        return SavedIndex(dict(ref), index, dict(dedup))

    @staticmethod
    def _retokenized(state: _State) -> list[str]:
        """The items whose terms the index's older tokenizer made otherwise: re-indexed on
        top of it, as those changed since it was saved are, rather than all items rebuilt
        (seconds of a start per 10,000 items). The index is then of this version, and saved
        as such with the next full snapshot."""
        old = state.index.terms_version
        ids = [
            it.id
            for it in state.items.values()
            if any(terms_changed(old, text) for text in (it.content, it.summary or "", *it.tags))
        ]
        log.info("saved index of tokenizer version %d: %d of %d items to re-index", old, len(ids), len(state.items))
        return ids

    def _reindex(self, state: _State, changed: list[str]) -> bool:
        """Bring an index loaded from an older file up to the items: each id changed since it
        was written is taken out and, if still stored, indexed again (and its near-duplicate
        entry with it). False when a full rebuild is the cheaper way."""
        ids = list(dict.fromkeys(changed))
        if len(ids) > stale_limit(len(state.items)):
            return False
        index, dedup = state.index, state.dedup
        for item_id in ids:
            if item_id in index:
                index.remove(item_id)
            dedup.remove(item_id)
        self._index_new(state, [state.items[i] for i in ids if i in state.items], self.load_progress)
        return True

    def _load_index_file(self, snap: dict[str, Any]) -> _IndexLoad | None:
        """Start reading the binary index file the snapshot names on a thread: checking its
        checksum reads the whole file (~80 ms at 100k items) and releases the GIL as it does,
        so it overlaps the parsing of the items. None when there is no file to read."""
        ref = snap.get("index_file")
        if ref is None or not isinstance(snap.get("index"), dict):
            return None
        if self._backend is None:  # a parsed snapshot without its dir (the doctor joins it itself)
            snap.pop("index")
            return None
        backend = self._backend
        return _IndexLoad(lambda: backend.load_index(ref))

    def _attach_index_file(self, snap: dict[str, Any], loading: _IndexLoad | None) -> None:
        """Join the arrays `loading` read (memory-mapped, read in place) to the rest of the
        snapshot's saved index. A file that is missing or does not match its checksum is not
        used: the index is then rebuilt from the items, with a warning."""
        snap.pop("index_file", None)
        if loading is None:
            return
        try:
            snap["index"] = {**snap["index"], **loading.result()}
        except IndexFileError as exc:
            log.warning("saved index unusable (%s); rebuilding it from the items", exc)
            snap.pop("index")

    @classmethod
    def replay(
        cls, snapshot: dict[str, Any] | None, batches: Sequence[tuple[int, list[Op]]]
    ) -> tuple[Self, bool, list[str]]:
        """An in-memory Store built from a parsed snapshot and journal lines exactly as a start
        builds one, for checking a state dir without opening it (the doctor). Returns the
        store, whether the snapshot's saved index was used, and one message per op that could
        not be applied ("line N op K ('kind'): error"); those ops are skipped."""
        store = cls()
        snap = dict(snapshot) if snapshot else None
        if snap is not None:
            snap["items"] = (record for record in list(snap["items"]))
        store._s, store.settings, derived, _ = store._state_from_snapshot(snap)
        failures: list[str] = []
        for lineno, ops in batches:
            for k, op in enumerate(ops):
                try:
                    store._apply(op)
                except Exception as exc:
                    failures.append(f"line {lineno} op {k} ({op.get('op')!r}): {exc!r:.120}")
        return store, derived, failures

    def _sync(self) -> None:
        """Apply what other processes appended since our last call. Call under the lock."""
        if self._backend is None or not self._backend.journal_changed():
            return
        batches = self._backend.read_new()
        if batches is None:
            # Another process rotated: catch up from the journal it replaced when its snapshot
            # is a checkpoint (a reload costs seconds at 20k items, everyone waiting on the lock).
            batches = self._backend.read_across_rotation()
            if batches is None:
                self._reload()
                return
            # The index file our snapshots would name may be gone with that rotation: the
            # next full snapshot saves ours again.
            self._on_disk, self._index_saved = None, False
        for batch in batches:
            for op in batch:
                self._apply(op)

    def _commit(self, ops: list[Op], *, sync: bool = True) -> None:
        if not ops:
            return
        with self._txn(sync=sync) as txn:
            txn.apply(ops)

    @contextlib.contextmanager
    def _txn(self, sync: bool = True) -> Iterator[_Txn]:
        """Ops applied inside the block are journaled together when it ends, or all undone if
        it raises (the journal write included), leaving memory exactly as it was."""
        txn = _Txn(self)
        with self.runtime.write_work():
            try:
                yield txn
                txn.commit(sync=sync)
            except BaseException:
                txn.rollback()
                raise

    def _persist_ops(self, ops: list[Op], sync: bool) -> None:
        """Journal applied ops, or raise so the caller's transaction is undone: a write that
        is not on disk is never acknowledged. A failure makes memory read-only (reads go on);
        each later write tries the disk again, and the first that succeeds ends it."""
        sd = self._backend
        if sd is None or not ops:
            return
        try:
            sd.append(ops, sync=sync)
        except (WriteConflictError, AmbiguousCommitError):
            raise  # not a failing disk: run again caught up, or say that the outcome is unknown
        except PersistenceError as exc:
            if self._degraded is None:
                log.error("persistence failed; memory is read-only until the disk recovers: %s", exc)
            self._degraded = str(exc)
            raise PersistenceError(
                f"Memory is read-only until compactor can save again ({exc}). Nothing from this call "
                "was stored; free disk space or fix permissions and retry: it resumes by itself."
            ) from exc
        if self._degraded is not None:
            log.warning("persistence recovered: saving again")
            self._degraded = None
        self._dirty = True

    @property
    def degraded(self) -> str | None:
        """Why memory is not being saved, or None when all is saved."""
        return self._degraded

    @contextlib.contextmanager
    def _locked(self, wait_s: float | None = None) -> Iterator[None]:
        """Memory to change: the call lock, and the writers' lock when memory is persisted.
        While waiting for the writers' lock (another thread of this server, or another server,
        holds it) the call lock is let go, so reads answer meanwhile; the wait is bounded by
        `lock_wait_s`, then WriteLockTimeoutError."""
        with self._calls:
            backend = self._backend
            if backend is None:
                if self._calls.depth == 1:
                    self._flush_accesses()
                yield
                return
            if backend.held_here:  # nested in this thread's own hold (a write inside a read, say)
                with backend.locked():
                    yield
                return
            held = contextlib.ExitStack()
            if _AT_ONCE.get():  # not waiting, so the call lock is kept: nobody could take it meanwhile
                held.enter_context(backend.locked(wait_s=0.0))  # WouldWaitError if held elsewhere
            else:
                with self._calls.suspended():
                    held.enter_context(backend.locked(wait_s=self.lock_wait_s if wait_s is None else wait_s))
            # Memory may have moved on while the call lock was let go: the caller catches up
            # (`_sync`) under the lock, as always.
            with held:
                self._flush_accesses()
                yield

    def _note_accesses(self, ids: Sequence[str]) -> None:
        """Queries' accesses, for the next hold of the writers' lock to journal (`_locked`)."""
        now = self._clock()
        with self._access_guard:
            self._access_pending.update(ids)
            self._access_at = now

    @property
    def accesses_pending(self) -> bool:
        return bool(self._access_pending)

    def flush_accesses(self) -> None:
        """Journal the accesses noted so far now (a server's quiet spell, its end)."""
        if self._access_pending:
            with self._locked():
                pass

    def _flush_accesses(self) -> None:
        """Under the writers' lock: the accesses noted, as one entry journaled without fsync
        (losing one on power loss is harmless); items forgotten meanwhile are left out."""
        if not self._access_pending:
            return
        with self._access_guard:
            counts, self._access_pending = self._access_pending, Counter()
            at = self._access_at
        self._sync()
        items = self._s.items
        ops: list[Op] = [
            {"op": "patch", "id": i, "set": {"last_accessed_at": at, "access_count": it.access_count + n}}
            for i, n in counts.items()
            if (it := items.get(i)) is not None
        ]
        try:
            self._commit(ops, sync=False)
        except WriteConflictError:
            # Another server wrote first: noted again, recorded at the next hold, caught up.
            with self._access_guard:
                self._access_pending.update(counts)
        except PersistenceError as exc:
            log.warning("access times not saved: %s", exc)
            for op in ops:
                self._apply(op)

    @contextlib.asynccontextmanager
    async def _locked_off_loop(self) -> AsyncIterator[None]:
        """`_locked` for a coroutine: waiting for the locks, and releasing them (a database
        round trip), happen on a worker thread, so the event loop serves other calls. The
        thread that runs each part is made the holder first (`_hand_over`)."""
        cm = self._locked()
        await anyio.to_thread.run_sync(cm.__enter__)
        self._hand_over()
        try:
            yield
        finally:
            # Parked while the loop awaits the release: held by no thread, so a call the loop
            # runs meanwhile (a read at once) cannot take this hold for its own.
            self._hand_over(_PARKED)

            def leave() -> None:
                self._hand_over()
                cm.__exit__(None, None, None)

            await anyio.to_thread.run_sync(leave)

    def _hand_over(self, thread: int | None = None) -> None:
        me = threading.get_ident() if thread is None else thread
        self._calls.hand_over(me)
        if self._backend is not None:
            self._backend.hand_over(me)

    def _read(self) -> Any:
        """Context for a read: catch up with other processes first."""
        return _ReadGuard(self)

    @contextlib.contextmanager
    def at_once(self) -> Iterator[bool]:
        """Whether a call may run in the calling thread without ever waiting: True unless memory
        is a database (catching up is a round trip). While the block runs, a call that would
        wait for a lock (another call or server holds one) raises WouldWaitError before doing
        anything; the caller then runs it where waiting is harmless. For a server's event loop,
        which a worker thread would cost a hand-over each way (~0.1 ms)."""
        if self._backend is not None and self._backend.remote:
            yield False
            return
        token = _AT_ONCE.set(True)
        try:
            yield True
        finally:
            _AT_ONCE.reset(token)

    @property
    def persistent(self) -> bool:
        return self._backend is not None

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def needs_final_snapshot(self) -> bool:
        """Whether a process ending now should write a snapshot: unsaved changes, or a snapshot
        on disk without the search index (background snapshots leave it out), which would make
        the next start rebuild the index from every item."""
        return self.persistent and (self._dirty or not self._index_saved)

    def _snapshot_header(self, gen: int, prev_gen: int, prev_offset: int) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "gen": gen,
            "prev_gen": prev_gen,
            "prev_offset": prev_offset,
            "written_at": self._clock(),
            "settings": self.settings.to_record(),
        }

    def _write_snapshot_locked(self, items: dict[str, Item], *, adopt: bool = True, checkpoint: bool = False) -> None:
        """A full snapshot with the index. `adopt`: go on with the index read from the file
        just written (`_adopt_saved_index`); not worth it when the store closes next.
        `checkpoint`: it holds exactly what the journal says (nothing purged or rebuilt), so
        other processes may catch up across it from the journal (`read_across_rotation`)."""
        assert self._backend is not None
        gen, offset = self._backend.gen, self._backend.offset
        header = self._snapshot_header(gen + 1, gen, offset)
        if checkpoint:
            header["checkpoint"] = True
        # Synchronous snapshots (shutdown, forget, recovery) hold the lock anyway, so they also
        # save the index: the next start then loads it instead of re-tokenising everything.
        header["index"], ref, dedup_saved = self._saved_index(gen + 1)
        header["index_file"] = ref
        # Saved with the index, the buckets' arrays are read in place at the next start, shared
        # and not parsed (base64 in the header was ~4 MiB per process at 10k items until a first write).
        header["dedup"] = {"format": 2, "byteorder": sys.byteorder} if dedup_saved else dedup_state(self._s)
        self._backend.snapshot_now(header, list(items.values()))
        self._backend.keep_only_index(ref["name"])
        self._dirty = False
        self._index_saved = True
        self._on_disk = self._saved_index_of(header)
        self._index_stale = set()
        if adopt:
            self._adopt_saved_index(header, ref)

    def _adopt_saved_index(self, header: dict[str, Any], ref: dict[str, Any]) -> None:
        """Serve the search index and near-duplicate buckets from the file just written, as a
        start would: memory-mapped, shared and clean instead of the private arrays saving it
        merged them into (at 100k items ~285 MiB that stayed resident after every full
        snapshot). On any failure the index in memory, which the file holds too, stays."""
        assert self._backend is not None
        scratch = _State()
        try:
            arrays = self._backend.load_index(ref, verify=False)  # written and checksummed just now
            snap = {"index": {**header["index"], **arrays}, "dedup": dict(header["dedup"])}
            kept = "keeping the index in memory, which the file also holds"
            if not self._restore_derived(scratch, snap, instead=kept) or len(scratch.index) != len(self._s.index):
                return
        except (IndexFileError, OSError, ValueError) as exc:
            log.info("kept the index in memory after a snapshot: %s", exc)
            return
        self._s.index = scratch.index
        self._s._dedup, self._s._dedup_saved = scratch._dedup, scratch._dedup_saved
        self._s.index_file = scratch.index_file

    def _saved_index(self, gen: int) -> tuple[dict[str, Any], dict[str, Any], bool]:
        """The search index's state for the snapshot's header less its arrays, the reference
        of the arrays the backend saved (`Persistence.save_index`), and whether the
        near-duplicate buckets' arrays were saved with them."""
        assert self._backend is not None
        state = self._s.index.to_state(binary=True)
        arrays = {key: value for key, value in state.items() if isinstance(value, memoryview)}
        dedup = dedup_arrays(self._s)
        try:
            ref = self._backend.save_index(gen, {**arrays, **(dedup or {})})
        except OSError as exc:
            raise PersistenceError(f"Could not write the index file: {exc.strerror or exc}") from exc
        return {key: value for key, value in state.items() if key not in arrays}, ref, dedup is not None

    def rebuild_and_snapshot(self) -> None:
        """Rebuild the derived structures (search index, near-duplicate buckets) from the items
        and save them with a full snapshot: `compactor doctor --repair` after index drift."""
        if self._backend is None:
            return
        with self._locked():
            self._sync()
            self._rebuild_derived(self._s)
            self._write_snapshot_locked(dict(self._s.items))

    def snapshot(self, *, adopt: bool = True) -> None:
        """Write a snapshot and truncate the journal, synchronously (used at shutdown; `adopt`
        as `_write_snapshot_locked`)."""
        if self._backend is None:
            return
        with self._locked():
            self._sync()
            self._write_snapshot_locked(dict(self._s.items), adopt=adopt, checkpoint=True)

    async def snapshot_async(self) -> None:
        """Snapshot without blocking the event loop: items are frozen, so a shallow copy of the
        dict taken under the lock is a consistent picture; it is serialised and written in a
        worker thread, and only the rename + journal rotation take the lock again."""
        if self._backend is None:
            return
        sd = self._backend
        async with self._locked_off_loop():
            self._sync()
            items = list(self._s.items.values())
            gen, offset = sd.gen, sd.offset
            header = self._snapshot_header(gen + 1, gen, offset)
            header["checkpoint"] = True  # see `_write_snapshot_locked`
            keep = self._name_saved_index(header, len(items))
            self._dirty = False
        with self.runtime.background_write():  # the event loop gets the GIL back quickly
            tmp_ok = await anyio.to_thread.run_sync(self._write_snapshot_tmp, header, items)
        if not tmp_ok:
            self._dirty = True
            return
        async with self._locked_off_loop():
            # Catch up first: only that reveals a rotation by another process (it reloads and
            # moves sd.gen). Checking before it let a stale snapshot replace a newer one and
            # cut the new journal at our old offset, mid-line.
            self._sync()
            if sd.gen != gen:
                # Someone else rotated meanwhile (forget, another process): ours is stale.
                self._discard_tmp()
                return
            cleanup = None
            try:
                # Also lists the index files this snapshot leaves unused (all but the one it
                # names, if any): the cleanup deletes them off the lock.
                cleanup = sd.install_pending_snapshot(gen, offset, keep)
                self._index_saved = False
            except (PersistenceError, OSError) as exc:
                log.warning("snapshot not installed: %s", exc)
                self._dirty = True
        if cleanup is not None:
            await anyio.to_thread.run_sync(cleanup)

    def _name_saved_index(self, header: dict[str, Any], n_items: int) -> str | None:
        """Name the index file on disk in a background snapshot's header, with the ids changed
        since it was written, when a load re-indexing those would beat rebuilding everything
        (a process killed before its final snapshot then starts almost as fast). Returns the
        file's name, which the snapshot's cleanup must keep; None when it names none."""
        on_disk, stale = self._on_disk, self._index_stale
        if on_disk is None or stale is None or len(stale) > stale_limit(n_items):
            return None
        header["index"] = on_disk.index
        header["index_file"] = on_disk.ref
        header["dedup"] = on_disk.dedup
        header["index_stale"] = sorted(stale)
        name = on_disk.ref.get("name")
        return name if isinstance(name, str) else None

    def _write_snapshot_tmp(self, header: dict[str, Any], items: list[Item]) -> bool:
        assert self._backend is not None
        try:
            self._backend.write_pending_snapshot(header, items)
            return True
        except (PersistenceError, OSError) as exc:
            log.warning("snapshot failed: %s", exc)
            return False

    def _discard_tmp(self) -> None:
        assert self._backend is not None
        self._backend.discard_pending_snapshot()

    def close(self) -> None:
        if self._backend is not None:
            if self._access_pending and self._backend.is_open:
                try:
                    self.flush_accesses()
                except Exception as exc:  # closing goes on: an access time is worth a log line
                    log.warning("access times not saved at close: %s", exc)
            self._backend.close()

    def close_with_snapshot(self) -> None:
        """How a server ends: a final snapshot when one is needed (`needs_final_snapshot`),
        then close. A failed snapshot loses nothing (the journal has every change): logged."""
        if self.needs_final_snapshot:
            try:
                self.snapshot(adopt=False)
            except Exception:
                log.exception("final snapshot failed; the journal still holds every change")
        self.close()
