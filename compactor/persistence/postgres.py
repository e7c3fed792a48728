"""PostgreSQL as the store: the same event-sourced design as the state dir, on tables that
several compactor servers (on several machines) share. Implements `compactor.persistence.base.Persistence`.

Tables (schema version in `compactor_schema`, created and migrated on first start):

    compactor_head       one row: gen (bumped when history is rewritten: forget, prune, repair),
                         snap_id/snap_seq (the snapshot in use and the last entry it holds),
                         trimmed (entries up to here may be deleted)
    compactor_journal    seq bigserial, ops bytea: one row per call, its ops as JSON
    compactor_snapshot   one row per snapshot: pending (being written) or current, and the
                         sequence number it holds everything up to
    compactor_snapshot_chunk   the snapshot's bytes (the state dir's snapshot.json layout), in
                         chunks so no value nears PostgreSQL's 1 GB limit (n >= 0); below zero,
                         the search index it names (n = -1 its reference, n <= -2 its arrays
                         in the index file's layout)
    compactor_ledger     the forget ledger: ids and times, never content

**Writers take an advisory lock, not SERIALIZABLE.** A call holds `pg_advisory_lock` (session
level) from before it catches up until after its last append, exactly as a state-dir call holds
flock: it reads every entry after its own sequence number, plans on that state in memory, and
appends. SERIALIZABLE cannot see that plan (it is made in the server's memory, not in SQL), so
it would have to be checked by hand and a conflict would mean re-running the whole call, while
the lock makes conflicts impossible and costs one round trip. It also makes sequence order
commit order: a bigserial is drawn before commit, so two unlocked writers can commit 8 after 9,
and a reader catching up "after 8" would skip 9 for good. The append itself is one statement,
one transaction, that inserts only if the head's generation and the journal's last sequence
number are still the writer's: being up to date is checked where the entry is written.

**Other writers' changes arrive by LISTEN/NOTIFY.** Every append notifies its sequence number
and every rewrite its generation; a server compares them with its own position, so a call that
no other server raced costs no query to find that out. Taking the lock reads the head in the
same round trip (pipelined), so a writer never relies on a notification having arrived.

**Snapshots are rows written in the background**: serialised in a worker thread on a second
connection as a pending snapshot, then made current under the lock; start-up reads the current
snapshot plus the entries after it. Entries before the previous snapshot are then deleted (a
server that lagged past them reloads from the snapshot). A pending snapshot whose writer is
gone (its backend pid no longer in pg_stat_activity) is deleted at the next start or snapshot.

**The search index is saved with a snapshot, as rows of it.** `save_index` lays the arrays out
as the state dir's index file (`compactor.persistence.indexfile`) and the snapshot that names
them writes them as its chunks below zero; a background snapshot, which names an older index,
copies those rows from the snapshot that holds them inside the server (`INSERT ... SELECT`), so
their bytes never cross the wire again. A start reads them in the snapshot's transaction and
the index reads its arrays in place from that one buffer: no base64, no copy per array.

**Forget** writes a fresh snapshot without the item and deletes, in the same transaction, every
journal entry (the item's ops among them) and every other snapshot with the index rows they
hold (the forgotten item's terms among them); the others see the new
generation and reload. Deleted rows stay in the table's pages until VACUUM reuses them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import orjson

from ..errors import (
    AmbiguousCommitError,
    PersistenceError,
    StateCorruptError,
    WriteConflictError,
    WriteLockTimeoutError,
)
from ..models import Item, Op
from . import indexfile
from .base import Loaded, ReentrantLock
from .codec import INDEX_REF, ITEMS_LINE, SnapshotItems, snapshot_chunks
from .indexfile import IndexFileError
from .pg_sql import (
    APPEND_ASYNC_SQL,
    APPEND_SQL,
    COPY_INDEX_SQL,
    DEAD_PENDING_SQL,
    HEAD_SQL,
    INDEX_LABEL,
    INDEX_ROW_BYTES,
    INDEX_ROWS_SQL,
    MIGRATIONS,
    PG_CHANNEL,
    PG_CONNECT_TIMEOUT_S,
    PG_MIGRATE_LOCK,
    PG_SCHEMA_VERSION,
    PG_WRITE_LOCK,
    display_url,
    import_psycopg,
    one_line,
    sync_warning,
    without_password,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import psycopg
from .codec import SCHEMA_VERSION

log = logging.getLogger(__name__)


def _label(ref: Mapping[str, Any]) -> bytes:
    """The row that names a saved index: its reference, as a snapshot's header keeps it."""
    return orjson.dumps({"name": ref.get("name"), "size": ref.get("size"), "crc32": ref.get("crc32")})


# A saved index's bytes in this process: a numpy buffer, not a bytearray, which the index would
# take for a blob of its own to grow in place (`Vocab._grown_blob`) rather than a view to copy.
Image: TypeAlias = "npt.NDArray[np.uint8]"


def _assemble(pieces: Iterable[Any], size: int) -> Image | None:
    """One buffer of `size` bytes filled from `pieces` (bytes-like, in order) as each arrives,
    so no second copy is made; None if they add up to another size."""
    import numpy as np

    image = np.empty(size, dtype=np.uint8)
    at = 0
    for piece in pieces:
        data = np.frombuffer(piece, dtype=np.uint8)
        end = at + len(data)
        if end > size:
            return None
        image[at:end] = data
        at = end
    return image if at == size else None


def _name_of(label: bytes) -> object:
    """The index name a label row gives (None if it is damaged)."""
    try:
        got = orjson.loads(label)
    except ValueError:
        return None
    return got.get("name") if isinstance(got, dict) else None


class PgBackend(ReentrantLock):
    """Memory kept in a PostgreSQL database (see the module docstring)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = display_url(url)
        self.gen = 0
        self.offset = 0  # the last journal sequence number applied to memory
        self.last_snapshot_at: float | None = None
        self.last_snapshot_seconds: float | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._bg: psycopg.Connection[Any] | None = None  # background snapshots' own connection
        self._bg_lock = threading.Lock()
        self._pid = 0  # our main connection's backend pid: marks our pending snapshots
        self._lock_conn: psycopg.Connection[Any] | None = None  # the connection that holds the lock
        self._locker: psycopg.Connection[Any] | None = None  # the one the lock is taken on
        self._head: tuple[int, int, int] | None = None  # (gen, trimmed, last seq) at lock time
        self._heard_seq = 0  # the highest sequence number another writer announced
        self._heard_gen = 0
        self._missed = True  # notifications may have been missed (new connection)
        self._pending: int | None = None  # id of our pending snapshot row
        self.durability_warning: str | None = None  # from `sync_warning` at open; shown by status
        # Access-time entries (not fsynced on a state dir either) held until the lock is released,
        # then sent in the same round trip as the unlock: a query costs one round trip less.
        self._deferred: list[Op] = []
        # A saved index in hand, by its label: laid out by `save_index` for the snapshot that
        # names it, or read with the snapshot by `load`. Handed to `load_index` (the
        # index then reads its arrays from it), so no second copy stays.
        self._index: tuple[bytes, Image] | None = None

    @classmethod
    def connect(cls, url: str) -> PgBackend:
        backend = cls(url)
        backend.open()
        return backend

    # --- connections ----------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> PersistenceError:
        detail = without_password(str(exc).strip() or repr(exc), self.url)
        return PersistenceError(f"Could not {what} in database {self.where}: {detail}.")

    def _new_connection(self) -> psycopg.Connection[Any]:
        driver = import_psycopg()
        try:
            conn: psycopg.Connection[Any] = driver.connect(
                self.url, autocommit=True, connect_timeout=PG_CONNECT_TIMEOUT_S, application_name="compactor"
            )
        except driver.Error as exc:
            raise PersistenceError(
                f"Cannot connect to database {self.where}: {without_password(one_line(exc), self.url)}. "
                "Check the URL, that PostgreSQL is running and reachable, and the user's password and rights."
            ) from exc
        return conn

    def open(self) -> None:
        conn = self._new_connection()
        try:
            self._migrate(conn)
            conn.execute(f"LISTEN {PG_CHANNEL}")
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            warning = sync_warning(conn, self.where)
        except BaseException:
            conn.close()
            raise
        if warning is not None and warning != self.durability_warning:
            log.warning("%s", warning)
        self.durability_warning = warning
        self._pid = int(row[0]) if row else 0
        self._conn = conn
        self._missed = True

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Create the tables on first start; refuse a schema newer than this compactor's."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_MIGRATE_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS compactor_schema "
                "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            row = conn.execute("SELECT coalesce(max(version), 0) FROM compactor_schema").fetchone()
            version = int(row[0]) if row else 0
            if version > PG_SCHEMA_VERSION:
                raise StateCorruptError(
                    f"Database {self.where} has compactor schema version {version}; this compactor reads up "
                    f"to {PG_SCHEMA_VERSION}. Upgrade compactor. Nothing was changed."
                )
            for step in range(version + 1, PG_SCHEMA_VERSION + 1):
                conn.execute(MIGRATIONS[step])
                conn.execute("INSERT INTO compactor_schema (version) VALUES (%s)", (step,))
                log.info("database %s: created compactor schema version %d", self.where, step)

    def _conn_lost(self) -> bool:
        """Whether the main connection broke (rather than never opened)."""
        conn = self._conn
        return conn is not None and (conn.closed or conn.broken)

    def _live(self) -> psycopg.Connection[Any]:
        """The main connection, opened anew if it broke (notifications may then be missed)."""
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if conn is not None:
            conn.close()
            self._conn = None
            log.warning("lost the connection to %s; reconnecting", self.where)
        self.open()
        assert self._conn is not None
        return self._conn

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    def close(self) -> None:
        self._index = None
        for conn in (self._conn, self._bg, self._locker):
            if conn is not None:
                conn.close()
        self._conn = self._bg = self._locker = None

    def __del__(self) -> None:
        # A Store dropped without close() (as a state dir's file descriptor would be): close
        # the sessions, which also releases the advisory lock, instead of a ResourceWarning.
        with contextlib.suppress(Exception):
            self.close()

    # --- the writers' lock ----------------------------------------------------------------
    def _acquire(self, exclusive: bool) -> None:
        """pg_advisory_lock (`ReentrantLock`), waiting at most `lock_wait_s`; the head is read
        in the same round trip. The lock is waited for on a connection of its own, so that the
        main one stays free for reads meanwhile."""
        psycopg = import_psycopg()
        conn = self._locker
        try:
            if conn is None or conn.closed or conn.broken:
                conn = self._locker = self._new_connection()
            wait_ms = max(1, round((self.lock_wait_s or 0) * 1000)) if self.lock_wait_s else 0
            with conn.pipeline():
                conn.execute("SELECT set_config('lock_timeout', %s, false)", (str(wait_ms),))
                conn.execute("SELECT pg_advisory_lock(%s)", (PG_WRITE_LOCK,))
                cur = conn.execute(HEAD_SQL)
            row = cur.fetchone()
        except psycopg.errors.LockNotAvailable as exc:
            raise WriteLockTimeoutError(
                f"Another compactor server has held the writers' lock of {self.where} for more than "
                f"{self.lock_wait_s or 0:g} s (busy, stopped or stuck); this call was not applied. Retry it "
                "in a moment."
            ) from exc
        except psycopg.Error as exc:
            raise self._fail("take the writers' lock", exc) from exc
        assert row is not None
        self._head = (int(row[0]), int(row[1]), int(row[2]))
        self._lock_conn = conn

    def _release(self) -> None:
        psycopg = import_psycopg()
        conn, self._lock_conn = self._lock_conn, None
        assert conn is not None
        self._head = None
        deferred, self._deferred = self._deferred, []
        try:
            with conn.pipeline() as pipe:
                sent = None
                if deferred:
                    sent = conn.execute(APPEND_ASYNC_SQL, self._append_params(deferred))
                    # A Sync ends the insert's transaction before the unlock runs: in one implicit
                    # transaction the lock went first, and another server could take it and
                    # read a head without this entry, then have its own append refused.
                    pipe.sync()
                conn.execute("SELECT pg_advisory_unlock(%s)", (PG_WRITE_LOCK,))
            self._appended(sent.fetchone() if sent is not None else None, deferred)
        except psycopg.Error as exc:
            # Closing the session releases the lock too; the next call reconnects.
            log.warning("could not release the writers' lock (%s); closing the connection", exc)
            conn.close()
            self._missed = True

    def reading(self) -> contextlib.AbstractContextManager[None]:
        # Readers need no lock: writers commit in sequence order, so any committed prefix of
        # the journal is a consistent state to catch up to.
        return contextlib.nullcontext()

    # --- catching up ----------------------------------------------------------------------
    def _drain_notifications(self) -> None:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            self._missed = True
            return
        try:
            # A call returns what arrived during our own queries first, without reading the
            # socket: repeat until one finds nothing.
            while notes := list(conn.notifies(timeout=0)):
                for note in notes:
                    kind, value = note.payload[:1], int(note.payload[1:])
                    if kind == "s":
                        self._heard_seq = max(self._heard_seq, value)
                    elif kind == "g":
                        self._heard_gen = max(self._heard_gen, value)
        except Exception as exc:
            log.warning("could not read notifications from %s: %s", self.where, exc)
            self._missed = True

    def journal_changed(self) -> bool:
        """Under the lock: what the head said when it was taken. Otherwise: whether another
        writer announced an entry after ours or a new generation."""
        if self._head is not None:
            gen, _, last = self._head
            return gen != self.gen or last != self.offset
        self._drain_notifications()
        return self._missed or self._heard_seq > self.offset or self._heard_gen > self.gen

    def read_new(self) -> list[list[Op]] | None:
        psycopg = import_psycopg()
        try:
            conn = self._live()
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                head = conn.execute("SELECT gen, trimmed FROM compactor_head").fetchone()
                assert head is not None
                if int(head[0]) != self.gen or self.offset < int(head[1]):
                    return None  # history was rewritten, or trimmed past us: reload
                rows = conn.execute(
                    "SELECT seq, ops FROM compactor_journal WHERE seq > %s ORDER BY seq", (self.offset,)
                ).fetchall()
        except psycopg.Error as exc:
            raise self._fail("read the journal", exc) from exc
        batches = [self._parse_ops(int(seq), bytes(ops)) for seq, ops in rows]
        if rows:
            self.offset = int(rows[-1][0])
        self._missed = False
        if self._head is not None:
            self._head = (self.gen, self._head[1], self.offset)
        return batches

    def _parse_ops(self, seq: int, raw: bytes) -> list[Op]:
        try:
            ops = orjson.loads(raw)
            if not isinstance(ops, list):
                raise ValueError("ops is not a list")
        except ValueError as exc:
            raise StateCorruptError(
                f"Journal entry {seq} in database {self.where} is damaged ({exc}): compactor will not build on "
                f"it. Nothing was changed; `compactor doctor --database URL` shows what is wrong."
            ) from exc
        return ops

    def load(self) -> Loaded:
        psycopg = import_psycopg()
        try:
            conn = self._live()
            self._drain_notifications()
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                head = conn.execute("SELECT gen, snap_id, snap_seq FROM compactor_head").fetchone()
                if head is None:
                    raise StateCorruptError(f"Database {self.where} has no compactor_head row. Restore it from backup.")
                gen, snap_id, snap_seq = int(head[0]), head[1], int(head[2])
                snap = None if snap_id is None else self._read_snapshot(conn, int(snap_id))
                self._index = None if snap_id is None else self._read_index_rows(conn, int(snap_id))
                rows = conn.execute(
                    "SELECT seq, ops FROM compactor_journal WHERE seq > %s ORDER BY seq", (snap_seq,)
                ).fetchall()
            batches = [self._parse_ops(int(seq), bytes(ops)) for seq, ops in rows]
        except psycopg.Error as exc:
            raise self._fail("load memory", exc) from exc
        self.gen = gen
        self.offset = int(rows[-1][0]) if rows else snap_seq
        self._heard_gen = max(self._heard_gen, gen)
        self._missed = False
        if self._head is not None:
            self._head = (self.gen, self._head[1], self.offset)
        self.remove_dead_temp_files()
        return Loaded(snapshot=snap, batches=batches, gen=gen, offset=self.offset)

    def _corrupt(self, snap_id: int) -> Callable[[object], StateCorruptError]:
        def corrupt(reason: object) -> StateCorruptError:
            return StateCorruptError(
                f"Snapshot {snap_id} in database {self.where} is corrupt ({reason}). Nothing was changed; "
                "`compactor doctor --database URL` shows what is wrong."
            )

        return corrupt

    def _read_snapshot(self, conn: psycopg.Connection[Any], snap_id: int) -> dict[str, Any]:
        """The snapshot's header, its items an `ItemRecords` read line by line (checksummed
        as in a state dir: the bytes are the same layout)."""
        chunks = conn.execute(
            "SELECT data FROM compactor_snapshot_chunk WHERE snapshot_id = %s AND n >= 0 ORDER BY n", (snap_id,)
        ).fetchall()
        corrupt = self._corrupt(snap_id)
        if not chunks:
            raise corrupt("it has no data")
        fh = io.BytesIO(b"".join(bytes(c[0]) for c in chunks))
        del chunks
        first = fh.readline()
        if not first.endswith(ITEMS_LINE):
            raise corrupt("its first line is damaged")
        try:
            header = orjson.loads(first[: -len(ITEMS_LINE)] + b"}")
            if not isinstance(header, dict):
                raise ValueError("not a compactor snapshot")
        except ValueError as exc:
            raise corrupt(exc) from exc
        version = header.get("schema")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise StateCorruptError(
                f"Snapshot {snap_id} in database {self.where} has schema version {version!r}; this compactor "
                f"reads up to {SCHEMA_VERSION}. Upgrade compactor."
            )
        header["items"] = SnapshotItems(fh, corrupt, zlib.crc32(first))
        return header

    @staticmethod
    def _read_index_rows(conn: psycopg.Connection[Any], snap_id: int) -> tuple[bytes, Image] | None:
        """The index the snapshot holds (its label and bytes), read a row at a time into one
        buffer; None if it holds none or its rows do not add up (`load_index` then says so)."""
        row = conn.execute(
            "SELECT data FROM compactor_snapshot_chunk WHERE snapshot_id = %s AND n = %s", (snap_id, INDEX_LABEL)
        ).fetchone()
        if row is None:
            return None
        label = bytes(row[0])
        try:
            size = orjson.loads(label)["size"]
            if not isinstance(size, int) or size < 0:
                return None
        except (ValueError, KeyError, TypeError):
            return None
        rows = conn.cursor().stream(
            "SELECT data FROM compactor_snapshot_chunk WHERE snapshot_id = %s AND n < %s ORDER BY n DESC",
            (snap_id, INDEX_LABEL),
        )
        image = _assemble((data for (data,) in rows), size)
        return None if image is None else (label, image)

    # --- writing --------------------------------------------------------------------------
    def _append_params(self, ops: list[Op]) -> dict[str, Any]:
        return {"ops": orjson.dumps(ops), "gen": self.gen, "seq": self.offset}

    def _appended(self, row: Any, ops: list[Op]) -> None:
        """Note where deferred access-time entries landed (or that they did not)."""
        if not ops:
            return
        if row is None:
            log.warning("access times not saved in %s: another writer was ahead", self.where)
            self._missed = True
            return
        self.offset = int(row[0])

    def _flush_deferred(self) -> None:
        """Write held access-time entries now (before an entry or a snapshot that follows them)."""
        if self._deferred:
            deferred, self._deferred = self._deferred, []
            self.append(deferred, sync=False)

    def append(self, ops: list[Op], *, sync: bool = True) -> None:
        psycopg = import_psycopg()
        if not sync and self._lock_depth:
            self._deferred.extend(ops)
            return
        self._flush_deferred()
        params = self._append_params(ops)
        try:
            row = self._live().execute(APPEND_SQL if sync else APPEND_ASYNC_SQL, params).fetchone()
        except psycopg.Error as exc:
            if exc.sqlstate is None and self._conn_lost():
                # The connection went while the entry was on its way or committing: whether
                # PostgreSQL committed it is unknown (the next call's catch-up shows it).
                raise AmbiguousCommitError(
                    f"The connection to database {self.where} was lost while this call was being saved "
                    f"({str(exc).strip()}): it may or may not have been applied. Retrying a store within "
                    f"a minute returns the first one's id rather than a duplicate."
                ) from exc
            raise PersistenceError(
                f"Could not write to the journal in database {self.where}: {str(exc).strip()}. This call was "
                "not applied; check that PostgreSQL is up and retry."
            ) from exc
        if row is None:
            # Someone wrote without the lock, or a rewrite slipped past: catch up, then retry.
            self._missed = True
            raise WriteConflictError(
                f"Database {self.where} has entries this server had not read yet; this call was not "
                "applied. Retry it: the next call catches up first."
            )
        self.offset = int(row[0])
        if self._head is not None:
            self._head = (self.gen, self._head[1], self.offset)

    def _write_snapshot_rows(
        self,
        conn: psycopg.Connection[Any],
        state: str,
        header: dict[str, Any],
        items: list[Item],
        index: tuple[bytes, Image] | None = None,
    ) -> int:
        """Insert a snapshot row and its chunks (inside the caller's transaction); its id. The
        index its header names goes with it: from `index` when that is the one named, else
        copied from the snapshot that holds it."""
        row = conn.execute(
            "INSERT INTO compactor_snapshot (state, gen, upto_seq, writer_pid) VALUES (%s, %s, %s, %s) RETURNING id",
            (state, int(header["prev_gen"]), int(header["prev_offset"]), self._pid),
        ).fetchone()
        assert row is not None
        snap_id = int(row[0])
        size = 0
        with conn.cursor().copy("COPY compactor_snapshot_chunk (snapshot_id, n, data) FROM STDIN") as copy:
            for n, chunk in enumerate(snapshot_chunks(header, items)):
                copy.write_row((snap_id, n, chunk))
                size += len(chunk)
        conn.execute("UPDATE compactor_snapshot SET bytes = %s WHERE id = %s", (size, snap_id))
        ref = header.get(INDEX_REF)
        if isinstance(ref, dict):
            self._write_index_rows(conn, snap_id, _label(ref), index)
        return snap_id

    def _write_index_rows(
        self, conn: psycopg.Connection[Any], snap_id: int, label: bytes, index: tuple[bytes, Image] | None
    ) -> None:
        if index is not None and index[0] == label:
            view = index[1].data
            with conn.cursor().copy("COPY compactor_snapshot_chunk (snapshot_id, n, data) FROM STDIN") as copy:
                copy.write_row((snap_id, INDEX_LABEL, label))
                for k, lo in enumerate(range(0, view.nbytes, INDEX_ROW_BYTES)):
                    copy.write_row((snap_id, INDEX_LABEL - 1 - k, view[lo : lo + INDEX_ROW_BYTES]))
            return
        copied = conn.execute(COPY_INDEX_SQL, {"snap": snap_id, "label": label}).rowcount
        if not copied:
            # Dropped meanwhile (a forget, a repair): the start that reads this snapshot rebuilds it.
            log.info("the index snapshot %d names is no longer in %s", snap_id, self.where)

    def snapshot_now(self, header: dict[str, Any], items: list[Item]) -> None:
        psycopg = import_psycopg()
        self._flush_deferred()
        header["prev_offset"] = self.offset
        started = time.perf_counter()
        new_gen = self.gen + 1
        try:
            conn = self._live()
            with conn.transaction():
                snap_id = self._write_snapshot_rows(conn, "current", header, items, self._index)
                conn.execute("DELETE FROM compactor_snapshot WHERE id <> %s", (snap_id,))
                conn.execute("DELETE FROM compactor_journal WHERE seq <= %s", (self.offset,))
                conn.execute(
                    "UPDATE compactor_head SET gen = %s, snap_id = %s, snap_seq = %s, trimmed = %s",
                    (new_gen, snap_id, self.offset, self.offset),
                )
                conn.execute("SELECT pg_notify(%s, %s)", (PG_CHANNEL, f"g{new_gen}"))
        except psycopg.Error as exc:
            raise self._fail("write a snapshot", exc) from exc
        self.gen = new_gen
        self._heard_gen = max(self._heard_gen, new_gen)
        if self._head is not None:
            self._head = (new_gen, self.offset, self.offset)
        self._pending = None
        self.last_snapshot_seconds = time.perf_counter() - started
        self.last_snapshot_at = time.time()

    def write_pending_snapshot(self, header: dict[str, Any], items: list[Item]) -> None:
        psycopg = import_psycopg()
        started = time.perf_counter()
        with self._bg_lock:
            try:
                if self._bg is None or self._bg.closed or self._bg.broken:
                    self._bg = self._new_connection()
                with self._bg.transaction():
                    self._pending = self._write_snapshot_rows(self._bg, "pending", header, items)
            except psycopg.Error as exc:
                raise self._fail("write a snapshot", exc) from exc
        self.last_snapshot_seconds = time.perf_counter() - started

    def install_pending_snapshot(
        self, gen: int, offset: int, keep_index: str | None = None
    ) -> Callable[[], None] | None:
        psycopg = import_psycopg()
        self._flush_deferred()
        snap_id, self._pending = self._pending, None
        if snap_id is None:
            return None
        try:
            conn = self._live()
            with conn.transaction():
                head = conn.execute("SELECT snap_id, snap_seq FROM compactor_head FOR UPDATE").fetchone()
                assert head is not None
                if int(head[1]) > offset:  # another server installed a newer one meanwhile
                    conn.execute("DELETE FROM compactor_snapshot WHERE id = %s", (snap_id,))
                    return None
                made = conn.execute(
                    "UPDATE compactor_snapshot SET state = 'current' WHERE id = %s AND state = 'pending' RETURNING id",
                    (snap_id,),
                ).fetchone()
                if made is None:
                    raise PersistenceError("the pending snapshot was removed (a forget or repair ran meanwhile)")
                conn.execute(
                    "UPDATE compactor_head SET snap_id = %s, snap_seq = %s, trimmed = snap_seq", (snap_id, offset)
                )
                # Entries before the previous snapshot go: a server behind them reloads.
                conn.execute("DELETE FROM compactor_journal WHERE seq <= %s", (int(head[1]),))
                conn.execute(DEAD_PENDING_SQL)
        except psycopg.Error as exc:
            raise self._fail("install a snapshot", exc) from exc
        self.last_snapshot_at = time.time()
        if self._head is not None:
            self._head = (self._head[0], int(head[1]), self._head[2])
        return lambda: self._drop_snapshots_before(snap_id)

    def _drop_snapshots_before(self, snap_id: int) -> None:
        """Off the event loop: delete the snapshots the one in use replaced."""
        with self._bg_lock:
            try:
                if self._bg is None or self._bg.closed or self._bg.broken:
                    self._bg = self._new_connection()
                self._bg.execute("DELETE FROM compactor_snapshot WHERE id < %s AND state = 'current'", (snap_id,))
            except Exception as exc:
                log.warning("could not delete the replaced snapshot: %s", exc)

    def discard_pending_snapshot(self) -> None:
        snap_id, self._pending = self._pending, None
        if snap_id is None:
            return
        with contextlib.suppress(Exception):
            self._live().execute("DELETE FROM compactor_snapshot WHERE id = %s AND state = 'pending'", (snap_id,))

    def read_across_rotation(self) -> list[list[Op]] | None:
        return None  # a rewritten history is reloaded

    def purge_kept_aside(self, needles: Sequence[bytes]) -> list[str]:
        return []  # a repair keeps nothing aside in a database

    def remove_dead_temp_files(self) -> None:
        with contextlib.suppress(Exception):
            self._live().execute(DEAD_PENDING_SQL)

    # --- the saved search index: rows of the snapshot that names it -----------------------
    def save_index(self, gen: int, arrays: Mapping[str, memoryview]) -> dict[str, Any]:
        """Lay the arrays out as an index file's bytes, in hand until the snapshot that names
        the reference returned writes them (`snapshot_now`)."""
        pieces = indexfile.encode(arrays)
        ref = indexfile.reference(f"index.{gen}", pieces)
        image = _assemble(pieces, ref["size"])
        assert image is not None  # the size is theirs
        self._index = (_label(ref), image)
        return ref

    def load_index(self, ref: Mapping[str, Any], *, verify: bool = True) -> dict[str, memoryview]:
        label = _label(ref)
        where = f"the saved index {ref.get('name')!r} in database {self.where}"
        held = self._index
        if held is not None and held[0] == label:
            self._index = None  # the index's arrays now read it: it is theirs
            image = held[1]
        else:
            image = self._fetch_index(label, ref.get("size"), where)
        if len(image) != ref.get("size"):
            raise IndexFileError(f"{where} is {len(image):,} bytes, not the {ref.get('size')!r} the snapshot recorded")
        if verify and zlib.crc32(image.data) != ref.get("crc32"):
            raise IndexFileError(f"{where} does not match its checksum: some bytes changed after it was written")
        image.flags.writeable = False  # read in place, as an index file's memory map is
        return indexfile.parse(image.data, where)

    def _fetch_index(self, label: bytes, size: object, where: str) -> Image:
        """The index's bytes from whichever snapshot holds them (one this process did not read)."""
        psycopg = import_psycopg()
        if not isinstance(size, int) or size < 0:
            raise IndexFileError(f"{where} has no valid size in the snapshot's reference")
        try:
            with self._live().cursor() as cur:
                rows = cur.stream(INDEX_ROWS_SQL, {"label": label, "snap": 0})
                image = _assemble((data for (data,) in rows), size)
        except psycopg.Error as exc:
            raise IndexFileError(f"{where} cannot be read: {one_line(exc)}") from exc
        if image is None:
            raise IndexFileError(f"{where} is missing or cut short")
        return image

    def keep_only_index(self, name: str | None) -> None:
        """After `snapshot_now`, which deleted every other snapshot with its index rows: also
        those of a snapshot another server was still writing then (a forget must leave no
        index that holds the forgotten item's terms)."""
        held = self._index
        if held is not None and _name_of(held[0]) != name:
            self._index = None
        psycopg = import_psycopg()
        try:
            conn = self._live()
            labels = conn.execute(
                "SELECT snapshot_id, data FROM compactor_snapshot_chunk WHERE n = %s", (INDEX_LABEL,)
            ).fetchall()
            other = [int(snap) for snap, data in labels if _name_of(bytes(data)) != name]
            if other:
                conn.execute("DELETE FROM compactor_snapshot_chunk WHERE n < 0 AND snapshot_id = ANY(%s)", (other,))
        except psycopg.Error as exc:
            log.warning("could not drop the index rows no snapshot names in %s: %s", self.where, exc)

    # --- the forget ledger ----------------------------------------------------------------
    def append_ledger(self, entries: list[dict[str, Any]]) -> None:
        psycopg = import_psycopg()
        try:
            with self._live().cursor() as cur:
                rows = [(orjson.dumps(e),) for e in entries]
                cur.executemany("INSERT INTO compactor_ledger (entry) VALUES (%s)", rows)
        except psycopg.Error as exc:
            raise self._fail("append to the forget ledger", exc) from exc

    def read_ledger(self) -> list[dict[str, Any]]:
        with contextlib.suppress(Exception):
            rows = self._live().execute("SELECT entry FROM compactor_ledger ORDER BY n").fetchall()
            return [orjson.loads(bytes(r[0])) for r in rows]
        return []

    def ledger_count(self) -> int:
        with contextlib.suppress(Exception):
            row = self._live().execute("SELECT count(*) FROM compactor_ledger").fetchone()
            return int(row[0]) if row else 0
        return 0

    def describe(self) -> dict[str, Any]:
        entries = size = snap_bytes = 0
        snap_at: float | None = None
        with contextlib.suppress(Exception):
            row = (
                self._live()
                .execute(
                    "SELECT (SELECT count(*) FROM compactor_journal), "
                    "(SELECT coalesce(sum(octet_length(ops)), 0) FROM compactor_journal), s.bytes, "
                    "extract(epoch FROM s.written_at)::float8 "
                    "FROM compactor_head h LEFT JOIN compactor_snapshot s ON s.id = h.snap_id"
                )
                .fetchone()
            )
            if row is not None:
                entries, size = int(row[0]), int(row[1])
                snap_bytes = int(row[2] or 0)
                snap_at = float(row[3]) if row[3] is not None else None
        return {
            "snapshot_bytes": snap_bytes,
            "snapshot_at": snap_at,
            "database": self.where,
            "journal_entries": entries,
            "journal_bytes": size,
            "generation": self.gen,
            "sequence": self.offset,
            "last_snapshot_at": self.last_snapshot_at,
            "last_snapshot_seconds": self.last_snapshot_seconds,
            "durability_warning": self.durability_warning,
        }
