"""PostgreSQL's side of the team server that is not the backend itself: the tables and their
migrations (`migrate`), what a database holds of them read without writing (`inspect`, and what
`schema_problem` says about it), the statements the backend runs, a journal entry's ops read
(`parse_entry`), whether a session the server ended says so (`socket_ended`), the driver
imported with a message when it is missing, a database's URL shown without its password, and
whether it syncs what it acknowledges. `postgres.PgBackend` is the backend over them."""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import orjson

from ..errors import PersistenceError, StateCorruptError
from ..models import Op

if TYPE_CHECKING:
    import psycopg

_log = logging.getLogger(__name__)

# The database schema compactor writes; a newer one is refused (upgrade compactor), an older
# one is migrated at start under PG_MIGRATE_LOCK.
PG_SCHEMA_VERSION: Final = 2
# pg_advisory_lock keys: any constant that other software on the same database is unlikely to
# pick; these spell "cmpw" (writers) and "cmpm" (migrations) in ASCII.
PG_WRITE_LOCK: Final = 0x636D7077
PG_MIGRATE_LOCK: Final = 0x636D706D
# LISTEN/NOTIFY channel on which every journal write and history rewrite is announced.
PG_CHANNEL: Final = "compactor_journal"
# A start against an unreachable database fails after this long with a message instead of
# hanging: long enough for a container's PostgreSQL still starting on a LAN, short for a typo.
PG_CONNECT_TIMEOUT_S: Final = 10
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
    # The database's identity (see EPOCH below) and the journal entries a repair set aside.
    2: """
    ALTER TABLE compactor_head ADD COLUMN epoch uuid NOT NULL DEFAULT gen_random_uuid();
    CREATE OR REPLACE FUNCTION compactor_new_epoch() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.epoch := gen_random_uuid();
        RETURN NEW;
    END $$;
    CREATE TRIGGER compactor_head_epoch BEFORE INSERT ON compactor_head
        FOR EACH ROW EXECUTE FUNCTION compactor_new_epoch();
    CREATE TABLE compactor_journal_aside (
        n bigserial PRIMARY KEY,
        seq bigint NOT NULL,
        ops bytea NOT NULL,
        written_at timestamptz NOT NULL,
        set_aside_at timestamptz NOT NULL DEFAULT now(),
        why text NOT NULL
    );
    """,
}
# Each version's tables and their columns: what `inspect` compares a database with, so that a
# table compactor did not make is never written, and tables whose compactor_schema row went
# missing are recognised as compactor's.
_LAYOUT_1: dict[str, dict[str, str]] = {
    "compactor_head": {
        "id": "smallint",
        "gen": "bigint",
        "snap_id": "bigint",
        "snap_seq": "bigint",
        "trimmed": "bigint",
    },
    "compactor_journal": {"seq": "bigint", "ops": "bytea", "written_at": "timestamp with time zone"},
    "compactor_snapshot": {
        "id": "bigint",
        "state": "text",
        "gen": "bigint",
        "upto_seq": "bigint",
        "writer_pid": "integer",
        "bytes": "bigint",
        "written_at": "timestamp with time zone",
    },
    "compactor_snapshot_chunk": {"snapshot_id": "bigint", "n": "integer", "data": "bytea"},
    "compactor_ledger": {"n": "bigint", "entry": "bytea"},
}
LAYOUTS: dict[int, dict[str, dict[str, str]]] = {
    1: _LAYOUT_1,
    2: {
        **_LAYOUT_1,
        "compactor_head": {**_LAYOUT_1["compactor_head"], "epoch": "uuid"},
        "compactor_journal_aside": {
            "n": "bigint",
            "seq": "bigint",
            "ops": "bytea",
            "written_at": "timestamp with time zone",
            "set_aside_at": "timestamp with time zone",
            "why": "text",
        },
    },
}
SCHEMA_TABLE: Final = "compactor_schema"
_SCHEMA_COLUMNS = {"version": "integer", "applied_at": "timestamp with time zone"}
_SCHEMA_DDL = f"""
CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())
"""
_TABLES = sorted({SCHEMA_TABLE, *(t for layout in LAYOUTS.values() for t in layout)})
# The columns of those tables in the schema compactor creates its tables in (the first of the
# search path that exists): where a first start would create them, and what queries then find.
_COLUMNS_SQL = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relname = ANY(%s)
"""
# **Which database memory was read from: its epoch.** A restore from a backup (pg_restore
# --clean, or into a new database) sends no notification and may leave the generation and the
# journal's last sequence number as this server last saw them, so a server would go on serving
# and appending to memory the database no longer holds. Every call therefore compares the
# head's EPOCH with the one memory was loaded from: a write in the round trip that takes the
# lock (and again in its append), a read in the one small query it makes for the head:
#   - the head table's oid: a restore that drops and creates the tables (--clean, or a fresh
#     database) makes a new one, even from a dump of this very database, whose rows are equal;
#   - the head's epoch column: random at creation and set anew by a trigger whenever the head
#     row is inserted, which outside the first start only a data-only restore does (its
#     triggers are in place then; a --clean restore creates them after the data, hence the oid).
# A journal that went back (its last entry before the one memory holds: a point-in-time
# recovery) or a generation that changed also makes a server reload.
EPOCH: Final = "h.tableoid::int8, h.epoch::text"
# The head and the journal's last sequence number (the snapshot's when the journal holds none
# after it), with the epoch: read right after taking the lock, and by every read.
_LAST_SEQ = "greatest(h.snap_seq, coalesce((SELECT max(seq) FROM compactor_journal), 0))"
HEAD_SQL = f"""
SELECT h.gen, h.trimmed, {_LAST_SEQ}, {EPOCH}
FROM compactor_head h
"""
# Which database memory was read from (EPOCH): the head table's oid and its epoch.
Epoch: TypeAlias = tuple[int, str]
# What the head says (HEAD_SQL): generation, trimmed, last sequence number, epoch.
Head: TypeAlias = tuple[int, int, int, Epoch]


def undone(exc: BaseException) -> bool:
    """Whether PostgreSQL undid a statement that is worth running again: a deadlock (with a
    restore in one transaction taking the tables, say) or a serialization failure."""
    return getattr(exc, "sqlstate", None) in ("40P01", "40001")


class NoHead(PersistenceError):
    """No compactor_head row: a restore between creating the tables and copying their rows, a
    transaction whose snapshot predates a restore it then waited for (the backend's read tries
    once more), or a damaged database."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"Database {where} has no compactor_head row (a restore in progress, or the row was deleted); "
            "this call was not applied. Retry when the restore is done, or restore the database from a backup."
        )


def head_of(row: Any, where: str) -> Head:
    if row is None:
        raise NoHead(where)
    return int(row[0]), int(row[1]), int(row[2]), (int(row[3]), str(row[4]))


# Whether a restore has put everything back: pg_restore creates the trigger and then the foreign
# key (its last step) after copying every row, each step its own transaction unless it runs
# with --single-transaction; a load made before would read a database half restored.
RESTORED_SQL = """
SELECT EXISTS (SELECT FROM pg_constraint WHERE conrelid = to_regclass('compactor_snapshot_chunk') AND contype = 'f')
   AND EXISTS (SELECT FROM pg_trigger WHERE tgrelid = to_regclass('compactor_head') AND tgname = 'compactor_head_epoch')
"""
# Insert only if the writer is up to date with the same database: one statement, one
# transaction, then notify.
APPEND_SQL = f"""
WITH ins AS (
    INSERT INTO compactor_journal (ops)
    SELECT %(ops)s FROM compactor_head h
    WHERE h.gen = %(gen)s
      AND {_LAST_SEQ} = %(seq)s
      AND h.tableoid = %(table)s::oid AND h.epoch = %(epoch)s::uuid
    RETURNING seq
)
SELECT seq, pg_notify('{PG_CHANNEL}', 's' || seq) FROM ins
"""
# Access-time entries are not worth a WAL flush (the state dir does not fsync them either).
APPEND_ASYNC_SQL = APPEND_SQL.replace(
    "SELECT %(ops)s FROM compactor_head h",
    "SELECT %(ops)s FROM compactor_head h, (SELECT set_config('synchronous_commit', 'off', true)) cfg",
)
# A saved index's rows: its reference at INDEX_LABEL (what a later snapshot finds it by), its
# bytes in rows of INDEX_ROW_BYTES from INDEX_LABEL - 1 down (~25 rows at 10k items).
INDEX_LABEL: Final = -1
INDEX_ROW_BYTES: Final = 1 << 20
# The snapshot that holds the index a label names (the newest, if several copied it).
_INDEX_HOLDER = f"""
SELECT snapshot_id FROM compactor_snapshot_chunk
WHERE n = {INDEX_LABEL} AND data = %(label)s AND snapshot_id <> %(snap)s
ORDER BY snapshot_id DESC LIMIT 1
"""
# A background snapshot keeps the older index it names by copying its rows inside the server.
COPY_INDEX_SQL = f"""
INSERT INTO compactor_snapshot_chunk (snapshot_id, n, data)
SELECT %(snap)s, c.n, c.data FROM compactor_snapshot_chunk c
WHERE c.n < 0 AND c.snapshot_id = ({_INDEX_HOLDER})
"""
INDEX_ROWS_SQL = f"""
SELECT data FROM compactor_snapshot_chunk
WHERE n < {INDEX_LABEL} AND snapshot_id = ({_INDEX_HOLDER})
ORDER BY n DESC
"""
DEAD_PENDING_SQL = """
DELETE FROM compactor_snapshot s
WHERE s.state = 'pending'
  AND (s.gen < (SELECT gen FROM compactor_head)
       OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = s.writer_pid))
"""


def sync_warning(conn: psycopg.Connection[Any], where: str) -> str | None:
    """Why an acknowledged write could be lost on a crash of the database host (this session's
    `synchronous_commit` or the server's `fsync` is off), with how to turn it on; None if neither.
    `synchronous_commit = local` or `remote_*` still flushes on this host: not reported."""
    off = []
    for name in ("synchronous_commit", "fsync"):
        row = conn.execute(f"SHOW {name}").fetchone()
        if row is not None and str(row[0]).lower() == "off":
            off.append(name)
    if not off:
        return None
    return (
        f"database {where} runs with {' and '.join(f'{name}=off' for name in off)}: a write compactor "
        "acknowledged can be lost if the database host crashes. Turn it on: remove it from the URL's "
        "options and the role's or database's settings (ALTER DATABASE ... RESET synchronous_commit), "
        "and set synchronous_commit = on and fsync = on in postgresql.conf."
    )


def display_url(url: str) -> str:
    """The database a URL names, without its password (status and messages show this). Parsed
    here, not by the driver: it names the database in the message that the driver is missing."""
    try:
        if "://" in url:
            parts = urllib.parse.urlsplit(url)
            info = {
                "user": urllib.parse.unquote(parts.username or ""),
                "host": parts.hostname or "",
                "port": str(parts.port or ""),
                "dbname": urllib.parse.unquote(parts.path.lstrip("/")),
            }
        else:  # libpq's key=value form
            info = {k: v.strip("'") for k, v in _CONNINFO_PAIR.findall(url)}
    except ValueError:
        return "(unparseable database URL)"
    user = f"{info['user']}@" if info.get("user") else ""
    port = f":{info['port']}" if info.get("port") else ""
    return f"postgresql://{user}{info.get('host') or 'localhost'}{port}/{info.get('dbname') or ''}"


_CONNINFO_PAIR = re.compile(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)")
_USERINFO_PASSWORD = re.compile(r"://[^/?#@]*?:([^/?#]*)@")


def without_password(message: str, url: str) -> str:
    """`message` with the URL's password taken out: the driver quotes a malformed one back
    ('invalid percent-encoded token: "Sup3rSecretPw%zz"')."""
    secrets = [m.group(1) for m in _USERINFO_PASSWORD.finditer(url)]
    secrets += [v.strip("'") for k, v in _CONNINFO_PAIR.findall(url) if k == "password"]
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        message = message.replace(secret, "***")
        with contextlib.suppress(ValueError):
            decoded = urllib.parse.unquote(secret, errors="strict")
            if decoded:
                message = message.replace(decoded, "***")
    return message


@dataclass(slots=True)
class Schema:
    """What a database holds of compactor's tables (`inspect`): the version compactor_schema
    records (None without that table) and the columns of each table with one of compactor's
    names."""

    version: int | None
    columns: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Compactor never wrote here: none of its tables."""
        return self.version is None and not self.columns

    def unrecorded_version(self) -> int | None:
        """The version whose tables these exactly are, when compactor_schema is missing."""
        if self.version is not None or SCHEMA_TABLE in self.columns:
            return None
        return next((v for v, layout in sorted(LAYOUTS.items()) if self.columns == layout), None)


def inspect(conn: psycopg.Connection[Any]) -> Schema:
    """Read compactor's tables in the database `conn` is connected to, writing nothing."""
    columns: dict[str, dict[str, str]] = {}
    for table, column, kind in conn.execute(_COLUMNS_SQL, (_TABLES,)).fetchall():
        columns.setdefault(str(table), {})[str(column)] = str(kind)
    version = None
    if columns.get(SCHEMA_TABLE) == _SCHEMA_COLUMNS:
        row = conn.execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchone()
        version = int(row[0]) if row and row[0] is not None else None
        if version is None:  # an empty compactor_schema says no more than none
            del columns[SCHEMA_TABLE]
    return Schema(version, columns)


def schema_problem(schema: Schema, where: str) -> tuple[str, str] | None:
    """Why compactor may not use a database holding `schema`, and what to do about it (the
    server and the CLI say both as one sentence, `refusal`; the doctor as a problem and its
    fix); None if it may (an older version is upgraded by the next start)."""
    version = schema.version
    if version is not None and version > PG_SCHEMA_VERSION:
        return (
            f"Database {where} has compactor schema version {version}, and this compactor reads up to "
            f"{PG_SCHEMA_VERSION}",
            "upgrade compactor on this machine (to the version the other servers run); nothing was changed",
        )
    recorded = schema.unrecorded_version()
    if recorded is not None:
        return (
            f"Database {where} holds compactor's tables but not the {SCHEMA_TABLE} table that records their "
            "version (dropped, or left out of a restore)",
            f"`compactor doctor --repair --database URL` records version {recorded} again; nothing was changed",
        )
    # Each table must have the columns of the version recorded (without one, of any version):
    # a table by one of compactor's names that is not compactor's is never written to.
    expected = LAYOUTS.get(version, {}) if version is not None else {}
    foreign = sorted(
        name
        for name, cols in schema.columns.items()
        if name != SCHEMA_TABLE
        and cols != expected.get(name)
        and (version is not None or all(cols != layout.get(name) for layout in LAYOUTS.values()))
    )
    if SCHEMA_TABLE in schema.columns and schema.columns[SCHEMA_TABLE] != _SCHEMA_COLUMNS:
        foreign.insert(0, SCHEMA_TABLE)
    if foreign:
        return (
            f"Database {where} already has {'a table' if len(foreign) == 1 else 'tables'} named "
            f"{', '.join(foreign)} that compactor did not make (other columns), and compactor will not write to "
            f"{'it' if len(foreign) == 1 else 'them'}",
            "give compactor a database or a schema of its own (`CREATE SCHEMA compactor`, then "
            "`?options=-csearch_path%3Dcompactor` in the URL), or rename that table; nothing was changed",
        )
    if version is None and schema.columns:
        return (
            f"Database {where} holds some of compactor's tables ({', '.join(sorted(schema.columns))}) but not "
            f"the {SCHEMA_TABLE} table that records their version",
            "restore the database from a backup; nothing was changed",
        )
    missing = sorted(set(expected) - set(schema.columns))
    if missing:
        return (
            f"Database {where} records compactor schema version {version} but lacks its table(s) {', '.join(missing)}",
            "restore the database from a backup; nothing was changed",
        )
    return None


def refusal(problem: tuple[str, str]) -> str:
    """A `schema_problem` as the one sentence the server and the CLI say."""
    return f"{problem[0]}: {problem[1]}."


def migrate(conn: psycopg.Connection[Any], where: str) -> None:
    """Create the tables on first start and upgrade an older schema, under PG_MIGRATE_LOCK;
    refuse (StateCorruptError, `schema_problem`'s sentence) a database compactor may not use."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_MIGRATE_LOCK,))
        schema = inspect(conn)
        problem = schema_problem(schema, where)
        if problem is not None:
            raise StateCorruptError(refusal(problem))
        if schema.version is None:
            conn.execute(_SCHEMA_DDL)
        for step in range((schema.version or 0) + 1, PG_SCHEMA_VERSION + 1):
            conn.execute(MIGRATIONS[step])
            conn.execute(f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (%s)", (step,))
            _log.info("database %s: compactor schema version %d", where, step)


def record_schema_version(conn: psycopg.Connection[Any], where: str) -> int | None:
    """`compactor doctor --repair`: recreate a missing compactor_schema over tables that are
    exactly some version's; that version, or None if there was nothing to do."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_MIGRATE_LOCK,))
        version = inspect(conn).unrecorded_version()
        if version is None:
            return None
        conn.execute(_SCHEMA_DDL)
        conn.cursor().executemany(
            f"INSERT INTO {SCHEMA_TABLE} (version) VALUES (%s)", [(v,) for v in range(1, version + 1)]
        )
        _log.info("database %s: recorded compactor schema version %d", where, version)
        return version


def read_schema(url: str) -> Schema:
    """`inspect` the database at `url` (nothing is created). Raises PersistenceError if it
    cannot be reached."""
    driver = import_psycopg()
    try:
        with driver.connect(url, autocommit=True, connect_timeout=PG_CONNECT_TIMEOUT_S) as conn:
            return inspect(conn)
    except driver.Error as exc:
        raise PersistenceError(
            f"Cannot connect to database {display_url(url)}: {without_password(one_line(exc), url)}."
        ) from exc


def parse_entry(raw: bytes) -> tuple[list[Op], str | None]:
    """A journal entry's ops, or why they cannot be read (a list of objects is expected)."""
    try:
        ops = orjson.loads(raw)
    except ValueError as exc:
        return [], str(exc)
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        return [], "not a list of ops"
    return ops, None


def socket_ended(fd: int) -> bool:
    """Whether what an idle session's socket holds next is the server's goodbye: the error
    that ends a session (a FATAL message, type E) or end of file. Looks without reading."""
    sock = socket.socket(fileno=fd)
    try:
        first = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.detach()
    return first in (b"", b"E")


def one_line(exc: BaseException) -> str:
    """The driver's message as one line without its closing punctuation: libpq's spans lines
    ("...failed: Connection refused\n\tIs the server running...?")."""
    lines = [" ".join(line.split()).rstrip(".?!") for line in str(exc).splitlines()]
    return "; ".join(line for line in lines if line)


def import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise PersistenceError(
            "--database needs the PostgreSQL driver: install compactor with its postgres extra "
            '(`pip install "compactor[postgres]"`) and start again.'
        ) from exc
    return psycopg
