"""PostgreSQL as the store (compactor/postgres.py), against a real cluster: the schema version
table, the up-to-date check on append, LISTEN/NOTIFY, snapshots as rows, forget deleting the
item's rows, a lagging server, dead writers' pending snapshots, a dropped connection."""

from __future__ import annotations

import re
import time

import anyio
import psycopg
import pytest

from compactor.errors import PersistenceError, StateCorruptError
from compactor.persistence import postgres as postgres_mod
from compactor.persistence.postgres import PgBackend
from compactor.store import Store, StoreInput


def rows(url: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def backend_of(store: Store) -> PgBackend:
    sd = store._backend
    assert isinstance(sd, PgBackend)
    return sd


def test_first_start_creates_the_schema_and_records_its_version(pg_url: str):
    Store(database=pg_url).close()
    assert rows(pg_url, "SELECT version FROM compactor_schema") == [(postgres_mod.PG_SCHEMA_VERSION,)]
    Store(database=pg_url).close()  # a second start migrates nothing
    assert rows(pg_url, "SELECT count(*) FROM compactor_schema") == [(1,)]


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
        assert not sd.journal_changed()  # nothing new: no query needed to know it
        x = a.store("a new write").item.id
        deadline = time.monotonic() + 10
        while not sd.journal_changed():
            assert time.monotonic() < deadline, "no notification arrived"
            time.sleep(0.01)
        assert sd._heard_seq == backend_of(a).offset
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
from compactor.persistence import postgres as postgres_mod
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
