"""A backup restored under live servers (issue 39, point 3): the database carries an epoch that
every call compares with the one memory was read from, so a server that served memory the
database no longer holds reloads at its next call instead of serving it, and acknowledges no
store into a database nobody else reads. Real pg_dump and pg_restore, on the suite's cluster."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from compactor.errors import PersistenceError, WriteConflictError
from compactor.persistence.postgres import PgBackend
from compactor.store import Store
from tests.support.pg_cluster import _tool
from tests.support.stdio_client import StdioServer
from tests.system import test_http


def sql(url: str, statement: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def dump(url: str, path: Path) -> Path:
    subprocess.run([_tool("pg_dump"), "-Fc", "-f", str(path), url], check=True, capture_output=True, timeout=120)
    return path


def restore(url: str, path: Path, *options: str) -> None:
    done = subprocess.run(
        [_tool("pg_restore"), *(options or ("--clean",)), "-d", url, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def contents(store: Store) -> set[str]:
    return {store.get(i).content for i in store.ids()}


def fresh_contents(url: str) -> set[str]:
    s = Store(database=url)
    try:
        return contents(s)
    finally:
        s.close()


def advisory_locks(url: str) -> int:
    """The writers' locks held on this database (pg_locks covers the whole cluster)."""
    held = (
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    return int(sql(url, held)[0][0])


@pytest.fixture
def live(pg_url: str, tmp_path: Path) -> Iterator[tuple[Store, Path]]:
    """A store that wrote 5 items, a dump of them, then 20 more items the dump does not hold."""
    a = Store(database=pg_url)
    for i in range(5):
        a.store(f"before the backup {i}")
    path = dump(pg_url, tmp_path / "backup.dump")
    for i in range(20):
        a.store(f"after the backup {i}")
    try:
        yield a, path
    finally:
        a.close()


BEFORE = {f"before the backup {i}" for i in range(5)}


def test_a_read_after_a_restore_serves_what_the_database_holds(pg_url: str, live: tuple[Store, Path]):
    a, path = live
    assert len(a.ids()) == 25
    restore(pg_url, path)
    assert contents(a) == BEFORE  # was: the 20 items made after the backup, still served
    a.store("after the restore")
    assert contents(a) == fresh_contents(pg_url) == BEFORE | {"after the restore"}


def test_a_store_after_a_restore_lands_in_the_restored_database_not_a_split(pg_url: str, live: tuple[Store, Path]):
    a, path = live
    restore(pg_url, path)
    item = a.store("the first call after the restore is a write").item  # was: acknowledged, seen by no other server
    fresh = Store(database=pg_url)
    try:
        assert fresh.get(item.id).content == "the first call after the restore is a write"
        assert contents(fresh) == contents(a) == BEFORE | {item.content}
    finally:
        fresh.close()


def test_a_query_after_a_restore_finds_nothing_made_after_the_backup(pg_url: str, live: tuple[Store, Path]):
    a, path = live
    assert a.query("after the backup", limit=50)
    restore(pg_url, path)
    assert {h.item.content for h in a.query("backup", limit=50)} == BEFORE


def test_a_data_only_restore_into_emptied_tables_changes_the_epoch_too(pg_url: str, live: tuple[Store, Path]):
    """Tables kept (TRUNCATE, then --data-only): their oid is the same, but inserting the head
    row sets a new epoch (a trigger in place during a data-only restore)."""
    a, path = live
    epoch = sql(pg_url, "SELECT epoch FROM compactor_head")
    tables = "compactor_head, compactor_journal, compactor_snapshot, compactor_snapshot_chunk, compactor_ledger"
    sql(pg_url, f"TRUNCATE {tables}, compactor_schema, compactor_journal_aside")
    restore(pg_url, path, "--data-only")
    assert sql(pg_url, "SELECT epoch FROM compactor_head") != epoch
    assert contents(a) == BEFORE
    a.store("after a data-only restore")
    assert fresh_contents(pg_url) == contents(a)


def test_a_journal_that_went_back_is_read_again(pg_url: str, live: tuple[Store, Path]):
    """A point-in-time recovery keeps the tables and their epoch but loses the last entries: a
    journal whose last entry is before the one memory holds makes the server reload, and later
    entries reusing those numbers are not skipped."""
    a, _ = live
    last = int(sql(pg_url, "SELECT max(seq) FROM compactor_journal")[0][0])
    sql(pg_url, "DELETE FROM compactor_journal WHERE seq > %s", last - 3)
    sql(pg_url, "SELECT setval(pg_get_serial_sequence('compactor_journal', 'seq'), %s)", last - 3)
    assert len(a.ids()) == 22
    b = Store(database=pg_url)
    try:
        b.store("written over the lost numbers")
        assert contents(a) == contents(b)
    finally:
        b.close()


def test_a_forget_under_the_lock_does_not_write_over_a_restore(pg_url: str, live: tuple[Store, Path]):
    """A restore between taking the lock (the head read then) and a forget's new snapshot: the
    snapshot is refused, not written over the restored database."""
    a, path = live
    with a._locked():
        a._sync()
        restore(pg_url, path)
        with pytest.raises(WriteConflictError, match="changed under this server"):
            a._write_snapshot_locked(dict(a._s.items))
    assert fresh_contents(pg_url) == BEFORE
    assert contents(a) == BEFORE


def test_a_pending_snapshot_written_before_a_restore_is_not_installed(pg_url: str, live: tuple[Store, Path]):
    a, path = live
    backend = a._backend
    assert isinstance(backend, PgBackend)
    with a._locked():
        a._sync()
        header = a._snapshot_header(backend.gen + 1, backend.gen, backend.offset)
    backend.write_pending_snapshot(header, list(a._s.items.values()))
    restore(pg_url, path)
    rows = sql(pg_url, "SELECT id, state, upto_seq FROM compactor_snapshot ORDER BY id")
    with a._locked():
        a._sync()  # reloads: the restored database
        assert backend.install_pending_snapshot(backend.gen, backend.offset) is None
    assert sql(pg_url, "SELECT id, state, upto_seq FROM compactor_snapshot ORDER BY id") == rows
    assert fresh_contents(pg_url) == BEFORE


def test_a_background_snapshot_across_a_restore_keeps_the_restored_state(pg_url: str, live: tuple[Store, Path]):
    a, path = live
    restore(pg_url, path)
    anyio.run(a.snapshot_async)
    a.store("after the restore and a snapshot")
    assert fresh_contents(pg_url) == contents(a) == BEFORE | {"after the restore and a snapshot"}


def test_a_call_during_a_restore_is_refused_plainly_and_holds_no_lock(pg_url: str, live: tuple[Store, Path]):
    """Mid-restore the tables are gone, or the head row is not copied yet: each call says so in
    a sentence, and a write that took the writers' lock gives it back."""
    a, path = live
    sql(pg_url, "DELETE FROM compactor_head")  # tables created, rows not copied yet
    with pytest.raises(PersistenceError, match="no compactor_head row"):
        a.store("while the head row is missing")
    assert advisory_locks(pg_url) == 0
    sql(pg_url, "DROP TABLE compactor_head")  # --clean dropped it, not created yet
    for call in (lambda: a.store("while the tables are gone"), a.ids):
        with pytest.raises(PersistenceError, match="a restore is under way") as caught:
            call()
        assert "Traceback" not in str(caught.value) and "\n" not in str(caught.value)
    assert advisory_locks(pg_url) == 0
    restore(pg_url, path, "--clean", "--if-exists")
    assert contents(a) == BEFORE


def test_a_restore_needs_no_writer_lock_and_waits_for_none(pg_url: str, live: tuple[Store, Path]):
    """pg_restore --clean drops the tables: no session of a live server holds a table lock
    between calls, so the restore is not blocked by one."""
    a, path = live
    a.ids()
    held = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE c.relname LIKE 'compactor_%%'"
    assert sql(pg_url, held) == [(0,)]
    restore(pg_url, path)
    assert advisory_locks(pg_url) == 0


def test_a_database_half_restored_is_not_read(pg_url: str, live: tuple[Store, Path]):
    """Rows copied, the last constraint not made yet: a server that sees the new epoch waits
    for the restore to end rather than load a database that may lack rows still to come."""
    a, path = live
    restore(pg_url, path)
    sql(pg_url, "ALTER TABLE compactor_snapshot_chunk DROP CONSTRAINT compactor_snapshot_chunk_snapshot_id_fkey")
    for call in (a.ids, lambda: a.store("during the restore")):
        with pytest.raises(PersistenceError, match="is being restored"):
            call()
    assert len(a._s.items) == 25  # memory as it was: nothing half loaded
    sql(
        pg_url,
        "ALTER TABLE compactor_snapshot_chunk ADD FOREIGN KEY (snapshot_id) REFERENCES compactor_snapshot (id) "
        "ON DELETE CASCADE",
    )
    assert contents(a) == BEFORE


def hammer(store: Store, during: Any) -> list[str]:
    """Stores and reads on two threads while `during()` runs; what the calls said when they failed."""
    stop, failures = threading.Event(), []

    def loop(write: bool) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                for tries in (1, 2):  # as the server runs a call again after a conflict
                    try:
                        store.store(f"written during the restore {n}") if write else store.ids()
                        break
                    except WriteConflictError:
                        if tries == 2:
                            raise
            except PersistenceError as exc:
                failures.append(str(exc))
            time.sleep(0.005)

    threads = [threading.Thread(target=loop, args=(w,)) for w in (True, False)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.1)
        during()
        time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    return failures


@pytest.mark.slow
@pytest.mark.parametrize("atomic", [True, False], ids=["single-transaction", "step-by-step"])
def test_a_restore_under_a_writing_server_leaves_one_memory(pg_url: str, tmp_path: Path, atomic: bool):
    """With --single-transaction every call waits for the restore and none fails; without it,
    calls during the restore fail with a sentence, none writes into the half-restored tables
    (which would make pg_restore fail on its rows), and after it every server agrees."""
    a = Store(database=pg_url)
    try:
        for i in range(200):
            a.store(f"before the backup {i} " + "padding " * 200)
        path = dump(pg_url, tmp_path / "backup.dump")
        options = ("--clean", "--if-exists", *(["--single-transaction"] if atomic else []))
        failures = hammer(a, lambda: restore(pg_url, path, *options))
        if atomic:
            assert failures == []
        assert all("restore" in f or "restored" in f for f in failures), failures
        assert contents(a) == fresh_contents(pg_url)
    finally:
        a.close()


def exported(server: StdioServer) -> set[str]:
    return {rec["content"] for rec in server.export_records()}


@pytest.mark.slow
def test_a_live_stdio_server_serves_the_restored_database_and_no_split(pg_url: str, tmp_path: Path):
    with StdioServer("--database", pg_url) as server:
        for i in range(3):
            server.ok("store", content=f"kept by the backup {i}", scope="global")
        path = dump(pg_url, tmp_path / "backup.dump")
        for i in range(4):
            server.ok("store", content=f"lost with the restore {i}", scope="global")
        assert len(exported(server)) == 7
        restore(pg_url, path)
        kept = {f"kept by the backup {i}" for i in range(3)}
        assert exported(server) == kept  # was: all 7, the 4 lost ones still served
        hits = server.ok("query", query="restore backup", scope="all", limit=50)["items"]
        assert {h["id"] for h in hits} == {rec["id"] for rec in server.export_records()}
        server.ok("store", content="stored after the restore", scope="global")
        assert exported(server) == fresh_contents(pg_url) == kept | {"stored after the restore"}


class RestoresUnderLiveServers(RuleBasedStateMachine):
    """Two long-lived stores write, dumps are taken, and any dump is restored under them at
    any time: every store, and a fresh one, always sees exactly what the database holds."""

    cluster: Any = None  # the suite's cluster, set by the test

    def __init__(self) -> None:
        super().__init__()
        self.url = self.cluster.new_database()
        self.tmp = Path(tempfile.mkdtemp(prefix="compactor-restores-"))
        self.stores = [Store(database=self.url), Store(database=self.url)]
        self.dumps: list[Path] = []
        self.n = 0

    @rule(who=st.integers(0, 1), count=st.integers(1, 3))
    def store(self, who: int, count: int) -> None:
        for _ in range(count):
            self.n += 1
            self.stores[who].store(f"note {self.n}")

    @precondition(lambda self: any(s.ids() for s in self.stores))
    @rule(who=st.integers(0, 1))
    def forget(self, who: int) -> None:
        s = self.stores[who]
        s.forget(sorted(s.ids())[0])

    @rule(who=st.integers(0, 1))
    def snapshot(self, who: int) -> None:
        anyio.run(self.stores[who].snapshot_async)

    @rule()
    def take_a_dump(self) -> None:
        self.dumps.append(dump(self.url, self.tmp / f"{len(self.dumps)}.dump"))

    @precondition(lambda self: bool(self.dumps))
    @rule(data=st.data())
    def restore_a_dump(self, data: st.DataObject) -> None:
        restore(self.url, data.draw(st.sampled_from(self.dumps)))

    @invariant()
    def every_store_sees_what_the_database_holds(self) -> None:
        fresh = fresh_contents(self.url)
        for s in self.stores:
            assert contents(s) == fresh

    def teardown(self) -> None:
        for s in self.stores:
            s.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


@pytest.mark.slow
def test_restores_under_live_servers_never_split_memory(pg_cluster: Any, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(RestoresUnderLiveServers, "cluster", pg_cluster)
    machine = settings(max_examples=10, stateful_step_count=20, deadline=None, suppress_health_check=list(HealthCheck))(
        RestoresUnderLiveServers
    )
    machine.TestCase().runTest()


async def _contents_over_http(url: str) -> set[str]:
    async with test_http.connect(url, None) as c:
        out: set[str] = set()
        cursor = None
        while True:
            page = await test_http.call(c, "export", format="json", cursor=cursor)
            out |= {i["content"] for i in page["items"]}
            cursor = page.get("next_cursor")
            if not cursor:
                return out


async def _store_over_http(url: str, content: str) -> None:
    async with test_http.connect(url, None) as c:
        await test_http.call(c, "store", content=content, scope="global")


@pytest.mark.slow
def test_two_http_servers_serve_the_restored_database_and_agree(pg_url: str, tmp_path: Path):
    """Over the SDK's streamable HTTP client: a restore under two running servers, one of which
    wrote the items made after the backup; both then serve the restored memory, and a store on
    one after the restore is served by the other."""
    with test_http.http_server("--database", pg_url) as a, test_http.http_server("--database", pg_url) as b:
        for i in range(3):
            anyio.run(_store_over_http, a, f"kept by the backup {i}")
        path = dump(pg_url, tmp_path / "backup.dump")
        for i in range(5):
            anyio.run(_store_over_http, a, f"lost with the restore {i}")
        assert len(anyio.run(_contents_over_http, b)) == 8
        restore(pg_url, path)
        kept = {f"kept by the backup {i}" for i in range(3)}
        assert anyio.run(_contents_over_http, a) == anyio.run(_contents_over_http, b) == kept
        anyio.run(_store_over_http, a, "stored on a after the restore")
        assert anyio.run(_contents_over_http, b) == kept | {"stored on a after the restore"}
