"""A store retried after an answer that never came (an ambiguous commit) returns the first id
(issue 39, point 2), through the SDK's in-memory client; and the ambiguous commit is said to
be one, on the suite's PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.client import Client

from compactor.errors import AmbiguousCommitError, PersistenceError
from compactor.mcp import build_server
from compactor.store import Store
from compactor.store.facade import RETRY_WINDOW_S
from tests.support.pg_faults import LostAfterCommit


async def stored_id(c: Client, **args: Any) -> str:
    res = await c.call_tool("store", args)
    assert not res.is_error, res.content
    assert res.structured_content is not None
    item_id: str = res.structured_content["id"]
    return item_id


@pytest.mark.anyio
async def test_the_same_store_within_the_window_returns_the_first_id(store: Store, clock: Any):
    async with Client(build_server(store), mode="legacy") as c:
        first = await stored_id(c, content="the build uses ninja", tags=["build"])
        assert await stored_id(c, content="the build uses ninja", tags=["build"]) == first
        assert await stored_id(c, content="the build uses ninja", tags=["ci"]) != first
        assert await stored_id(c, content="the build uses ninja", tags=["build"], scope="other") != first
        clock.advance(RETRY_WINDOW_S + 1)
        assert await stored_id(c, content="the build uses ninja", tags=["build"]) != first
    assert len(store) == 4


def test_a_connection_lost_at_commit_is_said_to_be_unknown(pg_url: str, monkeypatch: pytest.MonkeyPatch):
    store = Store(database=pg_url)
    try:
        backend: Any = store._backend
        live = backend._live
        monkeypatch.setattr(backend, "_live", lambda: LostAfterCommit(live()))

        def unreachable() -> None:  # so whether it landed cannot be looked up either
            raise PersistenceError("Cannot connect to database: Connection refused.")

        monkeypatch.setattr(backend, "open", unreachable)
        with pytest.raises(AmbiguousCommitError, match="may or may not have been applied"):
            store.store("deploys go out on Tuesdays", tags=["deploy"])
        monkeypatch.undo()
        # The retry finds what landed: one item, the first id.
        again = store.store("deploys go out on Tuesdays", tags=["deploy"])
        assert len(store) == 1
        assert store.get(again.item.id).content == "deploys go out on Tuesdays"
    finally:
        store.close()
