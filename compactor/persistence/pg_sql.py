"""PostgreSQL's side of the team server that is not the backend itself: the tables and their
migrations, the statements the backend runs, the driver imported with a message when it is
missing, a database's URL shown without its password, its schema version read without writing,
and whether it syncs what it acknowledges. `postgres.PgBackend` is the backend over them."""

from __future__ import annotations

import contextlib
import re
import urllib.parse
from typing import TYPE_CHECKING, Any, Final

from ..errors import PersistenceError

if TYPE_CHECKING:
    import psycopg

# The database schema compactor writes; a newer one is refused (upgrade compactor), an older
# one is migrated at start under PG_MIGRATE_LOCK.
PG_SCHEMA_VERSION: Final = 1
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


def schema_version(url: str) -> int:
    """The compactor schema version of the database at `url`, 0 if compactor never wrote there
    (read only: nothing is created). Raises PersistenceError if it cannot be reached."""
    driver = import_psycopg()
    try:
        with driver.connect(url, autocommit=True, connect_timeout=PG_CONNECT_TIMEOUT_S) as conn:
            row = conn.execute("SELECT to_regclass('compactor_schema') IS NOT NULL").fetchone()
            if not row or not row[0]:
                return 0
            got = conn.execute("SELECT coalesce(max(version), 0) FROM compactor_schema").fetchone()
            return int(got[0]) if got else 0
    except driver.Error as exc:
        raise PersistenceError(
            f"Cannot connect to database {display_url(url)}: {without_password(one_line(exc), url)}."
        ) from exc


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
