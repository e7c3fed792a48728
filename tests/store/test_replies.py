"""A reply is found by the question it answers (ISSUE 40): for a question in words, a turn right
after a turn ending in "?" (both words, the same project) gains that question's score, so "who
came to the home visit" finds "Bernadette came round ..." after "How did the home visit go?".
An agent's question to itself followed by a command or its output lends nothing, nor does a
code lookup. Checked on the Store, as a property over arbitrary conversations, through the
in-memory client, a stdio server and the CLI; such a hit names its question (`reply_to`)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.types import TextContent

from compactor.mcp import build_server
from compactor.store import Store
from compactor.store.inputs import StoreInput
from compactor.store.state import ALL_SCOPES
from compactor.store.tuning import Tuning
from tests.conftest import cli_json, cli_text
from tests.support.sdk_calls import stored_and_asked
from tests.support.stdio_client import StdioServer

TURNS = [
    "Mia: Hey Jon! How did the home visit for the rescue dog go?",
    "Jon: Bernadette came round for the visit, checked the garden and asked about my night shifts.",
    "Mia: My choir starts again on Sunday, rehearsals in the old church hall.",
    "Jon: The rescue will ring about the dog next week, fingers crossed.",
    "Mia: Good luck with the home visit result, you deserve that dog!",
]
QUESTION, REPLY = 0, 1
ASKED = "What happened at the home visit for the rescue dog?"


def _pair() -> tuple[Store, Store]:
    """Two stores that differ in the lift alone, on clocks that tick alike."""
    clocks = (itertools.count(1_000.0), itertools.count(1_000.0))
    lifted = Store(clock=lambda: float(next(clocks[0])))
    plain = Store(clock=lambda: float(next(clocks[1])), tuning=Tuning(reply_weight=0.0))
    return lifted, plain


def _stored(s: Store, turns: list[str], scopes: list[str] | None = None) -> list[str]:
    return [s.store(t, scope=scopes[i] if scopes else None).item.id for i, t in enumerate(turns)]


def _ranked(s: Store, query: str) -> list[str]:
    return [h.item.id for h in s.query(query=query, limit=10)]


def test_a_reply_ranks_first_by_the_question_it_answers_and_not_without_the_lift() -> None:
    lifted, plain = _pair()
    ids = _stored(lifted, TURNS)
    hits = lifted.query(query=ASKED)
    assert hits[0].item.id == ids[REPLY]
    # The hit names the question whose words found it; no other hit names one.
    assert [h.reply_to for h in hits] == [ids[QUESTION]] + [None] * (len(hits) - 1)
    ids = _stored(plain, TURNS)
    hits = plain.query(query=ASKED)
    ranked = [h.item.id for h in hits]
    assert ranked[0] == ids[QUESTION] and ranked.index(ids[REPLY]) > 1
    assert not [h for h in hits if h.reply_to]


@pytest.mark.parametrize(
    ("ending", "lends"),
    [(" :)", True), (" \U0001f60a", True), (" \U0001f44d\U0001f3fd", True), (")", True), (" ;-)", True), ("!", False)],
    ids=["smiley", "emoji", "emoji-with-skin-tone", "bracket", "wink", "exclamation"],
)
def test_a_question_may_end_in_a_smiley_an_emoji_or_a_bracket(ending: str, lends: bool) -> None:
    question = TURNS[QUESTION].removesuffix("?") + ("?" if lends else "") + ending
    lifted, _ = _pair()
    ids = _stored(lifted, [question, *TURNS[1:]])
    assert (_ranked(lifted, ASKED)[0] == ids[REPLY]) is lends


def test_turns_stored_in_one_bulk_call_keep_their_order_and_their_replies() -> None:
    s = Store()
    ids = [it.id for it in s.bulk_store([StoreInput(turn) for turn in TURNS]).items]
    assert _ranked(s, ASKED)[:2] == [ids[REPLY], ids[QUESTION]]


def test_a_reply_the_query_did_not_reach_is_added() -> None:
    turns = ["Mia: How was the pottery class on Tuesday?", "Jon: Honestly a disaster, the clay collapsed twice."]
    lifted, plain = _pair()
    ids = _stored(lifted, turns)
    assert _ranked(lifted, "What happened in the pottery class?") == [ids[1], ids[0]]
    ids = _stored(plain, turns)
    assert _ranked(plain, "What happened in the pottery class?") == [ids[0]]


def _scores(s: Store, query: str) -> dict[str, float]:
    return {h.item.id: h.score for h in s.query(query=query, limit=10)}


@pytest.mark.parametrize(
    ("turns", "query"),
    [
        # An agent's question to itself, then the command it runs and the output: no reply.
        (
            [
                "Why does the parser fail on empty input?",
                "$ pytest tests/test_parser.py\nFAILED test_empty - IndexError: list index out of range",
            ],
            "why does the parser fail on empty input",
        ),
        # A code lookup (a path) is no question in words.
        (
            ["How does the parser read src/parser.py lines?", "It reads the parser lines lazily."],
            "parser src/parser.py",
        ),
        # A statement is no question.
        (["The parser fails on empty input.", "It fails on blank lines too."], "why does the parser fail"),
    ],
    ids=["tool-output", "code-lookup", "no-question"],
)
def test_nothing_lends_where_there_is_no_question_in_words_and_reply_in_words(turns: list[str], query: str) -> None:
    lifted, plain = _pair()
    _stored(lifted, turns)
    _stored(plain, turns)
    got, expected = _scores(lifted, query), _scores(plain, query)
    assert len(got) == len(turns)
    assert list(got.values()) == pytest.approx(list(expected.values()))


def test_the_reply_is_the_next_turn_of_the_question_s_own_project() -> None:
    """On a server that many projects share, another project's item may be stored between a
    question and its reply: it is no reply, the next turn of the question's project is."""
    turns = [TURNS[QUESTION], "Ola: How did the deploy of the billing service go last night?", TURNS[REPLY], *TURNS[2:]]
    scopes = ["/work/a", "/work/b", "/work/a", "/work/a", "/work/a", "/work/a"]
    lifted, plain = _pair()
    _stored(lifted, turns, scopes)
    _stored(plain, turns, scopes)
    assert lifted.query(query=ASKED, scope="/work/a")[0].item.content == TURNS[REPLY]
    assert plain.query(query=ASKED, scope="/work/a")[0].item.content == TURNS[QUESTION]
    # The other project's turn holds no word of the question, and lends or gains nothing.
    assert turns[1] not in [h.item.content for h in lifted.query(query=ASKED, scope=ALL_SCOPES)]


_VOCAB = ["dog", "visit", "garden", "choir", "pottery", "clay", "bike", "trip", "Spain", "shift", "cake", "oven"]
_turn = st.tuples(st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=6), st.booleans()).map(
    lambda t: " ".join(t[0]) + ("?" if t[1] else ".")
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_turn, min_size=1, max_size=14, unique=True), st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=3))
def test_the_lift_only_adds_replies_and_keeps_every_other_hit_in_order(turns: list[str], words: list[str]) -> None:
    """With the lift, the hits that are no reply to a question are the first of the hits without
    it, in the same order: a reply can only rise, nothing else can. (Turns differ: a turn stored
    twice in a row is a retry, kept once.)"""
    query = "what about the " + " ".join(words)
    lifted, plain = _pair()
    replies = {i + 1 for i, t in enumerate(turns[:-1]) if t.endswith("?")}
    named, plain_named = (_positions(s, turns, query) for s in (lifted, plain))
    with_lift, without = [i for i, _ in named], [i for i, _ in plain_named]
    others = [i for i in with_lift if i not in replies]
    assert others == [i for i in without if i not in replies][: len(others)]
    assert set(with_lift) - set(without) <= replies
    # A hit names the question it answers, the turn before it, and only a reply does.
    assert all(q is None or (i in replies and q == i - 1) for i, q in named)
    assert all(q is None for _, q in plain_named)


def _positions(s: Store, turns: list[str], query: str) -> list[tuple[int, int | None]]:
    """Where in `turns` each hit of `query` was stored, and the question it names, if any."""
    position = {item_id: i for i, item_id in enumerate(_stored(s, turns))}
    hits = s.query(query=query, limit=5)
    return [(position[h.item.id], position[h.reply_to] if h.reply_to else None) for h in hits]


def test_the_in_memory_client_finds_the_reply_first_and_names_its_question() -> None:
    ids, (ranked,) = anyio.run(stored_and_asked, Store(), TURNS, [ASKED])
    assert ranked[0] == ids[REPLY]

    async def asked() -> tuple[Any, str]:
        async with Client(build_server(store), mode="legacy") as c:
            with anyio.fail_after(10):
                res = await c.call_tool("query", {"query": ASKED})
        text = res.content[0].text if isinstance(res.content[0], TextContent) else ""
        return res.structured_content, text

    store = Store()
    ids = _stored(store, TURNS)
    structured, text = anyio.run(asked)
    assert [h["reply_to"] for h in structured["items"]][:2] == [ids[QUESTION], None]
    assert f"[answers {ids[QUESTION]}]" in text.splitlines()[0]


@pytest.mark.slow
def test_a_stdio_server_and_the_cli_find_the_reply_first(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    with StdioServer("--state-dir", state) as server:
        ids = [server.ok("store", content=turn)["id"] for turn in TURNS]
        first = server.ok("query", query=ASKED)["items"][0]
        assert (first["id"], first["reply_to"]) == (ids[REPLY], ids[QUESTION])
    first = cli_json("query", ASKED, "--state-dir", state)["items"][0]
    assert (first["id"], first["reply_to"]) == (ids[REPLY], ids[QUESTION])
    text = cli_text("query", ASKED, "--state-dir", state)
    assert f"{ids[REPLY]} answers {ids[QUESTION]}" in text
