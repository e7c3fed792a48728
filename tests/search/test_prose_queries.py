"""A query of words alone asks about a matter, not about the last steps: it gets no lift for
recently stored items (the recency prior), while a query naming a number, path, name or code
keeps it (code lookups go back to recent work)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from compactor.mcp import build_server
from compactor.search.analyze import is_prose
from compactor.store import Store
from compactor.store.tuning import Tuning
from tests.support.stdio_client import StdioServer

OLD = "the migration of release 2024 failed on the orders table"
NEW = OLD + " again"  # a little longer, so a little less relevant, and stored 41 items later
PROSE = "why did the migration fail on the orders table"
CODE = "migration 2024 failed on the orders table"


def _fill(store_one) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    old = store_one(OLD)
    for i in range(40):
        store_one(f"filler note {i} about the cache warmup and unrelated chores")
    return old, store_one(NEW)


def test_words_alone_are_prose_and_anything_else_is_not() -> None:
    for text in ("why did the migration fail", "what did we decide about retries when charging cards?", "The Parser"):
        assert is_prose(text), text
    for text in ("KeyError in parser", "pytest tests/x.py", "fix w12 in mod42", "release 2024", "max_items", ""):
        assert not is_prose(text), text


def test_a_prose_query_ranks_by_relevance_and_a_code_query_lifts_recent_items() -> None:
    store = Store()
    old, new = _fill(lambda text: store.store(text).item.id)
    assert [h.item.id for h in store.query(PROSE)][:2] == [old, new]
    assert [h.item.id for h in store.query(CODE)][:2] == [new, old]
    # With the prior a code lookup gets, the prose query would put the newer note first.
    lifted = Store(tuning=Tuning().overridden({"PROSE_RECENCY_PRIOR": "0.5"}))
    old, new = _fill(lambda text: lifted.store(text).item.id)
    assert [h.item.id for h in lifted.query(PROSE)][:2] == [new, old]


def test_the_in_memory_client_ranks_the_same() -> None:
    async def main() -> list[list[str]]:
        async with Client(build_server(Store()), mode="legacy") as c:

            async def store_one(text: str) -> str:
                return str((await c.call_tool("store", {"content": text})).structured_content["id"])  # type: ignore[index]

            ids = [await store_one(OLD)]
            for i in range(40):
                await store_one(f"filler note {i} about the cache warmup and unrelated chores")
            ids.append(await store_one(NEW))
            out = [ids]
            for q in (PROSE, CODE):
                reply = await c.call_tool("query", {"query": q})
                out.append([h["id"] for h in (reply.structured_content or {})["items"]][:2])
            return out

    (old, new), prose, code = anyio.run(main)
    assert prose == [old, new] and code == [new, old]


@pytest.mark.slow
def test_a_stdio_server_ranks_the_same(tmp_path: Path) -> None:
    with StdioServer("--state-dir", str(tmp_path / "state")) as server:
        old, new = _fill(lambda text: server.ok("store", content=text)["id"])
        assert [h["id"] for h in server.ok("query", query=PROSE)["items"]][:2] == [old, new]
        assert [h["id"] for h in server.ok("query", query=CODE)["items"]][:2] == [new, old]
