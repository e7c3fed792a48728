"""Sessions PostgreSQL ends under a server (pg_terminate_backend, issue 39 point 6): a session
ended while idle is replaced before a call sends anything on it, a read that loses its session
on the way runs again on a new one, taking the writers' lock too; an append whose session ends
on the way looks whether its entry was committed: done if so, written once more if surely not,
and only when that cannot be told "may or may not have been applied", never "not applied"."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import anyio
import psycopg
import pytest

from compactor.errors import AmbiguousCommitError, PersistenceError
from compactor.persistence.pg_sql import PG_WRITE_LOCK
from compactor.persistence.postgres import PgBackend
from compactor.store import Store
from tests.support.pg_faults import LostAfterCommit


def backend_of(store: Store) -> PgBackend:
    b = store._backend
    assert isinstance(b, PgBackend)
    return b


def sessions(url: str) -> list[int]:
    """The backend pids of compactor's sessions on this database."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'compactor' AND datname = current_database()"
        ).fetchall()
    return [int(r[0]) for r in rows]


def terminate(url: str, pid: int) -> None:
    """End a session and wait until its process is gone (its goodbye is then on the socket)."""
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)


@pytest.mark.slow  # ~5 s: forty calls, each after its sessions were ended and waited for
def test_every_call_after_its_idle_sessions_were_ended_is_answered_once(pg_url: str, store: Store):
    """Each call follows the end of one of the store's sessions (the main one, the lock's, the
    background snapshots'): none fails, none is applied twice, memory stays writable."""
    rng = random.Random(39)
    ids = [store.store(f"seed {i} about the ledger").item.id for i in range(3)]
    calls = {
        "store": lambda n: ids.append(store.store(f"note {n} about the ledger").item.id),
        "get": lambda n: store.get(ids[n % len(ids)]),
        "ids": lambda n: store.ids(),
        "query": lambda n: store.query("ledger"),
        "update": lambda n: store.update(ids[0], summary=f"summary {n}"),
    }
    for n in range(40):
        terminate(pg_url, rng.choice(sessions(pg_url)))
        calls[rng.choice(sorted(calls))](n)
    assert store.degraded is None
    fresh = Store(database=pg_url)
    try:
        assert sorted(fresh.ids()) == sorted(store.ids()) == sorted(ids)
    finally:
        fresh.close()


def test_a_store_after_both_its_sessions_ended_is_stored_once(pg_url: str, store: Store):
    store.store("first")
    for pid in sessions(pg_url):
        terminate(pg_url, pid)
    item = store.store("second").item  # was: "may or may not have been applied" (nothing was sent)
    assert len(store.ids()) == 2 and store.get(item.id).content == "second"


class Blocked:
    """Another session holding a lock that the next statement of `what` waits for, so that a
    session can be ended while its statement is on the way."""

    def __init__(self, url: str, lock_sql: str) -> None:
        self.conn = psycopg.connect(url)
        self.conn.execute(lock_sql)

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


def waiting_pid(url: str, pids_before: set[int], what: str, timeout: float = 10.0) -> int:
    """The compactor session waiting on a lock while running `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'compactor' AND wait_event_type = 'Lock' "
                "AND query ILIKE %s",
                (f"%{what}%",),
            ).fetchall()
        if rows:
            return int(rows[0][0])
        time.sleep(0.02)
    raise AssertionError(f"no compactor session waited on {what!r}")


def run(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    return t, out


def end_its_session_while_it_waits(
    pg_url: str, fn: Any, waits_on: str, release: Any, settle_s: float = 0.1, join_s: float = 30
) -> dict[str, Any]:
    """Run `fn` on a thread, end the session it waits on (`waits_on`: a table or a statement),
    then `release` what held it: the thread's value or error."""
    t, out = run(fn)
    try:
        terminate(pg_url, waiting_pid(pg_url, set(), waits_on))
        time.sleep(settle_s)
    finally:
        release()
    t.join(join_s)
    return out


def test_a_read_whose_session_is_ended_on_the_way_runs_again_on_a_new_one(pg_url: str, store: Store):
    x = store.store("read me").item.id
    blocker = Blocked(pg_url, "LOCK TABLE compactor_head IN ACCESS EXCLUSIVE MODE")
    out = end_its_session_while_it_waits(pg_url, lambda: store.get(x).content, "compactor_head", blocker.release)
    assert out == {"value": "read me"}


def test_taking_the_lock_is_tried_again_when_its_session_ends_while_waiting(pg_url: str, store: Store):
    store.store("first")
    store.lock_wait_s = 20
    holder = psycopg.connect(pg_url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (PG_WRITE_LOCK,))
    # Closing the holder lets the lock go.
    out = end_its_session_while_it_waits(
        pg_url, lambda: store.store("second").item.content, "pg_advisory_lock", holder.close
    )
    assert out == {"value": "second"}
    assert len(store.ids()) == 2


def test_an_append_whose_session_ends_before_it_commits_is_written_once_more(pg_url: str, store: Store):
    """Its statement was sent and the session ended while it waited: once that session's process
    is gone the entry is surely not in the journal, so it is written again on a new session
    (before: "not applied", and memory turned read-only)."""
    store.store("first")
    blocker = Blocked(pg_url, "LOCK TABLE compactor_journal IN EXCLUSIVE MODE")
    out = end_its_session_while_it_waits(
        pg_url, lambda: store.store("second").item.content, "INSERT INTO compactor_journal", blocker.release, 0.2
    )
    assert out == {"value": "second"}
    assert store.degraded is None
    assert {store.get(i).content for i in store.ids()} == {"first", "second"}
    assert sql_count(pg_url) == 2


def sql_count(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM compactor_journal").fetchone()
    assert row is not None
    return int(row[0])


def test_an_append_whose_answer_is_lost_after_its_commit_is_done_once(
    pg_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
):
    backend = backend_of(store)
    live = backend._live
    monkeypatch.setattr(backend, "_live", lambda: LostAfterCommit(live()))
    item = store.store("deploys go out on Tuesdays").item  # was: "may or may not have been applied"
    monkeypatch.undo()
    assert sql_count(pg_url) == 1
    fresh = Store(database=pg_url)
    try:
        assert fresh.ids() == store.ids() == [item.id]
    finally:
        fresh.close()


def test_an_append_is_said_to_be_unknown_only_when_that_cannot_be_told(
    pg_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
):
    backend = backend_of(store)
    live = backend._live
    monkeypatch.setattr(backend, "_live", lambda: LostAfterCommit(live()))

    def unreachable() -> None:
        raise PersistenceError("Cannot connect to database: Connection refused.")

    monkeypatch.setattr(backend, "open", unreachable)
    with pytest.raises(AmbiguousCommitError, match="may or may not have been applied"):
        store.store("deploys go out on Tuesdays")
    monkeypatch.undo()
    assert store.degraded is None
    assert len(store.ids()) == 1  # it had been: the next call's catch-up shows it


@pytest.mark.slow
def test_an_http_server_answers_every_call_after_its_sessions_are_ended(pg_url: str):
    """Over the SDK's streamable HTTP client: before each call one of the server's sessions is
    ended; every call answers, and every store is there once."""
    from tests.system.test_http import call, connect, http_server

    rng = random.Random(6)

    async def calls(url: str, run: int) -> list[str]:
        stored: list[str] = []
        async with connect(url, None) as c:
            for n in range(30):
                terminate(pg_url, rng.choice(sessions(pg_url)))
                if n % 3 == 0:
                    note = f"run {run} note {n} about the ledger"
                    stored.append((await call(c, "store", content=note, scope="global"))["id"])
                elif n % 3 == 1:
                    await call(c, "query", query="ledger", scope="all")
                else:
                    await call(c, "get", id=stored[-1])
        return stored

    with http_server("--database", pg_url) as url:
        ids = anyio.run(calls, url, 1) + anyio.run(calls, url, 2)  # a call that failed raises here
    fresh = Store(database=pg_url)
    try:
        assert sorted(fresh.ids()) == sorted(ids) and len(ids) == 20
    finally:
        fresh.close()
