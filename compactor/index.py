"""Incremental Okapi BM25 (BM25F-style field weights) over the memory's items.

Layout, chosen for memory at ~100k documents, where postings dominate everything else:

- terms and documents get dense int ids (a document gets a new one on every add, so ids also
  give insertion order, and each term's postings stay sorted by document);
- a posting is ONE uint32, ``doc << 8 | tf_units`` (tf_units >= 255 spill into a side dict),
  in one ``array('I')`` per term: 4 bytes instead of a dict entry's ~100, and sorted, so a
  single document can be found in it by bisection;
- each document keeps the sorted ids of its distinct terms: that is what removal, ``terms()``
  and the matched-terms report need;
- removal is lazy: the document's length becomes -1 and document frequencies drop at once (so
  scores stay exact); a term's postings are compacted only when dead ones outnumber live ones,
  so removal is amortised O(terms of the document) and nothing ever walks all documents.

Field weights are applied in integer units of ``1/TF_SCALE``, so frequencies and lengths are
exact integers: running totals never drift and an index built incrementally scores bit for bit
like one rebuilt from scratch.

Queries are scored term at a time, rarest term first. Once the k-th best partial score beats
the most that the remaining (common) terms could still add, no unseen document can enter the
top k, so the common terms only update the candidates already found (by bisection) instead of
having their long postings scanned. This is the "MaxScore" idea of Turtle & Flood (1995); the
result is the same top k as a full evaluation.
"""

from __future__ import annotations

import base64
import heapq
import math
import sys
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, Final, NamedTuple

from compactor.analyze import query_terms, tokenize

# --- tuning constants (lead: move to compactor/constants.py) --------------------------------
# Okapi defaults from Robertson & Zaragoza, "The Probabilistic Relevance Framework" (2009).
BM25_K1: Final = 1.2
BM25_B: Final = 0.75
# A summary is a distilled restatement of the content and tags are chosen by the agent on
# purpose, so a match there says more than one in the body (BM25F-style field weighting).
SUMMARY_WEIGHT: Final = 1.5
TAG_WEIGHT: Final = 3.0
# Field weights are applied in units of 1/TF_SCALE (4 represents 1.5 and 3.0 exactly); a
# posting holds up to 254 units inline, i.e. a content tf of 63.
TF_SCALE: Final = 4
# A term's postings are compacted once dead postings outnumber live ones by this slack.
_COMPACT_SLACK: Final = 8
# Pruning costs a pass over the candidates; try it only when the next term's postings are
# clearly longer than that pass.
_PRUNE_MIN_POSTINGS: Final = 256
# Bisecting one candidate into a long postings array costs about this many scanned postings.
_BISECT_COST: Final = 16
# With a filter, look this many times `limit` candidates deep before sorting them all.
_ACCEPT_OVERFETCH: Final = 4
# Float slack for the pruning bound (the bound itself is exact in real arithmetic).
_BOUND_SLACK: Final = 1e-9
# ---------------------------------------------------------------------------------------------

_STATE_FORMAT: Final = 1
_SUMMARY_UNITS: Final = round(SUMMARY_WEIGHT * TF_SCALE)
_TAG_UNITS: Final = round(TAG_WEIGHT * TF_SCALE)
_TF_BITS: Final = 8
_TF_MASK: Final = (1 << _TF_BITS) - 1  # this value in a posting means "see self._big_tf"
_DOC_LIMIT: Final = 1 << (32 - _TF_BITS)
_DEAD: Final = -1.0

if array("I").itemsize != 4:  # pragma: no cover - every CPython platform we target has it
    raise ImportError("compactor.index needs a 4-byte array('I')")


class Hit(NamedTuple):
    doc_id: str
    score: float
    matched: tuple[str, ...]


def _b64(data: array[int] | array[float]) -> str:
    return base64.b64encode(data.tobytes()).decode("ascii")


def _unb64(text: str, typecode: str, swap: bool) -> array[Any]:
    out: array[Any] = array(typecode)
    out.frombytes(base64.b64decode(text))
    if swap:
        out.byteswap()
    return out


def _split(flat: array[int], lens: array[int]) -> list[array[int]]:
    out: list[array[int]] = []
    start = 0
    for n in lens:
        out.append(flat[start : start + n])
        start += n
    return out


class BM25Index:
    """Okapi BM25 over content + summary + tags of documents keyed by str ids.

    Effective tf = tf_content + SUMMARY_WEIGHT*tf_summary + TAG_WEIGHT*tf_tags and the document
    length is weighted the same way; idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
    """

    def __init__(self) -> None:
        self._vocab: dict[str, int] = {}
        self._terms: list[str] = []  # term id -> term; "" marks a free id
        self._free_terms: list[int] = []
        self._df: array[int] = array("I")
        self._post: list[array[int]] = []  # term id -> sorted doc << 8 | tf_units
        self._big_tf: dict[int, dict[int, int]] = {}  # tid -> {doc: tf_units >= _TF_MASK}
        self._ids: dict[str, int] = {}
        self._ext: list[str | None] = []  # doc -> external id, None once removed
        self._doc_terms: list[array[int] | None] = []  # doc -> sorted distinct term ids
        self._dl: array[float] = array("d")  # doc -> length in tf units, _DEAD once removed
        self._total_len = 0  # sum of live lengths in tf units (an exact integer)

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
        """Mean weighted document length in tokens (0.0 when empty)."""
        n = len(self._ids)
        return self._total_len / TF_SCALE / n if n else 0.0

    # --- writes ----------------------------------------------------------------------------

    def add(self, doc_id: str, content: str, summary: str | None = None, tags: Sequence[str] = ()) -> None:
        if doc_id in self._ids:
            raise ValueError(f"document {doc_id!r} is already indexed")
        body = tokenize(content)
        units = {term: n * TF_SCALE for term, n in Counter(body).items()}
        length = len(body) * TF_SCALE
        if summary:
            length += _add_field(units, tokenize(summary), _SUMMARY_UNITS)
        if tags:
            length += _add_field(units, [t for tag in tags for t in tokenize(tag)], _TAG_UNITS)

        if len(self._ext) >= _DOC_LIMIT:
            self._renumber()
            if len(self._ext) >= _DOC_LIMIT:
                raise OverflowError(f"BM25Index holds at most {_DOC_LIMIT} documents")
        d = len(self._ext)
        vocab, post, df = self._vocab, self._post, self._df
        tids: list[int] = []
        for term, tf in units.items():
            tid = vocab.get(term)
            if tid is None:
                tid = self._new_term(term)
            if tf < _TF_MASK:
                post[tid].append(d << _TF_BITS | tf)
            else:
                self._big_tf.setdefault(tid, {})[d] = tf
                post[tid].append(d << _TF_BITS | _TF_MASK)
            df[tid] += 1
            tids.append(tid)
        tids.sort()
        self._ids[doc_id] = d
        self._ext.append(doc_id)
        self._doc_terms.append(array("I", tids))
        self._dl.append(float(length))
        self._total_len += length

    def _new_term(self, term: str) -> int:
        if self._free_terms:
            tid = self._free_terms.pop()
            self._terms[tid] = term
        else:
            tid = len(self._terms)
            self._terms.append(term)
            self._post.append(array("I"))
            self._df.append(0)
        self._vocab[term] = tid
        return tid

    def remove(self, doc_id: str) -> None:
        """Drop a document; KeyError when absent."""
        d = self._ids.pop(doc_id)
        tids = self._doc_terms[d]
        assert tids is not None
        self._doc_terms[d] = None
        self._ext[d] = None
        self._total_len -= int(self._dl[d])
        self._dl[d] = _DEAD
        df, post, big = self._df, self._post, self._big_tf
        for tid in tids:
            if big:
                spilled = big.get(tid)
                if spilled is not None and spilled.pop(d, None) is not None and not spilled:
                    del big[tid]
            left = df[tid] - 1
            df[tid] = left
            if left == 0:
                post[tid] = array("I")
                del self._vocab[self._terms[tid]]
                self._terms[tid] = ""
                self._free_terms.append(tid)
            elif len(post[tid]) > 2 * left + _COMPACT_SLACK:
                dl = self._dl
                post[tid] = array("I", [e for e in post[tid] if dl[e >> _TF_BITS] >= 0])

    def update(self, doc_id: str, content: str, summary: str | None = None, tags: Sequence[str] = ()) -> None:
        """Replace a document (it becomes the newest); KeyError when absent."""
        self.remove(doc_id)
        self.add(doc_id, content, summary, tags)

    def _renumber(self) -> None:
        """Give live documents dense ids again, once 2**24 adds have used the id space up."""
        new_of = {old: new for new, old in enumerate(d for d, e in enumerate(self._ext) if e is not None)}
        self._post = [
            array("I", [new_of[e >> _TF_BITS] << _TF_BITS | e & _TF_MASK for e in p if e >> _TF_BITS in new_of])
            for p in self._post
        ]
        self._big_tf = {tid: {new_of[d]: v for d, v in m.items()} for tid, m in self._big_tf.items()}
        self._ext = [self._ext[d] for d in new_of]
        self._doc_terms = [self._doc_terms[d] for d in new_of]
        self._dl = array("d", [self._dl[d] for d in new_of])
        self._ids = {e: d for d, e in enumerate(self._ext) if e is not None}

    # --- reads -----------------------------------------------------------------------------

    def terms(self, doc_id: str) -> frozenset[str]:
        """The document's distinct terms over all fields; KeyError when absent."""
        tids = self._doc_terms[self._ids[doc_id]]
        assert tids is not None
        names = self._terms
        return frozenset(names[t] for t in tids)

    def search(self, query: str, limit: int = 10, accept: Callable[[str], bool] | None = None) -> list[Hit]:
        """Top `limit` documents by score (ties: newest first); `accept` filters candidates only."""
        if limit <= 0:
            return []
        ok = _Acceptance(self._ext, accept)
        acc, found = self._accumulate(query, limit, ok)
        ranked = _best(acc, limit) if accept is None else ok.top(acc, limit)
        hits: list[Hit] = []
        for score, d in ranked:
            doc_id = self._ext[d]
            assert doc_id is not None
            hits.append(Hit(doc_id, score, self._matched(d, found)))
        return hits

    def search_scores(
        self, query: str, accept: Callable[[str], bool] | None = None
    ) -> dict[str, tuple[float, tuple[str, ...]]]:
        """BM25 score and matched terms of every candidate, for callers that mix in other signals."""
        acc, found = self._accumulate(query, None, _Acceptance(self._ext, None))
        out: dict[str, tuple[float, tuple[str, ...]]] = {}
        for d, score in acc.items():
            doc_id = self._ext[d]
            assert doc_id is not None
            if accept is None or accept(doc_id):
                out[doc_id] = (score, self._matched(d, found))
        return out

    def _accumulate(
        self, query: str, limit: int | None, ok: _Acceptance
    ) -> tuple[dict[int, float], list[tuple[str, int]]]:
        """Partial-or-full scores: exact for every document that can be in the top `limit`."""
        n = len(self._ids)
        acc: dict[int, float] = {}
        found: list[tuple[str, int]] = []
        if n == 0 or self._total_len == 0:
            return acc, found
        df = self._df
        weighted: list[tuple[float, int]] = []
        for term in query_terms(query):
            tid = self._vocab.get(term)
            if tid is not None:
                found.append((term, tid))
                f = df[tid]
                weighted.append((math.log(1.0 + (n - f + 0.5) / (f + 0.5)) * (BM25_K1 + 1.0), tid))
        # Rarest first; a stable sort keeps query order among equal weights (determinism).
        weighted.sort(key=itemgetter(0), reverse=True)
        # tf/(tf + k1*(1 - b + b*dl/avgdl)) is unchanged when tf and dl are both in tf units.
        c1 = TF_SCALE * BM25_K1 * (1.0 - BM25_B)
        c2 = TF_SCALE * BM25_K1 * BM25_B * n / self._total_len
        # The most the terms from position j on can still add to any one document.
        reach = [0.0] * (len(weighted) + 1)
        for j in range(len(weighted) - 1, -1, -1):
            reach[j] = reach[j + 1] + weighted[j][0]
        for j, (w, tid) in enumerate(weighted):
            p = self._post[tid]
            if limit is not None and j and len(p) > 2 * len(acc) + _PRUNE_MIN_POSTINGS:
                floor = ok.kth_score(acc, limit)
                if floor is not None and floor > reach[j] * (1.0 + _BOUND_SLACK):
                    cut = floor * (1.0 - _BOUND_SLACK) - reach[j]
                    acc = {d: s for d, s in acc.items() if s >= cut}
                    for w2, tid2 in weighted[j:]:
                        self._refine(acc, w2, tid2, c1, c2)
                    break
            self._scan(acc, w, tid, c1, c2)
        return acc, found

    def _scan(self, acc: dict[int, float], w: float, tid: int, c1: float, c2: float) -> None:
        # The hottest loop of a query: kept free of attribute lookups and of the spill check
        # unless this term has spilled frequencies.
        p, dl = self._post[tid], self._dl
        spilled = self._big_tf.get(tid)
        if spilled is not None:
            for e in p:
                d = e >> _TF_BITS
                length = dl[d]
                if length >= 0:
                    tf = e & _TF_MASK
                    if tf == _TF_MASK:
                        tf = spilled[d]
                    acc[d] = acc.get(d, 0.0) + w * tf / (tf + c1 + c2 * length)
        elif acc:
            get = acc.get
            for e in p:
                d = e >> _TF_BITS
                length = dl[d]
                if length >= 0:
                    tf = e & _TF_MASK
                    acc[d] = get(d, 0.0) + w * tf / (tf + c1 + c2 * length)
        else:
            for e in p:
                d = e >> _TF_BITS
                length = dl[d]
                if length >= 0:
                    tf = e & _TF_MASK
                    acc[d] = w * tf / (tf + c1 + c2 * length)

    def _refine(self, acc: dict[int, float], w: float, tid: int, c1: float, c2: float) -> None:
        """Add a term's contribution to the existing candidates only."""
        p, dl = self._post[tid], self._dl
        spilled = self._big_tf.get(tid, {})
        if len(acc) * _BISECT_COST < len(p):
            size = len(p)
            for d in acc:
                i = bisect_left(p, d << _TF_BITS)
                if i < size and p[i] >> _TF_BITS == d:
                    tf = p[i] & _TF_MASK
                    if tf == _TF_MASK:
                        tf = spilled[d]
                    acc[d] += w * tf / (tf + c1 + c2 * dl[d])
        else:
            for e in p:
                d = e >> _TF_BITS
                if d in acc:
                    tf = e & _TF_MASK
                    if tf == _TF_MASK:
                        tf = spilled[d]
                    acc[d] += w * tf / (tf + c1 + c2 * dl[d])

    def _matched(self, d: int, found: list[tuple[str, int]]) -> tuple[str, ...]:
        tids = self._doc_terms[d]
        assert tids is not None
        out: list[str] = []
        for term, tid in found:
            i = bisect_left(tids, tid)
            if i < len(tids) and tids[i] == tid:
                out.append(term)
        return tuple(out)

    # --- persistence -----------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """Everything needed to restore without re-tokenising, as str/int/list (orjson-ready).

        O(index size); arrays travel as base64 of their native bytes.
        """
        doc_terms = [t if t is not None else array("I") for t in self._doc_terms]
        return {
            "format": _STATE_FORMAT,
            "byteorder": sys.byteorder,
            "units": [TF_SCALE, _SUMMARY_UNITS, _TAG_UNITS],
            "terms": list(self._terms),
            "df": _b64(self._df),
            "post_lens": _b64(array("Q", map(len, self._post))),
            "post": base64.b64encode(b"".join(p.tobytes() for p in self._post)).decode("ascii"),
            "big_tf": [[tid, d, v] for tid, m in self._big_tf.items() for d, v in m.items()],
            "ext": list(self._ext),
            "doc_terms_lens": _b64(array("Q", map(len, doc_terms))),
            "doc_terms": base64.b64encode(b"".join(t.tobytes() for t in doc_terms)).decode("ascii"),
            "dl": _b64(self._dl),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> BM25Index:
        """Inverse of `to_state`; ValueError if the state has another format or field weights."""
        if state.get("format") != _STATE_FORMAT:
            raise ValueError(f"unknown index state format {state.get('format')!r}")
        if state["units"] != [TF_SCALE, _SUMMARY_UNITS, _TAG_UNITS]:
            raise ValueError("index state was built with other field weights; rebuild it")
        swap = state["byteorder"] != sys.byteorder
        self = cls()
        self._terms = list(state["terms"])
        self._df = _unb64(state["df"], "I", swap)
        self._post = _split(_unb64(state["post"], "I", swap), _unb64(state["post_lens"], "Q", swap))
        for tid, d, v in state["big_tf"]:
            self._big_tf.setdefault(int(tid), {})[int(d)] = int(v)
        self._ext = list(state["ext"])
        self._dl = _unb64(state["dl"], "d", swap)
        doc_terms = _split(_unb64(state["doc_terms"], "I", swap), _unb64(state["doc_terms_lens"], "Q", swap))
        if not len(self._terms) == len(self._df) == len(self._post):
            raise ValueError("index state is inconsistent: term tables differ in length")
        if not len(self._ext) == len(self._dl) == len(doc_terms):
            raise ValueError("index state is inconsistent: document tables differ in length")
        self._doc_terms = [t if e is not None else None for t, e in zip(doc_terms, self._ext, strict=True)]
        self._vocab = {t: i for i, t in enumerate(self._terms) if t}
        self._free_terms = [i for i, t in enumerate(self._terms) if not t]
        self._ids = {e: d for d, e in enumerate(self._ext) if e is not None}
        self._total_len = sum(int(x) for x in self._dl if x >= 0)
        return self


def _add_field(units: dict[str, int], tokens: list[str], weight: int) -> int:
    for term, n in Counter(tokens).items():
        units[term] = units.get(term, 0) + n * weight
    return len(tokens) * weight


class _Acceptance:
    """The caller's filter, asked at most once per document and only about candidates."""

    def __init__(self, ext: list[str | None], accept: Callable[[str], bool] | None) -> None:
        self._ext = ext
        self._accept = accept
        self._memo: dict[int, bool] = {}

    def __call__(self, d: int) -> bool:
        if self._accept is None:
            return True
        seen = self._memo.get(d)
        if seen is None:
            doc_id = self._ext[d]
            seen = doc_id is not None and self._accept(doc_id)
            self._memo[d] = seen
        return seen

    def top(self, acc: dict[int, float], limit: int) -> list[tuple[float, int]]:
        """The `limit` best accepted candidates as (score, doc), best first."""
        shallow = _best(acc, limit * _ACCEPT_OVERFETCH)
        kept = [pair for pair in shallow if self(pair[1])]
        if len(kept) >= limit or len(shallow) == len(acc):
            return kept[:limit]
        return [pair for pair in _best(acc, len(acc)) if self(pair[1])][:limit]

    def kth_score(self, acc: dict[int, float], limit: int) -> float | None:
        """Score of the `limit`-th best accepted candidate so far, None if too few are known."""
        if len(acc) < limit:
            return None
        if self._accept is None:
            return heapq.nlargest(limit, acc.values())[-1]
        kept = [s for s, d in _best(acc, limit * _ACCEPT_OVERFETCH) if self(d)]
        return kept[limit - 1] if len(kept) >= limit else None


def _best(acc: dict[int, float], n: int) -> list[tuple[float, int]]:
    """The n best (score, doc) pairs, best first; ties go to the newest (highest) doc."""
    if len(acc) > n:
        # A C-speed pass over bare floats finds the cut; only pairs above it are built.
        floor = heapq.nlargest(n, acc.values())[-1]
        pairs = [(s, d) for d, s in acc.items() if s >= floor]
    else:
        pairs = [(s, d) for d, s in acc.items()]
    pairs.sort(reverse=True)
    return pairs[:n]
