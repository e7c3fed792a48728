import base64
import contextlib
import dataclasses
import math
import random
import re
from array import array
from collections import Counter
from itertools import accumulate
from unittest.mock import patch

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from compactor.search import index as index_mod
from compactor.search import index as index_module
from compactor.search import postings as postings_module
from compactor.search import topk as topk_module
from compactor.search.analyze import index_tokens, query_terms, tokenize
from compactor.search.index import BM25Index, IndexHit
from compactor.search.topk import BM25_B, BM25_K1, SUMMARY_B, SUMMARY_WEIGHT, TAG_B, TAG_WEIGHT, WEIGHTS

# --- reference ---------------------------------------------------------------------------
# Real agent text kept in the repository (tests/data/README.md: provenance, MIT license), so
# the suite needs no ../shared: the first 1,500 events of shared/corpus, content cut at 400 chars.
from tests.conftest import CORPUS_SLICE


def _first_contents(n: int) -> list[str]:
    out = []
    with CORPUS_SLICE.open("rb") as f:
        for line in f:
            out.append(orjson.loads(line)["content"])
            if len(out) == n:
                break
    return out


class _OurIdfOkapi(BM25Okapi):
    """rank_bm25's Okapi with our idf, over `tokenize`'s terms, a document's length counted in
    its words as written (a path or identifier is one word however many parts it is indexed by)."""

    def __init__(self, texts, **kwargs):
        super().__init__([tokenize(t) for t in texts], **kwargs)
        self.doc_len = [len(terms) - extra for terms, extra in map(index_tokens, texts)]
        self.avgdl = sum(self.doc_len) / len(self.doc_len)

    def _calc_idf(self, nd):
        for word, freq in nd.items():
            self.idf[word] = math.log(1 + (self.corpus_size - freq + 0.5) / (freq + 0.5))


def _reference_top(ref, query, k):
    scores = ref.get_scores(query_terms(query))
    # Ties: newest (highest position) first, as the index promises.
    order = sorted((i for i in range(len(scores)) if scores[i] > 0), key=lambda i: (-scores[i], -i))
    return [(str(i), float(scores[i])) for i in order[:k]]


@pytest.fixture(scope="module")
def real():
    docs = _first_contents(1500)
    tokens = [tokenize(d) for d in docs]
    index = BM25Index()
    for i, d in enumerate(docs):
        index.add(str(i), d)
    ref = _OurIdfOkapi(docs, k1=BM25_K1, b=BM25_B)
    df = Counter(t for toks in tokens for t in set(toks))
    return index, ref, df


def _queries(df, lo, hi, n, *, seed, extra=()):
    words = sorted(w for w, c in df.items() if lo <= c <= hi)
    rng = random.Random(seed)
    return [" ".join([*rng.sample(words, rng.randint(2, 4)), *extra]) for _ in range(n)]


NO_STEMS = dataclasses.replace(WEIGHTS, stem=0.0)

# numpy: every query is scored over a dense array, its top k bounded by the maxima of blocks
# of 16 documents (numpy-all: from every nonzero score); python: term at a time (with
# pruning). All must give the full evaluation's top k, scores bit for bit.
_DENSE = pytest.mark.parametrize("scoring_path", ["numpy", "numpy-all", "python"])


def _path(mode: str) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    stack.enter_context(patch.object(index_module, "_DENSE_MIN_POSTINGS", 10**9 if mode == "python" else 0))
    stack.enter_context(patch.object(topk_module, "_TOP_BLOCK", 10**9 if mode == "numpy-all" else 16))
    return stack


def _assert_same_top(index, ref, query):
    # rank_bm25 knows no stem terms; `test_stem_terms_keep_the_top_k_of_a_full_evaluation` has them.
    got = index.search(query, 10, weights=NO_STEMS)
    want = _reference_top(ref, query, 10)
    assert [h.doc_id for h in got] == [doc for doc, _ in want], query
    for hit, (_, score) in zip(got, want, strict=True):
        assert hit.score == pytest.approx(score, rel=1e-9)


@_DENSE
def test_top10_equals_rank_bm25_on_real_text_for_rare_word_queries(real, scoring_path):
    index, ref, df = real
    queries = _queries(df, 2, 30, 30, seed=1)
    assert len(queries) == 30
    with _path(scoring_path):
        for q in queries:
            _assert_same_top(index, ref, q)


@_DENSE
def test_top10_equals_rank_bm25_when_common_terms_are_pruned(real, scoring_path):
    index, ref, df = real
    common = [w for w, _ in df.most_common(6)]
    with _path(scoring_path):
        for q in _queries(df, 2, 30, 15, seed=2, extra=common[:3]) + _queries(df, 40, 400, 15, seed=3):
            _assert_same_top(index, ref, q)


@_DENSE
def test_search_matches_full_evaluation_when_pruning_is_forced(real, scoring_path):
    index, _, df = real
    common = [w for w, _ in df.most_common(10)]
    queries = _queries(df, 1, 200, 20, seed=4, extra=common[5:8])
    with (
        patch.object(topk_module, "_PRUNE_MIN_POSTINGS", 0),
        _path(scoring_path),
    ):
        for q in queries:
            full = sorted(index.search_scores(q).items(), key=lambda kv: (-kv[1][0], -int(kv[0])))[:7]
            got = index.search(q, 7)
            assert [(h.doc_id, h.score, h.matched) for h in got] == [(d, s, m) for d, (s, m) in full]


@_DENSE
def test_filtered_search_matches_filtered_full_evaluation_when_pruning_is_forced(real, scoring_path):
    index, _, df = real
    common = [w for w, _ in df.most_common(10)]
    queries = _queries(df, 1, 200, 20, seed=5, extra=common[4:7])

    def accept(doc_id: str) -> bool:
        return int(doc_id) % 3 != 0

    with (
        patch.object(topk_module, "_PRUNE_MIN_POSTINGS", 0),
        _path(scoring_path),
    ):
        for q in queries:
            full = sorted(index.search_scores(q).items(), key=lambda kv: (-kv[1][0], -int(kv[0])))
            want = [(d, s) for d, (s, _) in full if accept(d)][:5]
            got = index.search(q, 5, accept=accept)
            assert [(h.doc_id, h.score) for h in got] == want


# --- fields --------------------------------------------------------------------------------


def test_word_only_in_tags_is_found():
    index = BM25Index()
    index.add("a", "plain text here", tags=["Flaky-Test"])
    index.add("b", "other plain text")
    hits = index.search("flaky")
    assert [h.doc_id for h in hits] == ["a"]
    assert hits[0].matched == ("flaky",)


def test_word_only_in_summary_is_found():
    index = BM25Index()
    index.add("a", "plain text here", summary="migration squash decision")
    index.add("b", "other plain text")
    assert [h.doc_id for h in index.search("squash")] == ["a"]


def test_field_weights_follow_the_bm25f_formula():
    index = BM25Index()
    index.add("a", "alpha beta beta", summary="gamma alpha", tags=["alpha"])
    index.add("b", "beta delta")
    index.add("c", "epsilon")
    avg_content, avg_summary, avg_tags = (3 + 2 + 1) / 3, 2 / 3, 1 / 3

    def norm(b, length, avg):
        return 1 - b + b * length / avg

    tf = (
        1 / norm(BM25_B, 3, avg_content)
        + SUMMARY_WEIGHT * 1 / norm(SUMMARY_B, 2, avg_summary)
        + TAG_WEIGHT * 1 / norm(TAG_B, 1, avg_tags)
    )
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    want = idf * tf * (BM25_K1 + 1) / (tf + BM25_K1)
    assert index.avg_doc_len == pytest.approx(avg_content)
    [hit] = index.search("alpha")
    assert hit.score == pytest.approx(want, rel=1e-12)
    assert index.terms("a") == frozenset({"alpha", "beta", "gamma"})


def test_a_summary_match_is_not_diluted_by_the_length_of_the_content():
    index = BM25Index()
    index.add("short", "ok", summary="pytest tests/store/test_models.py")
    index.add("long", "line of output\n" * 400, summary="pytest tests/store/test_models.py")
    index.add("other", "something else entirely")
    scores = index.search_scores("tests/store/test_models.py")
    assert scores["short"][0] == pytest.approx(scores["long"][0], rel=1e-12)


def test_a_fields_length_counts_its_words_as_written_not_the_parts_of_a_path():
    """A tool output of paths and identifiers is as long as a note of as many words: each path
    is one word, though it is indexed whole, by its tails and by its parts (ISSUE 40)."""
    index = BM25Index()
    index.add("paths", "retry " + " ".join(f"src/pkg{i}/module_{i}.py parseHeader{i}" for i in range(20)))
    index.add("words", "retry " + " ".join(f"word{i} other{i}" for i in range(20)))
    index.add("stems", "retry " + " ".join(f"pools{i} running" for i in range(20)))
    index.add("none", "nothing here")
    scores = index.search_scores("retry")
    assert scores["paths"][0] == pytest.approx(scores["words"][0], rel=1e-12)
    assert scores["stems"][0] == pytest.approx(scores["words"][0], rel=1e-12)


def test_a_term_in_a_short_summary_counts_more_than_in_a_long_one():
    index = BM25Index()
    index.add("terse", "body", summary="migration squash")
    index.add("wordy", "body", summary="migration " + " ".join(f"word{i}" for i in range(30)))
    index.add("none", "body")
    hits = index.search("migration")
    assert [h.doc_id for h in hits] == ["terse", "wordy"]
    assert hits[0].score > hits[1].score


def test_a_summary_match_outranks_the_same_word_once_in_a_long_body():
    index = BM25Index()
    filler = " ".join(f"w{i}" for i in range(300))
    index.add("headline", f"{filler}", summary="sed -n 10,40p sphinx/domains/python.py")
    index.add("mention", f"{filler} sphinx/domains/python.py {filler}")
    assert [h.doc_id for h in index.search("sphinx/domains/python.py")] == ["headline", "mention"]


def test_very_frequent_term_keeps_its_exact_frequency():
    texts = ["spam " * 300 + "eggs", "spam eggs ham", "ham"]
    index = BM25Index()
    for i, text in enumerate(texts):
        index.add(str(i), text)
    ref = _OurIdfOkapi(texts, k1=BM25_K1, b=BM25_B)
    got = index.search("spam")
    want = _reference_top(ref, "spam", 10)
    assert [h.doc_id for h in got] == [doc for doc, _ in want] == ["0", "1"]
    for hit, (_, score) in zip(got, want, strict=True):
        assert hit.score == pytest.approx(score, rel=1e-12)


# --- lifecycle -----------------------------------------------------------------------------


def test_remove_makes_a_document_unfindable_and_keeps_average_length_right():
    index = BM25Index()
    index.add("a", "one two three four")
    index.add("b", "two three")
    index.add("c", "three five six")
    index.remove("a")
    assert "a" not in index
    assert len(index) == index.doc_count == 2
    assert index.avg_doc_len == pytest.approx((2 + 3) / 2)
    assert index.search("one four") == []
    assert [h.doc_id for h in index.search("two")] == ["b"]
    index.remove("b")
    index.remove("c")
    assert index.avg_doc_len == 0.0
    assert index.search("three") == []


def test_duplicate_add_and_missing_remove_raise():
    index = BM25Index()
    index.add("a", "text")
    with pytest.raises(ValueError, match="already"):
        index.add("a", "again")
    with pytest.raises(KeyError):
        index.remove("zz")
    with pytest.raises(KeyError):
        index.update("zz", "text")
    with pytest.raises(KeyError):
        index.terms("zz")


def test_ties_go_to_the_newest_document_and_update_makes_it_newest():
    index = BM25Index()
    for doc in ("a", "b", "c"):
        index.add(doc, "same words here")
    assert [h.doc_id for h in index.search("words")] == ["c", "b", "a"]
    index.update("a", "same words here")
    assert [h.doc_id for h in index.search("words")] == ["a", "c", "b"]


def test_accept_filters_candidates_only():
    index = BM25Index()
    for i in range(40):
        index.add(f"d{i}", f"alpha {'beta ' * (i % 5)} filler{i}")
    asked: list[str] = []

    def accept(doc_id: str) -> bool:
        asked.append(doc_id)
        return int(doc_id[1:]) % 3 == 0

    hits = index.search("beta", limit=5, accept=accept)
    full = sorted(index.search_scores("beta").items(), key=lambda kv: (-kv[1][0], -int(kv[0][1:])))
    assert [h.doc_id for h in hits] == [d for d, _ in full if int(d[1:]) % 3 == 0][:5]
    assert set(asked) <= {d for d, _ in full}
    assert len(asked) == len(set(asked))


@_DENSE
def test_stem_terms_keep_the_top_k_of_a_full_evaluation(real, scoring_path):
    """With stem terms in the query, pruning and the dense path still give the top 10 of
    scoring every document."""
    index, _, df = real
    words = sorted(w for w, c in df.items() if 3 <= c <= 200 and w.isalpha() and len(w) > 4)
    rng = random.Random(11)
    with patch.object(index_module, "_DENSE_MIN_POSTINGS", 10**9 if scoring_path == "python" else 0):
        for _ in range(30):
            query = " ".join(w + rng.choice(["", "s", "ing", "ed"]) for w in rng.sample(words, 3))
            full = sorted(index.search_scores(query).items(), key=lambda kv: (-kv[1][0], -int(kv[0])))[:10]
            got = index.search(query, 10)
            assert [h.doc_id for h in got] == [doc for doc, _ in full], query
            for hit, (_, (score, _)) in zip(got, full, strict=True):
                assert hit.score == pytest.approx(score, rel=1e-9)


def test_empty_index_unknown_terms_and_zero_limit_give_nothing():
    index = BM25Index()
    assert index.search("anything") == []
    index.add("a", "")
    assert index.search("anything") == []
    index.add("b", "something")
    assert index.search("nothing") == []
    assert index.search("something", limit=0) == []
    assert index.search("something") == [IndexHit("b", index.search_scores("something")["b"][0], ("something",))]


def test_state_survives_json_and_refuses_other_formats():
    index = BM25Index()
    index.add("a", "alpha beta " * 100, summary="sum", tags=["t1"])
    index.add("b", "beta gamma")
    index.remove("a")
    index.add("c", "alpha delta")
    restored = BM25Index.from_state(orjson.loads(orjson.dumps(index.to_state())))
    assert restored.search("alpha beta") == index.search("alpha beta")
    assert restored.terms("c") == index.terms("c")
    assert restored._ext[0] is None and restored._doc_terms[0] is None  # "a" stays removed
    assert (restored.avg_doc_len, restored._summary.total, restored._tags.total) == (
        index.avg_doc_len,
        index._summary.total,
        index._tags.total,
    )
    restored.add("a", "alpha again")
    assert "a" in restored
    with pytest.raises(ValueError, match="format"):
        BM25Index.from_state({**index.to_state(), "format": 99})


def test_saved_derived_arrays_load_as_computing_them_would():
    """The vocabulary's starts and hash order and the postings' starts are saved so that a start
    reads them in place; without them (PostgreSQL's state, an older file) they are computed."""
    index = BM25Index()
    for k in range(50):
        index.add(f"d{k}", f"alpha beta{k} gamma{k % 7} KeyError query.py", summary=f"s{k % 3}", tags=[f"t{k % 5}"])
    index.remove("d3")
    state = index.to_state(binary=True)
    assert all(key in state for key in index_module.DERIVED_ARRAYS)
    read = BM25Index.from_state(state)
    computed = BM25Index.from_state({k: v for k, v in state.items() if k not in index_module.DERIVED_ARRAYS})
    for a, b in ((read._vocab, computed._vocab),):
        assert list(a._starts) == list(b._starts)
        assert list(a._order) == list(b._order)
        assert list(a._sorted) == list(b._sorted)
    assert list(read._post.starts) == list(computed._post.starts)
    for q in ("alpha", "gamma3 KeyError", "beta17 s1 t2"):
        assert read.search(q) == computed.search(q) == index.search(q)
    read.add("new", "alpha beta17 fresh")
    computed.add("new", "alpha beta17 fresh")
    assert read.search("alpha fresh") == computed.search("alpha fresh")
    with pytest.raises(ValueError, match="inconsistent"):
        BM25Index.from_state({**state, "vocab_order": state["vocab_order"][:4]})
    with pytest.raises(ValueError, match="inconsistent"):
        BM25Index.from_state({**state, "post_starts": state["post_starts"][:8]})


# --- incremental == rebuilt ----------------------------------------------------------------

_WORDS = ["alpha", "beta", "gamma", "delta", "KeyError", "query.py", "max_items", "spam"]
_TEXT = st.builds(
    lambda words, rep: " ".join(words) + " spam" * rep,
    st.lists(st.sampled_from(_WORDS), max_size=12),
    st.sampled_from([0, 0, 0, 260]),  # 260: frequencies that spill out of a posting
)
_DOC = st.tuples(_TEXT, st.none() | _TEXT, st.lists(st.sampled_from(_WORDS), max_size=2))
_OPS = st.lists(
    st.tuples(st.sampled_from(["put", "put", "remove", "retag"]), st.integers(0, 7), _DOC), min_size=1, max_size=40
)
_QUERIES = ["alpha", "beta gamma", "key error", "query", "spam delta", "max_items alpha beta", "nothing"]


def _ranked(index, query, order):
    scores = index.search_scores(query)
    return sorted(scores.items(), key=lambda kv: (-kv[1][0], -order.index(kv[0])))


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    _OPS,
    st.booleans(),
    st.booleans(),
    st.sampled_from([12, 1 << 24]),
    st.sampled_from([1, 2, 256]),
    st.sampled_from([0, index_mod.INDEX_SETTLE_MIN]),
    st.booleans(),
)
def test_any_sequence_of_writes_searches_like_a_fresh_rebuild(
    ops, force_prune, force_bisect, doc_limit, top_block, settle_min, batched
):
    with (
        patch.object(index_mod, "INDEX_SETTLE_MIN", settle_min),  # 0: terms and postings merge on most adds
        patch.object(topk_module, "_TOP_BLOCK", top_block),  # 1 and 2: the top-k bound with ties at the cut
        patch.object(index_module, "_DOC_LIMIT", doc_limit),  # 12 forces renumbering
        patch.object(index_module, "_COMPACT_SLACK", 0),  # compacts postings early and often
        patch.object(topk_module, "_PRUNE_MIN_POSTINGS", 0 if force_prune else 256),
        patch.object(topk_module, "_BISECT_COST", 0 if force_bisect else 16),
    ):
        index = BM25Index()
        docs: dict[str, tuple[str, str | None, list[str]]] = {}
        for step, (op, key, doc) in enumerate(ops):
            if step in (len(ops) // 2, 3 * len(ops) // 4):
                # Halfway, continue on a reloaded copy: writes to a loaded index go to postings
                # that start out in its flat array (new ones to a tail after it). Reloaded
                # again later, with the tails of the first reload merged in.
                index = BM25Index.from_state(orjson.loads(orjson.dumps(index.to_state())))
            doc_id = f"k{key}"
            if op == "remove":
                if doc_id in docs:
                    index.remove(doc_id)
                    del docs[doc_id]
                continue
            if op == "retag":
                if doc_id in docs:  # new tags only; the document keeps its place
                    content, summary, old_tags = docs[doc_id]
                    index.retag(doc_id, old_tags, doc[2])
                    docs[doc_id] = (content, summary, doc[2])
                continue
            if doc_id in docs:
                index.update(doc_id, *doc)
                del docs[doc_id]
            elif batched:  # add_many's path: each term's new postings appended in one step
                index.add_many([(doc_id, *doc)])
            else:
                index.add(doc_id, *doc)
            docs[doc_id] = doc
        fresh = BM25Index()
        for doc_id, doc in docs.items():  # insertion order = order of last write
            fresh.add(doc_id, *doc)
        restored = BM25Index.from_state(orjson.loads(orjson.dumps(index.to_state())))

        order = list(docs)
        assert len(index) == len(fresh) == len(docs)
        assert index.avg_doc_len == pytest.approx(fresh.avg_doc_len, rel=1e-12)
        # Field lengths feed the summary and tag normalisation.
        assert (index._summary.total, index._tags.total) == (fresh._summary.total, fresh._tags.total)
        for doc_id in docs:
            assert index.terms(doc_id) == fresh.terms(doc_id)
        for q in _QUERIES:
            want = fresh.search(q, 5)
            with patch.object(index_module, "_DENSE_MIN_POSTINGS", 0):
                dense = index.search(q, 5)
            with patch.object(index_module, "_DENSE_MIN_POSTINGS", 10**9):
                scanned = index.search(q, 5)
            assert dense == scanned  # same ids, matched terms and scores, bit for bit
            for got in (index.search(q, 5), restored.search(q, 5)):
                assert [(h.doc_id, h.matched) for h in got] == [(h.doc_id, h.matched) for h in want]
                for a, b in zip(got, want, strict=True):
                    assert a.score == pytest.approx(b.score, rel=1e-9)
            full = _ranked(index, q, order)[:5]
            assert [(h.doc_id, h.score) for h in want] == [(d, s) for d, (s, _) in full]


def _words(text):
    """A field's length: its words as written, a compound ("query.py", "tag-x") one word, a
    word too short to be a term none."""
    return sum(1 for word in re.findall(r"\w(?:[\w./-]*\w)?", text) if tokenize(word))


def _bm25f_reference(docs, query):
    """Scores straight from the BM25F formula, for documents given as (content, summary, tags)."""
    toks = [(tokenize(c), tokenize(s) if s else [], [t for tag in tags for t in tokenize(tag)]) for c, s, tags in docs]
    lens = [(_words(c), _words(s or ""), sum(_words(tag) for tag in tags)) for c, s, tags in docs]
    n = len(docs)
    avg = [sum(d[f] for d in lens) / n for f in range(3)]
    weights, bs = (1.0, SUMMARY_WEIGHT, TAG_WEIGHT), (BM25_B, SUMMARY_B, TAG_B)
    out = {}
    for i, fields in enumerate(toks):
        score, matched = 0.0, False
        for term in query_terms(query):
            df = sum(1 for d in toks if any(term in f for f in d))
            if not df:
                continue
            tf = 0.0
            for f in range(3):
                count = fields[f].count(term)
                if count:
                    tf += weights[f] * count / (1 - bs[f] + bs[f] * lens[i][f] / avg[f])
            if tf:
                matched = True
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1)
        if matched:
            out[str(i)] = score
    return out


_FIELD_WORDS = ["alpha", "beta", "gamma", "query.py"]
_FIELD_DOC = st.tuples(
    st.lists(st.sampled_from(_FIELD_WORDS), max_size=10).map(" ".join),
    st.integers(0, 300),  # extra "alpha": frequencies inline, packed with fields, or spilled
    st.none() | st.lists(st.sampled_from(_FIELD_WORDS), max_size=6).map(" ".join),
    st.lists(st.sampled_from(["alpha", "beta", "tag-x"]), max_size=5),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(_FIELD_DOC, min_size=1, max_size=8))
def test_scores_follow_the_bm25f_formula_for_any_field_frequencies(raw):
    docs = [(f"{words} {'alpha ' * extra}", summary, tags) for words, extra, summary, tags in raw]
    index = BM25Index()
    for i, doc in enumerate(docs):
        index.add(str(i), *doc)
    for query in ("alpha", "beta gamma", "query.py tag-x", "x"):
        got = {d: s for d, (s, _) in index.search_scores(query).items()}
        want = _bm25f_reference(docs, query)
        assert got.keys() == want.keys()
        for d in want:
            assert got[d] == pytest.approx(want[d], rel=1e-9)


# --- a batch add == one add after another ----------------------------------------------------

_BATCH_OPS = st.lists(
    st.tuples(st.sampled_from(["batch", "batch", "remove"]), st.lists(st.tuples(st.integers(0, 9), _DOC), max_size=6)),
    min_size=1,
    max_size=12,
)


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(_BATCH_OPS, st.sampled_from([0, index_mod.INDEX_SETTLE_MIN]), st.booleans(), st.sampled_from([12, 1 << 24]))
def test_add_many_leaves_the_index_exactly_as_adding_one_by_one(steps, settle_min, reload_halfway, doc_limit):
    """Same term ids (freed ones reused in the same order), postings, spilled frequencies,
    field lengths and per-document terms: the saved states are equal, and so are searches.
    A doc limit of 12 makes both renumber their documents."""
    with patch.object(index_mod, "INDEX_SETTLE_MIN", settle_min), patch.object(index_module, "_DOC_LIMIT", doc_limit):
        batched, single = BM25Index(), BM25Index()
        live: set[str] = set()
        for step, (op, docs) in enumerate(steps):
            if reload_halfway and step == len(steps) // 2:
                batched = BM25Index.from_state(orjson.loads(orjson.dumps(batched.to_state())))
                single = BM25Index.from_state(orjson.loads(orjson.dumps(single.to_state())))
            if op == "remove":
                for key, _ in docs:
                    if f"k{key}" in live:
                        batched.remove(f"k{key}")
                        single.remove(f"k{key}")
                        live.discard(f"k{key}")
                continue
            fresh = list({f"k{key}": doc for key, doc in docs if f"k{key}" not in live}.items())
            terms = batched.add_many([(doc_id, *doc) for doc_id, doc in fresh])
            for doc_id, doc in fresh:
                single.add(doc_id, *doc)
                live.add(doc_id)
            assert [frozenset(t) for t in terms] == [single.terms(doc_id) for doc_id, _ in fresh]
        assert _comparable(batched.to_state()) == _comparable(single.to_state())
        for q in _QUERIES:
            assert batched.search(q, 5) == single.search(q, 5)


def _comparable(state):
    """A saved state with the CRC-32 of freed term ids cleared: a freed id keeps the hash it
    had if it was settled before being freed, so that slot depends on when settles ran."""
    lens = array("I", base64.b64decode(state["vocab_lens"]))
    hashes = array("I", base64.b64decode(state["vocab_hashes"]))
    cleared = array("I", [h if n else 0 for n, h in zip(lens, hashes, strict=True)])
    return {**state, "vocab_hashes": cleared.tobytes()}


def test_add_many_refuses_a_present_or_repeated_id_and_then_adds_nothing():
    index = BM25Index()
    index.add("a", "alpha")
    for docs in ([("b", "beta", None, ()), ("a", "again", None, ())], [("c", "x", None, ()), ("c", "y", None, ())]):
        with pytest.raises(ValueError, match="already indexed"):
            index.add_many(docs)
        assert len(index) == 1 and "b" not in index and "c" not in index
    assert index.add_many([]) == []


def test_a_loaded_term_takes_new_postings_in_a_tail_without_copying_its_own():
    """Writing to a loaded index appends each settled term's new postings after its flat part
    instead of copying the flat part first (at 100k items that copy grew a writing server by
    ~100 MiB over its first 250 stores); changing the term joins the two. Reading it leaves
    them apart: a query that joined them made the next settle gather every posting."""
    index = BM25Index()
    for k in range(40):
        index.add(f"d{k}", f"common word{k} alpha", tags=["t"])
    loaded = BM25Index.from_state(index.to_state(binary=True))
    tid = loaded._vocab.get("common")
    assert tid is not None
    loaded.add("new1", "common fresh")
    loaded.add_many([("new2", "common fresher", None, ())])
    post = loaded._post
    shift = index_module._TF_BITS
    assert tid not in post._own and list(post._tail[tid]) == [40 << shift | 1, 41 << shift | 1]
    assert post.length(tid) == 42
    assert [h.doc_id for h in loaded.search("common", 50)][:2] == ["new2", "new1"]
    assert tid not in post._own and len(post._tail[tid]) == 2 and len(post[tid]) == 42
    loaded.add("new3", "common again")
    loaded.retag("d0", ["t"], ["common"])
    assert tid in post._own and tid not in post._tail and len(post._own[tid]) == 43
    hits = [h.doc_id for h in loaded.search("common", 50)]
    assert loaded.terms("d0") == {"common", "word0", "alpha"} and hits[0] == "d0" and len(hits) == 43
    again = BM25Index.from_state(loaded.to_state(binary=True))
    assert not again._post._tail and again.search("common", 50) == loaded.search("common", 50)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=12),
    st.lists(st.tuples(st.sampled_from(["tail", "new", "grow", "own"]), st.integers(0, 30)), max_size=60),
    st.sampled_from([1, 2, 5, postings_module._SETTLE_CHUNK]),
    st.sampled_from(["array", "mapped", "read"]),
    st.sampled_from([None, 0, 6]),
)
def test_settling_lays_every_term_out_in_order_whichever_way_it_merges(settled, writes, chunk, source, line):
    """`settle` moves the flat part up in place (a chunk at a time, from the top) when only
    tails and new terms hold postings, and gathers with each tail as a second segment
    otherwise: either way the flat array is every term's postings in term order, as reading
    each term gave them before, for any mix of writes and any chunk size. It grows the array
    it holds only when that is its own and nobody reads it: not a memory-mapped file's
    (`mapped`), nor while a slice handed out is still read (`read`), which keeps its values.
    The term starts grow in place likewise, a chunk of terms at a time. They take 4 bytes each
    up to 4G postings, 8 beyond: `line` moves that limit to a few postings (None: where it is)."""
    import numpy as np

    def narrow_until(end: int) -> type:
        return np.uint32 if line is None or end <= line else np.uint64

    lens = list(settled)
    flat = array("I", range(1, sum(lens) + 1))

    def build() -> postings_module._Postings:
        post = postings_module._Postings(memoryview(array("I", flat)) if source == "mapped" else array("I", flat), lens)
        doc = 1_000
        for kind, k in writes:
            doc += 1
            if kind == "tail":
                post.add(k % len(lens), doc)
            elif kind == "new" and len(post) > len(lens):
                post.add(len(lens) + k % (len(post) - len(lens)), doc)
            elif kind == "grow":
                post.grow(1 + k % 3)
            elif kind == "own":  # a settled term rewritten in place: the gather only
                post[k % len(lens)] = array("I", [doc])
        return post

    with patch.object(postings_module, "offsets_dtype", narrow_until):
        post = build()
    if not post.unsettled:
        return
    appended = min(post._own, default=len(post)) >= post._own_from
    unsettled = post.unsettled
    want = [list(post[t]) for t in range(len(post))]  # reading changes nothing a settle sees
    assert (min(post._own, default=len(post)) >= post._own_from) == appended and post.unsettled == unsettled
    before, starts_before = post._flat, post._starts
    held = post[0] if source == "read" and lens[0] and 0 not in post._tail and 0 not in post._own else None
    held_values = list(held) if held is not None else None
    with (
        patch.object(postings_module, "_SETTLE_CHUNK", chunk),
        patch.object(postings_module, "_STARTS_CHUNK", chunk),
        patch.object(
            postings_module._Postings,
            "_appended_flat",
            autospec=True,
            side_effect=postings_module._Postings._appended_flat,
        ) as spy,
        patch.object(postings_module, "offsets_dtype", narrow_until),
    ):
        post.settle()
    assert spy.call_count == (1 if appended else 0)
    width = post._starts.itemsize
    assert width == np.dtype(narrow_until(len(post.flat))).itemsize
    assert list(post.flat) == [p for term in want for p in term]
    assert list(post.starts) == [0, *accumulate(len(term) for term in want)]
    assert [list(post[t]) for t in range(len(post))] == want
    assert (post.flat is before) == (appended and source != "mapped" and held is None)
    # An array of its own from the start, grown in place unless it had to widen.
    assert (post._starts is starts_before) == (appended and width == starts_before.itemsize)
    if held is not None:
        assert list(held) == held_values
    # A second round on what the first made: a flat array grown in place grows again.
    post.grow(2)
    want.extend([[], []])
    for doc, t in enumerate((0, len(post) - 1, len(post) // 2), start=5_000):
        post.add(t, doc)
        want[t].append(doc)
    with patch.object(postings_module, "offsets_dtype", narrow_until):
        post.settle()
    assert [list(post[t]) for t in range(len(post))] == want
    assert post._starts.itemsize == np.dtype(narrow_until(len(post.flat))).itemsize


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 3), max_size=6),
    st.lists(
        st.tuples(st.sampled_from(["grow", "add", "batch", "set", "write", "settle"]), st.integers(0, 40)),
        max_size=40,
    ),
)
def test_postings_read_back_what_was_written_between_and_across_settles(settled, ops):
    """Every way of writing postings (one at a time, a batch, replacing a term's, changing
    one in place), on settled terms and new ones (a new term holds its first posting
    without an array until it gets a second), reads back as written after each step, and
    a settle changes nothing read."""
    model = [[1_000 * t + i for i in range(n)] for t, n in enumerate(settled)]
    post = postings_module._Postings(array("I", [p for term in model for p in term]), settled)
    doc = 100_000
    for kind, k in ops:
        doc += 1
        if kind == "grow":
            post.grow(1 + k % 3)
            model.extend([] for _ in range(1 + k % 3))
        elif not model:
            continue
        elif kind == "add":
            post.add(k % len(model), doc)
            model[k % len(model)].append(doc)
        elif kind == "batch":  # one or two postings each, as `_post_many` sends them
            tids = sorted({(k * j) % len(model) for j in range(1, 4)})
            runs = [[doc] * (1 + (t + k) % 2) for t in tids]
            entries = array("I", [p for run in runs for p in run])
            bounds = [0, *accumulate(4 * len(run) for run in runs)]
            post.extend_each(tids, memoryview(entries.tobytes()), bounds)
            for t, run in zip(tids, runs, strict=True):
                model[t].extend(run)
        elif kind == "set":
            t = k % len(model)
            model[t] = model[t][1:]
            post[t] = array("I", model[t])
        elif kind == "write":
            t = k % len(model)
            post.writable(t).append(doc)
            model[t].append(doc)
        else:
            post.settle()
            assert not post.unsettled and list(post.flat) == [p for term in model for p in term]
        assert [list(post[t]) for t in range(len(post))] == model
        assert [post.length(t) for t in range(len(post))] == [len(term) for term in model]
        assert post._ones == sum(1 for one in post._one if one)
        assert not any(one and post._own_from + k in post._own for k, one in enumerate(post._one))


def test_terms_waiting_for_a_merge_stay_under_a_share_of_the_merged_ones():
    """What waits unmerged is ~150 bytes a term of Python objects that the process keeps once
    freed: the largest wait sets a load's peak, so it is bounded by a share of the vocabulary."""
    with patch.object(index_mod, "INDEX_SETTLE_MIN", 64):
        index = BM25Index()
        peak_share = 0.0
        for batch in range(60):
            docs = [(f"d{batch}-{k}", " ".join(f"t{batch}x{k}x{j}" for j in range(40)), None, ()) for k in range(10)]
            index.add_many(docs)
            vocab = index._vocab
            assert vocab.unsettled <= max(index_mod.INDEX_SETTLE_MIN, vocab.settled // index_mod.INDEX_SETTLE_SHARE)
            if vocab.settled > 64 * index_mod.INDEX_SETTLE_SHARE:
                peak_share = max(peak_share, vocab.unsettled / vocab.settled)
        assert vocab.settled > 8 * 64 * index_mod.INDEX_SETTLE_SHARE // 2
        assert 0 < peak_share <= 1 / index_mod.INDEX_SETTLE_SHARE


def test_postings_starts_take_four_bytes_and_a_file_with_eight_byte_starts_still_loads():
    """Term starts into the flat postings are 4 bytes while there are fewer than 4G postings:
    8 MiB less at the ~2M terms of 100k items. A save keeps their width, and an index file
    of the last version (8 bytes a start) loads as it is and narrows at the next settle."""
    import numpy as np

    def copied(state: dict) -> dict:
        return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in state.items()}

    docs = [(f"d{i}", f"common word{i} shared{i % 3} path/to/f{i}.py", None, ()) for i in range(40)]
    index = BM25Index()
    index.add_many(docs)
    index.settle()
    assert index._post._starts.itemsize == 4
    state = copied(index.to_state(binary=True))
    assert len(state["post_starts"]) == 4 * (len(index._vocab) + 1)
    want = index.search("common shared1", 50)
    assert BM25Index.from_state(state).search("common shared1", 50) == want
    old = {**state, "post_starts": np.frombuffer(state["post_starts"], np.uint32).astype(np.uint64).tobytes()}
    loaded = BM25Index.from_state(old)
    assert loaded._post._starts.itemsize == 8 and loaded.search("common shared1", 50) == want
    loaded.add("new", "common shared1 fresh", None, ())
    loaded.settle()
    assert loaded._post._starts.itemsize == 4
    assert [h.doc_id for h in loaded.search("fresh", 5)] == ["new"]
    # Past the line (moved to 50 postings here), 8 bytes, kept through a save.
    with patch.object(postings_module, "offsets_dtype", lambda end: np.uint32 if end <= 50 else np.uint64):
        wide = BM25Index()
        wide.add_many(docs)
        wide.settle()
        assert wide._post._starts.itemsize == 8
        again = BM25Index.from_state(copied(wide.to_state(binary=True)))
    assert again._post._starts.itemsize == 8 and again.search("common shared1", 50) == want


def test_a_settle_folds_new_documents_terms_into_one_array_unless_a_view_is_read():
    """Each new document's terms are an array object of their own until a settle moves them
    into the flat array (~70 bytes a document less); a removed one stays removed, a view
    still read keeps them where they are until the next settle, and a loaded index's flat
    array (the file's) is never copied for it."""
    index = BM25Index()
    docs = [(f"d{i}", f"common word{i} shared{i % 3} path/to/f{i}.py", None, ()) for i in range(30)]
    index.add_many(docs[:10])
    index.remove("d3")
    want = {d: (list(index._doc_terms[d]) if index._doc_terms[d] is not None else None) for d in range(10)}
    dt = index._doc_terms
    assert len(dt._tail) == 10
    index.settle()
    assert not dt._tail and isinstance(dt._flat, array) and len(dt) == 10
    assert {d: (list(dt[d]) if dt[d] is not None else None) for d in range(10)} == want
    assert want[3] is None and dt[3] is None
    index.add_many(docs[10:20])
    held = dt[0]  # a view of the flat array, still read
    assert isinstance(held, memoryview)
    index.settle()
    assert len(dt._tail) == 10 and list(held) == want[0]
    del held
    index.settle()
    assert not dt._tail and len(dt) == 20
    assert [h.doc_id for h in index.search("word15", 5)] == ["d15"]
    assert index.terms("d12") == frozenset(tokenize(docs[12][1]))
    index.retag("d12", (), ("newtag",))  # a folded document changed in place
    assert "newtag" in index.terms("d12") and [h.doc_id for h in index.search("newtag", 5)] == ["d12"]
    # As a start reads the index file: its arrays read where they lie.
    state = index.to_state(binary=True)
    loaded = BM25Index.from_state(
        {k: memoryview(bytes(v)) if isinstance(v, memoryview) else v for k, v in state.items()}
    )
    loaded.add_many(docs[20:])
    loaded.settle()
    assert len(loaded._doc_terms._tail) == 10 and not isinstance(loaded._doc_terms._flat, array)
    assert loaded.search("shared1", 50) == BM25Index.from_state(loaded.to_state()).search("shared1", 50)
