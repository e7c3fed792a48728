"""A query never waits for writers (issue 39, point 5): its access is journaled under the writers'
lock when that is free, else by this server's next hold of it, and never lost at close. On the
team database reads take no lock, so a query answers while another server holds it."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import anyio

from compactor.mcp.server import snapshots
from compactor.store import Store
from tests.support.holds import held_elsewhere


def _lock_held_by(other: Store) -> contextlib.AbstractContextManager[threading.Event]:
    """Another server holding the writers' lock while the block runs, released when it ends."""
    return held_elsewhere(other._locked, most_s=5)


def test_a_query_answers_while_another_server_holds_the_writers_lock(pg_url: str):
    s = Store(database=pg_url)
    other = Store(database=pg_url)
    note = s.store("the ninja build caches objects in out/").item
    with _lock_held_by(other):
        started = time.monotonic()
        assert [h.item.id for h in s.query("ninja build")] == [note.id]
        assert time.monotonic() - started < 0.3, "the query waited for the writer"
        assert s.get(note.id).access_count == 0  # noted, not yet journaled
    s.store("a later write journals the access with its own hold")
    assert s.get(note.id).access_count == 1
    assert other.get(note.id).access_count == 1  # on disk: another process reads it
    s.close()
    other.close()


def test_a_free_lock_records_the_access_at_once(state_dir: Path):
    s = Store(state_dir=state_dir)
    other = Store(state_dir=state_dir)
    note = s.store("pelicans nest on the east jetty").item
    s.query("pelicans")
    s.query("jetty pelicans")
    assert s.get(note.id).access_count == 2
    assert other.get(note.id).access_count == 2
    s.close()
    other.close()


def test_accesses_noted_while_busy_are_saved_at_close_and_by_the_server_loop(pg_url: str):
    s = Store(database=pg_url)
    other = Store(database=pg_url)
    note = s.store("herons wade in the salt marsh").item
    with _lock_held_by(other):
        s.query("herons marsh")
    assert s.accesses_pending
    s.close()
    again = Store(database=pg_url)
    assert again.get(note.id).access_count == 1

    # A server with nothing to write still journals them within a snapshot interval.
    with _lock_held_by(other):
        again.query("salt marsh")
    assert again.accesses_pending

    async def one_tick() -> None:
        with anyio.move_on_after(0.3):
            await snapshots(again, 0.1)

    anyio.run(one_tick)
    assert not again.accesses_pending
    assert other.get(note.id).access_count == 2
    again.close()
    other.close()


def test_in_memory_the_access_is_recorded_with_the_query():
    s = Store()
    note = s.store("gulls circle the harbour").item
    s.query("gulls harbour")
    assert s.get(note.id).access_count == 1
    assert not s.accesses_pending
