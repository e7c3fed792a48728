"""A query that names a file and a symbol (or lines) finds first the view of that file that
shows them, not another view of the same file (ISSUE 40 point 3).

Seen from outside, a code lookup's first hit was often "for a file, another view of the same
file whose lines do not hold the symbol the query names": every view of a named file got the
same lift, so a newer view, or one that shared a prose word with the query, ranked ahead of
the one that shows what was asked. Now a view holding a symbol the query names (a grep's
pattern, a `name` in backticks, a snake_case or camelCase name) or showing the lines it names
is lifted further. Through the Store, the SDK's in-memory client and a stdio server."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from compactor.mcp import build_server
from compactor.store import Store
from tests.support.stdio_client import StdioServer

_CODE = "\n".join(
    f"   {120 + i}\t{line}"
    for i, line in enumerate(
        [
            "    def charge_card(self, card, amount):",
            '        """Charge once; the gateway deduplicates by key."""',
            "        key = self.idempotency_key(card, amount)",
            "        return self.gateway.charge(card, amount, key=key)",
        ]
    )
)
# Oldest first: the view that shows charge_card (lines 120-123), notes, then two newer views of
# the same file that do not: one a grep for "retry" (a word the queries also use), one its head.
SHOWS = f"$ nl -ba src/shop/billing.py | sed -n '120,123p'\n{_CODE}"
CONTENTS = [
    SHOWS,
    *(f"note {i}: the cart tests pass" for i in range(5)),
    '$ grep -n "retry" src/shop/billing.py\n88:    retry_policy = RetryPolicy(attempts=3)\n'
    "93:        for attempt in self.retry_policy:",
    "$ head -n 4 src/shop/billing.py\nimport logging\nfrom .gateway import Gateway\n\n"
    "log = logging.getLogger(__name__)",
]
QUERIES = [
    "src/shop/billing.py charge_card",
    'Where does billing retry `charge_card`?\ngrep -n "charge_card" src/shop/billing.py',
    "how does src/shop/billing.py retry charge_card",
    "src/shop/billing.py lines 120-123 retry",
    "src/shop/billing.py:121 retry",
]


def _summary(content: str) -> str:
    return content.split("\n", 1)[0]  # as the replay stores a tool result: its `$ cmd` line


@pytest.mark.parametrize("query", QUERIES)
def test_the_view_that_shows_the_symbol_or_lines_comes_before_other_views_of_the_file(query: str) -> None:
    store = Store()
    ids = [store.store(c, summary=_summary(c)).item.id for c in CONTENTS]
    hits = store.query(query=query, limit=5)
    assert hits[0].item.id == ids[0]
    # Every view of the file is still among the hits: the others are lifted too, only less.
    assert {ids[0], ids[-2], ids[-1]} <= {h.item.id for h in hits}


def test_a_symbol_no_view_holds_changes_nothing() -> None:
    store = Store()
    ids = [store.store(c, summary=_summary(c)).item.id for c in CONTENTS]
    plain = [h.item.id for h in store.query(query="src/shop/billing.py", limit=10)]
    assert [h.item.id for h in store.query(query="src/shop/billing.py refund_order", limit=10)] == plain
    assert plain[0] != ids[0]  # without a symbol the newest views lead


def test_the_in_memory_client_ranks_the_view_that_shows_the_symbol_first() -> None:
    async def go() -> None:
        async with Client(build_server(Store()), mode="legacy") as c:
            ids = []
            for content in CONTENTS:
                res = await c.call_tool("store", {"content": content, "summary": _summary(content)})
                assert res.structured_content is not None
                ids.append(res.structured_content["id"])
            for query in QUERIES:
                res = await c.call_tool("query", {"query": query})
                assert res.structured_content is not None
                assert res.structured_content["items"][0]["id"] == ids[0], query

    anyio.run(go)


@pytest.mark.slow
def test_a_stdio_server_ranks_the_view_that_shows_the_symbol_first(tmp_path: Path) -> None:
    with StdioServer("--state-dir", str(tmp_path / "state")) as server:
        ids = [server.ok("store", content=c, summary=_summary(c))["id"] for c in CONTENTS]
        for query in QUERIES:
            assert server.ok("query", query=query)["items"][0]["id"] == ids[0], query
