"""A question in words asks about a matter, not about the last steps: it gets no lift for
recently stored items (the recency prior), while a query naming a path, an identifier or code
keeps it (code lookups go back to recent work). People ask with acronyms, numbers, hyphenated
words and in other scripts; those are words too."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from compactor.mcp import build_server
from compactor.search.analyze import is_prose
from compactor.store import Store
from compactor.store.tuning import Tuning
from tests.support.stdio_client import StdioServer

OLD = "the migration of release 2024 failed on the orders table"
NEW = OLD + " again"  # a little longer, so a little less relevant, and stored 41 items later
PROSE = "why did the migration fail on the orders table"
WRITTEN = "Why did the 2024 migration fail on the orders table in CI?"  # a number and an acronym
CODE = "release_2024 migration failed on the orders table"


def _fill(store_one) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    old = store_one(OLD)
    for i in range(40):
        store_one(f"filler note {i} about the cache warmup and unrelated chores")
    return old, store_one(NEW)


QUESTIONS = (
    "why did the migration fail",
    "what did we decide about retries when charging cards?",
    "The Parser",
    "What did Caroline say about the LGBTQ support group in 2022?",
    "why did CI fail on the 2nd run of the follow-up",
    "the self-care plan from the 1990s",
    "Café in Zürich, naïve retries",
    "数据库迁移为什么失败",
    "डेटाबेस क्यों धीमा है",
    "migration 2024 failed on the orders table",
    "git status",
    "which URLs and APIs did the PRs touch",
)
CODE_LOOKUPS = (
    "KeyError in parser",
    "pytest tests/x.py",
    "fix w12 in mod42",
    "release_2024 failed",
    "max_items",
    "os.path.join",
    "getUser returns None",
    "foo(bar) fails",
    "pip install --no-cache",
    "ls -la",
    "x = 3",
    "echo $HOME",
    "grep `ERR` | wc",
    "k8s deploy",
    "iPhone sync",
    "",
)


def test_questions_in_words_are_prose_and_code_lookups_are_not() -> None:
    for text in QUESTIONS:
        assert is_prose(text), text
    for text in CODE_LOOKUPS:
        assert not is_prose(text), text


_WORDS = st.sampled_from(["why", "did", "Caroline", "LGBTQ", "2022", "3rd", "self-care", "Zürich", "数据", "retries"])
_CODE = st.sampled_from(["tests/x.py", "os.path", "max_items", "getUser", "w12", "f(x)", "--force", "a=b", "$HOME"])


@given(st.lists(_WORDS, min_size=1, max_size=8), _CODE, st.integers(min_value=0))
def test_one_name_or_sign_of_code_makes_a_question_a_code_lookup(words: list[str], code: str, at: int) -> None:
    assert is_prose(" ".join(words) + "?")
    words.insert(at % (len(words) + 1), code)
    assert not is_prose(" ".join(words))


def test_a_prose_query_ranks_by_relevance_and_a_code_query_lifts_recent_items() -> None:
    store = Store()
    old, new = _fill(lambda text: store.store(text).item.id)
    assert [h.item.id for h in store.query(PROSE)][:2] == [old, new]
    assert [h.item.id for h in store.query(WRITTEN)][:2] == [old, new]
    assert [h.item.id for h in store.query(CODE)][:2] == [new, old]
    # With the prior a code lookup gets, the prose queries would put the newer note first.
    lifted = Store(tuning=Tuning().overridden({"PROSE_RECENCY_PRIOR": "0.5"}))
    old, new = _fill(lambda text: lifted.store(text).item.id)
    assert [h.item.id for h in lifted.query(PROSE)][:2] == [new, old]
    assert [h.item.id for h in lifted.query(WRITTEN)][:2] == [new, old]


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
            for q in (PROSE, WRITTEN, CODE):
                reply = await c.call_tool("query", {"query": q})
                out.append([h["id"] for h in (reply.structured_content or {})["items"]][:2])
            return out

    (old, new), prose, written, code = anyio.run(main)
    assert prose == written == [old, new] and code == [new, old]


@pytest.mark.slow
def test_a_stdio_server_ranks_the_same(tmp_path: Path) -> None:
    with StdioServer("--state-dir", str(tmp_path / "state")) as server:
        old, new = _fill(lambda text: server.ok("store", content=text)["id"])
        assert [h["id"] for h in server.ok("query", query=PROSE)["items"]][:2] == [old, new]
        assert [h["id"] for h in server.ok("query", query=WRITTEN)["items"]][:2] == [old, new]
        assert [h["id"] for h in server.ok("query", query=CODE)["items"]][:2] == [new, old]
