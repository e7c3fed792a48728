"""`get(id, offset=N)` reads a long item in parts. Claude Code refuses a tool reply over 25k
tokens ("use pagination, filtering, or limit parameters") and gives the model the structured
result, so an item past ~100 KB could not be read there at all. `content` is the part from
`offset` (0 when left out: one page, never the whole of a long item, issue 38), at most
C.GET_PAGE_CHARS of it, and `next_offset` says where the next part starts. Through the SDK's
in-memory client and a stdio server."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from compactor import constants as C
from compactor.content.tokens import default_counter
from compactor.mcp import build_server
from compactor.store import Store
from tests.support.stdio_client import StdioServer


def _long_text(chars: int, seed: int = 5) -> str:
    """Code-like text with quotes, backslashes and non-ASCII, which JSON escapes."""
    rng = random.Random(seed)
    lines: list[str] = []
    while sum(len(line) + 1 for line in lines) < chars:
        n = rng.randrange(10_000)
        lines.append(f'    value_{n} = parse("{n:x}\\t", path=r"C:\\data\\{n}") # ok \u00e9t\u00e9 {"x" * (n % 40)}')
    return "\n".join(lines)[:chars]


def _read_in_parts(call: Any, item_id: str) -> tuple[str, list[dict[str, Any]]]:
    """The content as `get` with `offset` gives it, part after part, and each part's reply."""
    replies: list[dict[str, Any]] = []
    offset: int | None = 0
    while offset is not None:
        got = call(item_id, offset)
        replies.append(got)
        offset = got["next_offset"]
        assert len(replies) <= 1_000
    return "".join(r["content"] for r in replies), replies


def test_a_long_item_read_in_parts_over_the_in_memory_client_is_the_item() -> None:
    text = _long_text(3 * C.GET_PAGE_CHARS + 1_234)

    async def go() -> None:
        async with Client(build_server(Store()), mode="legacy") as c:
            item_id = (await c.call_tool("store", {"content": text})).structured_content["id"]  # type: ignore[index]
            whole = await c.call_tool("get", {"id": item_id})
            assert whole.structured_content is not None
            # Without offset: the first page, as offset=0 gives it.
            assert whole.structured_content["content"] == text[: C.GET_PAGE_CHARS]
            assert whole.structured_content["content_chars"] == len(text)
            assert whole.structured_content["next_offset"] == C.GET_PAGE_CHARS

            parts: list[Any] = []
            offset: int | None = 0
            while offset is not None:
                reply = await c.call_tool("get", {"id": item_id, "offset": offset})
                assert not reply.is_error and reply.structured_content is not None
                parts.append(reply)
                offset = reply.structured_content["next_offset"]
            got = [p.structured_content for p in parts]
            assert "".join(g["content"] for g in got) == text
            assert [g["next_offset"] for g in got] == [C.GET_PAGE_CHARS * k for k in (1, 2, 3)] + [None]
            assert all(g["content_chars"] == len(text) for g in got)
            first, last = parts[0].content[0].text, parts[-1].content[0].text  # type: ignore[union-attr]
            page = C.GET_PAGE_CHARS
            assert first.endswith(f"(characters 0-{page:,} of {len(text):,}; more: get('{item_id}', offset={page}))")
            assert last.endswith(f"(characters {3 * C.GET_PAGE_CHARS:,}-{len(text):,} of {len(text):,}; the end)")

    anyio.run(go)


def _cjk_text(chars: int) -> str:
    rng = random.Random(9)
    return "".join(rng.choice("数据库连接池配置错误最大导致超时ユーザー認証トークン의데이터") for _ in range(chars))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["code", "cjk"])
def test_each_part_of_a_largest_item_stays_under_what_claude_code_takes(kind: str) -> None:
    """The structured result is what Claude Code gives the model (JSON, non-ASCII as it is): a
    part of a 1 MiB item stays near the 10k tokens above which it warns, far from the 25k it
    refuses, whether the text is code or CJK (~1 token a character: fewer characters a part)."""
    text = _long_text(C.MAX_CONTENT_BYTES) if kind == "code" else _cjk_text(C.MAX_CONTENT_BYTES // 3)
    text = text.encode()[: C.MAX_CONTENT_BYTES].decode(errors="ignore")  # as large as an item may be
    store = Store()
    item_id = store.store(text).item.id

    def tokens(reply: Any) -> int:
        return default_counter().count(json.dumps(reply.structured_content, ensure_ascii=False))

    async def go() -> None:
        async with Client(build_server(store), mode="legacy") as c:
            assert tokens(await c.call_tool("get", {"id": item_id})) <= C.GET_PAGE_TOKENS * 2
            read, offset = "", 0
            while True:
                reply = await c.call_tool("get", {"id": item_id, "offset": offset})
                assert tokens(reply) < 12_000
                assert len(reply.content[0].text) <= C.MAX_OUTPUT_CHARS  # type: ignore[union-attr]
                read += reply.structured_content["content"]  # type: ignore[index]
                if reply.structured_content["next_offset"] is None:  # type: ignore[index]
                    break
                offset = reply.structured_content["next_offset"]  # type: ignore[index]
            assert read == text

    anyio.run(go)


def test_an_offset_past_the_end_is_refused_in_one_sentence_and_the_end_itself_is_empty() -> None:
    async def go() -> None:
        async with Client(build_server(Store()), mode="legacy") as c:
            item_id = (await c.call_tool("store", {"content": "short note"})).structured_content["id"]  # type: ignore[index]
            end = await c.call_tool("get", {"id": item_id, "offset": 10})
            assert end.structured_content is not None
            assert (end.structured_content["content"], end.structured_content["next_offset"]) == ("", None)
            small = await c.call_tool("get", {"id": item_id, "offset": 0})
            assert small.structured_content is not None
            assert (small.structured_content["content"], small.structured_content["next_offset"]) == (
                "short note",
                None,
            )
            past = await c.call_tool("get", {"id": item_id, "offset": 11})
            assert past.is_error
            assert past.content[0].text == (  # type: ignore[union-attr]
                f"get: offset 11 is past the end of {item_id}'s content (10 characters)."
            )
            negative = await c.call_tool("get", {"id": item_id, "offset": -1})
            assert negative.is_error
            again = await c.call_tool("get", {"id": item_id})
            assert again.structured_content is not None and again.structured_content["content"] == "short note"

    anyio.run(go)


@pytest.mark.slow
@pytest.mark.parametrize("size", [C.GET_PAGE_CHARS, C.GET_PAGE_CHARS + 1])
def test_parts_over_stdio(tmp_path: Path, size: int) -> None:
    text = _long_text(size, seed=size)
    with StdioServer("--state-dir", str(tmp_path / "state")) as server:
        item_id = server.ok("store", content=text)["id"]
        read, replies = _read_in_parts(lambda i, o: server.ok("get", id=i, offset=o), item_id)
        assert read == text
        assert len(replies) == (1 if size == C.GET_PAGE_CHARS else 2)
        first = server.ok("get", id=item_id)
        assert first["content"] == text[: C.GET_PAGE_CHARS] and first["content_chars"] == len(text)
        refused = server.call("get", id=item_id, offset=size + 1)
        assert refused.get("isError") and "is past the end of" in refused["content"][0]["text"]
