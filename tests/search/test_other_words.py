"""A query word that memory does not hold is looked up in its other forms and synonyms.

"db connection pools leaking" found a note on "the database connection pool leaks" only by
"connection", as it found any other note on connections. Now a word no document holds as
written is also searched as its synonyms ("db": "database") and its other English forms
("pools": "pool"; "leaking": "leaks"), at OTHER_WORD_WEIGHT of a term's weight; a word some
document holds is searched as written only. Through the index, the SDK's in-memory client, a
stdio server and the CLI.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from compactor.mcp import build_server
from compactor.search import index as index_mod
from compactor.search.analyze import QUERY_STOPWORDS, query_words
from compactor.search.index import BM25Index
from compactor.search.topk import WEIGHTS
from compactor.search.wordforms import derivations, inflections, synonyms
from compactor.store import Store
from tests.conftest import cli_json
from tests.support.stdio_client import StdioServer

POOL = "the database connection pool leaks under load"
STRING = "the connection string is read from the environment"
QUERY = "db connection pools leaking"
MATCHED = ("connection", "database", "pool", "leaks")


@pytest.mark.parametrize(
    ("word", "forms"),
    [
        ("pools", {"pool"}),
        ("pool", {"pools", "pooled", "pooling"}),
        ("tests", {"test", "tested", "testing"}),
        ("failing", {"fail", "fails", "failed"}),
        ("parsing", {"parse", "parses", "parsed"}),
        ("queries", {"query", "queried", "querying"}),
        ("copied", {"copy", "copies", "copying"}),
        ("classes", {"class"}),
        ("caches", {"cache", "cached", "caching"}),
        ("running", {"run", "runs"}),
        ("logging", {"log", "logs", "logged"}),
        ("used", {"use", "uses", "using"}),
        ("configured", {"configure", "configures", "configuring"}),
        ("string", {"strings"}),  # a word of its own, not "str" + ing
        ("speed", {"speeds"}),  # -eed is no past
    ],
)
def test_a_word_has_its_other_forms(word: str, forms: set[str]) -> None:
    assert forms <= set(inflections(word))
    assert "str" not in inflections("string")
    assert "spe" not in inflections("speed") or "speeds" in inflections("speed")


@pytest.mark.parametrize("word", ["js", "ok", "pool_3", "Pools", "http2", "naïve", "x" * 41])
def test_only_lowercase_words_of_three_letters_or_more_have_forms(word: str) -> None:
    assert inflections(word) == ()


# A regular English base of three letters or more: a vowel, then a final consonant English inflects plainly (no s, x,
# z, h, y or e, which take other endings).
_BASE = st.from_regex(r"[a-z]{1,6}[aeiou][a-z]{0,3}[bcdfgklmnprtvw]", fullmatch=True)


@given(_BASE)
def test_each_regular_form_leads_back_to_its_base(base: str) -> None:
    for form in (base + "s", base + "ed", base + "ing"):
        got = inflections(form)
        assert base in got or base in QUERY_STOPWORDS, (form, got)
        assert form not in got
        assert not set(got) & QUERY_STOPWORDS


@given(st.text(max_size=60))
def test_forms_are_never_the_word_and_never_stop_words(word: str) -> None:
    got = inflections(word)
    assert word not in got
    assert not set(got) & QUERY_STOPWORDS
    assert list(got) == sorted(set(got))


@pytest.mark.parametrize(
    ("word", "derived"),
    [
        ("deploy", {"deployment", "deployments"}),
        ("deployments", {"deploy", "deployed", "deploying"}),
        ("migrate", {"migration", "migrations"}),
        ("migrations", {"migrate", "migrated", "migrating"}),
        ("validation", {"validate", "validated"}),
        ("connection", {"connect", "connected", "connects"}),
        ("configure", {"configuration", "configurations"}),
        ("configuration", {"configure", "configured"}),
        ("implement", {"implementation"}),
        ("serialization", {"serialize", "serialized"}),
        ("verify", {"verification"}),
    ],
)
def test_a_word_has_its_derived_nouns_and_verbs(word: str, derived: set[str]) -> None:
    assert derived <= set(derivations(word))


@given(st.text(max_size=60))
def test_derivations_are_never_the_word_its_forms_or_stop_words(word: str) -> None:
    got = derivations(word)
    assert word not in got
    assert not set(got) & (QUERY_STOPWORDS | set(inflections(word)))
    assert list(got) == sorted(set(got))


NO_OTHER_WORDS = dataclasses.replace(WEIGHTS, other_word=0.0)
NO_FORMS = dataclasses.replace(WEIGHTS, other_word=0.0, stem=0.0)
NO_STEMS = dataclasses.replace(WEIGHTS, stem=0.0)


def test_a_short_stem_is_another_word() -> None:
    assert "act" not in derivations("action")
    assert "opt" not in derivations("options")


@pytest.mark.parametrize(
    ("word", "others"),
    [
        ("db", {"database"}),
        ("database", {"db"}),
        ("configuration", {"cfg", "conf", "config"}),
        ("config", {"configuration", "cfg", "conf"}),
        ("auth", {"authentication", "authorization"}),
        ("authentication", {"auth"}),
        ("k8s", {"kubernetes"}),
        ("vars", {"variables"}),
        ("postgresql", {"pg", "postgres"}),
    ],
)
def test_an_abbreviation_and_its_word_are_synonyms(word: str, others: set[str]) -> None:
    assert set(synonyms(word)) == others


def test_synonyms_go_both_ways_and_are_never_the_word() -> None:
    assert synonyms("pool") == ()
    for word in ("db", "database", "cfg", "configuration", "auth", "authorization", "str", "string"):
        for other in synonyms(word):
            assert other != word
            assert word in synonyms(other)


def test_query_words_are_the_words_standing_on_their_own() -> None:
    assert query_words("How do the connection pools in db/pool.py handle failing_tests? HTTP2") == [
        "connection",
        "pools",
        "handle",
        "http2",
    ]


def _index(*docs: str) -> BM25Index:
    index = BM25Index()
    for k, text in enumerate(docs):
        index.add(f"d{k}", text)
    return index


def test_a_word_no_document_holds_finds_its_other_words() -> None:
    index = _index(POOL, STRING)
    hits = index.search(QUERY)
    assert [h.doc_id for h in hits] == ["d0", "d1"]
    assert hits[0].matched == MATCHED
    assert hits[1].matched == ("connection",)
    # Another word scores OTHER_WORD_WEIGHT of what the word would, written as the note writes it.
    exact = index.search("database connection pool leaks")[0].score
    assert hits[0].score < exact
    assert [h.matched for h in index.search("db")] == [("database",)]
    assert [h.matched for h in index.search("configurations from env")] == [("environment",)]
    deployed = _index("Deployment: the image is built by the release workflow", "the pipeline of the parser")
    assert [h.matched for h in deployed.search("deploy pipeline")] == [("pipeline",), ("deployment",)]
    assert [h.matched for h in deployed.search("deploy")] == [("deployment",)]


def test_a_word_some_document_holds_is_searched_as_written() -> None:
    index = _index(POOL, "two pools were drained", "the db file is locked")
    # Its other forms are found by their stem, below the word as written.
    assert [h.doc_id for h in index.search("pools")] == ["d1", "d0"]
    assert [h.doc_id for h in index.search("pool")] == ["d0", "d1"]
    assert [h.doc_id for h in index.search("db")] == ["d2"]
    assert [h.doc_id for h in index.search("database")] == ["d0"]


def test_a_word_inside_a_path_or_name_has_no_forms() -> None:
    index = _index("the user table", "the handler module", "the database")
    assert index.search("src/handlers/users.py") == []
    assert index.search("handlers_users") == []
    assert index.search("app/db/models.py") == []
    assert [h.doc_id for h in index.search("users")] == ["d0"]


def test_a_word_only_another_project_holds_still_finds_its_other_words() -> None:
    s = Store(scope="/p/a")
    drained = s.store("two pools were drained", scope="/p/a").item.id
    pool = s.store(POOL, scope="/p/b").item.id
    hits = s.query("connection pools", scope="/p/b")
    assert [h.item.id for h in hits] == [pool]
    assert hits[0].matched == ("connection", "pool")
    assert [h.item.id for h in s.query("pools", scope="/p/a")] == [drained]  # held there: as written
    assert next(h.item.id for h in s.query("pools", scope="all")) == drained
    # The same for a tag filter: no note tagged "db" says "pools".
    tagged = s.store("the pool of workers", tags=["db"], scope="/p/a").item.id
    assert [h.item.id for h in s.query("pools", tags=["db"], scope="/p/a")] == [tagged]


def test_only_the_first_words_of_a_long_query_have_forms() -> None:
    filler = " ".join(f"zq{chr(ord('a') + k)}x" for k in range(index_mod.EXPANDED_WORDS))  # words, held by no note
    index = _index(POOL)
    # Without stems: the stem finds "pool" for any word, which is not asked here.
    assert index.search(f"pools {filler}", weights=NO_STEMS)
    assert not index.search(f"{filler} pools", weights=NO_STEMS)


def test_no_other_words_at_weight_zero() -> None:
    index = _index(POOL, STRING)
    assert [h.matched for h in index.search(QUERY, weights=NO_FORMS)] == [("connection",), ("connection",)]


def test_the_in_memory_client_finds_the_note_in_other_words() -> None:
    async def go() -> None:
        async with Client(build_server(Store()), mode="legacy") as c:
            pool = (await c.call_tool("store", {"content": POOL})).structured_content["id"]  # type: ignore[index]
            string = (await c.call_tool("store", {"content": STRING})).structured_content["id"]  # type: ignore[index]
            hits = (await c.call_tool("query", {"query": QUERY})).structured_content["items"]  # type: ignore[index]
            assert hits[0]["id"] == pool
            assert hits[0]["matched_terms"] == list(MATCHED)
            recall = (await c.call_tool("recall", {"query": QUERY})).structured_content  # type: ignore[index]
            related = recall["text"].split("Related to the task", 1)[1]
            assert related.index(pool) < related.index(string)

    anyio.run(go)


@pytest.mark.slow
def test_a_stdio_server_and_the_cli_find_it(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    with StdioServer("--state-dir", state) as server:
        pool = server.ok("store", content=POOL)["id"]
        server.ok("store", content=STRING)
        hits = server.ok("query", query=QUERY)["items"]
        assert hits[0]["id"] == pool
        assert hits[0]["matched_terms"] == list(MATCHED)
    assert cli_json("query", QUERY, "--state-dir", state)["items"][0]["id"] == pool


# Documents and queries over a few words that are one another's forms, synonyms and derivations.
_VOCAB = ["pool", "pools", "pooled", "db", "database", "deploy", "deployment", "deploys", "cache", "caching", "load"]
_DOCS = st.lists(st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=6).map(" ".join), min_size=1, max_size=8)
_QUERY = st.lists(st.sampled_from([*_VOCAB, "connections", "configs"]), min_size=1, max_size=4).map(" ".join)


@given(_DOCS, _QUERY)
def test_other_words_only_add_to_what_the_query_finds(docs: list[str], query: str) -> None:
    """Against the same index, the query without other words: every document it scores keeps at
    least that score and those matched terms; and a query whose every word some document
    holds finds exactly what it found."""
    index = _index(*docs)
    with_other = index.search_scores(query)
    without = index.search_scores(query, weights=NO_OTHER_WORDS)
    for doc_id, (score, matched) in without.items():
        assert with_other[doc_id][0] >= score - 1e-9
        assert set(matched) <= set(with_other[doc_id][1])
    held = {t for d in docs for t in d.split()}
    if all(word in held for word in query.split()):
        assert with_other == without
