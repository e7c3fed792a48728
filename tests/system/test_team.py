"""A team server you can trust (issue 39), against the suite's PostgreSQL cluster over the SDK's
streamable HTTP client: no refused stores between servers under mixed load and access counts
equal everywhere; reads that answer while a write waits for the writers' lock."""

from __future__ import annotations

import contextlib

import anyio
import pytest

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
