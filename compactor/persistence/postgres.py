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
                         chunks so no value nears PostgreSQL's 1 GB limit
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

**Forget** writes a fresh snapshot without the item and deletes, in the same transaction, every
journal entry (the item's ops among them) and every other snapshot; the others see the new
generation and reload. Deleted rows stay in the table's pages until VACUUM reuses them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from .. import constants as C
from ..errors import PersistenceError, StateCorruptError
from ..models import Item, Op
from .base import Loaded, ReentrantLock
from .codec import ITEMS_LINE, SnapshotItems, snapshot_chunks
from .indexfile import IndexFileError

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)

MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE compactor_head (
        id smallint PRIMARY KEY CHECK (id = 1),
        gen bigint NOT NULL,
        snap_id bigint,
        snap_seq bigint NOT NULL,
        trimmed bigint NOT NULL
    );
    INSERT INTO compactor_head VALUES (1, 1, NULL, 0, 0);
    CREATE TABLE compactor_journal (
        seq bigserial PRIMARY KEY,
        ops bytea NOT NULL,
        written_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE compactor_snapshot (
        id bigserial PRIMARY KEY,
        state text NOT NULL CHECK (state IN ('pending', 'current')),
        gen bigint NOT NULL,
        upto_seq bigint NOT NULL,
        writer_pid integer NOT NULL,
        bytes bigint NOT NULL DEFAULT 0,
        written_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE compactor_snapshot_chunk (
        snapshot_id bigint NOT NULL REFERENCES compactor_snapshot (id) ON DELETE CASCADE,
        n integer NOT NULL,
        data bytea NOT NULL,
        PRIMARY KEY (snapshot_id, n)
    );
    CREATE TABLE compactor_ledger (
        n bigserial PRIMARY KEY,
        entry bytea NOT NULL
    );
    """,
}

# The head and the journal's last sequence number, read right after taking the lock.
HEAD_SQL = """
SELECT h.gen, h.trimmed, coalesce((SELECT max(seq) FROM compactor_journal), h.snap_seq)
FROM compactor_head h
"""
# Insert only if the writer is up to date: one statement, one transaction, then notify.
APPEND_SQL = f"""
WITH ins AS (
    INSERT INTO compactor_journal (ops)
    SELECT %(ops)s FROM compactor_head h
    WHERE h.gen = %(gen)s
      AND NOT EXISTS (SELECT 1 FROM compactor_journal j WHERE j.seq > %(seq)s)
      AND h.snap_seq <= %(seq)s
    RETURNING seq
)
SELECT seq, pg_notify('{C.PG_CHANNEL}', 's' || seq) FROM ins
"""
# Access-time entries are not worth a WAL flush (the state dir does not fsync them either).
APPEND_ASYNC_SQL = APPEND_SQL.replace(
    "SELECT %(ops)s FROM compactor_head h",
    "SELECT %(ops)s FROM compactor_head h, (SELECT set_config('synchronous_commit', 'off', true)) cfg",
)
DEAD_PENDING_SQL = """
DELETE FROM compactor_snapshot s
WHERE s.state = 'pending'
  AND (s.gen < (SELECT gen FROM compactor_head)
       OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = s.writer_pid))
"""


def display_url(url: str) -> str:
    """The database a URL names, without its password (status and messages show this)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(url)
    except Exception:
        return "(unparseable database URL)"
    user = f"{info['user']}@" if info.get("user") else ""
    port = f":{info['port']}" if info.get("port") else ""
    return f"postgresql://{user}{info.get('host') or 'localhost'}{port}/{info.get('dbname') or ''}"


def schema_version(url: str) -> int:
    """The compactor schema version of the database at `url`, 0 if compactor never wrote there
    (read only: nothing is created). Raises PersistenceError if it cannot be reached."""
    driver = _import_psycopg()
    try:
        with driver.connect(url, autocommit=True, connect_timeout=C.PG_CONNECT_TIMEOUT_S) as conn:
            row = conn.execute("SELECT to_regclass('compactor_schema') IS NOT NULL").fetchone()
            if not row or not row[0]:
                return 0
            got = conn.execute("SELECT coalesce(max(version), 0) FROM compactor_schema").fetchone()
            return int(got[0]) if got else 0
    except driver.Error as exc:
        raise PersistenceError(f"Cannot connect to database {display_url(url)}: {_one_line(exc)}.") from exc


def _one_line(exc: BaseException) -> str:
    """The driver's message as one line without its closing punctuation: libpq's spans lines
    ("...failed: Connection refused\n\tIs the server running...?")."""
    lines = [" ".join(line.split()).rstrip(".?!") for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line)


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise PersistenceError(
            "--database needs the PostgreSQL driver: install compactor with its postgres extra "
            "(`pip install 'compactor[postgres]'`) and start again."
        ) from exc
    return psycopg


class PgBackend(ReentrantLock):
    """Memory kept in a PostgreSQL database (see the module docstring)."""

    index_in_file = False  # the saved index travels inside the snapshot row

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
        self._head: tuple[int, int, int] | None = None  # (gen, trimmed, last seq) at lock time
        self._heard_seq = 0  # the highest sequence number another writer announced
        self._heard_gen = 0
        self._missed = True  # notifications may have been missed (new connection)
        self._pending: int | None = None  # id of our pending snapshot row
        # Access-time entries (not fsynced on a state dir either) held until the lock is released,
        # then sent in the same round trip as the unlock: a query costs one round trip less.
        self._deferred: list[Op] = []

    @classmethod
    def connect(cls, url: str) -> PgBackend:
        backend = cls(url)
        backend.open()
        return backend

    # --- connections ----------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> PersistenceError:
        return PersistenceError(f"Could not {what} in database {self.where}: {str(exc).strip() or exc!r}.")

    def _new_connection(self) -> psycopg.Connection[Any]:
        driver = _import_psycopg()
        try:
            conn: psycopg.Connection[Any] = driver.connect(
                self.url, autocommit=True, connect_timeout=C.PG_CONNECT_TIMEOUT_S, application_name="compactor"
            )
        except driver.Error as exc:
            raise PersistenceError(
                f"Cannot connect to database {self.where}: {_one_line(exc)}. Check the URL, that "
                "PostgreSQL is running and reachable, and the user's password and rights."
            ) from exc
        return conn

    def open(self) -> None:
        conn = self._new_connection()
        try:
            self._migrate(conn)
            conn.execute(f"LISTEN {C.PG_CHANNEL}")
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
        except BaseException:
            conn.close()
            raise
        self._pid = int(row[0]) if row else 0
        self._conn = conn
        self._missed = True

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        """Create the tables on first start; refuse a schema newer than this compactor's."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (C.PG_MIGRATE_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS compactor_schema "
                "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            row = conn.execute("SELECT coalesce(max(version), 0) FROM compactor_schema").fetchone()
            version = int(row[0]) if row else 0
            if version > C.PG_SCHEMA_VERSION:
                raise StateCorruptError(
                    f"Database {self.where} has compactor schema version {version}; this compactor reads up "
                    f"to {C.PG_SCHEMA_VERSION}. Upgrade compactor. Nothing was changed."
                )
            for step in range(version + 1, C.PG_SCHEMA_VERSION + 1):
                conn.execute(MIGRATIONS[step])
                conn.execute("INSERT INTO compactor_schema (version) VALUES (%s)", (step,))
                log.info("database %s: created compactor schema version %d", self.where, step)

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
        for conn in (self._conn, self._bg):
            if conn is not None:
                conn.close()
        self._conn = self._bg = None

    def __del__(self) -> None:
        # A Store dropped without close() (as a state dir's file descriptor would be): close
        # the sessions, which also releases the advisory lock, instead of a ResourceWarning.
        with contextlib.suppress(Exception):
            self.close()

    # --- the writers' lock ----------------------------------------------------------------
    def _acquire(self, exclusive: bool) -> None:
        """pg_advisory_lock (`ReentrantLock`); the head is read in the same round trip."""
        psycopg = _import_psycopg()
        try:
            conn = self._live()
            with conn.pipeline():
                conn.execute("SELECT pg_advisory_lock(%s)", (C.PG_WRITE_LOCK,))
                cur = conn.execute(HEAD_SQL)
            row = cur.fetchone()
        except psycopg.Error as exc:
            raise self._fail("take the writers' lock", exc) from exc
        assert row is not None
        self._head = (int(row[0]), int(row[1]), int(row[2]))
        self._lock_conn = conn

    def _release(self) -> None:
        psycopg = _import_psycopg()
        conn, self._lock_conn = self._lock_conn, None
        assert conn is not None
        self._head = None
        deferred, self._deferred = self._deferred, []
        try:
            with conn.pipeline():
                sent = conn.execute(APPEND_ASYNC_SQL, self._append_params(deferred)) if deferred else None
                conn.execute("SELECT pg_advisory_unlock(%s)", (C.PG_WRITE_LOCK,))
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
        psycopg = _import_psycopg()
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
        psycopg = _import_psycopg()
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
            "SELECT data FROM compactor_snapshot_chunk WHERE snapshot_id = %s ORDER BY n", (snap_id,)
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
        if not isinstance(version, int) or version > C.SCHEMA_VERSION:
            raise StateCorruptError(
                f"Snapshot {snap_id} in database {self.where} has schema version {version!r}; this compactor "
                f"reads up to {C.SCHEMA_VERSION}. Upgrade compactor."
            )
        header["items"] = SnapshotItems(fh, corrupt, zlib.crc32(first))
        return header

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
        psycopg = _import_psycopg()
        if not sync and self._lock_depth:
            self._deferred.extend(ops)
            return
        self._flush_deferred()
        params = self._append_params(ops)
        try:
            row = self._live().execute(APPEND_SQL if sync else APPEND_ASYNC_SQL, params).fetchone()
        except psycopg.Error as exc:
            raise PersistenceError(
                f"Could not write to the journal in database {self.where}: {str(exc).strip()}. This call was "
                "not applied; check that PostgreSQL is up and retry."
            ) from exc
        if row is None:
            # Someone wrote without the lock, or a rewrite slipped past: catch up, then retry.
            self._missed = True
            raise PersistenceError(
                f"Database {self.where} has entries this server had not read yet; this call was not "
                "applied. Retry it: the next call catches up first."
            )
        self.offset = int(row[0])
        if self._head is not None:
            self._head = (self.gen, self._head[1], self.offset)

    def _write_snapshot_rows(
        self, conn: psycopg.Connection[Any], state: str, header: dict[str, Any], items: list[Item]
    ) -> int:
        """Insert a snapshot row and its chunks (inside the caller's transaction); its id."""
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
        return snap_id

    def snapshot_now(self, header: dict[str, Any], items: list[Item]) -> None:
        psycopg = _import_psycopg()
        self._flush_deferred()
        header["prev_offset"] = self.offset
        started = time.perf_counter()
        new_gen = self.gen + 1
        try:
            conn = self._live()
            with conn.transaction():
                snap_id = self._write_snapshot_rows(conn, "current", header, items)
                conn.execute("DELETE FROM compactor_snapshot WHERE id <> %s", (snap_id,))
                conn.execute("DELETE FROM compactor_journal WHERE seq <= %s", (self.offset,))
                conn.execute(
                    "UPDATE compactor_head SET gen = %s, snap_id = %s, snap_seq = %s, trimmed = %s",
                    (new_gen, snap_id, self.offset, self.offset),
                )
                conn.execute("SELECT pg_notify(%s, %s)", (C.PG_CHANNEL, f"g{new_gen}"))
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
        psycopg = _import_psycopg()
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
        psycopg = _import_psycopg()
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

    # The saved index travels inside the snapshot row: there is no file to memory-map.
    def save_index(self, gen: int, arrays: Mapping[str, memoryview]) -> dict[str, Any] | None:
        return None

    def load_index(self, ref: Mapping[str, Any], *, verify: bool = True) -> dict[str, memoryview]:
        raise IndexFileError("a database snapshot names no index file")

    def keep_only_index(self, name: str | None) -> None:
        return None

    # --- the forget ledger ----------------------------------------------------------------
    def append_ledger(self, entries: list[dict[str, Any]]) -> None:
        psycopg = _import_psycopg()
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
        }
