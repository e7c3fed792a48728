"""A plain `query` finds archived items (ISSUE 13 point 1), and the index holds only text that is
in the item (point 6).

Through the real protocol (the SDK's in-memory client and a real stdio subprocess) and the CLI:
an item archived by compaction at a small budget is found without any flag, marked archived
with the active summary covering it, ranks under an equally relevant active item by at most
the bounded factor, and `include_archived=false` (or `--active-only`) leaves it out.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import Implementation

from compactor import cli
from compactor.mcp import build_server
from compactor.search import scoring as scoring_mod
from compactor.store import Store
from tests.conftest import FakeClock
from tests.support.stdio_client import StdioServer

QUERY = "zeppelin mooring"
# One-line items (no headline), equally long, sharing only the query's words: equal BM25.
ACTIVE_TEXT = "zeppelin mooring " + " ".join(f"alfa{i}" for i in range(10))
ARCHIVED_TEXT = "zeppelin mooring " + " ".join(f"bravo{i}" for i in range(10))


def _filler(i: int) -> str:
    return f"filler note {i}: " + " ".join(f"w{i}x{j}" for j in range(40))


Call = Callable[..., Awaitable[Any]]


async def _scenario(ok: Call) -> tuple[str, str]:
    """Both target items stored first at low importance, archived by compaction at a 1,000-token
    budget; then the first is restored, so the two differ in tier and (slightly) in age only."""
    await ok("configure", token_budget=1_000, auto_compact=False)
    active = (await ok("store", content=ACTIVE_TEXT, importance=1))["id"]
    archived = (await ok("store", content=ARCHIVED_TEXT, importance=1))["id"]
    for i in range(30):
        await ok("store", content=_filler(i), importance=9)
    await ok("compact", target_usage=0.3)
    assert (await ok("get", id=active))["tier"] == "archived"
    assert (await ok("get", id=archived))["tier"] == "archived"
    await ok("restore", id=active)
    assert (await ok("get", id=active))["tier"] == "active"
    assert (await ok("get", id=archived))["tier"] == "archived"
    return active, archived


async def _check(ok: Call, text_of: Call, active: str, archived: str) -> None:
    plain = await ok("query", query=QUERY)
    ids = [i["id"] for i in plain["items"]]
    assert archived in ids, ids  # found without include_archived
    hit = plain["items"][ids.index(archived)]
    assert hit["tier"] == "archived" and hit["archived"] is True
    cover = hit["covered_by"]
    assert cover and hit["path"][-1] == cover
    node = await ok("get", id=cover)
    assert node["tier"] == "active" and node["depth"] >= 1
    assert hit["path"][0] in (await ok("get", id=archived))["parents"]
    assert not set(hit["path"]) & set(ids)  # the summaries over a hit would only repeat it
    # Equally relevant, and the archived one is the newer: only the tier factor puts it under.
    top = plain["items"][ids.index(active)]
    assert ids.index(active) < ids.index(archived)
    assert hit["score"] >= scoring_mod.ARCHIVED_RANK_FACTOR * top["score"] * (1 - 1e-6), (hit["score"], top["score"])
    assert top["tier"] == "active" and top["covered_by"] is None

    text = await text_of("query", query=QUERY)
    line = next(ln for ln in text.splitlines() if ln.startswith(f"- {archived} "))
    assert "archived" in line and cover in line

    only_active = await ok("query", query=QUERY, include_archived=False)
    got = [i["id"] for i in only_active["items"]]
    assert active in got and archived not in got
    assert all(i["tier"] == "active" for i in only_active["items"])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_plain_query_finds_archived_items_over_the_in_memory_client() -> None:
    store = Store(clock=FakeClock())
    async with Client(build_server(store), mode="legacy", client_info=Implementation(name="pytest", version="1")) as c:

        async def result(tool: str, args: dict[str, Any]) -> Any:
            with anyio.fail_after(10):
                res = await c.call_tool(tool, args)
            assert not res.is_error, res.content
            return res

        async def ok(tool: str, **args: Any) -> Any:
            return (await result(tool, args)).structured_content

        async def text_of(tool: str, **args: Any) -> Any:
            return (await result(tool, args)).content[0].text

        active, archived = await _scenario(ok)
        await _check(ok, text_of, active, archived)
        # recall with a query reaches the archive too, and says what covers an archived item.
        r = await ok("recall", query=QUERY)
        hit = next(i for i in r["items"] if i["id"] == archived)
        assert hit["tier"] == "archived" and hit["covered_by"]
        assert archived in r["text"]


@pytest.mark.slow
def test_plain_query_finds_archived_items_over_stdio() -> None:
    with StdioServer() as srv:

        async def ok(tool: str, **args: Any) -> Any:
            return srv.ok(tool, **args)

        async def text_of(tool: str, **args: Any) -> Any:
            result = srv.call(tool, **args)
            assert not result.get("isError"), result
            return result["content"][0]["text"]

        async def main() -> None:
            active, archived = await _scenario(ok)
            await _check(ok, text_of, active, archived)

        anyio.run(main)


def test_cli_query_searches_the_archive_unless_told_not_to(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = Store(state_dir=state_dir, budget=1_000, clock=FakeClock())
    s.configure(auto_compact=False)
    target = s.store(ARCHIVED_TEXT, importance=1).item.id
    for i in range(30):
        s.store(_filler(i), importance=9)
    s.compact(0.3)
    assert s.get(target).tier == "archived"
    cover = s.ancestors(s.get(target))[-1]
    s.close()

    def run(*argv: str) -> str:
        assert cli.main(["query", QUERY, "--state-dir", str(state_dir), *argv]) == 0
        return capsys.readouterr().out

    found = json.loads(run("--json"))["items"]
    hit = next(i for i in found if i["id"] == target)
    assert hit["tier"] == "archived" and hit["covered_by"] == cover
    assert target in run() and f"{target} by {cover}" in run()
    assert target in run("--archived")  # the old opt-in flag still parses
    assert target not in [i["id"] for i in json.loads(run("--active-only", "--json"))["items"]]
