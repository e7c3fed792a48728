"""PostgreSQL as the store: the same event-sourced design as the state dir, on tables that
several compactor servers (on several machines) share. Implements `compactor.persistence.base.Persistence`.

Tables (schema version in `compactor_schema`, created and migrated on first start):

    compactor_head       one row: gen (bumped when history is rewritten: forget, prune, repair),
                         snap_id/snap_seq (the snapshot in use and the last entry it holds),
                         trimmed (entries up to here may be deleted), epoch (see below)
    compactor_journal    seq bigserial, ops bytea: one row per call, its ops as JSON
    compactor_snapshot   one row per snapshot: pending (being written) or current, and the
                         sequence number it holds everything up to
    compactor_snapshot_chunk   the snapshot's bytes (the state dir's snapshot.json layout), in
                         chunks so no value nears PostgreSQL's 1 GB limit (n >= 0); below zero,
                         the search index it names (n = -1 its reference, n <= -2 its arrays
                         in the index file's layout)
    compactor_ledger     the forget ledger: ids and times, never content
    compactor_journal_aside   entries `compactor doctor --repair` set aside (unreadable ones)

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
and every rewrite its generation; a server compares them with its own position. Taking the lock
reads the head in the same round trip (pipelined), so a writer never relies on a notification.

**A restored database is noticed, not written over.** The head carries an epoch (pg_sql.EPOCH)
that a restore changes; every write compares it in the round trip that takes the lock and in
the append itself, and every read asks the head. A changed epoch, or a journal that went back,
makes the server reload: it then serves exactly what the database holds.

**A session the server ended is replaced before anything is sent** (`_ended`: the socket of an
idle session holds the goodbye); a read that loses its session on the way is run again on a new
one, taking the lock too. An append that did looks, once that session's process is gone,
whether its entry was committed (`_landed`): if so it is done, if not it is written once more;
only when that cannot be told is it "may or may not have been applied".

**Snapshots are rows written in the background**: serialised in a worker thread on a second
connection as a pending snapshot, then made current under the lock; start-up reads the current
snapshot plus the entries after it. Entries before the previous snapshot are then deleted (a
server that lagged past them reloads from the snapshot). A pending snapshot whose writer is
gone (its backend pid no longer in pg_stat_activity) is deleted at the next start or snapshot.

**The search index is saved with a snapshot, as rows of it** (`compactor.persistence.pg_index`).

**Forget** writes a fresh snapshot without the item and deletes, in the same transaction, every
journal entry (the item's ops among them) and every other snapshot with the index rows they
hold (the forgotten item's terms among them); the others see the new
generation and reload. Deleted rows stay in the table's pages until VACUUM reuses them.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

import orjson

from ..errors import (
    AmbiguousCommitError,
    PersistenceError,
    StateCorruptError,
    WriteConflictError,
    WriteLockTimeoutError,
)
from ..models import Item, Op
from . import pg_index, pg_rows
from .base import Loaded, ReentrantLock
from .codec import INDEX_REF, snapshot_chunks
from .pg_sql import (
    APPEND_ASYNC_SQL,
    APPEND_SQL,
    DEAD_PENDING_SQL,
    EPOCH,
    HEAD_SQL,
    PG_CHANNEL,
    PG_CONNECT_TIMEOUT_S,
    PG_WRITE_LOCK,
    RESTORED_SQL,
    Epoch,
    Head,
    NoHead,
    display_url,
    head_of,
    import_psycopg,
    migrate,
    one_line,
    parse_entry,
    socket_ended,
    sync_warning,
    undone,
    without_password,
)

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)
T = TypeVar("T")


# No such table, no such column, a sequence number without its default: tables dropped or
# made under a running server, which a restore does.
_TABLES_CHANGED: Final = ("42P01", "42703", "23502")
# How long an append whose session ended waits for that session's process to be gone before
# it looks whether its entry was committed (a terminated backend exits in milliseconds).
LANDED_WAIT_S: Final = 5.0


class PgBackend(ReentrantLock):
    """Memory kept in a PostgreSQL database (see the module docstring)."""

    # Stores of one server pass the advisory lock on, up to 8 in a row (~30 ms under load)
    # before another server's turn: taking and giving it back are two round trips a store.
    hand_offs_max = 8
    remote = True

    def __init__(self, url: str, *, upgrade: bool = True) -> None:
        self.url = url
        # Whether opening creates or upgrades the tables (not for the doctor, which only reads).
        self._upgrade = upgrade
        self.where = display_url(url)
        self.gen = 0
        self.offset = 0  # the last journal sequence number applied to memory
        self.last_snapshot_at: float | None = None
        self.last_snapshot_seconds: float | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._bg: psycopg.Connection[Any] | None = None  # background snapshots' own connection
        self._bg_lock = threading.Lock()
        self._pid = 0  # our main connection's backend pid: marks our pending snapshots
        self._session: tuple[int, Any] = (0, None)  # that pid and when its session started
        self._opened = False
        self._lock_conn: psycopg.Connection[Any] | None = None  # the connection that holds the lock
        self._locker: psycopg.Connection[Any] | None = None  # the one the lock is taken on
        self._head: Head | None = None  # what the head said when the lock was taken
        self._epoch: Epoch | None = None  # the database memory was loaded from (pg_sql.EPOCH)
        self._heard_seq = 0  # the highest sequence number another writer announced
        self._heard_gen = 0
        self._missed = True  # notifications may have been missed (new connection)
        self._pending: tuple[int, Epoch | None] | None = None  # our pending snapshot row, and where
        self.durability_warning: str | None = None  # from `sync_warning` at open; shown by status
        # Access-time entries (not fsynced on a state dir either) held until the lock is released,
        # then sent in the same round trip as the unlock: a query costs one round trip less.
        self._deferred: list[Op] = []
        self._lock_timeout: tuple[psycopg.Connection[Any], int] | None = None  # as last set, on which session
        # A saved index in hand, by its label: laid out by `save_index` for the snapshot that
        # names it, or read with the snapshot by `load`. Handed to `load_index` (the
        # index then reads its arrays from it), so no second copy stays.
        self._index: pg_index.Held | None = None

    @classmethod
    def connect(cls, url: str) -> PgBackend:
        backend = cls(url)
        backend.open()
        return backend

    # --- connections ----------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> PersistenceError:
        # The server's own sentence, without the statement and caret it may quote on more lines.
        primary = getattr(getattr(exc, "diag", None), "message_primary", None)
        detail = without_password(primary or one_line(exc) or repr(exc), self.url)
        if getattr(exc, "sqlstate", None) in _TABLES_CHANGED:
            # Never created here under a running server: that could be a restore half done.
            return PersistenceError(
                f"Could not {what} in database {self.where}: its tables are not the ones this compactor reads "
                f"({one_line(exc)}): a restore is under way, or a backup of an older compactor was restored. Once "
                "it is done, restart this server, which upgrades the tables; this call was not applied."
            )
        return PersistenceError(f"Could not {what} in database {self.where}: {detail}.")

    def _new_connection(self) -> psycopg.Connection[Any]:
        driver = import_psycopg()
        try:
            # No statement prepared by the driver: psycopg 3.3 counts one as prepared when a lock
            # timeout (routine: queries try the lock for 1 ms) cuts short the pipeline preparing it.
            conn: psycopg.Connection[Any] = driver.connect(
                self.url,
                autocommit=True,
                connect_timeout=PG_CONNECT_TIMEOUT_S,
                application_name="compactor",
                prepare_threshold=None,
            )
        except driver.Error as exc:
            raise PersistenceError(
                f"Cannot connect to database {self.where}: {without_password(one_line(exc), self.url)}. "
                "Check the URL, that PostgreSQL is running and reachable, and the user's password and rights."
            ) from exc
        return conn

    def open(self) -> None:
        psycopg = import_psycopg()
        conn = self._new_connection()
        try:
            if self._upgrade:
                migrate(conn, self.where)
            conn.execute(f"LISTEN {PG_CHANNEL}")
            row = conn.execute(
                "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
            ).fetchone()
            warning = sync_warning(conn, self.where)
        except psycopg.Error as exc:  # e.g. no right to create tables, no schema to create them in
            conn.close()
            raise self._fail("open compactor's tables", exc) from exc
        except BaseException:
            conn.close()
            raise
        if warning is not None and warning != self.durability_warning:
            log.warning("%s", warning)
        self.durability_warning = warning
        self._pid = int(row[0]) if row else 0
        self._session = (self._pid, row[1] if row else None)
        self._conn = conn
        self._opened = True
        self._missed = True

    def _conn_lost(self) -> bool:
        """Whether the main connection broke (rather than never opened)."""
        conn = self._conn
        return conn is not None and (conn.closed or conn.broken)

    def _ended(self, conn: psycopg.Connection[Any] | None) -> bool:
        """Whether a session that looks open was ended by the server (pg_terminate_backend, a
        restart): told without a round trip, so that a call opens a new one before it sends
        anything rather than fail. An idle session hears nothing but notifications until the
        server ends it; then its socket holds the error that says so, and end of file."""
        if conn is None or conn.closed or conn.broken:
            return True
        try:
            fd = conn.fileno()
            if not select.select([fd], [], [], 0)[0]:
                return False
            if conn is self._conn:
                self._drain_notifications()  # notifications first: they are ours to read
            with conn.lock:  # no statement of another thread is under way meanwhile
                return conn.closed or conn.broken or (bool(select.select([fd], [], [], 0)[0]) and socket_ended(fd))
        except (OSError, ValueError):
            return True

    def _background(self) -> psycopg.Connection[Any]:
        """The background snapshots' connection (under `_bg_lock`), opened anew if it ended."""
        if self._bg is None or self._ended(self._bg):
            if self._bg is not None:
                self._bg.close()
            self._bg = self._new_connection()
        return self._bg

    def _live(self) -> psycopg.Connection[Any]:
        """The main connection, opened anew if it broke (notifications may then be missed)."""
        conn = self._conn
        if conn is not None and not self._ended(conn):
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
        # Opened and not closed: a session that ended and could not be reopened yet is still
        # open, so that the next read tries again rather than serve memory without catching up.
        return self._opened

    def close(self) -> None:
        self._index = None
        for conn in (self._conn, self._bg, self._locker):
            if conn is not None:
                conn.close()
        self._conn = self._bg = self._locker = None
        self._opened = False

    def __del__(self) -> None:
        # A Store dropped without close() (as a state dir's file descriptor would be): close
        # the sessions, which also releases the advisory lock, instead of a ResourceWarning.
        with contextlib.suppress(Exception):
            self.close()

    # --- the writers' lock ----------------------------------------------------------------
    def _acquire(self, exclusive: bool) -> None:
        """pg_advisory_lock (`ReentrantLock`), waiting at most what is left of the call's wait; the head is read
        in the same round trip. The lock is waited for on a connection of its own, so that the
        main one stays free for reads meanwhile. A session the server ended is replaced, and
        taking the lock is tried once more if it ended on the way: a session that is gone
        holds no lock."""
        psycopg = import_psycopg()
        for attempt in (1, 2):
            conn = self._locker
            try:
                if self._ended(conn):
                    if conn is not None:
                        conn.close()
                    conn = self._locker = self._new_connection()
                assert conn is not None
                wait_s = self._acquire_wait_s
                wait_ms = max(1, round(wait_s * 1000)) if wait_s is not None else 0  # 0: none
                # A statement's error is raised once the pipeline has ended: raised inside it,
                # psycopg logged a warning of its own ("pipeline aborted") on the way out.
                failed: Exception | None = None
                try:
                    with conn.pipeline():
                        try:
                            if self._lock_timeout != (conn, wait_ms):  # kept by the session unless undone
                                conn.execute("SELECT set_config('lock_timeout', %s, false)", (str(wait_ms),))
                                self._lock_timeout = (conn, wait_ms)
                            conn.execute("SELECT pg_advisory_lock(%s)", (PG_WRITE_LOCK,))
                            cur = conn.execute(HEAD_SQL)
                        except psycopg.Error as exc:
                            failed = exc
                except psycopg.errors.PipelineAborted:
                    if failed is None:
                        raise
                if failed is not None:
                    raise failed
                self._head = head_of(cur.fetchone(), self.where)
            except psycopg.errors.LockNotAvailable as exc:
                self._lock_timeout = None  # undone with the failed statements of its round trip
                if conn is not None:
                    self._let_go_of(conn)
                raise WriteLockTimeoutError(
                    f"Another compactor server has held the writers' lock of {self.where} for more than "
                    f"{self._asked_wait_s or 0:g} s (busy, stopped or stuck); this call was not applied. Retry it "
                    "in a moment."
                ) from exc
            except (psycopg.Error, PersistenceError) as exc:
                self._lock_timeout = None
                # The lock may be held by now (a session lock outlives a failed statement):
                # ending the session is what surely lets it go.
                lost = (conn is not None and (conn.closed or conn.broken)) or undone(exc)
                if conn is not None:
                    conn.close()
                self._locker = None
                if attempt == 1 and lost and isinstance(exc, psycopg.Error):
                    log.warning(
                        "the session taking the writers' lock of %s ended (%s); taking it again",
                        self.where,
                        one_line(exc),
                    )
                    continue
                if isinstance(exc, PersistenceError):
                    raise
                raise self._fail("take the writers' lock", exc) from exc
            self._lock_conn = conn
            return

    def _still_held(self) -> bool:
        conn = self._lock_conn
        return conn is not None and not conn.closed and not conn.broken and not self._ended(conn)

    def _let_go_of(self, conn: psycopg.Connection[Any]) -> None:
        """After a timeout the session may hold the lock anyway: PostgreSQL keeps one granted
        as its timer fired, and the head read after the grant can time out too."""
        try:
            conn.execute("SELECT pg_advisory_unlock_all()")
        except import_psycopg().Error:
            conn.close()  # which lets go of it too
            self._locker = None

    def _release(self) -> None:
        psycopg = import_psycopg()
        conn, self._lock_conn = self._lock_conn, None
        assert conn is not None
        self._head = None
        deferred, self._deferred = self._deferred, []
        # All of the session's advisory locks (it takes no other): a hold taken twice unawares
        # (see `_let_go_of`) is let go of too.
        unlock = "SELECT pg_advisory_unlock_all()"
        try:
            if not deferred:
                conn.execute(unlock)  # a pipeline costs more CPU than it saves for one statement
                return
            with conn.pipeline() as pipe:
                sent = conn.execute(APPEND_ASYNC_SQL, self._append_params(deferred))
                # A Sync ends the insert's transaction before the unlock runs: in one implicit
                # transaction the lock went first, and another server could take it and read a
                # head without this entry, then have its own append refused.
                pipe.sync()
                conn.execute(unlock)
            self._appended(sent.fetchone(), deferred)
        except psycopg.Error as exc:
            # Closing the session releases the lock too; the next call reconnects.
            log.warning("could not release the writers' lock (%s); closing the connection", exc)
            conn.close()
            self._missed = True

    def reading(self, wait_s: float | None = None) -> contextlib.AbstractContextManager[None]:
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

    def _read(self, what: str, query: Callable[[psycopg.Connection[Any]], T]) -> T:
        """`query` on the main connection, run once more on a new one if the session ended
        under it (terminated, the server restarted): a read is safe to repeat."""
        psycopg = import_psycopg()
        for attempt in (1, 2):
            try:
                return query(self._live())
            except NoHead:
                # A snapshot taken before a restore that this read then waited for sees its
                # tables empty: a new transaction sees them whole.
                if attempt == 1:
                    continue
                raise
            except psycopg.Error as exc:
                if attempt == 1 and (self._conn_lost() or undone(exc)):
                    log.warning("reading %s again on a new try (%s)", self.where, one_line(exc))
                    continue
                raise self._fail(what, exc) from exc
        raise AssertionError("unreachable")

    def _moved(self, head: Head) -> bool:
        """Whether the head says memory is not the database's any more: another database
        (restored, replaced), a rewritten history, or a journal that went back."""
        gen, _, last, epoch = head
        return epoch != self._epoch or gen != self.gen or last < self.offset

    def journal_changed(self) -> bool:
        """Under the lock: what the head said when it was taken. Otherwise: whether another
        writer announced an entry or a new generation, else what the head says now. That small
        query (~60 µs on loopback) is the round trip a read adds: a restore announces nothing,
        and an entry committed a moment ago may not have been announced here yet."""
        if self._head is not None:
            return self._moved(self._head) or self._head[2] != self.offset
        self._drain_notifications()
        if self._missed or self._heard_seq > self.offset or self._heard_gen > self.gen:
            return True
        head = self._read("read the journal", lambda conn: head_of(conn.execute(HEAD_SQL).fetchone(), self.where))
        return self._moved(head) or head[2] != self.offset

    def read_new(self) -> list[list[Op]] | None:
        def query(conn: psycopg.Connection[Any]) -> tuple[Head, list[tuple[Any, ...]]]:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                head = head_of(conn.execute(HEAD_SQL).fetchone(), self.where)
                if self._moved(head) or self.offset < head[1]:
                    return head, []  # restored, rewritten, or trimmed past us: reload
                rows = conn.execute(
                    "SELECT seq, ops FROM compactor_journal WHERE seq > %s ORDER BY seq", (self.offset,)
                ).fetchall()
            return head, rows

        head, rows = self._read("read the journal", query)
        if self._moved(head) or self.offset < head[1]:
            if head[3] != self._epoch:
                log.warning(
                    "database %s is not the one memory was read from (restored from a backup?): reloading", self.where
                )
            return None
        batches = [self._parse_ops(int(seq), bytes(ops)) for seq, ops in rows]
        if rows:
            self.offset = int(rows[-1][0])
        self._missed = False
        if self._head is not None:
            # Not below the head a writer read when it took the lock meanwhile (it waits for the
            # lock without the call lock that this read holds): that writer catches up to it.
            self._head = (self.gen, self._head[1], max(self._head[2], self.offset), self._head[3])
        return batches

    def _parse_ops(self, seq: int, raw: bytes) -> list[Op]:
        ops, why = parse_entry(raw)
        if why is not None:
            raise StateCorruptError(
                f"Journal entry {seq} in database {self.where} is damaged ({why}) and compactor will not build on "
                "it: `compactor doctor --repair --database URL` sets it aside (kept in compactor_journal_aside) "
                "and says which items it touched; nothing was changed."
            )
        return ops

    def load(self) -> Loaded:
        self._drain_notifications()

        def query(conn: psycopg.Connection[Any]) -> tuple[tuple[Any, ...], Any, Any, list[tuple[Any, ...]]]:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                restored = conn.execute(RESTORED_SQL).fetchone()
                if not restored or not restored[0]:
                    raise PersistenceError(
                        f"Database {self.where} is being restored (its tables are not all in place yet), so this "
                        "server does not read it; this call was not applied. Retry when the restore is done (or, if "
                        "it failed, restore again)."
                    )
                head = conn.execute(f"SELECT h.gen, h.snap_id, h.snap_seq, {EPOCH} FROM compactor_head h").fetchone()
                if head is None:
                    raise NoHead(self.where)
                snap_id, snap_seq = head[1], int(head[2])
                snap = None if snap_id is None else pg_rows.read_snapshot(conn, int(snap_id), self.where)
                index = None if snap_id is None else pg_index.read_rows(conn, int(snap_id))
                rows = conn.execute(
                    "SELECT seq, ops FROM compactor_journal WHERE seq > %s ORDER BY seq", (snap_seq,)
                ).fetchall()
            return head, snap, index, rows

        head, snap, self._index, rows = self._read("load memory", query)
        batches = [self._parse_ops(int(seq), bytes(ops)) for seq, ops in rows]
        gen, snap_seq = int(head[0]), int(head[2])
        self.gen = gen
        self._epoch = (int(head[3]), str(head[4]))
        self.offset = int(rows[-1][0]) if rows else snap_seq
        self._heard_gen = max(self._heard_gen, gen)
        self._missed = False
        if self._head is not None:
            self._head = (self.gen, self._head[1], self.offset, self._epoch)
        self.remove_dead_temp_files()
        return Loaded(snapshot=snap, batches=batches, gen=gen, offset=self.offset)

    # --- writing --------------------------------------------------------------------------
    def _append_params(self, ops: list[Op]) -> dict[str, Any]:
        table, epoch = self._epoch or (0, str(uuid.UUID(int=0)))
        return {"ops": orjson.dumps(ops), "gen": self.gen, "seq": self.offset, "table": table, "epoch": epoch}

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
        for attempt in (1, 2):
            session = self._session
            try:
                row = self._live().execute(APPEND_SQL if sync else APPEND_ASYNC_SQL, params).fetchone()
                break
            except psycopg.Error as exc:
                if not self._conn_lost():
                    self._refused(exc)
                # The session ended while the entry was on its way or committing (one the server
                # had ended before is replaced by `_live` before anything is sent): look.
                landed = self._landed(params["ops"], session)
                if landed:
                    row = (landed,)
                    break
                if landed == 0 and attempt == 1:
                    log.warning("the session of %s ended before this entry was written; writing it again", self.where)
                    continue
                raise AmbiguousCommitError(
                    f"The connection to database {self.where} was lost while this call was being saved "
                    f"({str(exc).strip()}): it may or may not have been applied. Retrying a store within "
                    f"a minute returns the first one's id rather than a duplicate."
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
            self._head = (self.gen, self._head[1], self.offset, self._head[3])

    def _refused(self, exc: Exception) -> NoReturn:
        """Raise what an append PostgreSQL refused means (the session still up: not applied)."""
        if undone(exc):  # a deadlock with a restore taking the tables, say: worth running again
            self._missed = True
            raise WriteConflictError(
                f"Database {self.where} undid this call's write ({one_line(exc)}); this call was not applied. "
                "Retry it: the next call catches up first."
            ) from exc
        if getattr(exc, "sqlstate", None) in _TABLES_CHANGED:
            # Its tables are being dropped or made under it (a restore): not a failing
            # database, and the call run again reads what the restore leaves.
            self._missed = True
            raise WriteConflictError(str(self._fail("write to the journal", exc))) from exc
        raise PersistenceError(
            f"Could not write to the journal in database {self.where}: {str(exc).strip()}. This call was "
            "not applied; check that PostgreSQL is up and retry."
        ) from exc

    def _landed(self, entry: bytes, session: tuple[int, Any]) -> int | None:
        """After the session that sent `entry` ended: `pg_rows.landed` on a live session."""
        try:
            conn = self._live()
        except Exception as exc:  # unreachable still, or restarting: unknown
            log.warning("could not tell whether an entry reached %s: %s", self.where, exc)
            return None
        return pg_rows.landed(conn, entry, session, self.offset, self.where, LANDED_WAIT_S)

    def _write_snapshot_rows(
        self,
        conn: psycopg.Connection[Any],
        state: str,
        header: dict[str, Any],
        items: list[Item],
        index: pg_index.Held | None = None,
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
            pg_index.write_rows(conn, snap_id, pg_index.label_of(ref), index, self.where)
        return snap_id

    def snapshot_now(self, header: dict[str, Any], items: list[Item]) -> None:
        psycopg = import_psycopg()
        self._flush_deferred()
        header["prev_offset"] = self.offset
        started = time.perf_counter()
        new_gen = self.gen + 1
        try:
            conn = self._live()
            with conn.transaction():
                # It replaces everything: only over the database and the history memory holds.
                head = head_of(conn.execute(HEAD_SQL + " FOR UPDATE OF h").fetchone(), self.where)
                if self._moved(head) or head[2] != self.offset:
                    self._missed = True
                    raise WriteConflictError(
                        f"Database {self.where} changed under this server (another writer, or a restore from a "
                        "backup); nothing was written. Retry: the next call reads it first."
                    )
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
            self._head = (new_gen, self.offset, self.offset, self._head[3])
        self._pending = None
        self.last_snapshot_seconds = time.perf_counter() - started
        self.last_snapshot_at = time.time()

    def write_pending_snapshot(self, header: dict[str, Any], items: list[Item]) -> None:
        psycopg = import_psycopg()
        started = time.perf_counter()
        epoch = self._epoch
        with self._bg_lock:
            try:
                bg = self._background()
                with bg.transaction():
                    row = bg.execute(f"SELECT {EPOCH} FROM compactor_head h").fetchone()
                    if row is None or (int(row[0]), str(row[1])) != epoch:
                        raise PersistenceError(f"database {self.where} was restored or replaced meanwhile")
                    self._pending = (self._write_snapshot_rows(bg, "pending", header, items), epoch)
            except psycopg.Error as exc:
                raise self._fail("write a snapshot", exc) from exc
        self.last_snapshot_seconds = time.perf_counter() - started

    def install_pending_snapshot(
        self, gen: int, offset: int, keep_index: str | None = None
    ) -> Callable[[], None] | None:
        psycopg = import_psycopg()
        self._flush_deferred()
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        snap_id, epoch = pending
        try:
            conn = self._live()
            with conn.transaction():
                head = conn.execute(
                    f"SELECT h.snap_id, h.snap_seq, {EPOCH} FROM compactor_head h FOR UPDATE OF h"
                ).fetchone()
                assert head is not None
                if (int(head[2]), str(head[3])) != epoch or epoch != self._epoch:
                    return None  # written into a database since restored: that row is not ours
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
            self._head = (self._head[0], int(head[1]), self._head[2], self._head[3])
        return lambda: self._drop_snapshots_before(snap_id)

    def _drop_snapshots_before(self, snap_id: int) -> None:
        """Off the event loop: delete the snapshots the one in use replaced (never the one the
        head names: a restore may have come in between)."""
        with self._bg_lock:
            try:
                self._background().execute(
                    "DELETE FROM compactor_snapshot WHERE id < %s AND state = 'current' "
                    "AND id IS DISTINCT FROM (SELECT snap_id FROM compactor_head)",
                    (snap_id,),
                )
            except Exception as exc:
                log.warning("could not delete the replaced snapshot: %s", exc)

    def discard_pending_snapshot(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None or pending[1] is None:
            return
        snap_id, (table, epoch) = pending[0], pending[1]
        with contextlib.suppress(Exception):
            self._live().execute(
                "DELETE FROM compactor_snapshot s USING compactor_head h WHERE s.id = %s AND s.state = 'pending' "
                "AND h.tableoid = %s::oid AND h.epoch = %s::uuid",
                (snap_id, table, epoch),
            )

    def read_across_rotation(self) -> list[list[Op]] | None:
        return None  # a rewritten history is reloaded

    def purge_kept_aside(self, needles: Sequence[bytes]) -> list[str]:
        """Entries holding a forgotten item leave compactor_journal_aside (where a repair set
        aside the ones it could not use): each holds one call, so the rest stays."""
        psycopg = import_psycopg()
        try:
            gone = pg_rows.purge_aside(self._live(), needles) if needles else 0
        except psycopg.Error as exc:
            raise self._fail("purge the entries a repair set aside", exc) from exc
        return [pg_rows.ASIDE_TABLE] if gone else []

    # --- what `compactor doctor` reads and sets aside (`pg_rows`) -------------------------
    def read_raw(self) -> tuple[int, dict[str, Any] | None, list[tuple[int, bytes]]]:
        """The generation, the snapshot in use (its items checked as they are read) and every
        journal entry after it as stored, not decoded: what the doctor checks and repairs."""
        return self._read("read the journal", lambda conn: pg_rows.read_raw(conn, self.where))

    def set_aside(self, why: Mapping[int, str]) -> int:
        """Under the lock: move the journal entries `why` names (seq -> reason) aside and start
        a new generation, which makes every server reload without them (`pg_rows.set_aside`)."""
        psycopg = import_psycopg()
        try:
            return pg_rows.set_aside(self._live(), why)
        except psycopg.Error as exc:
            raise self._fail("set journal entries aside", exc) from exc

    def aside_count(self) -> int:
        """How many journal entries a repair set aside (kept in compactor_journal_aside)."""
        return self._read("count the entries set aside", pg_rows.aside_count)

    def remove_dead_temp_files(self) -> None:
        with contextlib.suppress(Exception):
            self._live().execute(DEAD_PENDING_SQL)

    # --- the saved search index: rows of the snapshot that names it (`pg_index`) ----------
    def save_index(self, gen: int, arrays: Mapping[str, memoryview]) -> dict[str, Any]:
        """Lay the arrays out as an index file's bytes, in hand until the snapshot that names
        the reference returned writes them (`snapshot_now`)."""
        ref, self._index = pg_index.lay_out(gen, arrays)
        return ref

    def load_index(self, ref: Mapping[str, Any], *, verify: bool = True) -> dict[str, memoryview]:
        label = pg_index.label_of(ref)
        where = f"the saved index {ref.get('name')!r} in database {self.where}"
        held = self._index
        if held is not None and held[0] == label:
            self._index = None  # the index's arrays now read it: it is theirs
            image = held[1]
        else:
            image = pg_index.fetch(self._live(), label, ref.get("size"), where)
        return pg_index.open_image(image, ref, where, verify=verify)

    def keep_only_index(self, name: str | None) -> None:
        """After `snapshot_now`, which deleted every other snapshot with its index rows: also
        those of a snapshot another server was still writing then (a forget must leave no
        index that holds the forgotten item's terms)."""
        held = self._index
        if held is not None and pg_index.name_of(held[0]) != name:
            self._index = None
        psycopg = import_psycopg()
        try:
            pg_index.drop_others(self._live(), name)
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

    def read_ledger(self, limit: int) -> list[dict[str, Any]]:
        with contextlib.suppress(Exception):
            rows = (
                self._live().execute("SELECT entry FROM compactor_ledger ORDER BY n DESC LIMIT %s", (limit,)).fetchall()
            )
            return [orjson.loads(bytes(r[0])) for r in reversed(rows)]
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
