"""One violation, one sentence: a value past a bound is worded the same whether the tool
contract refuses it (reading the bound from the tool's schema) or the Store does (reading it
from constants.py), because both say it through compactor.bounds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from mcp import Client

from compactor import constants as C
from compactor import errors
from compactor.errors import InvalidArgumentError
from compactor.mcp import build_server
from compactor.store import Store

# (tool, arguments, the same call on the Store)
CASES: list[tuple[str, dict[str, Any], Callable[[Store], object]]] = [
    ("store", {"content": "abc", "importance": 11}, lambda s: s.store("abc", importance=11)),
    ("update", {"id": "x", "importance": 0}, lambda s: s.update(s.store("abc").item.id, importance=0)),
    ("store", {"content": "abc", "summary": "s" * 20_001}, lambda s: s.store("abc", summary="s" * 20_001)),
    ("compact", {"target_usage": 1.5}, lambda s: s.compact(1.5)),
    ("configure", {"token_budget": 5}, lambda s: s.configure(token_budget=5)),
    ("configure", {"auto_compact_threshold": 0.1}, lambda s: s.configure(auto_compact_threshold=0.1)),
    ("configure", {"recall_tokens": 5}, lambda s: s.configure(recall_tokens=5)),
    ("configure", {"max_items": 5}, lambda s: s.configure(max_items=5)),
    ("configure", {"max_archive_tokens": 5}, lambda s: s.configure(max_archive_tokens=5)),
    ("list", {"limit": 0}, lambda s: s.list_items(limit=0)),
    ("list", {"offset": -1}, lambda s: s.list_items(offset=-1)),
    ("list", {"tier": "bogus"}, lambda s: s.list_items(tier="bogus")),  # type: ignore[arg-type]
    ("query", {"query": "a", "limit": 101}, lambda s: s.query("a", limit=101)),
    ("recall", {"limit": 0}, lambda s: s.recall(limit=0)),
    ("expand", {"id": "x", "offset": -1}, lambda s: s.expand("x", offset=-1)),
    ("expand", {"id": "x", "limit": 0}, lambda s: s.expand("x", limit=0)),
    ("tree", {"max_depth": 11}, lambda s: s.tree(max_depth=11)),
]


@pytest.mark.parametrize(("tool", "args", "direct"), CASES, ids=[f"{t}-{'-'.join(a)}" for t, a, _ in CASES])
def test_the_contract_and_the_store_word_a_violation_the_same(
    tool: str, args: dict[str, Any], direct: Callable[[Store], object]
):
    async def refused_by_the_tool() -> str:
        async with Client(build_server(Store())) as c:
            result = await c.call_tool(tool, args)
        assert result.is_error
        text = result.content[0].text  # type: ignore[union-attr]
        assert text.startswith(f"{tool}: ")
        return text.removeprefix(f"{tool}: ")

    with pytest.raises(InvalidArgumentError) as refused:
        direct(Store())
    assert anyio.run(refused_by_the_tool) == str(refused.value)


def test_every_valid_id_is_echoed_in_a_not_found_error() -> None:
    assert errors.ID_ECHO_CHARS == C.ID_MAX_CHARS  # the error says "ids have at most" it
    longest = "a" * C.ID_MAX_CHARS
    assert repr(longest) in str(errors.NotFoundError(longest))


# (tool, arguments, the same call on the Store): each value is the bound itself, which is allowed.
AT_THE_BOUND: list[tuple[str, dict[str, Any], Callable[[Store], object]]] = [
    ("query", {"query": "abc", "limit": C.QUERY_LIMIT_MAX}, lambda s: s.query("abc", limit=C.QUERY_LIMIT_MAX)),
    ("query", {"query": "abc", "limit": 1}, lambda s: s.query("abc", limit=1)),
    ("list", {"limit": C.LIST_LIMIT_MAX}, lambda s: s.list_items(limit=C.LIST_LIMIT_MAX)),
    ("list", {"limit": 1}, lambda s: s.list_items(limit=1)),
]


@pytest.mark.parametrize(
    ("tool", "args", "direct"), AT_THE_BOUND, ids=[f"{t}-{a['limit']}" for t, a, _ in AT_THE_BOUND]
)
def test_a_limit_at_its_bound_is_allowed(tool: str, args: dict[str, Any], direct: Callable[[Store], object]) -> None:
    """The refusals above are one past each bound; the bound itself is served (an off-by-one
    in a range check refuses it)."""

    async def served_by_the_tool() -> None:
        store = Store()
        store.store("abc")
        async with Client(build_server(store)) as c:
            result = await c.call_tool(tool, args)
        assert not result.is_error, result.content

    store = Store()
    store.store("abc")
    direct(store)
    anyio.run(served_by_the_tool)
