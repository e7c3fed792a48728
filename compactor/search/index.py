"""Incremental BM25F over the memory's items: Okapi BM25 on the content, plus summary and tags.

Fields (Robertson, Zaragoza & Taylor, "Simple BM25 extension to multiple weighted fields",
2004): each field's term frequency is normalised by that field's own length before the fields
are weighted and summed, and the sum is saturated once:

    tf~ = tf_content / B_content + SUMMARY_WEIGHT * tf_summary / B_summary + TAG_WEIGHT * tf_tags / B_tags
    B_f = 1 - b_f + b_f * len_f / avg_len_f,   score = sum over query terms of idf * tf~ * (k1 + 1) / (tf~ + k1)

A document with content only scores exactly as Okapi BM25. Normalising per field matters for
agent memory: a long tool output whose first line (its summary) is the command the agent is
about to re-run no longer has that match diluted by the length of the output.


The postings and each document's terms are kept in flat arrays (`compactor.search.postings`);
a posting's code byte holds the content tf (0-126) when the term is in the content only, the
vast majority, told apart by one comparison; with bit 7 set it packs the three frequencies
(content 0-7, summary 0-3, tags 0-3); 127 means "larger: see the spill dict". Removal is lazy:
the document's length becomes -1 and document frequencies drop at once (so scores stay exact);
a term's postings are compacted only when dead ones outnumber live ones, so removal is
amortised O(terms of the document) and nothing ever walks all documents.

Frequencies and lengths are integers and field weights are applied at query time, so running
totals never drift, an index built incrementally scores bit for bit like one rebuilt from
scratch, and a saved index does not depend on the weights. Queries are evaluated by
`compactor.search.topk`.
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Final, NamedTuple

from .analyze import STEM_MARK, TERMS_VERSION, index_tokens, query_stems, query_terms, query_words, stem
from .mapped import unmapped
from .postings import _DocTerms, _enc, _in_place, _in_place_starts, _Postings, _raw, _unb64
from .topk import (
    _CODE_MASK,
    _PACKED,
    _SPILL,
    _TF_BITS,
    WEIGHTS,
    Weights,
    _Acceptance,
    _best,
    _dense_top,
    _Scorer,
    accumulate,
)
from .vocab import Vocab
from .wordforms import other_words

# The search index merges the terms and postings written since its last merge into its flat
# arrays (compactor.search.vocab) once there are this many new terms, or a thirty-second as many as it
# already holds if that is more. What waits unmerged (~150 bytes a term in Python objects) is
# memory the process keeps once freed, so the largest wait sets a load's peak. A merge after a
# load grows the arrays in place, O(index) numpy moves and an O(new terms) Python pass, so
# merging more often costs little: at 100k items a merge takes ~0.2 s. At 10k items the
# minimum decides, and 16k terms against 32k ends 4 MiB lower and peaks the same.
INDEX_SETTLE_MIN: Final = 16_384
INDEX_SETTLE_SHARE: Final = 32
# Settled terms remembered in a dict after a lookup: enough for the words a code-and-prose
# corpus repeats in every document (a few thousand), ~2 MiB at most.
VOCAB_HOT_TERMS: Final = 16_384
# Whether a document the query may find (its scope, its tags) holds a query word is asked of
# that word's newest postings, this many at most: a word every project writes would otherwise
# cost a pass over all its documents for each query in a project that does not.
HELD_SCAN_POSTINGS: Final = 256
# Other words are looked up for the first this many words of a query: an agent's query may be
# its whole thought, and each word brings up to ten forms to look up.
EXPANDED_WORDS: Final = 16

# --- the index's own tuning: how it stores postings, nothing a caller sees --------------------
# A term's postings are compacted once dead postings outnumber live ones by this slack.
_COMPACT_SLACK: Final = 8
# A query whose terms' postings add up to this many is scored with numpy over a dense array of
# all documents instead of term at a time in Python: ~20x less per posting, but ~30-100 us to
# set up (a zeroed float per document), which short lists do not repay.
_DENSE_MIN_POSTINGS: Final = 1_000
# ---------------------------------------------------------------------------------------------

# Bumped when the layout or the text the store feeds in changes, so an older saved index is
# rebuilt rather than trusted (3: headlines cut at word boundaries; a 2 may hold a cut word;
# 4: the vocabulary as flat arrays).
_STATE_FORMAT: Final = 4
# Tokenizer versions whose saved index a load takes (see analyze.terms_changed).
_KNOWN_TERMS: Final = (1, 2, 3, 4, 5, TERMS_VERSION)
_DOC_LIMIT: Final = 1 << (32 - _TF_BITS)
_DEAD: Final = -1.0


class IndexHit(NamedTuple):
    doc_id: str
    score: float
    matched: tuple[str, ...]


# The saved index's arrays that only spare a start the work of deriving them from the others.
DERIVED_ARRAYS: Final = ("vocab_starts", "vocab_order", "vocab_sorted", "post_starts")


class _Field:
    """A field besides the content: its document lengths (its weight and b come with a query)."""

    __slots__ = ("lens", "total")

    def __init__(self) -> None:
        self.lens: array[int] = array("I")  # doc -> length in tokens
        self.total = 0  # sum of live lengths

    def norm(self, n: int, b: float) -> tuple[float, float]:
        """(f1, f2) with B = f1 + f2 * length; f2 = 0 while no document has the field."""
        return 1.0 - b, b * n / self.total if self.total else 0.0


def saved_terms_version(state: Mapping[str, Any]) -> Any:
    """The tokenizer version a saved index state's terms come from (version 1 recorded none)."""
    return state.get("terms", 1)


class BM25Index:
    """BM25F over content + summary + tags of documents keyed by str ids (see the module doc).

    idf = ln(1 + (N - df + 0.5) / (df + 0.5)), df counting documents with the term in any field.
    """

    def __init__(self) -> None:
        self._vocab = Vocab(VOCAB_HOT_TERMS)  # term <-> term id
        self._free_terms: list[int] = []
        self._df: array[int] = array("I")
        self._post = _Postings()  # term id -> sorted doc << 8 | code
        # tid -> {doc: (content, summary, tags) tf} for postings whose code is _SPILL
        self._spill: dict[int, dict[int, tuple[int, int, int]]] = {}
        self._summary = _Field()
        self._tags = _Field()
        self._ids: dict[str, int] = {}
        self._ext: list[str | None] = []  # doc -> external id, None once removed
        self._doc_terms = _DocTerms()  # doc -> sorted distinct term ids
        self._dl: array[float] = array("d")  # doc -> content length in tokens, _DEAD once removed
        self._total_len = 0  # sum of live content lengths
        # The terms of the document added last: the store asks for them right after adding it
        # (near-duplicate sketch), and naming them again from the vocabulary costs more.
        self._last: tuple[str, Any] | None = None
        # The tokenizer version its terms come from: older only as loaded from an older saved
        # index, until the store has re-indexed what that version tokenized otherwise.
        self.terms_version = TERMS_VERSION

    # --- size ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._ids

    @property
    def doc_count(self) -> int:
        return len(self._ids)

    @property
    def avg_doc_len(self) -> float:
        """Mean content length in tokens (0.0 when empty)."""
        n = len(self._ids)
        return self._total_len / n if n else 0.0

    # --- writes ----------------------------------------------------------------------------

    def add(self, doc_id: str, content: str, summary: str | None = None, tags: Sequence[str] = ()) -> None:
        if doc_id in self._ids:
            raise ValueError(f"document {doc_id!r} is already indexed")
        body, n_body = _field(content)
        in_summary, n_summary = _field(summary) if summary else ([], 0)
        in_tags, n_tags = _tag_field(tags)
        if len(self._ext) >= _DOC_LIMIT:
            self._renumber()
            if len(self._ext) >= _DOC_LIMIT:
                raise OverflowError(f"BM25Index holds at most {_DOC_LIMIT} documents")
        d = len(self._ext)
        vocab, df, post = self._vocab, self._df, self._post
        counts = Counter(body)
        s_counts, t_counts = Counter(in_summary), Counter(in_tags)
        terms = {**counts, **s_counts, **t_counts} if s_counts or t_counts else counts
        tids: list[int] = []
        for term, found in zip(terms, vocab.lookup(list(terms)), strict=True):
            tid = found if found >= 0 else self._new_term(term)
            tf, s_tf, t_tf = counts.get(term, 0), s_counts.get(term, 0), t_counts.get(term, 0)
            code = tf if not (s_tf or t_tf) and tf < _SPILL else self._code(tid, d, tf, s_tf, t_tf)
            post.add(tid, d << _TF_BITS | code)
            df[tid] += 1
            tids.append(tid)
        tids.sort()
        for field, n in ((self._summary, n_summary), (self._tags, n_tags)):
            field.lens.append(n)
            field.total += n
        self._ids[doc_id] = d
        self._ext.append(doc_id)
        self._doc_terms.append(array("I", tids))
        self._dl.append(float(n_body))
        self._total_len += n_body
        self._last = (doc_id, terms.keys())
        self._settle_if_due()

    def add_many(self, docs: Sequence[tuple[str, str, str | None, Sequence[str]]]) -> list[Collection[str]]:
        """`add` of each (doc_id, content, summary, tags) in order, with the same result (term
        ids, postings, frequencies), but the vocabulary is asked once for the distinct terms of
        the whole batch and each term's postings are appended in one step. Returns each
        document's distinct terms. Nothing is added if an id is present or repeated."""
        seen: set[str] = set()
        for doc_id, *_ in docs:
            if doc_id in self._ids or doc_id in seen:
                raise ValueError(f"document {doc_id!r} is already indexed")
            seen.add(doc_id)
        if not docs:
            return []
        if len(self._ext) + len(docs) > _DOC_LIMIT:  # renumbering is `add`'s business
            out: list[Collection[str]] = []
            for doc in docs:
                self.add(*doc)
                assert self._last is not None
                out.append(self._last[1])
            return out
        parsed: list[tuple[int, int, int, Counter[str], Counter[str] | None, Counter[str] | None]] = []
        wanted: dict[str, Any] = {}
        for _, content, summary, tags in docs:
            body, n_body = _field(content)
            in_summary, n_summary = _field(summary) if summary else ([], 0)
            in_tags, n_tags = _tag_field(tags)
            counts = Counter(body)
            if in_summary or in_tags:
                s_counts, t_counts = Counter(in_summary), Counter(in_tags)
                wanted.update(counts)
                wanted.update(s_counts)
                wanted.update(t_counts)
                parsed.append((n_body, n_summary, n_tags, counts, s_counts, t_counts))
            else:
                wanted.update(counts)
                parsed.append((n_body, 0, 0, counts, None, None))
        # New terms get ids in order of first appearance, as one `add` after another gives them.
        names = list(wanted)
        tid_of = dict(zip(names, self._vocab.lookup(names), strict=True))
        fresh = [term for term, tid in tid_of.items() if tid < 0]
        tid_of.update(zip(fresh, self._new_terms(fresh), strict=True))
        first = len(self._ext)
        all_tids: array[int] = array("I")
        all_codes: array[int] = array("I")
        doc_lens: list[int] = []
        terms_out: list[Collection[str]] = []
        get_tid = tid_of.__getitem__
        for k, (n_body, n_summary, n_tags, counts, maybe_s, maybe_t) in enumerate(parsed):
            d = first + k
            if maybe_s is None or maybe_t is None:
                keys: Collection[str] = counts.keys()
                tids = list(map(get_tid, keys))
                codes = list(counts.values())
                if codes and max(codes) >= _SPILL:
                    codes = [self._code(tid, d, tf, 0, 0) for tid, tf in zip(tids, codes, strict=True)]
            else:
                s_counts, t_counts = maybe_s, maybe_t
                keys = {**counts, **s_counts, **t_counts}.keys()
                tids = list(map(get_tid, keys))
                codes = list(counts.values())
                codes.extend([0] * (len(tids) - len(codes)))  # the terms in no content come last
                # Only the few terms of the summary or tags (or a spilling tf) need `_code`;
                # it runs in term order so the spill dict fills as `add` fills it.
                at = dict(zip(keys, range(len(tids)), strict=True))
                todo = {at[term] for term in s_counts.keys() | t_counts.keys()}
                if max(codes) >= _SPILL:
                    todo.update(i for i, tf in enumerate(codes) if tf >= _SPILL)
                names_of = list(keys)
                for i in sorted(todo):
                    term = names_of[i]
                    codes[i] = self._code(tids[i], d, counts[term], s_counts[term], t_counts[term])
            all_tids.extend(tids)
            all_codes.extend(codes)
            doc_lens.append(len(tids))
            terms_out.append(keys)
            tids.sort()
            self._doc_terms.append(array("I", tids))
            for field, n in ((self._summary, n_summary), (self._tags, n_tags)):
                field.lens.append(n)
                field.total += n
            self._dl.append(float(n_body))
            self._total_len += n_body
        self._post_many(first, all_tids, all_codes, doc_lens)
        for k, (doc_id, *_) in enumerate(docs):
            self._ids[doc_id] = first + k
            self._ext.append(doc_id)
        self._last = (docs[-1][0], terms_out[-1])
        self._settle_if_due()
        return terms_out

    def _post_many(self, first: int, tids: array[int], codes: array[int], doc_lens: list[int]) -> None:
        """Append the postings of documents first, first + 1, ... (`doc_lens[k]` (term id,
        code) pairs each, in `tids`/`codes`): grouped by term, in document order within each."""
        import numpy as np

        if not tids:
            return
        tid_np = np.frombuffer(tids, dtype=np.uint32)
        docs = np.repeat(np.arange(first, first + len(doc_lens), dtype=np.uint32), doc_lens)
        entries = docs << np.uint32(_TF_BITS) | np.frombuffer(codes, dtype=np.uint32)
        order = np.argsort(tid_np, kind="stable")  # stable: each term's documents stay ascending
        sorted_tids = tid_np[order]
        entries = entries[order]
        starts = np.flatnonzero(np.concatenate(([True], sorted_tids[1:] != sorted_tids[:-1])))
        bounds = np.append(starts, len(sorted_tids))
        uniq = sorted_tids[starts]
        df = np.frombuffer(self._df, dtype=np.uint32)
        df[uniq] += np.diff(bounds).astype(np.uint32)
        del df
        self._post.extend_each(uniq.tolist(), memoryview(entries.tobytes()), (bounds * 4).tolist())

    def _settle_if_due(self) -> None:
        """`settle` once the terms waiting for it are a share of the settled ones (INDEX_SETTLE_*)."""
        if self._vocab.unsettled > max(INDEX_SETTLE_MIN, self._vocab.settled // INDEX_SETTLE_SHARE):
            self.settle()

    def settle(self) -> None:
        """Merge the terms and postings written since the last settle into the flat arrays
        (see `Vocab` and `_Postings`). Changes no result; done by itself as terms accumulate."""
        import numpy as np

        self._post.settle()
        self._vocab.own(unmapped)
        self._vocab.settle(np.frombuffer(self._df, dtype=np.uint32) > 0)
        self._doc_terms.fold()

    def _code(self, tid: int, d: int, tf: int, s_tf: int, t_tf: int) -> int:
        """The code byte for these frequencies; spilled ones are recorded in the spill dict."""
        if not (s_tf or t_tf) and tf < _SPILL:
            return tf
        if (s_tf or t_tf) and tf < 8 and s_tf < 4 and t_tf < 4:  # 3, 2 and 2 bits
            return _PACKED | tf << 4 | s_tf << 2 | t_tf
        self._spill.setdefault(tid, {})[d] = (tf, s_tf, t_tf)
        return _SPILL

    def _freqs(self, tid: int, d: int, code: int) -> tuple[int, int, int]:
        """(content, summary, tags) frequencies of a posting; a spilled one leaves the spill dict."""
        if code < _SPILL:
            return code, 0, 0
        if code == _SPILL:
            spilled = self._spill[tid]
            freqs = spilled.pop(d)
            if not spilled:
                del self._spill[tid]
            return freqs
        return code >> 4 & 7, code >> 2 & 3, code & 3

    def _free_term(self, tid: int) -> None:
        self._post[tid] = array("I")
        self._vocab.release(tid)
        self._free_terms.append(tid)

    def _new_terms(self, terms: list[str]) -> list[int]:
        """`_new_term` of each term in order; the ids past the end are made in one step."""
        free = self._free_terms
        tids = [free.pop() for _ in range(min(len(free), len(terms)))]
        first = len(self._vocab)
        tids.extend(range(first, first + len(terms) - len(tids)))
        assign = self._vocab.assign
        for term, tid in zip(terms, tids, strict=True):
            assign(term, tid)
        grown = len(self._vocab) - first
        self._post.grow(grown)
        self._df.frombytes(bytes(4 * grown))
        return tids

    def _new_term(self, term: str) -> int:
        if self._free_terms:
            tid = self._free_terms.pop()
        else:
            tid = len(self._vocab)
            self._post.append(array("I"))
            self._df.append(0)
        self._vocab.assign(term, tid)
        return tid

    def remove(self, doc_id: str) -> None:
        """Drop a document; KeyError when absent."""
        d = self._ids.pop(doc_id)
        self._last = None
        tids = self._doc_terms[d]
        assert tids is not None
        self._doc_terms[d] = None
        self._ext[d] = None
        self._total_len -= int(self._dl[d])
        self._dl[d] = _DEAD
        for field in (self._summary, self._tags):
            field.total -= field.lens[d]
        df, post, spill = self._df, self._post, self._spill
        for tid in tids:
            if spill:
                spilled = spill.get(tid)
                if spilled is not None and spilled.pop(d, None) is not None and not spilled:
                    del spill[tid]
            left = df[tid] - 1
            df[tid] = left
            if left == 0:
                self._free_term(tid)
            elif post.length(tid) > 2 * left + _COMPACT_SLACK:
                dl = self._dl
                post[tid] = array("I", [e for e in post[tid] if dl[e >> _TF_BITS] >= 0])

    def retag(self, doc_id: str, old_tags: Sequence[str], tags: Sequence[str]) -> None:
        """Replace only a document's tags (`old_tags` must be what it was indexed with). Unlike
        `update` the document keeps its place and its content is not re-tokenised: merging
        near-duplicates re-tags survivors, and re-reading their bodies for it was most of a
        compaction's indexing cost."""
        d = self._ids[doc_id]
        self._last = None
        old_terms, n_old = _tag_field(old_tags)
        new_terms, n_new = _tag_field(tags)
        old, new = Counter(old_terms), Counter(new_terms)
        if old == new:
            return
        doc_terms = self._doc_terms.writable(d)
        assert doc_terms is not None
        post, df = self._post, self._df
        changed = sorted(old.keys() | new.keys())
        for term, found in zip(changed, self._vocab.lookup(changed), strict=True):
            t_tf = new.get(term, 0)
            tid = found
            if tid < 0:
                if not t_tf:
                    continue
                tid = self._new_term(term)
            p = post.writable(tid)
            i = bisect_left(p, d << _TF_BITS)
            if i < len(p) and p[i] >> _TF_BITS == d:
                tf, s_tf, _ = self._freqs(tid, d, p[i] & _CODE_MASK)
                if tf or s_tf or t_tf:
                    p[i] = d << _TF_BITS | self._code(tid, d, tf, s_tf, t_tf)
                    continue
                del p[i]
                del doc_terms[bisect_left(doc_terms, tid)]
                df[tid] -= 1
                if df[tid] == 0:
                    self._free_term(tid)
            elif t_tf:
                p.insert(i, d << _TF_BITS | self._code(tid, d, 0, 0, t_tf))
                doc_terms.insert(bisect_left(doc_terms, tid), tid)
                df[tid] += 1
        self._tags.lens[d] = n_new
        self._tags.total += n_new - n_old

    def update(self, doc_id: str, content: str, summary: str | None = None, tags: Sequence[str] = ()) -> None:
        """Replace a document (it becomes the newest); KeyError when absent."""
        self.remove(doc_id)
        self.add(doc_id, content, summary, tags)

    def _renumber(self) -> None:
        """Give live documents dense ids again, once 2**24 adds have used the id space up."""
        new_of = {old: new for new, old in enumerate(d for d, e in enumerate(self._ext) if e is not None)}
        renumbered = _Postings()
        for p in self._post:
            renumbered.append(
                array("I", [new_of[e >> _TF_BITS] << _TF_BITS | e & _CODE_MASK for e in p if e >> _TF_BITS in new_of])
            )
        self._post = renumbered
        self._spill = {tid: {new_of[d]: v for d, v in m.items()} for tid, m in self._spill.items()}
        for field in (self._summary, self._tags):
            field.lens = array("I", [field.lens[d] for d in new_of])
        self._ext = [self._ext[d] for d in new_of]
        renumbered_terms = _DocTerms()
        for d in new_of:
            terms = self._doc_terms[d]
            assert terms is not None
            renumbered_terms.append(array("I", terms))
        self._doc_terms = renumbered_terms
        self._dl = array("d", [self._dl[d] for d in new_of])
        self._ids = {e: d for d, e in enumerate(self._ext) if e is not None}

    # --- reads -----------------------------------------------------------------------------

    def terms(self, doc_id: str) -> frozenset[str]:
        """The document's distinct terms over all fields; KeyError when absent."""
        last = self._last
        if last is not None and last[0] == doc_id:
            return frozenset(last[1])
        tids = self._doc_terms[self._ids[doc_id]]
        assert tids is not None
        name = self._vocab.name
        return frozenset(name(t) for t in tids)

    def term_ids(self, doc_id: str) -> frozenset[int]:
        """`terms` as ids, without naming them: enough to compare documents of this index (an id
        stands for one term while both are live), and far cheaper; KeyError when absent."""
        tids = self._doc_terms[self._ids[doc_id]]
        assert tids is not None
        return frozenset(tids)

    def search(
        self,
        query: str,
        limit: int = 10,
        accept: Callable[[str], bool] | None = None,
        *,
        with_matched: bool = True,
        weights: Weights = WEIGHTS,
        terms_out: list[tuple[str, int]] | None = None,
    ) -> list[IndexHit]:
        """Top `limit` documents by score (ties: newest first); `accept` filters candidates only.
        `with_matched=False` leaves `matched` empty, for callers that keep only some hits
        (`matched_terms` then names them for those, given the query's terms in `terms_out`)."""
        if limit <= 0:
            return []
        ok = _Acceptance(self._ext, accept)
        found, weighted = self._weigh(query, ok, weights)
        if terms_out is not None:
            terms_out.extend(found)
        if sum(self._post.length(tid) for _, tid in weighted) >= _DENSE_MIN_POSTINGS:
            ranked = _dense_top(self, weighted, limit, ok, weights)
        else:
            acc = accumulate(self, weighted, limit, ok, weights)
            ranked = _best(acc, limit) if accept is None else ok.top(acc, limit)
        hits: list[IndexHit] = []
        for score, d in ranked:
            doc_id = self._ext[d]
            assert doc_id is not None
            hits.append(IndexHit(doc_id, score, self._matched(d, found) if with_matched else ()))
        return hits

    def matched_terms(
        self,
        doc_ids: Sequence[str],
        query: str,
        accept: Callable[[str], bool] | None = None,
        *,
        weights: Weights = WEIGHTS,
        terms: Sequence[tuple[str, int]] | None = None,
    ) -> list[tuple[str, ...]]:
        """For each document, the query's terms it contains (in query order), as `search` with
        the same `accept` and `weights` gives; `terms`: what that search put in `terms_out`
        (the query is not weighed again)."""
        found = terms if terms is not None else self._weigh(query, _Acceptance(self._ext, accept), weights)[0]
        return [self._matched(self._ids[doc_id], found) for doc_id in doc_ids]

    def search_scores(
        self, query: str, accept: Callable[[str], bool] | None = None, *, weights: Weights = WEIGHTS
    ) -> dict[str, tuple[float, tuple[str, ...]]]:
        """BM25 score and matched terms of every candidate, for callers that mix in other signals."""
        found, weighted = self._weigh(query, _Acceptance(self._ext, accept), weights)
        acc = accumulate(self, weighted, None, _Acceptance(self._ext, None), weights)
        out: dict[str, tuple[float, tuple[str, ...]]] = {}
        for d, score in acc.items():
            doc_id = self._ext[d]
            assert doc_id is not None
            if accept is None or accept(doc_id):
                out[doc_id] = (score, self._matched(d, found))
        return out

    def score_docs(
        self,
        query: str,
        doc_ids: Sequence[str],
        accept: Callable[[str], bool] | None = None,
        *,
        weights: Weights = WEIGHTS,
    ) -> list[IndexHit]:
        """The scores `search` with the same `accept` would give these documents (those matching
        a term), by bisection into the query's postings: for callers that add candidates of
        their own."""
        _, weighted = self._weigh(query, _Acceptance(self._ext, accept), weights)
        acc = {self._ids[i]: 0.0 for i in doc_ids if i in self._ids}
        scorer = _Scorer(self, len(self._ids), weights)
        for w, tid in weighted:
            scorer.refine(acc, w, tid)
        return [IndexHit(doc_id, score, ()) for d, score in acc.items() if score > 0.0 and (doc_id := self._ext[d])]

    def _weigh(
        self, query: str, ok: _Acceptance, weights: Weights
    ) -> tuple[list[tuple[str, int]], list[tuple[float, int]]]:
        """The query's indexed terms as (term, id), and as (idf * (k1 + 1), id) rarest first,
        with the other words of those no document `ok` accepts holds (`_other_words`)."""
        n = len(self._ids)
        found: list[tuple[str, int]] = []
        weighted: list[tuple[float, int]] = []
        if n == 0:
            return found, weighted
        df = self._df
        terms = query_terms(query)
        tids = self._vocab.lookup(terms)
        tid_of = dict(zip(terms, tids, strict=True))
        held = lambda word: self._held(tid_of.get(word, -1), ok)  # noqa: E731
        stems = query_stems(query) if weights.stem > 0 else []
        other = _other_words(query, terms, held) if weights.other_word > 0 else []
        # A word of prose matched as written weighs `exact`, its stem term `stem` more; a word that
        # is its own stem has no stem term in the notes holding it, so it weighs both itself.
        as_written = {
            word: weights.exact + (weights.stem if variants == [STEM_MARK + word] else 0.0) for word, variants in stems
        }
        # An other word of the same stem as a query word ("deployment" for "deploy") is found by
        # that stem term as well: it adds only what an other word weighs beyond a stem match. (A
        # word that is its own stem, "deploy" for "deployment", has no stem term to share.)
        roots = {variants[0][len(STEM_MARK) :] for _, variants in stems}
        beyond_stem = max(weights.other_word - weights.stem, 0.0)
        for k, (term, tid) in enumerate(zip(terms + other, tids + self._vocab.lookup(other), strict=True)):
            if tid >= 0 and df[tid]:
                found.append((term, tid))
                f = df[tid]
                w = math.log(1.0 + (n - f + 0.5) / (f + 0.5)) * (weights.k1 + 1.0)
                if k >= len(terms):
                    shared = roots and (root := stem(term)) != term and root in roots
                    w *= beyond_stem if shared else weights.other_word
                else:
                    w *= as_written.get(term, 1.0)
                weighted.append((w, tid))
        if stems:
            self._weigh_stems(stems, set(terms).union(other), tid_of, found, weighted, weights)
        # Rarest first; a stable sort keeps query order among equal weights (determinism).
        weighted.sort(key=itemgetter(0), reverse=True)
        return found, weighted

    def _weigh_stems(
        self,
        stems: list[tuple[str, list[str]]],
        have: set[str],
        tid_of: dict[str, int],
        found: list[tuple[str, int]],
        weighted: list[tuple[float, int]],
        weights: Weights,
    ) -> None:
        """Add the terms that find the other forms of the query's words of prose (`query_stems`)
        to `found` and `weighted`: each at `weights.stem` of the idf of the word's whole family
        (the word, its stem term and its stem as a word: the most common of them), so a document
        holding another form never gains more from it than the stem term gives the document
        holding the word itself, whatever the weights."""
        n, df = len(self._ids), self._df
        pairs = [(word, v) for word, variants in stems for v in variants if v not in have]
        if not pairs:
            return
        tids = self._vocab.lookup([v for _, v in pairs])
        family: dict[str, int] = {}  # word -> the df of its most common form
        for (word, _), tid in zip(pairs, tids, strict=True):
            exact = tid_of.get(word, -1)
            f = max(df[tid] if tid >= 0 else 0, df[exact] if exact >= 0 else 0)
            family[word] = max(family.get(word, 0), f)
        seen: set[int] = set()
        for (word, term), tid in zip(pairs, tids, strict=True):
            if tid < 0 or not df[tid] or tid in seen:
                continue
            seen.add(tid)
            f = family[word]
            w = math.log(1.0 + (n - f + 0.5) / (f + 0.5)) * (weights.k1 + 1.0) * weights.stem
            if not term.startswith(STEM_MARK):  # a stem term stands for forms the document may not show
                found.append((term, tid))
            weighted.append((w, tid))

    def _held(self, tid: int, ok: _Acceptance) -> bool:
        """Whether a document `ok` accepts holds term `tid`: another project's notes, or items a
        tag filter leaves out, do not keep a word from its other words. The newest
        HELD_SCAN_POSTINGS are asked; a term only older documents hold counts as not held."""
        if tid < 0 or not self._df[tid]:
            return False
        if ok.unfiltered:
            return True
        post = self._post[tid]
        newest = range(len(post) - 1, max(len(post) - 1 - HELD_SCAN_POSTINGS, -1), -1)
        return any(ok(post[i] >> _TF_BITS) for i in newest)

    def _matched(self, d: int, found: Sequence[tuple[str, int]]) -> tuple[str, ...]:
        tids = self._doc_terms[d]
        assert tids is not None
        out: dict[str, None] = {}
        for term, tid in found:
            i = bisect_left(tids, tid)
            if i < len(tids) and tids[i] == tid:
                out[term] = None
        return tuple(out)

    # --- persistence -----------------------------------------------------------------------

    def to_state(self, *, binary: bool = False) -> dict[str, Any]:
        """Everything needed to restore without re-tokenising, as str/int/list (orjson-ready).

        O(index size); arrays travel as base64 of their native bytes, or with `binary` as the
        bytes themselves (memoryviews, valid until the index changes). Field weights are not
        part of it: they apply at query time.
        """
        import numpy as np

        doc_terms, doc_terms_lens = self._doc_terms.flat()
        self._post.settle()
        self._vocab.own(unmapped)
        vocab = self._vocab.to_state(np.frombuffer(self._df, dtype=np.uint32) > 0)
        return {
            "format": _STATE_FORMAT,
            "terms": self.terms_version,
            "byteorder": sys.byteorder,
            **{f"vocab_{key}": _enc(value, binary) for key, value in vocab.items()},
            "df": _enc(self._df, binary),
            "post_lens": _enc(self._post.settled_lens(), binary),
            "post_starts": _enc(self._post.starts, binary),
            "post": _enc(self._post.flat, binary),
            "spill": [[tid, d, *tfs] for tid, m in self._spill.items() for d, tfs in m.items()],
            "summary_lens": _enc(self._summary.lens, binary),
            "tag_lens": _enc(self._tags.lens, binary),
            "ext": list(self._ext),
            "doc_terms_lens": _enc(doc_terms_lens, binary),
            "doc_terms": _enc(memoryview(doc_terms), binary),
            "dl": _enc(self._dl, binary),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BM25Index:
        """Inverse of `to_state`; ValueError if the state has another format or is inconsistent."""
        import numpy as np

        if state.get("format") != _STATE_FORMAT:
            raise ValueError(f"unknown index state format {state.get('format')!r}")
        terms = saved_terms_version(state)
        if terms not in _KNOWN_TERMS:
            raise ValueError(f"its terms were made by tokenizer version {terms!r}; this one makes {TERMS_VERSION}")
        swap = state["byteorder"] != sys.byteorder
        self = cls()
        # Arrays derived from the others, saved so that a start need not compute them; a state
        # without them (PostgreSQL's, an older file, another byte order) computes them.
        derived = not swap and all(key in state for key in DERIVED_ARRAYS)
        self._vocab = Vocab.from_state(
            _raw(state["vocab_blob"]),
            _in_place(state["vocab_lens"], swap),
            _in_place(state["vocab_hashes"], swap),
            VOCAB_HOT_TERMS,
            (_raw(state["vocab_starts"]), _raw(state["vocab_order"]), _raw(state["vocab_sorted"])) if derived else None,
        )
        self._df = _unb64(state["df"], "I", swap)
        if derived:
            starts = _in_place_starts(state["post_starts"], len(self._vocab) + 1)
            self._post = _Postings(_in_place(state["post"], swap), starts=starts)
        else:
            self._post = _Postings(_in_place(state["post"], swap), _unb64(state["post_lens"], "Q", swap))
        for tid, d, tf, s_tf, t_tf in state["spill"]:
            self._spill.setdefault(int(tid), {})[int(d)] = (int(tf), int(s_tf), int(t_tf))
        self._ext = list(state["ext"])
        self._dl = _unb64(state["dl"], "d", swap)
        self._summary.lens = _unb64(state["summary_lens"], "I", swap)
        self._tags.lens = _unb64(state["tag_lens"], "I", swap)
        doc_terms = _DocTerms(_in_place(state["doc_terms"], swap), _unb64(state["doc_terms_lens"], "Q", swap))
        if not len(self._vocab) == len(self._df) == len(self._post):
            raise ValueError("index state is inconsistent: term tables differ in length")
        if not len(self._ext) == len(self._dl) == len(doc_terms) == len(self._summary.lens) == len(self._tags.lens):
            raise ValueError("index state is inconsistent: document tables differ in length")
        self._ids = {e: d for d, e in enumerate(self._ext) if e is not None}
        if len(self._ids) < len(self._ext):
            for d, e in enumerate(self._ext):
                if e is None:
                    doc_terms[d] = None
        self._doc_terms = doc_terms
        self._free_terms = self._vocab.free_ids()
        self.terms_version = terms
        # Totals over the live documents (length >= 0), in numpy: at 100k documents the
        # Python sums were ~30 ms of a start. Lengths are whole numbers, exact as doubles.
        dl = np.frombuffer(self._dl, dtype=np.float64)
        live = dl >= 0
        self._total_len = int(dl[live].sum())
        for field in (self._summary, self._tags):
            field.total = int(np.frombuffer(field.lens, dtype=np.uint32)[live].sum(dtype=np.int64))
        return self

    def holds_all(self, doc_ids: Iterable[str]) -> bool:
        """Whether every one of `doc_ids` is indexed."""
        return all(map(self._ids.__contains__, doc_ids))


def _field(text: str) -> tuple[list[str], int]:
    """A field's terms (stem terms among them) and its length in words (`index_tokens`)."""
    terms, extra = index_tokens(text)
    return terms, len(terms) - extra


def _tag_field(tags: Sequence[str]) -> tuple[list[str], int]:
    terms: list[str] = []
    length = 0
    for tag in tags:
        some, n = _field(tag)
        terms.extend(some)
        length += n
    return terms, length


def _other_words(query: str, terms: Collection[str], held: Callable[[str], bool]) -> list[str]:
    """Words to search beside the query's own `terms`, for each of its first EXPANDED_WORDS
    words that stand on their own and that no document the query may find holds (`held` is
    false): its synonyms, other English forms and derived nouns or verbs (`wordforms.other_words`:
    "database" for "db", "pool" for "pools", "deployment" for "deploy"). A word documents hold
    keeps to itself: its other words would add the many documents of a common word ("models"
    for "modeling") to a query already answered."""
    out: dict[str, None] = {}
    for word in query_words(query, EXPANDED_WORDS):
        if not held(word):
            out.update(dict.fromkeys(other_words(word)))
    if not out:
        return []
    have = set(terms)  # a long query has thousands of terms
    return [word for word in out if word not in have]
