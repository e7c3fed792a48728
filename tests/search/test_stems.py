"""A word of prose is indexed as written and as its Snowball stem (ISSUE 40): a query finds a
note in another form of its words ("retried" for "retrying"), below a note holding the word as
written; identifiers and paths are not stemmed; stop words weigh nothing beside other words, unless quoted."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client

from compactor.mcp import build_server
from compactor.search.analyze import STEM_MARK, index_tokens, query_stems, query_terms
from compactor.search.index import BM25Index
from compactor.search.topk import EXACT_WEIGHT, STEM_WEIGHT, WEIGHTS
from compactor.store import Store
from tests.conftest import cli_json
from tests.support.stdio_client import StdioServer

# A note found only by the stems of the query's words: each of those words is held by another
# note, so no word is searched in other forms by the rules of `wordforms`.
CHARGED = "retrying the payment charged the card twice"
NOTES = (CHARGED, "the charge screen renders", "retried uploads")
QUERY = "charge retried"


def test_a_word_of_prose_is_indexed_as_written_and_as_its_stem() -> None:
    terms, extra = index_tokens("Connection pools pool parse_headers src/pools.py poolSizes")
    assert terms.count(STEM_MARK + "pool") == 1 and STEM_MARK + "connect" in terms
    assert len(terms) - extra == 6  # the length counts words as written, not stem terms or parts
    assert "pools" in terms and "pool" in terms  # as written, as before
    # Identifiers and paths are not stemmed (their parts are terms), nor is a word that is its stem.
    assert not [t for t in index_tokens("pool parse_headers src/pools.py poolSizes the was")[0] if t[0] == STEM_MARK]
    assert query_stems("the pools of running Servers") == [
        ("pools", [STEM_MARK + "pool", "pool"]),
        ("running", [STEM_MARK + "run", "run"]),
        ("servers", [STEM_MARK + "server", "server"]),
    ]


def test_a_note_in_other_forms_of_the_words_is_found() -> None:
    index = BM25Index()
    for k, note in enumerate(NOTES):
        index.add(f"d{k}", note)
    assert "d0" in [h.doc_id for h in index.search(QUERY)]
    pools = BM25Index()
    for k, note in enumerate(["the pool is full", "pooling the workers", "pools of threads"]):
        pools.add(f"d{k}", note)
    # Every form is found; the one the query writes first.
    assert next(h.doc_id for h in pools.search("pool")) == "d0"
    assert next(h.doc_id for h in pools.search("pooling")) == "d1"
    assert {h.doc_id for h in pools.search("pools")} == {"d0", "d1", "d2"}


_FORMS = [
    ("pool", "pools"),
    ("pool", "pooling"),
    ("run", "running"),
    ("connect", "connection"),
    ("deploy", "deployment"),
    ("retry", "retries"),
    ("charge", "charged"),
    # Irregular forms, found by their base's stem (search/irregular.py).
    ("go", "went"),
    ("buy", "bought"),
    ("child", "children"),
    ("write", "written"),
]
_FILLER = st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "the", "of"]), max_size=6).map(" ".join)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(_FORMS),
    st.booleans(),
    _FILLER,
    st.lists(st.tuples(_FILLER, st.integers(0, 3)), max_size=8),
    st.sampled_from([STEM_WEIGHT, 0.0, 0.25, 0.75, 0.99]),
    st.sampled_from([EXACT_WEIGHT, 0.1, 0.25, 0.5, 1.0]),
)
def test_a_stem_match_never_outranks_an_exact_match_of_the_same_word(
    pair: tuple[str, str],
    reverse: bool,
    filler: str,
    others: list[tuple[str, int]],
    stem_weight: float,
    exact_weight: float,
) -> None:
    """Two notes alike but for one word, one holding the query's word and one another form of
    it: the one holding the word scores higher, whatever else the index holds and whatever
    stem weight and exact weight above 0 an evaluation tunes."""
    word, form = pair[::-1] if reverse else pair
    index = BM25Index()
    index.add("exact", f"{filler} {word}")
    index.add("form", f"{filler} {form}")
    for k, (text, pick) in enumerate(others):  # other notes move the df of the word, its form and its stem
        extra = [word, form, f"{word} {form}", ""][pick]
        index.add(f"o{k}", f"{text} {extra}")
    weights = replace(WEIGHTS, stem=stem_weight, exact=exact_weight)
    scores = {h.doc_id: h.score for h in index.search(word, limit=100, weights=weights)}
    assert scores["exact"] > scores.get("form", 0.0)
    assert scores.get("form", 0.0) > 0.0 or stem_weight == 0.0


def test_the_stem_as_a_word_weighs_no_more_than_the_stem_term_of_the_word_itself() -> None:
    """Asked "pools", with "pool" and "pools" rare and "pooled" everywhere: the note saying "pools" still
    ranks first. The stem as a word ("pool") is another form, weighed as its family is rare (its
    stem term "^pool" is common), not as "pool" alone: that let it outrank the word itself when
    a word as written weighs less than its stem term."""
    index = BM25Index()
    index.add("exact", "the pools were drained")
    index.add("form", "the pool was drained")
    for k in range(40):
        index.add(f"o{k}", f"connections pooled by worker {k}")
    for exact, stem in ((0.5, 0.75), (0.1, 0.99), (1.0, 0.5)):
        weights = replace(WEIGHTS, stem=stem, exact=exact)
        scores = {h.doc_id: h.score for h in index.search("pools", limit=100, weights=weights)}
        assert scores["exact"] > scores["form"] > 0.0, (exact, stem, scores)


def test_stop_words_weigh_nothing_beside_other_words_but_match_in_paths() -> None:
    index = BM25Index()
    index.add("words", "what did we decide about the retries")
    index.add("stop", "what did we do about the other one, and where was it")
    index.add("path", "see docs/the/what.md")
    assert [h.doc_id for h in index.search("what did we decide about the retries")] == ["words"]
    assert [h.doc_id for h in index.search("docs/the/what.md")] == ["path"]
    assert next(h.doc_id for h in index.search("the")) in {"words", "stop", "path"}  # a query of stop words only


def test_stop_words_inside_quoted_text_count_as_words() -> None:
    index = BM25Index()
    index.add("phrase", "to be or not to be, the question")
    index.add("words", "the question of the phrase, answered")
    for i in range(3):
        index.add(f"filler{i}", "the question asked again")
    assert query_terms('the phrase "to be or not"') == ["phrase", "to", "be", "or", "not"]
    assert query_terms("the phrase \u201cto be or not\u201d") == ["phrase", "to", "be", "or", "not"]
    assert query_terms("the phrase to be or not") == ["phrase"]
    # "he" is outside the one quoted word: the stray mark at the end quotes nothing.
    assert query_terms('"the" question, he said "') == ["the", "question", "said"]
    assert next(h.doc_id for h in index.search('question "to be or not"')) == "phrase"
    assert next(h.doc_id for h in index.search("question to be or not")) != "phrase"


def test_the_in_memory_client_finds_the_note_by_the_stems() -> None:
    async def go() -> None:
        async with Client(build_server(Store()), mode="legacy") as c:
            ids = [(await c.call_tool("store", {"content": n})).structured_content["id"] for n in NOTES]  # type: ignore[index]
            hits = (await c.call_tool("query", {"query": QUERY})).structured_content["items"]  # type: ignore[index]
            assert ids[0] in [h["id"] for h in hits]

    anyio.run(go)


@pytest.mark.slow
def test_a_stdio_server_and_the_cli_find_it(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    with StdioServer("--state-dir", state) as server:
        ids = [server.ok("store", content=n)["id"] for n in NOTES]
        assert ids[0] in [h["id"] for h in server.ok("query", query=QUERY)["items"]]
    assert ids[0] in [h["id"] for h in cli_json("query", QUERY, "--state-dir", state)["items"]]
