"""Issue 38 point 8: every read tool's reply is bounded, even for the largest item the store
accepts, through the SDK's in-process client and a real stdio process. `get` returns one page
and says, in text and structure, where to read on."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from compactor import cli
from compactor import constants as C
from compactor.content.tokens import default_counter
from compactor.mcp import build_server
from compactor.store import Store
from tests.support.stdio_client import StdioServer

pytestmark = pytest.mark.anyio

# Claude Code refuses a tool reply over 25k tokens (constants.py, GET_PAGE_TOKENS).
CLIENT_REPLY_TOKENS = 25_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _largest_item() -> str:
    """An 8,999-line `cat -n` (the issue's case), padded to exactly MAX_CONTENT_BYTES."""
    lines = [f'{n:6}\tvalue_{n} = compute("{"x" * (n % 50)}", {n})  # line {n}' for n in range(1, 9_000)]
    text = "$ cat -n big/module.py\n" + "\n".join(lines)
    pad = C.MAX_CONTENT_BYTES - len(text.encode())
    assert pad > 0
    return text + "\n#" + "y" * (pad - 2)


READS: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
    ("get", lambda item_id: {"id": item_id}),
    ("get", lambda item_id: {"id": item_id, "offset": 0}),
    ("get", lambda item_id: {"id": item_id, "offset": 500_000}),
    ("query", lambda item_id: {"query": "value_77 compute"}),
    ("recall", lambda item_id: {}),
    ("list", lambda item_id: {"tier": "all"}),
    ("export", lambda item_id: {}),
    ("export", lambda item_id: {"format": "markdown"}),
    ("status", lambda item_id: {}),
    ("tree", lambda item_id: {}),
]


def _size(where: str, text: str, structured: dict[str, Any] | None) -> tuple[int, int]:
    body = text + json.dumps(structured or {})
    tokens = default_counter().count(body)
    print(f"  {where}: {len(body):,} characters, {tokens:,} tokens")
    return len(body), tokens


def _check_bounded(where: str, text: str) -> None:
    chars, tokens = _size(where, text, None)
    assert tokens <= CLIENT_REPLY_TOKENS and chars <= 4 * C.MAX_OUTPUT_CHARS, (where, chars, tokens)


def _check_resource(item_id: str, text: str) -> None:
    """The item resource shows the first page of content, as `get` does, and where to read on."""
    _check_bounded("memory://items/ID", text)
    assert "History" in text and "Lineage" in text and "$ cat -n big/module.py" in text
    assert f"of {C.MAX_CONTENT_BYTES:,}; more: get({item_id!r}, offset=" in text


def _check_first_page(item_id: str, text: str, structured: dict[str, Any]) -> None:
    assert structured["content_chars"] == C.MAX_CONTENT_BYTES
    assert 0 < len(structured["content"]) <= C.GET_PAGE_CHARS
    nxt = structured["next_offset"]
    assert nxt == len(structured["content"])
    assert f"get({item_id!r}, offset={nxt})" in text


@pytest.mark.slow
async def test_every_read_reply_is_bounded_over_the_sdk_client(tmp_path: Path) -> None:
    store = Store(state_dir=tmp_path / "state")
    async with Client(build_server(store), mode="legacy") as client:

        async def call(tool: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
            with anyio.fail_after(60):
                res = await client.call_tool(tool, args)
            assert not res.is_error, res.content
            assert res.structured_content is not None
            return res.content[0].text, res.structured_content  # type: ignore[union-attr]

        _, stored = await call("store", {"content": _largest_item()})
        item_id = stored["id"]
        await call("store", {"content": "a small note after the large one", "tags": ["after"]})
        await _check_all(item_id, call)
        with anyio.fail_after(60):
            item = (await client.read_resource(f"memory://items/{item_id}")).contents[0]
            prompt = (await client.get_prompt("recall", {"query": "value_77 compute"})).messages[0]
        _check_resource(item_id, item.text)  # type: ignore[union-attr]
        _check_bounded("the recall prompt", prompt.content.text)  # type: ignore[union-attr]
        records = await _export_pages(call)
    store.close()
    # The export tool's pages, joined by `compactor import`, give the item back whole.
    assert [r["id"] for r in records].count(item_id) > 1
    (tmp_path / "pages.json").write_text(json.dumps(records))
    assert cli.main(["import", str(tmp_path / "pages.json"), "--state-dir", str(tmp_path / "copy")]) == 0
    copy = Store(state_dir=tmp_path / "copy")
    assert copy.get(item_id).content == _largest_item()
    assert {it.id for it in copy.iter_items()} == {r["id"] for r in records}
    copy.close()
    # A page missing is refused, never imported as the whole item.
    (tmp_path / "cut.json").write_text(json.dumps(records[:1] + records[2:]))
    assert cli.main(["import", str(tmp_path / "cut.json"), "--state-dir", str(tmp_path / "cut")]) == 1


async def _export_pages(call: Callable[[str, dict[str, Any]], Awaitable[tuple[str, dict[str, Any]]]]) -> list[Any]:
    records: list[Any] = []
    cursor: str | None = None
    while True:
        text, page = await call("export", {"cursor": cursor} if cursor else {})
        chars, tokens = _size("export page", text, page)
        assert tokens <= CLIENT_REPLY_TOKENS and chars <= 4 * C.MAX_OUTPUT_CHARS
        records.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return records


async def _check_all(
    item_id: str, call: Callable[[str, dict[str, Any]], Awaitable[tuple[str, dict[str, Any]]]]
) -> None:
    for tool, make in READS:
        args = make(item_id)
        text, structured = await call(tool, args)
        chars, tokens = _size(f"{tool}({args})", text, structured)
        assert tokens <= CLIENT_REPLY_TOKENS, (tool, args, tokens)
        assert chars <= 4 * C.MAX_OUTPUT_CHARS, (tool, args, chars)
        if tool == "get" and args.get("offset") in (None, 0):
            _check_first_page(item_id, text, structured)
    # Reading on, page after page, gives back the whole content.
    parts: list[str] = []
    offset: int | None = 0
    while offset is not None:
        _, page = await call("get", {"id": item_id, "offset": offset})
        parts.append(page["content"])
        offset = page["next_offset"]
    assert "".join(parts) == _largest_item()


@pytest.mark.slow
def test_every_read_reply_is_bounded_over_stdio(state_dir: Path) -> None:
    with StdioServer("--state-dir", str(state_dir)) as srv:
        item_id = srv.ok("store", content=_largest_item())["id"]

        async def call(tool: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
            result = srv.call(tool, **args)
            assert not result.get("isError"), result
            return result["content"][0]["text"], result["structuredContent"]

        anyio.run(_check_all, item_id, call)
        read = srv.request("resources/read", {"uri": f"memory://items/{item_id}"})
        _check_resource(item_id, read["result"]["contents"][0]["text"])
        prompt = srv.request("prompts/get", {"name": "recall", "arguments": {"query": "value_77 compute"}})
        _check_bounded("the recall prompt", prompt["result"]["messages"][0]["content"]["text"])
