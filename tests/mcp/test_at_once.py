"""A read runs at once on the server's event loop when nothing holds memory (a worker thread
costs a hand-over each way, ~0.1 ms a call), and on a worker thread when it would wait: for
another call of this server, for another server holding a state dir's writers' lock, and always
on a database. A read that would wait never blocks the event loop, and is never lost."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from compactor.errors import WouldWaitError
from compactor.mcp.server import build_server
from compactor.store import Store
from tests.support.holds import held_elsewhere
from tests.support.stdio_client import StdioServer

READS = ("query", "get", "list", "recall", "status", "tree", "expand", "export")


def _lock_held_by(other: Store) -> contextlib.AbstractContextManager[threading.Event]:
    """Another server holding the writers' lock (until the block ends or sets the event)."""
    return held_elsewhere(other._locked)


def _call_lock_held(store: Store) -> contextlib.AbstractContextManager[threading.Event]:
    """Another call of this server inside memory: its call lock held by another thread."""
    return held_elsewhere(lambda: store._calls)


def _record_threads(store: Store, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """The thread each Store method the tools call ran on, by method name."""
    seen: dict[str, list[int]] = {}
    for name in ("query", "get", "list_items", "recall", "status", "tree", "expand", "export", "store"):
        real: Callable[..., Any] = getattr(store, name)

        def wrapped(*args: Any, _real: Callable[..., Any] = real, _name: str = name, **kwargs: Any) -> Any:
            seen.setdefault(_name, []).append(threading.get_ident())
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, wrapped)
    return seen


def _arguments(tool: str, item_id: str) -> dict[str, Any]:
    return {
        "query": {"query": "ninja build"},
        "get": {"id": item_id},
        "expand": {"id": item_id},
    }.get(tool, {})


def test_reads_run_on_the_event_loop_and_writes_on_a_worker_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    store = Store(state_dir=tmp_path / "state")
    note = store.store("the ninja build caches objects in out/").item
    seen = _record_threads(store, monkeypatch)

    async def main() -> int:
        async with Client(build_server(store), mode="legacy") as c:
            for tool in READS:
                result = await c.call_tool(tool, _arguments(tool, note.id))
                # expand of an item that is not a summary node is refused, by the Store method
                assert not result.is_error or tool == "expand", (tool, result)
            result = await c.call_tool("store", {"content": "a second note"})
            assert not result.is_error
        return threading.get_ident()

    loop_thread = anyio.run(main)
    assert seen["store"] and all(t != loop_thread for t in seen["store"])
    reads = {name: threads for name, threads in seen.items() if name != "store"}
    assert set(reads) == {"query", "get", "list_items", "recall", "status", "tree", "expand", "export"}, reads
    assert all(t == loop_thread for threads in reads.values() for t in threads), reads
    # The access was journaled in the read's own hold, at once.
    assert Store(state_dir=tmp_path / "state").get(note.id).access_count == 1


@pytest.mark.parametrize("holder", ["another call of this server", "another server"])
def test_a_read_that_would_wait_runs_on_a_worker_thread_and_the_loop_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holder: str
):
    store = Store(state_dir=tmp_path / "state")
    note = store.store("the ninja build caches objects in out/").item
    other = Store(state_dir=tmp_path / "state")
    seen = _record_threads(store, monkeypatch)
    held = _call_lock_held(store) if holder == "another call of this server" else _lock_held_by(other)

    async def main() -> tuple[int, list[str], int, list[str]]:
        ticks = 0
        hits: list[str] = []
        async with Client(build_server(store), mode="legacy") as c:

            async def ask() -> None:
                result = await c.call_tool("query", {"query": "ninja build"})
                hits.extend(h["id"] for h in (result.structured_content or {})["items"])

            with held as release:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask)
                    started = time.monotonic()
                    while time.monotonic() - started < 0.4:  # the loop is free: it counts
                        await anyio.sleep(0.01)
                        ticks += 1
                    before_release = list(hits)
                    release.set()  # the query, waiting on a worker thread, goes on
        return threading.get_ident(), hits, ticks, before_release

    loop_thread, hits, ticks, before_release = anyio.run(main)
    assert before_release == [] and hits == [note.id]
    assert ticks >= 20  # ~40 in 0.4 s: the event loop was never blocked by the waiting read
    # Run (after a try at once that did nothing) on a worker thread, which waited.
    assert seen["query"][-1] != loop_thread


def test_at_once_a_read_that_would_wait_raises_before_doing_anything(tmp_path: Path):
    store = Store(state_dir=tmp_path / "state")
    note = store.store("the ninja build caches objects in out/").item
    other = Store(state_dir=tmp_path / "state")
    with _lock_held_by(other), store.at_once() as here:
        assert here
        with pytest.raises(WouldWaitError, match="not applied"):
            store.query("ninja build")
    with _call_lock_held(store), store.at_once(), pytest.raises(WouldWaitError, match="not applied"):
        store.status()
    assert store.get(note.id).access_count == 0  # nothing noted, nothing journaled
    with store.at_once():
        assert [h.item.id for h in store.query("ninja build")] == [note.id]
    assert Store(state_dir=tmp_path / "state").get(note.id).access_count == 1


def test_at_once_a_write_that_would_wait_changes_nothing(tmp_path: Path):
    store = Store(state_dir=tmp_path / "state")
    other = Store(state_dir=tmp_path / "state")
    with _lock_held_by(other), store.at_once(), pytest.raises(WouldWaitError):
        store.store("never stored")
    assert [it.content for it in Store(state_dir=tmp_path / "state").iter_items()] == []
    assert [it.content for it in store.iter_items()] == []


@pytest.mark.slow
def test_on_a_database_nothing_runs_at_once(pg_url: str):
    store = Store(database=pg_url)
    with store.at_once() as here:
        assert not here


@pytest.mark.slow
def test_over_stdio_a_waiting_read_leaves_the_server_answering(tmp_path: Path):
    state = tmp_path / "state"
    with StdioServer("--state-dir", str(state), "--no-share") as server:
        stored = server.ok("store", content="the ninja build caches objects in out/")
        other = Store(state_dir=state)
        with _lock_held_by(other):
            server.send(
                {
                    "jsonrpc": "2.0",
                    "id": 901,
                    "method": "tools/call",
                    "params": {"name": "query", "arguments": {"query": "ninja build"}},
                }
            )
            server.send({"jsonrpc": "2.0", "id": 902, "method": "ping"})
            first = server.read_message(timeout=10)
            assert first["id"] == 902  # the ping is answered while the query waits
            released = time.monotonic()
        reply = server.read_message(timeout=10)
        assert reply["id"] == 901 and time.monotonic() - released < 5
        assert [h["id"] for h in reply["result"]["structuredContent"]["items"]] == [stored["id"]]
        # Free again: a read answers at once, as before.
        assert [h["id"] for h in server.ok("query", query="ninja build")["items"]] == [stored["id"]]


def test_a_read_at_once_never_joins_a_snapshot_hold_the_loop_is_releasing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """A background snapshot's hold is used on the event loop's thread and given back from a
    worker thread; while the loop awaits that, a read it runs at once must not take the hold
    for its own (it would read on under a lock that is being released)."""
    from compactor.store import journaled

    store = Store(state_dir=tmp_path / "state")
    note = store.store("the ninja build caches objects in out/").item
    real = anyio.to_thread.run_sync
    tried: list[str] = []

    async def spy(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if getattr(fn, "__name__", "") == "leave":  # the loop awaits the release now
            with store.at_once(), pytest.raises(WouldWaitError):
                store.status()
            tried.append("read at once")
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(journaled.anyio.to_thread, "run_sync", spy)
    anyio.run(store.snapshot_async)
    assert tried == ["read at once", "read at once"]  # both holds of the snapshot
    with store.at_once():  # given back whole: a read at once runs again
        assert [h.item.id for h in store.query("ninja build")] == [note.id]
