"""A team server you can trust (issue 39), against the suite's PostgreSQL cluster over the SDK's
streamable HTTP client: no refused stores between servers under mixed load and access counts
equal everywhere; reads that answer while a write waits for the writers' lock."""

from __future__ import annotations

import contextlib
import time

import anyio
import psycopg
import pytest

from compactor.persistence.pg_sql import PG_WRITE_LOCK
from tests.system.test_http import call, connect, http_server

pytestmark = pytest.mark.slow

ROUNDS = 40


async def mixed_load(urls: list[str]) -> tuple[int, list[str], dict[str, dict[str, int]]]:
    """On every server a storing client and a querying client, at once; returns the stores
    acknowledged, the errors any call got, and each server's access counts by id."""
    errors: list[str] = []
    stored = 0

    async def storer(url: str, k: int) -> None:
        nonlocal stored
        async with connect(url, None) as c:
            for n in range(ROUNDS):
                res = await c.call_tool("store", {"content": f"server {k} note {n}: the build uses ninja"})
                if res.is_error:
                    errors.append(str(res.content))
                else:
                    stored += 1

    async def querier(url: str) -> None:
        async with connect(url, None) as c:
            for _ in range(ROUNDS):
                res = await c.call_tool("query", {"query": "build ninja note", "limit": 5})
                if res.is_error:
                    errors.append(str(res.content))

    async with anyio.create_task_group() as tg:
        for k, url in enumerate(urls):
            tg.start_soon(storer, url, k)
            tg.start_soon(querier, url)
    await anyio.sleep(1)  # the last access-time entries' notifications arrive
    counts: dict[str, dict[str, int]] = {}
    for url in urls:
        async with connect(url, None) as c:
            counts[url] = {}
            cursor = None
            while True:
                page = await call(c, "export", format="json", cursor=cursor)
                counts[url].update({i["id"]: i["access_count"] for i in page["items"]})
                cursor = page.get("next_cursor")
                if not cursor:
                    break
    return stored, errors, counts


@pytest.mark.parametrize("servers", [2, 4])
def test_servers_on_one_database_refuse_no_store_under_mixed_load(pg_url: str, servers: int):
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(http_server("--database", pg_url)) for _ in range(servers)]
        stored, errors, counts = anyio.run(mixed_load, urls)
    print(f"{servers} servers: {stored} stores acknowledged, {len(errors)} calls refused")
    assert errors == []
    assert stored == servers * ROUNDS
    first = next(iter(counts.values()))
    assert len(first) == stored
    for other in counts.values():
        assert other == first


def test_reads_answer_while_a_write_waits_for_a_held_lock_and_the_write_fails_in_bounded_time(pg_url: str):
    with http_server("--database", pg_url, "--lock-wait", "2") as url:

        async def drive() -> dict[str, float]:
            async with connect(url, None) as c:
                first = await call(c, "store", content="stored before the lock was taken by someone else")
            times: dict[str, float] = {}
            with psycopg.connect(pg_url, autocommit=True) as holder:
                # Another server stopped while holding the writers' lock.
                holder.execute("SELECT pg_advisory_lock(%s)", (PG_WRITE_LOCK,))
                async with anyio.create_task_group() as tg:

                    async def write() -> None:
                        started = time.monotonic()
                        async with connect(url, None) as c:
                            res = await c.call_tool("store", {"content": "waits for the lock"})
                        times["store"] = time.monotonic() - started
                        assert res.is_error
                        text = str(res.content[0].text)  # type: ignore[union-attr]
                        assert "held the writers' lock" in text and "not applied" in text, text
                        assert "read-only" not in text

                    tg.start_soon(write)
                    await anyio.sleep(0.3)  # the write is waiting now
                    started = time.monotonic()
                    async with connect(url, None) as c:  # a new session too
                        await call(c, "status")
                        got = await call(c, "get", id=first["id"])
                        hits = await call(c, "query", query="stored before the lock")
                    times["reads"] = time.monotonic() - started
                    assert got["content"].startswith("stored before") and hits["items"]
            async with connect(url, None) as c:  # the lock is free again: writes go on
                await call(c, "store", content="after the lock was released")
                status = await call(c, "status")
            assert status["persistence"]["state"] == "saving"
            return times

        times = anyio.run(drive)
    print(f"while a write waited: reads took {times['reads']:.2f} s; the write failed after {times['store']:.2f} s")
    assert times["reads"] < 1.5
    assert 1.9 <= times["store"] < 4
