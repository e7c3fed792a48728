"""Calls through the SDK's in-memory client that several tests make."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from mcp import Client

from compactor.mcp import build_server
from compactor.store import Store


async def stored_and_ranked(store: Store, contents: Sequence[str], query: str) -> tuple[list[str], list[str]]:
    """Store `contents` one by one and ask `query` through the SDK client: the ids stored, the
    ids ranked."""
    ids, (ranked,) = await stored_and_asked(store, contents, [query])
    return ids, ranked


async def stored_and_asked(
    store: Store, contents: Sequence[str], queries: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    """Store `contents` one by one and ask each of `queries` through the SDK client: the ids
    stored, and the ids each query ranks."""
    async with Client(build_server(store), mode="legacy") as c:
        with anyio.fail_after(10):
            ids = []
            for content in contents:
                res = await c.call_tool("store", {"content": content})
                assert res.structured_content is not None
                ids.append(str(res.structured_content["id"]))
            ranked = []
            for query in queries:
                hits = await c.call_tool("query", {"query": query})
                assert hits.structured_content is not None
                ranked.append([str(h["id"]) for h in hits.structured_content["items"]])
    return ids, ranked
