"""PostgreSQL as the store (compactor/postgres.py), against a real cluster: the schema version
table, the up-to-date check on append, LISTEN/NOTIFY, snapshots as rows, forget deleting the
item's rows, a lagging server, dead writers' pending snapshots, a dropped connection."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import anyio
import orjson
import psycopg
import pytest

from compactor.errors import PersistenceError, StateCorruptError
from compactor.persistence import pg_sql as pg_sql_mod
from compactor.persistence.postgres import PgBackend
from compactor.store import Store, StoreInput
from compactor.store.journaled import _Journaled
from compactor.store.state import _State, dedup_state


def rows(url: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def backend_of(store: Store) -> PgBackend:
    sd = store._backend
    assert isinstance(sd, PgBackend)
    return sd


def test_first_start_creates_the_schema_and_records_its_version(pg_url: str):
    Store(database=pg_url).close()
    every = [(v,) for v in range(1, pg_sql_mod.PG_SCHEMA_VERSION + 1)]  # each migration run, in order
    assert rows(pg_url, "SELECT version FROM compactor_schema ORDER BY version") == every
    Store(database=pg_url).close()  # a second start migrates nothing
    assert rows(pg_url, "SELECT count(*) FROM compactor_schema") == [(len(every),)]


def test_a_newer_schema_is_refused_and_left_alone(pg_url: str):
    Store(database=pg_url).close()
    rows(pg_url, "INSERT INTO compactor_schema (version) VALUES (99) RETURNING version")
    with pytest.raises(StateCorruptError, match="schema version 99"):
        Store(database=pg_url)


def test_an_unreachable_database_is_a_clear_error(pg_cluster: object):
    with pytest.raises(
        PersistenceError, match=re.escape("Cannot connect to database postgresql://compactor@127.0.0.1:1/")
    ) as caught:
        Store(database="postgresql://compactor:sekrit@127.0.0.1:1/nowhere?connect_timeout=2")
    assert "sekrit" not in str(caught.value)
    # libpq's message spans lines and ends in "?": said as one sentence.
    assert "\n" not in str(caught.value) and "?." not in str(caught.value)
    assert "Connection refused; Is the server running" in str(caught.value)


def test_status_names_the_database_without_its_password(pg_url: str):
    url = pg_url.replace("compactor@", "compactor:hunter2@")
    s = Store(database=url)
    try:
        p = s.status().persistence
        assert p["database"].startswith("postgresql://compactor@127.0.0.1:") and "hunter2" not in str(p)
    finally:
        s.close()


def test_an_append_from_a_writer_that_is_not_up_to_date_is_refused(pg_url: str):
    a, b = Store(database=pg_url), Store(database=pg_url)
    try:
        a.store("a's write")
        before = rows(pg_url, "SELECT count(*) FROM compactor_journal")
        # b appends without catching up: the statement that writes checks and refuses.
        with pytest.raises(PersistenceError, match="had not read yet"):
            backend_of(b).append([{"op": "config", "set": {"token_budget": 9_000}}])
        assert rows(pg_url, "SELECT count(*) FROM compactor_journal") == before
        b.configure(token_budget=9_000)  # a call catches up first, then writes
    finally:
        a.close()
        b.close()
    s = Store(database=pg_url)
    try:
        assert s.budget == 9_000 and len(s) == 1
    finally:
        s.close()


def test_other_writers_changes_arrive_by_notification(pg_url: str):
    a, b = Store(database=pg_url), Store(database=pg_url)
    try:
        a.store("warm up")
        b.ids()
        sd = backend_of(b)
        assert not sd.journal_changed()  # nothing new
        x = a.store("a new write").item.id
        deadline = time.monotonic() + 10
        while sd._heard_seq != backend_of(a).offset:  # (a read also asks the head: it need not wait for this)
            assert time.monotonic() < deadline, "no notification arrived"
            sd._drain_notifications()
            time.sleep(0.01)
        assert sd.journal_changed()
        assert b.get(x).content == "a new write"
    finally:
        a.close()
        b.close()


def test_startup_reads_the_snapshot_row_plus_the_entries_after_it(pg_url: str):
    s = Store(database=pg_url)
    s.bulk_store([StoreInput(f"item {i}") for i in range(30)])
    anyio.run(s.snapshot_async)
    anyio.run(s.snapshot_async)  # the second trims the entries the first covered
    late = s.store("after the snapshots").item.id
    s.close()
    assert rows(pg_url, "SELECT state FROM compactor_snapshot") == [("current",)]
    assert rows(pg_url, "SELECT count(*) FROM compactor_journal") == [(1,)]
    s2 = Store(database=pg_url)
    try:
        assert len(s2) == 31 and s2.get(late).content == "after the snapshots"
    finally:
        s2.close()


def test_forget_deletes_the_items_rows_and_ops(pg_url: str):
    secret = "hunter2-very-secret-token-zq81"
    a, b = Store(database=pg_url), Store(database=pg_url)
    try:
        keep = a.store("public note").item.id
        gone = a.store(f"the password is {secret}").item.id
        anyio.run(a.snapshot_async)
        a.store("another note")
        # b writes a pending snapshot holding the secret, then a forgets it: b's snapshot is
        # deleted with every other one, and b does not install it.
        b.ids()
        sb = backend_of(b)
        with b._locked():
            b._sync()
            header = b._snapshot_header(sb.gen + 1, sb.gen, sb.offset)
            gen, offset = sb.gen, sb.offset
        sb.write_pending_snapshot(header, list(b._s.items.values()))
        a.forget(gone)
        needle = secret.encode()
        assert rows(pg_url, "SELECT count(*) FROM compactor_journal WHERE position(%s IN ops) > 0", needle) == [(0,)]
        found = rows(pg_url, "SELECT count(*) FROM compactor_snapshot_chunk WHERE position(%s IN data) > 0", needle)
        assert found == [(0,)]
        with b._locked():
            b._sync()  # sees the new generation and reloads
            assert sb.gen != gen
        with pytest.raises(PersistenceError, match="pending snapshot was removed"):
            sb.install_pending_snapshot(gen, offset)
        assert gone not in b.ids() and keep in b.ids()
        assert rows(pg_url, "SELECT count(*) FROM compactor_snapshot_chunk WHERE position(%s IN data) > 0", needle) == [
            (0,)
        ]
    finally:
        a.close()
        b.close()
    s = Store(database=pg_url)
    try:
        assert gone not in s.ids() and s.forget_ledger()[-1]["id"] == gone
    finally:
        s.close()


def test_a_server_that_lagged_past_the_trimmed_entries_reloads(pg_url: str):
    a, b = Store(database=pg_url), Store(database=pg_url)
    try:
        first = a.store("first").item.id
        b.ids()  # b is at the first entry, then idles while a snapshots twice
        later = [a.store(f"later {i}").item.id for i in range(5)]
        anyio.run(a.snapshot_async)
        a.store("more")
        anyio.run(a.snapshot_async)
        assert backend_of(b).offset < rows(pg_url, "SELECT trimmed FROM compactor_head")[0][0]
        got = set(b.ids())
        assert {first, *later} <= got and len(got) == 7
    finally:
        a.close()
        b.close()


def test_a_dead_writers_pending_snapshot_is_removed_at_the_next_start(pg_url: str):
    Store(database=pg_url).close()
    rows(
        pg_url,
        "INSERT INTO compactor_snapshot (state, gen, upto_seq, writer_pid) VALUES ('pending', 1, 0, 2147483000) "
        "RETURNING id",
    )
    Store(database=pg_url).close()
    assert rows(pg_url, "SELECT count(*) FROM compactor_snapshot WHERE state = 'pending'") == [(0,)]


def test_a_dropped_connection_is_reopened_and_nothing_is_lost(pg_url: str):
    s = Store(database=pg_url)
    try:
        x = s.store("before the drop").item.id
        pid = backend_of(s)._pid
        rows(pg_url, "SELECT pg_terminate_backend(%s)", pid)
        time.sleep(0.1)
        # The first call after the drop either reconnects at once or is refused unsaved; the
        # next one works, and nothing acknowledged is missing.
        try:
            y = s.store("after the drop").item.id
        except PersistenceError:
            y = s.store("after the drop").item.id
        assert s.degraded is None
    finally:
        s.close()
    s2 = Store(database=pg_url)
    try:
        assert {x, y} <= set(s2.ids())
    finally:
        s2.close()


WRITER = """
import sys
from compactor.store import Store
s = Store(database=sys.argv[1], budget=1_000_000)
keep = s.store("acknowledged before the kill").item.id
print("acked", keep, flush=True)
sys.stdin.readline()  # the test locks a table first
if sys.argv[2] == "forget":
    print("forgetting", flush=True)
    s.forget(keep)
else:
    print("storing", flush=True)
    s.store("never acknowledged: the writer dies inside this transaction")
print("returned", flush=True)
"""


def _blocked_backend(url: str, writer_pid_hint: str) -> int:
    """The pid of the writer's backend once it waits on our table lock (it is mid-transaction)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = rows(
            url,
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE %s",
            f"%{writer_pid_hint}%",
        )
        if found:
            return int(found[0][0])  # type: ignore[call-overload]
        time.sleep(0.05)
    raise AssertionError("the writer never blocked inside its transaction")


@pytest.mark.slow  # a writer process
@pytest.mark.parametrize(
    ("mode", "table", "hint"),
    [
        ("store", "compactor_journal", "INSERT INTO compactor_journal"),
        ("forget", "compactor_head", "UPDATE compactor_head"),
    ],
)
def test_a_writer_killed_inside_its_transaction_loses_nothing_acknowledged(
    pg_url: str, mode: str, table: str, hint: str
):
    """kill -9 while the writer's transaction is open (its INSERT, or the UPDATE that ends a
    forget's snapshot transaction, waits on a table lock we hold): the transaction rolls back,
    nothing acknowledged is lost, the advisory lock goes with the session, and the next writer
    goes on."""
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT, server_env

    Store(database=pg_url).close()  # schema created before we lock a table
    blocker = psycopg.connect(pg_url)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, pg_url, mode],
        cwd=ROOT,
        env=server_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        acked = proc.stdout.readline().split()
        assert acked[0] == "acked", acked
        # SHARE mode: reads go on (the head read with the advisory lock), writes to the table wait.
        blocker.execute(f"LOCK TABLE {table} IN SHARE MODE")  # a name from the parameters
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() in ("storing", "forgetting")
        _blocked_backend(pg_url, hint)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        blocker.rollback()
        blocker.close()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
    s = Store(database=pg_url)
    try:
        assert s.get(acked[1]).content == "acknowledged before the kill"  # the forget rolled back too
        others = [s.get(i).content for i in s.ids() if i != acked[1]]
        # A one-statement append whose client died while it waited still commits once the lock
        # is free (PostgreSQL notices the dead client only when it replies): unacknowledged, but
        # whole. The forget's transaction needs more statements from its client: rolled back.
        assert others in ([], ["never acknowledged: the writer dies inside this transaction"])
        assert not others or mode == "store"
        s.store("the next writer is not blocked by a dead one's lock")
        assert len(s) == 2 + len(others)
    finally:
        s.close()


def count_rebuilds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every rebuild of the search index from the items, counted (one entry each)."""
    calls: list[int] = []
    rebuild = _Journaled._rebuild_derived

    def counted(self: _Journaled, state: _State, *args: Any, **kwargs: Any) -> None:
        calls.append(len(state.items))
        rebuild(self, state, *args, **kwargs)

    monkeypatch.setattr(_Journaled, "_rebuild_derived", counted)
    return calls


def snapshot_header(url: str) -> dict[str, object]:
    (first,) = rows(
        url,
        "SELECT c.data FROM compactor_snapshot_chunk c JOIN compactor_head h ON c.snapshot_id = h.snap_id "
        "WHERE c.n = 0",
    )
    line = bytes(first[0]).split(b"\n", 1)[0]
    header = orjson.loads(line[: -len(b',"items":[')] + b"}")
    assert isinstance(header, dict)
    return header


def index_rows(url: str) -> list[tuple[object, ...]]:
    """(snapshot id, rows, bytes) of every snapshot's saved index rows."""
    return rows(
        url,
        "SELECT snapshot_id, count(*), sum(octet_length(data)) FROM compactor_snapshot_chunk WHERE n < 0 "
        "GROUP BY snapshot_id ORDER BY snapshot_id",
    )


def test_a_restart_uses_the_index_saved_as_rows_of_the_snapshot(pg_url: str, monkeypatch: pytest.MonkeyPatch):
    s = Store(database=pg_url)
    ids = [s.store(f"note {i} about parse_config_{i} in src/mod{i}.py").item.id for i in range(40)]
    s.close_with_snapshot()
    header = snapshot_header(pg_url)
    ref = header["index_file"]
    assert isinstance(ref, dict) and set(ref) == {"name", "size", "crc32"}
    assert "post" not in header["index"] and "vocab_blob" not in header["index"]  # type: ignore[operator]
    ((snap_id, n_rows, size),) = index_rows(pg_url)
    assert rows(pg_url, "SELECT snap_id FROM compactor_head") == [(snap_id,)] and n_rows >= 2
    assert size > ref["size"]  # its bytes, and the row that names them

    rebuilds = count_rebuilds(monkeypatch)
    again = Store(database=pg_url)
    try:
        assert rebuilds == []
        assert next(h.item.id for h in again.query("parse_config_7")) == ids[7] and again.check_derived() == []
        late = again.store("a late note about widgetry").item.id  # the index read in place takes writes
        assert [h.item.id for h in again.query("widgetry")] == [late]
    finally:
        again.close()


def test_a_background_snapshot_copies_the_index_rows_it_names_and_a_restart_uses_them(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
):
    s = Store(database=pg_url)
    s.bulk_store([StoreInput(f"item {i} on topic{i}") for i in range(30)])
    s.snapshot()
    (before,) = index_rows(pg_url)
    changed = s.store("written after the index was saved: zebrafinch").item.id
    anyio.run(s.snapshot_async)  # names the saved index with the id changed since
    s.close()  # as a kill would: no final snapshot
    header = snapshot_header(pg_url)
    assert header["index_stale"] == [changed]
    ((snap_id, n_rows, size),) = index_rows(pg_url)  # the older snapshot went, with its rows
    assert rows(pg_url, "SELECT snap_id FROM compactor_head") == [(snap_id,)] and snap_id != before[0]
    assert (n_rows, size) == before[1:]

    rebuilds = count_rebuilds(monkeypatch)
    again = Store(database=pg_url)
    try:
        assert rebuilds == []
        assert [h.item.id for h in again.query("zebrafinch")] == [changed] and again.check_derived() == []
    finally:
        again.close()


def test_damaged_or_missing_index_rows_make_the_start_rebuild(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    s = Store(database=pg_url)
    ids = [s.store(f"entry {i} mentions kestrel{i}").item.id for i in range(20)]
    s.close_with_snapshot()
    rebuilds = count_rebuilds(monkeypatch)
    rows(
        pg_url,
        "UPDATE compactor_snapshot_chunk SET data = overlay(data PLACING '\\xff'::bytea FROM 40) "
        "WHERE n = -2 RETURNING n",
    )
    with caplog.at_level(logging.WARNING):
        damaged = Store(database=pg_url)
    try:
        assert "does not match its checksum" in caplog.text and "rebuilding it from the items" in caplog.text
        assert len(rebuilds) == 1 and [h.item.id for h in damaged.query("kestrel3")] == [ids[3]]
    finally:
        damaged.close()
    rows(pg_url, "DELETE FROM compactor_snapshot_chunk WHERE n < -1 RETURNING n")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        missing = Store(database=pg_url)
    try:
        assert "is missing or cut short" in caplog.text and len(rebuilds) == 2
        assert missing.check_derived() == []
    finally:
        missing.close()


def test_a_snapshot_written_with_the_index_in_its_header_still_loads_it(pg_url: str, monkeypatch: pytest.MonkeyPatch):
    # As compactor wrote PostgreSQL snapshots before the index had rows of its own: base64 in the header.
    s = Store(database=pg_url)
    ids = [s.store(f"old layout {i} osprey{i}").item.id for i in range(20)]
    sd = backend_of(s)
    with s._locked():
        header = s._snapshot_header(sd.gen + 1, sd.gen, sd.offset)
        header["index"] = s._s.index.to_state()
        header["dedup"] = dedup_state(s._s)
        sd.snapshot_now(header, list(s._s.items.values()))
    s.close()
    assert index_rows(pg_url) == []
    rebuilds = count_rebuilds(monkeypatch)
    again = Store(database=pg_url)
    try:
        assert rebuilds == [] and [h.item.id for h in again.query("osprey5")] == [ids[5]]
        assert again.check_derived() == []
    finally:
        again.close()


def test_forget_leaves_no_index_row_with_the_forgotten_words(pg_url: str):
    word = b"uniqmarkerqq42"
    a, b = Store(database=pg_url), Store(database=pg_url)
    try:
        a.bulk_store([StoreInput(f"public note {i}") for i in range(10)])
        gone = a.store("the launch code is uniqmarkerqq42 remember it").item.id
        a.snapshot()  # the saved index holds the word
        found = rows(
            pg_url, "SELECT count(*) FROM compactor_snapshot_chunk WHERE n < 0 AND position(%s IN data) > 0", word
        )
        assert found == [(1,)]
        # b writes a pending snapshot naming that index (a copy of its rows), then a forgets.
        b.store("b's own note")
        sb = backend_of(b)
        with b._locked():
            b._sync()
            header = b._snapshot_header(sb.gen + 1, sb.gen, sb.offset)
            assert b._name_saved_index(header, len(b._s.items)) is not None
        sb.write_pending_snapshot(header, list(b._s.items.values()))
        assert len(index_rows(pg_url)) == 2
        a.forget(gone)
        for table, column in (
            ("compactor_journal", "ops"),
            ("compactor_snapshot_chunk", "data"),
            ("compactor_ledger", "entry"),
        ):
            assert rows(pg_url, f"SELECT count(*) FROM {table} WHERE position(%s IN {column}) > 0", word) == [(0,)]
        assert len(index_rows(pg_url)) == 1  # the new snapshot's, without the word
    finally:
        a.close()
        b.close()


def test_keep_only_index_drops_the_rows_of_every_other_index(pg_url: str):
    s = Store(database=pg_url)
    try:
        s.store("kept note")
        s.snapshot()
        ref = snapshot_header(pg_url)["index_file"]
        assert isinstance(ref, dict)
        # A snapshot another server was still writing, with an index of its own.
        (other,) = rows(
            pg_url,
            "INSERT INTO compactor_snapshot (state, gen, upto_seq, writer_pid) "
            "VALUES ('pending', 1, 0, pg_backend_pid()) RETURNING id",
        )
        label = orjson.dumps({"name": "index.1", "size": 3, "crc32": 0})
        rows(
            pg_url,
            "INSERT INTO compactor_snapshot_chunk VALUES (%s, -1, %s), (%s, -2, 'abc') RETURNING n",
            other[0],
            label,
            other[0],
        )
        backend_of(s).keep_only_index(ref["name"])
        assert [r[0] for r in index_rows(pg_url)] == [rows(pg_url, "SELECT snap_id FROM compactor_head")[0][0]]
    finally:
        s.close()


def test_the_snapshot_header_holds_no_copy_of_the_index(pg_url: str):
    s = Store(database=pg_url)
    s.bulk_store([StoreInput(f"item {i} with words lorem{i} ipsum{i % 7} dolor") for i in range(500)])
    s.close_with_snapshot()
    (first,) = rows(
        pg_url,
        "SELECT octet_length(split_part(encode(data, 'escape'), E'\\n', 1)) FROM compactor_snapshot_chunk WHERE n = 0",
    )
    ((_, _, index_bytes),) = index_rows(pg_url)
    assert first[0] < 8_000 < int(index_bytes)  # type: ignore[call-overload]


@pytest.mark.slow  # server processes
def test_a_server_on_a_database_restarts_with_its_saved_index(pg_url: str):
    from tests.conftest import server_env
    from tests.support.stdio_client import StdioServer

    with StdioServer("--database", pg_url) as first:
        stored = first.ok("store", content="the heron nests by the reservoir")
        first.close_stdin()
        assert first.wait() == 0
    assert len(index_rows(pg_url)) == 1  # its final snapshot saved the index as rows of its own
    env = {**server_env(), "COMPACTOR_LOG_LEVEL": "INFO"}
    with StdioServer("--database", pg_url, env=env) as again:
        found = again.ok("query", query="heron reservoir")
        again.close_stdin()
        assert again.wait() == 0
        assert again.proc.stderr is not None
        log_text = again.proc.stderr.read().decode()
    assert "loaded 1 items; search index: the saved one, 0 re-indexed" in log_text, log_text
    assert "rebuild" not in log_text
    assert stored and found
