"""Top-k evaluation for the search index (`compactor.search.index`): a query's terms scored
into candidate documents, and the best `limit` of them picked, with the caller's filter asked
only about candidates. Also the posting's code byte, which the scoring decodes.

Queries are scored term at a time, rarest term first. Once the k-th best partial score beats
the most that the remaining (common) terms could still add, no unseen document can enter the
top k, so the common terms only update the candidates still in reach (by bisection) instead of
having their long postings scanned. This is the "MaxScore" idea of Turtle & Flood (1995); the
result is the same top k as a full evaluation. A query with long postings is scored with numpy
over all documents instead (`_dense_top`), to the same result.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

# Okapi's defaults (Robertson & Zaragoza, "The Probabilistic Relevance Framework", 2009).
BM25_K1: Final = 1.2
BM25_B: Final = 0.75
# A summary word counts as 5 body words: most of the replay's gain, and several body matches
# still outvote one summary word (evals/KNOBS.md).
SUMMARY_WEIGHT: Final = 5.0
# Tags are labels; 1 measured the same as 3 (evals/KNOBS.md).
TAG_WEIGHT: Final = 3.0
# Per-field length normalisation: a summary is text, so the usual b (0 measured worse,
# evals/KNOBS.md); a tag set is not text.
SUMMARY_B: Final = 0.75
TAG_B: Final = 0.0
# A query word no document holds is also searched as its other words (wordforms), each at this
# share of a term of its rarity: below 1 since a document may hold two of them (evals/KNOBS.md).
OTHER_WORD_WEIGHT: Final = 0.75
# A word of prose in a query is scored as written and as its stem: a note holding the word
# gains EXACT_WEIGHT + STEM_WEIGHT of its rarity (1, as any other term), a note holding only
# another form of it ("pooling" for "pools") STEM_WEIGHT. Tuned on the tuning halves
# (evals/KNOBS.md).
STEM_WEIGHT: Final = 0.6
EXACT_WEIGHT: Final = 0.4


@dataclass(frozen=True, slots=True)
class Weights:
    """BM25F's parameters for one query: the numbers above, unless an evaluation overrides them
    (`compactor.store.tuning.Tuning`). Given with the query, not kept in the index, so no saved
    or loaded index can hold stale ones."""

    k1: float = BM25_K1
    b: float = BM25_B
    summary: float = SUMMARY_WEIGHT
    tags: float = TAG_WEIGHT
    summary_b: float = SUMMARY_B
    tags_b: float = TAG_B
    other_word: float = OTHER_WORD_WEIGHT
    stem: float = STEM_WEIGHT
    exact: float = EXACT_WEIGHT


WEIGHTS: Final = Weights()


class _Index(Protocol):
    """What scoring reads of a `compactor.search.index.BM25Index` (which imports this module)."""

    _post: Any  # term id -> sorted postings (`compactor.search.postings._Postings`)
    _spill: dict[int, dict[int, tuple[int, int, int]]]
    _summary: Any  # the summary field: its b, per-document lengths and total
    _tags: Any
    _dl: array[float]
    _total_len: int
    _ext: list[str | None]
    _ids: dict[str, int]


# --- top-k's own tuning: how it scans postings, nothing a caller sees -------------------------
# Pruning costs a pass over the candidates; try it only when the postings still to scan are
# clearly longer than that pass.
_PRUNE_MIN_POSTINGS: Final = 256
# Bisecting one candidate into a long postings array costs about this many scanned postings.
_BISECT_COST: Final = 16
# With a filter, look this many times `limit` candidates deep before sorting them all.
_ACCEPT_OVERFETCH: Final = 4
# Float slack for the pruning bound (the bound itself is exact in real arithmetic).
_BOUND_SLACK: Final = 1e-9
# Documents per block when the dense path bounds its top-k from block maxima.
_TOP_BLOCK: Final = 256
# ---------------------------------------------------------------------------------------------

# A posting is `doc << _TF_BITS | code`.
_TF_BITS: Final = 8
_CODE_MASK: Final = (1 << _TF_BITS) - 1
# The code byte: below _SPILL a content-only tf; _SPILL: see the spill dict; from _PACKED on,
# content tf in bits 4-6, summary tf in bits 2-3, tags tf in bits 0-1.
_SPILL: Final = 0x7F
_PACKED: Final = 0x80


class _Scorer:
    """One query's view of the index: adds terms' contributions to candidate scores.

    Content-only postings add w * tf / (tf + c1 + c2 * dl), i.e. Okapi with k1 * B_content =
    c1 + c2 * dl. Postings with field frequencies add w * x / (x + k) with k = c1 + c2 * dl and
    x = tf + f * k / k1 (f the weighted, normalised field part of tf~): w * tf~ / (tf~ + k1)
    multiplied through by B_content. Every path uses the same arithmetic, so a score does not
    depend on whether it was reached by scanning or by bisection.
    """

    __slots__ = ("c1", "c2", "dl", "index", "k1", "s_lens", "s_norm", "sw", "t_lens", "t_norm", "tw")

    def __init__(self, index: _Index, n: int, weights: Weights) -> None:
        self.index = index
        self.dl = index._dl
        self.k1, self.sw, self.tw = weights.k1, weights.summary, weights.tags
        self.c1 = weights.k1 * (1.0 - weights.b)
        self.c2 = weights.k1 * weights.b * n / index._total_len if index._total_len else 0.0
        self.s_lens, self.t_lens = index._summary.lens, index._tags.lens
        self.s_norm, self.t_norm = index._summary.norm(n, weights.summary_b), index._tags.norm(n, weights.tags_b)

    def scan(self, acc: dict[int, float], w: float, tid: int) -> None:
        """Add the term's contribution to every document that has it."""
        # The hottest loop of a query: kept free of attribute lookups, and content-only
        # postings take a single comparison on top of the Okapi arithmetic.
        p, dl, c1, c2 = self.index._post[tid], self.dl, self.c1, self.c2
        (s1, s2), (t1, t2), s_lens, t_lens = self.s_norm, self.t_norm, self.s_lens, self.t_lens
        sw, tw, k1 = self.sw, self.tw, self.k1
        get = acc.get
        for e in p:
            d = e >> _TF_BITS
            length = dl[d]
            if length < 0:
                continue
            tf = e & _CODE_MASK
            if tf < _SPILL:
                acc[d] = get(d, 0.0) + w * tf / (tf + c1 + c2 * length)
            elif tf == _SPILL:
                acc[d] = get(d, 0.0) + self.posting(w, tid, d, tf, length)
            else:  # packed (the term is in the summary or tags too), inlined: it is common
                s_tf, t_tf, tf = tf >> 2 & 3, tf & 3, tf >> 4 & 7
                f = 0.0
                if s_tf:
                    f += sw * s_tf / (s1 + s2 * s_lens[d])
                if t_tf:
                    f += tw * t_tf / (t1 + t2 * t_lens[d])
                k = c1 + c2 * length
                x = tf + f * k / k1
                acc[d] = get(d, 0.0) + w * x / (x + k)

    def refine(self, acc: dict[int, float], w: float, tid: int) -> None:
        """Add the term's contribution to the existing candidates only."""
        p, dl, c1, c2 = self.index._post[tid], self.dl, self.c1, self.c2
        if len(acc) * _BISECT_COST < len(p):
            size = len(p)
            for d in acc:
                i = bisect_left(p, d << _TF_BITS)
                if i < size and p[i] >> _TF_BITS == d:
                    tf = p[i] & _CODE_MASK
                    if tf < _SPILL:
                        acc[d] += w * tf / (tf + c1 + c2 * dl[d])
                    else:
                        acc[d] += self.posting(w, tid, d, tf, dl[d])
        else:
            # Only candidates are touched here, so packed postings need not be inlined as in `scan`.
            for e in p:
                d = e >> _TF_BITS
                if d in acc:
                    tf = e & _CODE_MASK
                    if tf < _SPILL:
                        acc[d] += w * tf / (tf + c1 + c2 * dl[d])
                    else:
                        acc[d] += self.posting(w, tid, d, tf, dl[d])

    def posting(self, w: float, tid: int, d: int, code: int, length: float) -> float:
        """What a spilled or packed posting adds."""
        if code == _SPILL:
            tf, s_tf, t_tf = self.index._spill[tid][d]
        else:
            tf, s_tf, t_tf = code >> 4 & 7, code >> 2 & 3, code & 3
        c1, c2 = self.c1, self.c2
        if not (s_tf or t_tf):
            return w * tf / (tf + c1 + c2 * length)
        f = 0.0
        if s_tf:
            f1, f2 = self.s_norm
            f += self.sw * s_tf / (f1 + f2 * self.s_lens[d])
        if t_tf:
            f1, f2 = self.t_norm
            f += self.tw * t_tf / (f1 + f2 * self.t_lens[d])
        k = c1 + c2 * length
        x = tf + f * k / self.k1
        return w * x / (x + k)


class _Acceptance:
    """The caller's filter, asked at most once per document and only about candidates."""

    def __init__(self, ext: list[str | None], accept: Callable[[str], bool] | None) -> None:
        self._ext = ext
        self._accept = accept
        self._memo: dict[int, bool] = {}

    @property
    def unfiltered(self) -> bool:
        return self._accept is None

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
        return self.pick(lambda n: _best(acc, n), len(acc), limit)

    def pick(self, best: Callable[[int], list[tuple[float, int]]], total: int, limit: int) -> list[tuple[float, int]]:
        """The `limit` best accepted of `total` candidates, `best(n)` giving the n best: a few
        times `limit` deep first, all of them only if too few of those are accepted."""
        shallow = best(limit * _ACCEPT_OVERFETCH)
        kept = self.take(shallow, limit)
        if len(kept) >= limit or len(shallow) == total:
            return kept
        return self.take(best(total), limit)

    def take(self, ranked: list[tuple[float, int]], limit: int) -> list[tuple[float, int]]:
        """The first `limit` accepted pairs of `ranked`, asking about no more than it takes."""
        kept: list[tuple[float, int]] = []
        for pair in ranked:
            if self(pair[1]):
                kept.append(pair)
                if len(kept) == limit:
                    break
        return kept

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


def _dense_top(
    index: _Index, weighted: list[tuple[float, int]], limit: int, ok: _Acceptance, weights: Weights
) -> list[tuple[float, int]]:
    """The `limit` best accepted (score, doc) pairs, best first, ties to the newest: the same
    result and the same floating-point arithmetic, term by term in the same order, as scanning
    in Python, done with numpy over every posting of the query's terms (no pruning needed)."""
    import numpy as np  # here: only a query with long postings pays for importing numpy

    n = len(index._ids)
    sc = _Scorer(index, n, weights)
    scores = np.zeros(len(index._ext))
    dl = np.frombuffer(index._dl, dtype=np.float64)
    s_lens = np.frombuffer(index._summary.lens, dtype=np.uint32)
    t_lens = np.frombuffer(index._tags.lens, dtype=np.uint32)
    (s1, s2), (t1, t2) = sc.s_norm, sc.t_norm
    for w, tid in weighted:
        p = np.frombuffer(index._post[tid], dtype=np.uint32)
        d = (p >> _TF_BITS).astype(np.intp)
        code = p & _CODE_MASK
        length = dl[d]
        live = length >= 0
        if not live.all():
            d, code, length = d[live], code[live], length[live]
        tf = code.astype(np.float64)
        contrib = w * tf / (tf + sc.c1 + sc.c2 * length)
        other = np.flatnonzero(code >= _SPILL)
        if len(other):
            oc, od, ol = code[other], d[other], length[other]
            packed = oc > _SPILL
            pc, pd, pl = oc[packed], od[packed], ol[packed]
            s_tf = ((pc >> 2) & 3).astype(np.float64)
            t_tf = (pc & 3).astype(np.float64)
            ptf = ((pc >> 4) & 7).astype(np.float64)
            f = np.where(s_tf > 0, sc.sw * s_tf / (s1 + s2 * s_lens[pd]), 0.0)
            f = f + np.where(t_tf > 0, sc.tw * t_tf / (t1 + t2 * t_lens[pd]), 0.0)
            k = sc.c1 + sc.c2 * pl
            x = ptf + f * k / sc.k1
            contrib[other[packed]] = w * x / (x + k)
            for i in other[~packed].tolist():  # spilled: rare, looked up one by one
                contrib[i] = sc.posting(w, tid, int(d[i]), _SPILL, float(length[i]))
        np.add.at(scores, d, contrib)

    def best(m: int) -> list[tuple[float, int]]:
        blocks = len(scores) // _TOP_BLOCK
        low = 0.0
        if blocks >= m:
            # The m-th largest block maximum is at most the m-th largest score (each of those m
            # blocks holds a score at least that high), so the top m are among the scores at or
            # above it: a cheap comparison pass instead of listing every nonzero score (the
            # scores' scattered zeros make that pass ~0.7 ms at 100k documents).
            peaks = scores[: blocks * _TOP_BLOCK].reshape(blocks, _TOP_BLOCK).max(axis=1)
            low = float(np.partition(peaks, blocks - m)[blocks - m])
        docs = np.flatnonzero(scores >= low) if low > 0.0 else np.flatnonzero(scores)
        vals = scores[docs]
        if len(docs) > m:
            keep = vals >= np.partition(vals, len(vals) - m)[len(vals) - m]  # ties at the cut stay
            docs, vals = docs[keep], vals[keep]
        order = np.lexsort((-docs, -vals))[:m]
        return list(zip(vals[order].tolist(), docs[order].tolist(), strict=True))

    return best(limit) if ok.unfiltered else ok.pick(best, int(np.count_nonzero(scores)), limit)


def accumulate(
    index: _Index, weighted: list[tuple[float, int]], limit: int | None, ok: _Acceptance, weights: Weights
) -> dict[int, float]:
    """Partial-or-full scores of the `_weigh`ed terms: exact for every document that can be
    in the top `limit`."""
    n = len(index._ids)
    acc: dict[int, float] = {}
    if not weighted:
        return acc
    scorer = _Scorer(index, n, weights)
    # The most the terms from position j on can still add to any one document, and the
    # postings they would scan: pruning pays once that is well above one pass over the
    # candidates, even when no single term is (a long query's tail of common words is many
    # medium-length lists).
    reach = [0.0] * (len(weighted) + 1)
    rest = [0] * (len(weighted) + 1)
    for j in range(len(weighted) - 1, -1, -1):
        reach[j] = reach[j + 1] + weighted[j][0]
        rest[j] = rest[j + 1] + index._post.length(weighted[j][1])
    floor: float | None = None
    scanned = 0  # postings scanned since the k-th best score was last looked up
    for j, (w, tid) in enumerate(weighted):
        if limit is not None and j and rest[j] > 2 * len(acc) + _PRUNE_MIN_POSTINGS:
            # Looking the k-th best up is a pass over the candidates: only once the scans
            # since the last look cost as much (a stale floor is still a lower bound).
            if floor is None or scanned >= len(acc):
                floor = ok.kth_score(acc, limit)
                scanned = 0
            if floor is not None and floor > reach[j] * (1.0 + _BOUND_SLACK):
                # Scores only grow, so `floor` stays below the k-th best while the bound
                # on what is left shrinks term by term: candidates drop out as it does.
                # The floor is looked up again when that pass is cheaper than the next
                # term's postings.
                for j2 in range(j, len(weighted)):
                    if j2 > j and len(acc) < index._post.length(weighted[j2][1]):
                        floor = max(floor, ok.kth_score(acc, limit) or floor)
                    cut = floor * (1.0 - _BOUND_SLACK) - reach[j2]
                    acc = {d: s for d, s in acc.items() if s >= cut}
                    scorer.refine(acc, *weighted[j2])
                break
        scorer.scan(acc, w, tid)
        scanned += index._post.length(tid)
    return acc
