"""PostgreSQL rows read or moved off the hot path of `compactor.persistence.postgres`: a
snapshot's chunks read back as the state dir reads snapshot.json (`read_snapshot`, the same
bytes and checksums), and the journal entries `compactor doctor --repair` sets aside in
compactor_journal_aside (`set_aside`), which a forget purges of the item it deletes
(`purge_aside`), what the doctor checks: everything as stored, undecoded (`read_raw`), and
whether an append whose session ended was committed (`landed`)."""

from __future__ import annotations

import io
import logging
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import StateCorruptError
from .codec import ITEMS_LINE, SCHEMA_VERSION, SnapshotItems
from .pg_sql import PG_CHANNEL

if TYPE_CHECKING:
    import psycopg

ASIDE_TABLE = "compactor_journal_aside"

log = logging.getLogger(__name__)


def _corrupt(snap_id: int, where: str) -> Callable[[object], StateCorruptError]:
    def corrupt(reason: object) -> StateCorruptError:
        return StateCorruptError(
            f"Snapshot {snap_id} in database {where} is corrupt ({reason}), and compactor will not build on it: "
            "restore the database from a backup (docs/team.md, 'Backups and restores'); nothing was changed."
        )

    return corrupt


def read_snapshot(conn: psycopg.Connection[Any], snap_id: int, where: str) -> dict[str, Any]:
    """The snapshot's header, its items an `ItemRecords` read line by line (checksummed as in a
    state dir: the bytes are the same layout)."""
    chunks = conn.execute(
        "SELECT data FROM compactor_snapshot_chunk WHERE snapshot_id = %s AND n >= 0 ORDER BY n", (snap_id,)
    ).fetchall()
    corrupt = _corrupt(snap_id, where)
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
            f"Snapshot {snap_id} in database {where} has schema version {version!r}; this compactor reads up to "
            f"{SCHEMA_VERSION}. Upgrade compactor."
        )
    header["items"] = SnapshotItems(fh, corrupt, zlib.crc32(first))
    return header


def set_aside(conn: psycopg.Connection[Any], why: Mapping[int, str]) -> int:
    """Move the journal entries `why` names (seq -> reason) to compactor_journal_aside and start
    a new generation, announced, which makes every server reload without them; in one
    transaction. Returns how many moved."""
    seqs = sorted(why)
    with conn.transaction():
        conn.execute(
            f"INSERT INTO {ASIDE_TABLE} (seq, ops, written_at, why) "
            "SELECT j.seq, j.ops, j.written_at, w.why FROM compactor_journal j "
            "JOIN unnest(%s::bigint[], %s::text[]) AS w(seq, why) ON w.seq = j.seq",
            (seqs, [why[seq] for seq in seqs]),
        )
        moved = conn.execute("DELETE FROM compactor_journal WHERE seq = ANY(%s)", (seqs,)).rowcount
        row = conn.execute("UPDATE compactor_head SET gen = gen + 1 RETURNING gen").fetchone()
        assert row is not None
        conn.execute("SELECT pg_notify(%s, %s)", (PG_CHANNEL, f"g{int(row[0])}"))
    return int(moved)


def purge_aside(conn: psycopg.Connection[Any], needles: Sequence[bytes]) -> int:
    """Delete the set-aside entries holding any of `needles`; how many went."""
    return int(
        conn.execute(
            f"DELETE FROM {ASIDE_TABLE} "
            "WHERE EXISTS (SELECT FROM unnest(%s::bytea[]) AS n(needle) WHERE position(n.needle IN ops) > 0)",
            ([bytes(n) for n in needles],),
        ).rowcount
    )


def aside_count(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(f"SELECT count(*) FROM {ASIDE_TABLE}").fetchone()
    return int(row[0]) if row else 0


def read_raw(conn: psycopg.Connection[Any], where: str) -> tuple[int, dict[str, Any] | None, list[tuple[int, bytes]]]:
    """The generation, the snapshot in use (its items read, and checked, now) and every journal
    entry after it as stored, in one repeatable-read transaction."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        head = conn.execute("SELECT snap_id, snap_seq, gen FROM compactor_head").fetchone()
        if head is None:
            raise StateCorruptError(f"Database {where} has no compactor_head row: restore it from a backup.")
        snap = None if head[0] is None else read_snapshot(conn, int(head[0]), where)
        if snap is not None:
            snap["items"] = list(snap["items"])
        rows = conn.execute(
            "SELECT seq, ops FROM compactor_journal WHERE seq > %s ORDER BY seq", (int(head[1]),)
        ).fetchall()
    return int(head[2]), snap, [(int(seq), bytes(ops)) for seq, ops in rows]


def landed(
    conn: psycopg.Connection[Any], entry: bytes, session: tuple[int, Any], offset: int, where: str, wait_s: float
) -> int | None:
    """After the session that sent `entry` (appended after sequence number `offset`) ended:
    its sequence number if it was committed, 0 if it surely was not, None if that cannot be
    told. Surely: once that session's process is gone its transaction is over, and a committed
    entry would be the first after `offset` (it was appended only if none was, and anyone
    else's after it). Waits at most `wait_s` for the process to be gone."""
    deadline = time.monotonic() + wait_s
    try:
        while conn.execute("SELECT FROM pg_stat_activity WHERE pid = %s AND backend_start = %s", session).fetchone():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)
        row = conn.execute(
            "SELECT seq, ops FROM compactor_journal WHERE seq > %s ORDER BY seq LIMIT 1", (offset,)
        ).fetchone()
    except Exception as exc:  # unreachable still, or restarting: unknown
        log.warning("could not tell whether an entry reached %s: %s", where, exc)
        return None
    return int(row[0]) if row is not None and bytes(row[1]) == entry else 0
