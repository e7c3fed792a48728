"""An irregular form is found by its base and finds it ("what did we buy" finds "we bought ...",
"go" finds "went", "children" finds "child"), below a note holding the word as written; the
table lists no form that is also another common word, nor a stop word. Checked in the index,
through the in-memory client, a stdio server and the CLI."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.search import index as index_module
from compactor.search.analyze import QUERY_STOPWORDS, STEM_MARK, index_tokens, query_stems, stem, terms_changed
from compactor.search.index import BM25Index
from compactor.search.irregular import IRREGULAR
from compactor.store import Store
from tests.conftest import cli_json
from tests.support.old_tokenizer import tokenizer_version
from tests.support.sdk_calls import stored_and_asked
from tests.support.stdio_client import StdioServer

NOTES = {
    "bought": "Melanie bought a used kayak from the marina last spring",
    "children": "the children painted the fence on Saturday",
    "went": "Caroline went to the support group meeting again",
    "other": "the marina sells kayaks and paint for fences",
}
# A question in plain words, each naming its note's word by its base (or the base by a form).
QUESTIONS = {
    "what did Melanie buy": "bought",
    "when did the child paint": "children",
    "where did Caroline go": "went",
}


def test_an_irregular_form_is_indexed_by_its_base_stem_and_queried_by_it() -> None:
    terms, extra = index_tokens("We went home; the children ran and Bought it")
    for form, base in (("went", "go"), ("children", "child"), ("ran", "run"), ("bought", "buy")):
        assert form in terms and STEM_MARK + stem(base) in terms
    assert len(terms) - extra == 9  # a stem term is no word of the field's length
    assert query_stems("went") == [("went", [STEM_MARK + "go", "go"])]
    assert query_stems("go") == [("go", [STEM_MARK + "go"])]  # a base of two letters is looked up too
    assert query_stems("GO went") == [("went", [STEM_MARK + "go", "go"])]  # as "RUNNING" is not stemmed
    assert not [t for t in index_tokens("go to the left bit, bound for ground")[0] if t.startswith(STEM_MARK)]


def test_the_table_lists_no_stop_word_no_word_of_another_sense_and_no_form_snowball_finds() -> None:
    assert not set(IRREGULAR) & QUERY_STOPWORDS
    assert not {"left", "bit", "bound", "ground", "rose", "lay", "lie", "lit", "wound"} & set(IRREGULAR)
    for form, base in IRREGULAR.items():
        assert stem(form) != stem(base), form  # Snowball already finds that one


def test_each_question_finds_its_note_first_and_the_word_as_written_outranks_its_form() -> None:
    index = BM25Index()
    for name, note in NOTES.items():
        index.add(name, note)
    for question, name in QUESTIONS.items():
        assert next(h.doc_id for h in index.search(question)) == name, question
    both = BM25Index()
    both.add("form", "we bought the tickets")
    both.add("base", "we buy the tickets")
    assert [h.doc_id for h in both.search("buy")] == ["base", "form"]
    assert [h.doc_id for h in both.search("bought")] == ["form", "base"]


_WORDS = ["went", "go", "Children", "child", "Bought", "pools", "pool", "src/a.py", "poolSizes", "the", "ran"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=6).map(" ".join), st.sampled_from([3, 4, 5]))
def test_a_text_is_indexed_as_an_older_version_did_unless_terms_changed_says_otherwise(text: str, version: int) -> None:
    """What a start re-indexes: every text whose terms or length the saved index's version made
    otherwise, so an index brought up to date equals one built now."""
    with tokenizer_version(version):
        before = index_module.index_tokens(text)
    assert index_module.index_tokens(text) == before or terms_changed(version, text)


def test_the_in_memory_client_answers_each_question_with_its_note() -> None:
    ids, ranked = anyio.run(stored_and_asked, Store(), list(NOTES.values()), list(QUESTIONS))
    by_name = dict(zip(NOTES, ids, strict=True))
    for (question, name), hits in zip(QUESTIONS.items(), ranked, strict=True):
        assert hits[:1] == [by_name[name]], question


@pytest.mark.slow
def test_a_stdio_server_and_the_cli_answer_each_question_with_its_note(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    with StdioServer("--state-dir", state) as server:
        ids = {name: server.ok("store", content=note)["id"] for name, note in NOTES.items()}
        for question, name in QUESTIONS.items():
            assert server.ok("query", query=question)["items"][0]["id"] == ids[name], question
    for question, name in QUESTIONS.items():
        assert cli_json("query", question, "--state-dir", state)["items"][0]["id"] == ids[name], question
