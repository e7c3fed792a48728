"""Incremental BM25F over the memory's items: Okapi BM25 on the content, plus summary and tags.

Fields (Robertson, Zaragoza & Taylor, "Simple BM25 extension to multiple weighted fields",
2004): each field's term frequency is normalised by that field's own length before the fields
are weighted and summed, and the sum is saturated once:

    tf~ = tf_content / B_content + SUMMARY_WEIGHT * tf_summary / B_summary + TAG_WEIGHT * tf_tags / B_tags
    B_f = 1 - b_f + b_f * len_f / avg_len_f,   score = sum over query terms of idf * tf~ * (k1 + 1) / (tf~ + k1)

A document with content only scores exactly as Okapi BM25. Normalising per field matters for
agent memory: a long tool output whose first line (its summary) is the command the agent is
about to re-run no longer has that match diluted by the length of the output.

Layout, chosen for memory at ~100k documents, where postings dominate everything else:

- terms and documents get dense int ids (a document gets a new one on every add, so ids also
  give insertion order, and each term's postings stay sorted by document);
- a posting is ONE uint32 in one ``array('I')`` per term, ``doc << 8 | code``, for every
  document that has the term in any field. The code byte is the content tf (0-126) when the
  term is in the content only, the vast majority, told apart by one comparison; with bit 7 set
  it packs the three frequencies (content 0-7, summary 0-3, tags 0-3); 127 means "larger: see
  the spill dict". 4 bytes instead of a dict entry's ~100, and sorted, so a single document
  can be found in it by bisection;
- each document keeps the sorted ids of its distinct terms (over all fields): that is what
  removal, ``terms()`` and the matched-terms report need;
- removal is lazy: the document's length becomes -1 and document frequencies drop at once (so
  scores stay exact); a term's postings are compacted only when dead ones outnumber live ones,
  so removal is amortised O(terms of the document) and nothing ever walks all documents.

Frequencies and lengths are integers and field weights are applied at query time, so running
totals never drift, an index built incrementally scores bit for bit like one rebuilt from
scratch, and a saved index does not depend on the weights.

Queries are scored term at a time, rarest term first. Once the k-th best partial score beats
the most that the remaining (common) terms could still add, no unseen document can enter the
top k, so the common terms only update the candidates still in reach (by bisection) instead of
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
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from itertools import accumulate
from operator import itemgetter
from typing import Any, Final, Literal, NamedTuple

from .. import constants as C
from ..persistence import indexfile
from .analyze import TERMS_VERSION, query_terms, query_words, tokenize
from .vocab import Vocab, gather, insert_grown, offsets_dtype, saved_offsets_dtype
from .wordforms import other_words

# Re-exported for callers and tests; the numbers and their sources are in constants.py.
BM25_K1: Final = C.BM25_K1
BM25_B: Final = C.BM25_B
SUMMARY_WEIGHT: Final = C.SUMMARY_WEIGHT
TAG_WEIGHT: Final = C.TAG_WEIGHT

# --- the index's own tuning: how it stores and scans postings, nothing a caller sees ---------
# A term's postings are compacted once dead postings outnumber live ones by this slack.
_COMPACT_SLACK: Final = 8
# Pruning costs a pass over the candidates; try it only when the postings still to scan are
# clearly longer than that pass.
_PRUNE_MIN_POSTINGS: Final = 256
# Bisecting one candidate into a long postings array costs about this many scanned postings.
_BISECT_COST: Final = 16
# With a filter, look this many times `limit` candidates deep before sorting them all.
_ACCEPT_OVERFETCH: Final = 4
# A query whose terms' postings add up to this many is scored with numpy over a dense array of
# all documents instead of term at a time in Python: ~20x less per posting, but ~30-100 us to
# set up (a zeroed float per document), which short lists do not repay.
_DENSE_MIN_POSTINGS: Final = 1_000
# Float slack for the pruning bound (the bound itself is exact in real arithmetic).
_BOUND_SLACK: Final = 1e-9
# Documents per block when the dense path bounds its top-k from block maxima.
_TOP_BLOCK: Final = 256
# ---------------------------------------------------------------------------------------------

# Bumped when the layout or the text the store feeds in changes, so an older saved index is
# rebuilt rather than trusted (3: headlines cut at word boundaries; a 2 may hold a cut word;
# 4: the vocabulary as flat arrays).
_STATE_FORMAT: Final = 4
# Tokenizer versions whose saved index a load takes (see analyze.terms_changed).
_KNOWN_TERMS: Final = (1, 2, TERMS_VERSION)
_TF_BITS: Final = 8
_CODE_MASK: Final = (1 << _TF_BITS) - 1
_DOC_LIMIT: Final = 1 << (32 - _TF_BITS)
# The code byte: below _SPILL a content-only tf; _SPILL: see the spill dict; from _PACKED on,
# content tf in bits 4-6, summary tf in bits 2-3, tags tf in bits 0-1.
_SPILL: Final = 0x7F
_PACKED: Final = 0x80
_DEAD: Final = -1.0

if array("I").itemsize != 4:  # pragma: no cover - every CPython platform we target has it
    raise ImportError("compactor.search.index needs a 4-byte array('I')")


class IndexHit(NamedTuple):
    doc_id: str
    score: float
    matched: tuple[str, ...]


# An array in a saved state: base64 text inside JSON (`to_state()`), or the raw bytes
# (`to_state(binary=True)`, for compactor.persistence.indexfile), which a load may read in place.
Saved = str | bytes | memoryview


def _b64(data: array[int] | array[float] | memoryview) -> str:
    return base64.b64encode(data).decode("ascii")


def _enc(data: array[int] | array[float] | memoryview, binary: bool) -> Saved:
    return memoryview(data).cast("B") if binary else _b64(data)


def _raw(value: Saved) -> bytes | memoryview:
    if isinstance(value, str):
        return base64.b64decode(value)
    return value


def _unb64(value: Saved, typecode: str, swap: bool) -> array[Any]:
    out: array[Any] = array(typecode)
    out.frombytes(_raw(value))
    if swap:
        out.byteswap()
    return out


def _in_place(value: Saved, swap: bool) -> array[int] | memoryview:
    """uint32s read where they lie (a memory-mapped file's pages stay shared), or a copy."""
    raw = _raw(value)
    if isinstance(raw, memoryview) and not swap and raw.nbytes % 4 == 0:
        return raw.cast("B").cast("I")
    return _unb64(value, "I", swap)


class _DocTerms:
    """Doc -> its sorted distinct term ids (None once removed). A loaded index keeps them all
    in ONE flat array, read through zero-copy slices (of the memory-mapped index file when it
    was loaded from one); a document gets an array of its own when it is added or re-tagged.
    An array object per document cost ~230 bytes and a Python loop over all of them at every
    start."""

    __slots__ = ("_flat", "_frozen", "_n", "_own", "_starts", "_tail")

    def __init__(self, flat: array[int] | memoryview | None = None, lens: Sequence[int] = ()) -> None:
        self._flat: array[int] | memoryview = flat if flat is not None else array("I")
        starts = array("Q", [0])
        starts.extend(accumulate(lens))
        if starts[-1] != len(self._flat):
            raise ValueError("index state is inconsistent: document term lengths do not add up")
        self._starts = starts
        self._frozen = memoryview(self._flat)
        self._n = len(starts) - 1  # documents held in the flat array
        self._own: dict[int, array[int] | None] = {}  # flat documents changed since
        self._tail: list[array[int] | None] = []  # documents added since

    def __len__(self) -> int:
        return self._n + len(self._tail)

    def __getitem__(self, d: int) -> array[int] | memoryview | None:
        if d >= self._n:
            return self._tail[d - self._n]
        if d in self._own:
            return self._own[d]
        return self._frozen[self._starts[d] : self._starts[d + 1]]

    def __setitem__(self, d: int, terms: array[int] | None) -> None:
        if d >= self._n:
            self._tail[d - self._n] = terms
        elif d >= 0:
            self._own[d] = terms
        else:
            raise IndexError(d)

    def append(self, terms: array[int]) -> None:
        self._tail.append(terms)

    def fold(self) -> None:
        """Move the documents added since into the flat array, when it is an array of its own
        (a load's is the index file's: copying it would cost more than the arrays save). An
        array object a document cost ~70 bytes more than its place in the flat one: ~6 MiB
        at 100k items loaded in one process. Nothing moves while a view of the flat array is
        still read: the next settle tries again."""
        flat = self._flat
        if not self._tail or not isinstance(flat, array):
            return
        more: array[int] = array("I")
        ends = array("Q")
        for terms in self._tail:
            if terms is not None:
                more.extend(terms)
            ends.append(len(flat) + len(more))
        self._frozen = memoryview(b"")  # our own view of it would forbid growing it
        try:
            flat.frombytes(memoryview(more).cast("B"))  # BufferError, and nothing changed, while a view is read
        except BufferError:
            return
        finally:
            self._frozen = memoryview(flat)
        for k, terms in enumerate(self._tail):
            if terms is None:
                self._own[self._n + k] = None
        self._starts.extend(ends)
        self._n = len(self._starts) - 1
        self._tail = []

    def writable(self, d: int) -> array[int] | None:
        """The document's terms as an array of its own, to change in place."""
        terms = self[d]
        if terms is None or isinstance(terms, array):
            return terms
        own: array[int] = array("I")
        own.frombytes(terms.cast("B"))
        self[d] = own
        return own

    def __iter__(self) -> Iterator[array[int] | memoryview | None]:
        return (self[d] for d in range(len(self)))

    def flat(self) -> tuple[bytes | memoryview, array[int]]:
        """(every document's terms concatenated, each document's count), a removed one empty."""
        import numpy as np

        if not self._own and not self._tail:
            lens: array[int] = array("Q")
            lens.frombytes(np.diff(np.frombuffer(self._starts, dtype=np.uint64)).tobytes())
            return memoryview(self._flat).cast("B"), lens
        runs = {**self._own, **{self._n + k: terms for k, terms in enumerate(self._tail)}}
        out, run_lens = _gather_runs(self._flat, self._starts, len(self), runs)
        lens = array("Q")
        lens.frombytes(run_lens.astype(np.uint64).tobytes())
        return memoryview(out).cast("B"), lens


# Postings a settle (`_Postings._appended_flat`) moves up per step (`insert_grown`): 320 KiB
# of temporaries. A step of 1M postings made its copy the last settle's peak in a 10k-item
# load (+3 MiB); the steps' overhead does not show at 20M.
_SETTLE_CHUNK: Final = 1 << 16
# Term starts a settle moves up per step: three 8-byte temporaries each, 1.5 MiB.
_STARTS_CHUNK: Final = 1 << 16


def _by_term(arrays: Mapping[int, array[int]]) -> tuple[Any, list[array[int]], Any]:
    """(the term ids in ascending order, their arrays in that order, each one's length)."""
    import numpy as np

    ids = np.sort(np.fromiter(arrays.keys(), dtype=np.int64, count=len(arrays)))
    ordered = [arrays[t] for t in ids.tolist()]
    return ids, ordered, np.fromiter(map(len, ordered), dtype=np.int64, count=len(ordered))


def _gather_runs(
    flat: array[int] | memoryview,
    starts: array[int] | memoryview,
    n: int,
    runs: Mapping[int, array[int] | None],
    tails: Mapping[int, array[int]] | None = None,
) -> tuple[Any, Any]:
    """Runs 0..n-1 of uint32s concatenated, run i being flat[starts[i] : starts[i + 1]] unless
    `runs` replaces it (None: empty); runs past the end of `starts` are empty unless replaced.
    `tails` extends some runs that `runs` does not replace: tails[i] follows run i's flat part.
    Returns (the uint32 numpy array, each run's length). In numpy, gathered around the few
    replaced runs without copying the flat part first (`gather`): copying each run in Python
    took ~250 ms for the documents of 100k items, and each copy was one more index-sized
    temporary at a settle's peak."""
    import numpy as np

    frozen = np.frombuffer(flat, dtype=np.uint32)
    at = _offsets(starts)
    old = len(at) - 1
    lens = np.zeros(n, dtype=np.int64)
    src = np.zeros(n, dtype=np.int64)
    lens[:old] = np.diff(at)
    src[:old] = at[:-1]
    ids = np.fromiter(runs.keys(), dtype=np.int64, count=len(runs))
    run_lens = np.fromiter((len(r) if r is not None else 0 for r in runs.values()), dtype=np.int64, count=len(runs))
    pieces = [r.tobytes() for r in runs.values() if r is not None]
    lens[ids] = run_lens
    src[ids] = len(frozen) + np.cumsum(run_lens) - run_lens
    if not tails:
        return gather(frozen, src, lens, np.frombuffer(b"".join(pieces), dtype=np.uint32)), lens
    # A tail is a second segment right after its run's own: no copy of the run joined to its
    # tail first (a Python step a term, ~60k terms at each settle of a 50k-item load).
    tail_ids, tail_arrays, tail_lens = _by_term(tails)
    tail_src = len(frozen) + int(run_lens.sum()) + np.cumsum(tail_lens) - tail_lens
    pieces.extend(t.tobytes() for t in tail_arrays)
    extra = np.frombuffer(b"".join(pieces), dtype=np.uint32)
    out = gather(frozen, np.insert(src, tail_ids + 1, tail_src), np.insert(lens, tail_ids + 1, tail_lens), extra)
    lens[tail_ids] += tail_lens
    return out, lens


# The saved index's arrays that only spare a start the work of deriving them from the others.
DERIVED_ARRAYS: Final = ("vocab_starts", "vocab_order", "vocab_sorted", "post_starts")


def _offsets(starts: array[int] | memoryview) -> Any:
    """Starts of runs (an array or view of "I" or "Q", `_offsets_code`) as a numpy view."""
    import numpy as np

    return np.frombuffer(starts, dtype=np.uint32 if starts.itemsize == 4 else np.uint64)


def _typecode(dtype: type) -> Literal["I", "Q"]:
    """The array typecode of an offsets dtype (`offsets_dtype`); np.dtype() maps it back."""
    import numpy as np

    return "I" if dtype is np.uint32 else "Q"


def _offsets_code(end: int) -> Literal["I", "Q"]:
    """The typecode of starts up to `end`: 4 bytes each while they fit."""
    return _typecode(offsets_dtype(end))


def _in_place_starts(value: Saved, count: int) -> array[int] | memoryview:
    """`count` saved starts read where they lie, or a copy: 4 or 8 bytes each, told apart by
    the size (a file of an earlier version holds 8)."""
    raw = _raw(value)
    size = memoryview(raw).nbytes
    code = _typecode(saved_offsets_dtype(size, count))
    if isinstance(raw, memoryview) and size % array(code).itemsize == 0:
        return raw.cast("B").cast(code)
    return _unb64(value, code, False)


class _Postings:
    """Term id -> sorted postings. A loaded index keeps every term's postings in ONE flat array
    (read through zero-copy memoryview slices). New documents have the highest ids, so what
    they add to a term goes after all it holds: a settled term keeps those in a tail array
    of its own, read with the flat part as one array only when the term is read or changed
    in place. At 100k items there are ~2M terms, most with one posting, and an array object
    per term cost ~100 bytes each and ~1.5 s to build on every start; copying a settled
    term's postings at its first new document cost ~100 MiB over the first 250 stores."""

    __slots__ = ("_flat", "_frozen", "_n", "_one", "_ones", "_own", "_own_from", "_starts", "_tail")

    def __init__(
        self,
        flat: array[int] | memoryview | None = None,
        lens: Sequence[int] = (),
        starts: array[int] | memoryview | None = None,
    ) -> None:
        self._flat: array[int] | memoryview = flat if flat is not None else array("I")
        if starts is None:
            import numpy as np

            # In numpy: ~2M terms at 100k items, where a Python loop took ~0.5 s; the last
            # end decides the width.
            ends = np.cumsum(np.asarray(lens, dtype=np.uint64), dtype=np.uint64)
            code = _offsets_code(int(ends[-1]) if len(ends) else 0)
            starts = array(code, [0])
            starts.frombytes(ends.astype(np.dtype(code)).tobytes())
        if not len(starts) or starts[0] != 0 or starts[-1] != len(self._flat):
            raise ValueError("index state is inconsistent: postings lengths do not add up")
        self._starts = starts
        self._frozen = memoryview(self._flat)
        self._own: dict[int, array[int]] = {}  # a term's whole postings
        self._tail: dict[int, array[int]] = {}  # a settled term's postings after its flat part
        self._own_from = len(starts) - 1  # term ids from here on are new since the last settle
        self._n = self._own_from
        # A new term's one posting, by id - _own_from, while it has just one (0: none; no
        # posting is 0, its code being at least 1): most new terms are an id, a hash or a path
        # seen once, and an array and a dict slot each were ~150 bytes a term until a settle.
        self._one: array[int] = array("I")
        self._ones = 0

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, tid: int) -> array[int] | memoryview:
        """The term's postings, to read; change them through `writable` or assignment."""
        own = self._own.get(tid)
        if own is not None:
            return own
        if 0 <= tid < self._own_from:
            flat = self._frozen[self._starts[tid] : self._starts[tid + 1]]
            tail = self._tail.get(tid)
            if tail is None:
                return flat
            # A copy that is not kept: kept, it made a query's common terms arrays of their
            # own until the next settle, which then had to gather every posting.
            joined: array[int] = array("I")
            joined.frombytes(flat.cast("B"))
            joined.extend(tail)
            return joined
        if self._own_from <= tid < self._n:
            one = self._one[tid - self._own_from]
            return array("I", (one,) if one else ())
        raise IndexError(tid)

    def length(self, tid: int) -> int:
        own = self._own.get(tid)
        if own is not None:
            return len(own)
        if tid >= self._own_from:
            return 1 if self._one[tid - self._own_from] else 0
        tail = self._tail.get(tid)
        return self._starts[tid + 1] - self._starts[tid] + (len(tail) if tail is not None else 0)

    def writable(self, tid: int) -> array[int]:
        """The term's whole postings as an array of its own, to change in place."""
        own = self._own.get(tid)
        if own is None:
            if tid < self._own_from:
                own = array("I")
                own.frombytes(self._frozen[self._starts[tid] : self._starts[tid + 1]].cast("B"))
                tail = self._tail.pop(tid, None)
                if tail is not None:
                    own.extend(tail)
                self._own[tid] = own
            else:
                own = self._owned(tid)
        return own

    def add(self, tid: int, entry: int) -> None:
        """Append a posting of a document newer than every one the term holds."""
        own = self._own.get(tid)
        if own is not None:
            own.append(entry)
        elif tid >= self._own_from and not self._one[tid - self._own_from]:
            self._one[tid - self._own_from] = entry
            self._ones += 1
        else:
            self._appended(tid).append(entry)

    def _appended(self, tid: int) -> array[int]:
        """Where a term with no array of its own takes more postings: its tail when settled,
        else an array of its own (with its one posting so far)."""
        if tid >= self._own_from:
            return self._owned(tid)
        tail = self._tail.get(tid)
        if tail is None:
            tail = self._tail[tid] = array("I")
        return tail

    def _owned(self, tid: int) -> array[int]:
        """A new term's array of its own, made from its one posting (if any)."""
        k = tid - self._own_from
        one = self._one[k]
        own = self._own[tid] = array("I", (one,) if one else ())
        if one:
            self._one[k] = 0
            self._ones -= 1
        return own

    def __setitem__(self, tid: int, postings: array[int]) -> None:
        if not 0 <= tid < self._n:
            raise IndexError(tid)
        self._own[tid] = postings
        self._tail.pop(tid, None)
        if tid >= self._own_from and self._one[tid - self._own_from]:
            self._one[tid - self._own_from] = 0
            self._ones -= 1

    def extend_each(self, tids: Sequence[int], entries: memoryview, bounds: Sequence[int]) -> None:
        """`add` of the uint32s in bytes bounds[i]:bounds[i + 1] of `entries` to tids[i], for
        each i, in one loop."""
        own, one, first = self._own, self._one, self._own_from
        words = entries.cast("I")
        for i, tid in enumerate(tids):
            arr = own.get(tid)
            if arr is None:
                lo, hi = bounds[i], bounds[i + 1]
                if tid >= first and hi - lo == 4 and not one[tid - first]:
                    one[tid - first] = words[lo >> 2]
                    self._ones += 1
                    continue
                arr = self._appended(tid)
            arr.frombytes(entries[bounds[i] : bounds[i + 1]])

    def grow(self, n: int) -> None:
        """Add n terms with no postings yet."""
        self._n += n
        self._one.frombytes(bytes(4 * n))

    def append(self, postings: array[int]) -> None:
        self._own[self._n] = postings
        self._n += 1
        self._one.append(0)

    def __iter__(self) -> Iterator[array[int] | memoryview]:
        return (self[tid] for tid in range(len(self)))

    @property
    def flat(self) -> array[int] | memoryview:
        """Every term's postings, in term order (after `settle`)."""
        if self.unsettled:
            raise RuntimeError("settle() first")
        return self._flat

    @property
    def starts(self) -> array[int] | memoryview:
        """Where each term's postings start in `flat`, and its end (after `settle`)."""
        if self.unsettled:
            raise RuntimeError("settle() first")
        return self._starts

    def settled_lens(self) -> array[int]:
        """Each term's number of postings (after `settle`)."""
        import numpy as np

        out: array[int] = array("Q")
        out.frombytes(np.diff(_offsets(self._starts)).astype(np.uint64).tobytes())
        return out

    @property
    def unsettled(self) -> int:
        """Terms with postings outside the flat array: what the next `settle` merges."""
        return len(self._own) + len(self._tail) + self._ones

    def settle(self) -> None:
        """Move every term's postings back into one flat array: an array object per term
        costs ~100 bytes, and most terms have one posting. O(postings), in numpy."""
        import numpy as np

        if not self.unsettled:
            return
        # A load's flat array and starts are the index file's: copied out of the map here,
        # its pages dropped as they go, the settle below then grows them in place.
        self._flat, self._starts = indexfile.unmapped(self._flat), indexfile.unmapped(self._starts)
        self._frozen = memoryview(self._flat)
        n = self._n
        flat: array[int] | memoryview
        starts: array[int] | memoryview
        if min(self._own, default=n) >= self._own_from:
            flat, starts = self._appended_flat()
        else:  # some settled term was rewritten in place (a removal compacted it)
            for k, one in enumerate(self._one):  # the gather takes each run as an array
                if one:
                    self._own[self._own_from + k] = array("I", (one,))
            gathered, lens = _gather_runs(self._flat, self._starts, n, self._own, self._tail)
            code = _offsets_code(len(gathered))
            made = np.zeros(n + 1, dtype=np.dtype(code))
            np.cumsum(lens, out=made[1:], dtype=made.dtype)
            # Both kept as made: no postings-sized (or terms-sized) copy.
            flat, starts = gathered.data.cast("B").cast("I"), made.data.cast("B").cast(code)
        self._flat, self._starts = flat, starts
        self._frozen = memoryview(flat)
        self._own, self._tail = {}, {}
        self._one, self._ones = array("I"), 0
        self._own_from = n

    def _appended_flat(self) -> tuple[array[int], array[int]]:
        """`settle`'s new flat array and term starts (with the end) when only tails and new
        terms hold postings (what adding documents leaves). The flat array grows in place
        when nothing else reads it: the new terms' postings go on its end, and the flat part
        moves up, from the top down, to put each tail in after its term. A copy of the old
        array beside the new one was the load's peak (~80 MiB more at 100k items); a gather
        also indexed every posting (~0.8 s and ~140 MiB of temporaries for 20M postings)."""
        import numpy as np

        at = _offsets(self._starts)
        old, n = len(at) - 1, self._n
        tail_ids, tails, tail_lens = _by_term(self._tail)
        # The new terms' postings, by id: an array of their own, or their one posting.
        fresh: list[array[int] | int] = [self._own.get(t, one) for t, one in enumerate(self._one, old)]
        fresh_lens = np.fromiter((len(a) if isinstance(a, array) else int(a > 0) for a in fresh), np.int64, n - old)
        # Everything that can fail for want of memory comes before the first posting moves.
        # Appended array to array: a bytes object a term to join was ~20 MiB at 200k new terms.
        tail_run, fresh_run = array("I"), array("I")
        for tail in tails:
            tail_run.extend(tail)
        for postings in fresh:
            if isinstance(postings, array):
                fresh_run.extend(postings)
            elif postings:
                fresh_run.append(postings)
        # The k-th tail posting (in term order) lands k places after where its term ended.
        dest = np.repeat(at[tail_ids + 1].astype(np.int64), tail_lens)
        dest += np.arange(len(dest), dtype=np.int64)
        # Term k moves up by the tails of the terms before it: before[i] for the first i tails.
        before = np.zeros(len(tail_lens) + 1, dtype=np.uint64)
        np.cumsum(tail_lens, out=before[1:], dtype=np.uint64)
        del at  # the starts may grow in place below only with no view of them left
        flat = self._flat
        self._frozen = memoryview(b"")  # our own view of it would forbid growing it in place
        try:
            out = _extended(flat, "I", tail_run, fresh_run)  # the flat part, room for the tails, the new terms
        finally:
            self._frozen = memoryview(flat)
        head = len(out) - len(fresh_run)
        buf = np.frombuffer(out, dtype=np.uint32)
        # The tails go in after their terms, the flat part moving up around them.
        insert_grown(buf[:head], dest, np.frombuffer(tail_run, dtype=np.uint32), _SETTLE_CHUNK)
        del buf  # `out` may grow again at the next settle only with no view of it left
        # The starts, in place too: each settled term's moves up, and the new terms' follow.
        code = _offsets_code(len(out))
        dtype = np.dtype(code)
        starts = self._starts
        if starts.itemsize != dtype.itemsize:  # a file's 8-byte starts, or past 4G postings
            starts = array(code)
            starts.frombytes(_offsets(self._starts).astype(dtype).tobytes())
        fresh_starts = np.cumsum(fresh_lens, dtype=np.uint64)
        fresh_starts += np.uint64(head)
        starts = _extended(starts, code, fresh_starts.astype(dtype).tobytes())
        view: Any = np.frombuffer(starts, dtype=dtype)
        for lo in range(0, old + 1, _STARTS_CHUNK):
            hi = min(lo + _STARTS_CHUNK, old + 1)
            view[lo:hi] += before[np.searchsorted(tail_ids, np.arange(lo, hi), side="left")].astype(dtype)
        del view
        return out, starts


def _extended(arr: array[int] | memoryview, typecode: str, *parts: bytes | array[int]) -> array[int]:
    """`arr` with `parts` appended: the same array, grown in place (a large block is remapped,
    not copied), when it is an array that nothing else reads; else a copy (of a memory-mapped
    file's or a settle's numpy result, or while a view of it is still held)."""
    if isinstance(arr, array):
        try:
            for part in parts:  # only the first resize can fail, before anything changed
                arr.frombytes(memoryview(part).cast("B"))
            return arr
        except BufferError:
            pass
    out: array[int] = array(typecode)
    out.frombytes(memoryview(arr).cast("B"))
    for part in parts:
        out.frombytes(memoryview(part).cast("B"))
    return out


class _Field:
    """A field besides the content: its b and document lengths (weights are constants)."""

    __slots__ = ("b", "lens", "total")

    def __init__(self, b: float) -> None:
        self.b = b
        self.lens: array[int] = array("I")  # doc -> length in tokens
        self.total = 0  # sum of live lengths

    def norm(self, n: int) -> tuple[float, float]:
        """(f1, f2) with B = f1 + f2 * length; f2 = 0 while no document has the field."""
        return 1.0 - self.b, self.b * n / self.total if self.total else 0.0


def saved_terms_version(state: Mapping[str, Any]) -> Any:
    """The tokenizer version a saved index state's terms come from (version 1 recorded none)."""
    return state.get("terms", 1)


class BM25Index:
    """BM25F over content + summary + tags of documents keyed by str ids (see the module doc).

    idf = ln(1 + (N - df + 0.5) / (df + 0.5)), df counting documents with the term in any field.
    """

    def __init__(self) -> None:
        self._vocab = Vocab(C.VOCAB_HOT_TERMS)  # term <-> term id
        self._free_terms: list[int] = []
        self._df: array[int] = array("I")
        self._post = _Postings()  # term id -> sorted doc << 8 | code
        # tid -> {doc: (content, summary, tags) tf} for postings whose code is _SPILL
        self._spill: dict[int, dict[int, tuple[int, int, int]]] = {}
        self._summary = _Field(C.SUMMARY_B)
        self._tags = _Field(C.TAG_B)
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
        body = tokenize(content)
        in_summary = tokenize(summary) if summary else []
        in_tags = [t for tag in tags for t in tokenize(tag)]
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
        for field, tokens in ((self._summary, in_summary), (self._tags, in_tags)):
            field.lens.append(len(tokens))
            field.total += len(tokens)
        self._ids[doc_id] = d
        self._ext.append(doc_id)
        self._doc_terms.append(array("I", tids))
        self._dl.append(float(len(body)))
        self._total_len += len(body)
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
            body = tokenize(content)
            in_summary = tokenize(summary) if summary else []
            in_tags = [t for tag in tags for t in tokenize(tag)]
            counts = Counter(body)
            if in_summary or in_tags:
                s_counts, t_counts = Counter(in_summary), Counter(in_tags)
                wanted.update(counts)
                wanted.update(s_counts)
                wanted.update(t_counts)
                parsed.append((len(body), len(in_summary), len(in_tags), counts, s_counts, t_counts))
            else:
                wanted.update(counts)
                parsed.append((len(body), 0, 0, counts, None, None))
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
        if self._vocab.unsettled > max(C.INDEX_SETTLE_MIN, self._vocab.settled // C.INDEX_SETTLE_SHARE):
            self.settle()

    def settle(self) -> None:
        """Merge the terms and postings written since the last settle into the flat arrays
        (see `Vocab` and `_Postings`). Changes no result; done by itself as terms accumulate."""
        import numpy as np

        self._post.settle()
        self._vocab.own(indexfile.unmapped)
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
        old = Counter(t for tag in old_tags for t in tokenize(tag))
        new = Counter(t for tag in tags for t in tokenize(tag))
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
        n_old, n_new = sum(old.values()), sum(new.values())
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
        self, query: str, limit: int = 10, accept: Callable[[str], bool] | None = None, *, with_matched: bool = True
    ) -> list[IndexHit]:
        """Top `limit` documents by score (ties: newest first); `accept` filters candidates only.
        `with_matched=False` leaves `matched` empty, for callers that keep only some hits
        (`matched_terms` then names them for those)."""
        if limit <= 0:
            return []
        ok = _Acceptance(self._ext, accept)
        found, weighted = self._weigh(query, ok)
        if sum(self._post.length(tid) for _, tid in weighted) >= _DENSE_MIN_POSTINGS:
            ranked = _dense_top(self, weighted, limit, ok)
        else:
            acc = self._accumulate(weighted, limit, ok)
            ranked = _best(acc, limit) if accept is None else ok.top(acc, limit)
        hits: list[IndexHit] = []
        for score, d in ranked:
            doc_id = self._ext[d]
            assert doc_id is not None
            hits.append(IndexHit(doc_id, score, self._matched(d, found) if with_matched else ()))
        return hits

    def matched_terms(
        self, doc_ids: Sequence[str], query: str, accept: Callable[[str], bool] | None = None
    ) -> list[tuple[str, ...]]:
        """For each document, the query's terms it contains (in query order), as `search` with
        the same `accept` gives."""
        found, _ = self._weigh(query, _Acceptance(self._ext, accept))
        return [self._matched(self._ids[doc_id], found) for doc_id in doc_ids]

    def search_scores(
        self, query: str, accept: Callable[[str], bool] | None = None
    ) -> dict[str, tuple[float, tuple[str, ...]]]:
        """BM25 score and matched terms of every candidate, for callers that mix in other signals."""
        found, weighted = self._weigh(query, _Acceptance(self._ext, accept))
        acc = self._accumulate(weighted, None, _Acceptance(self._ext, None))
        out: dict[str, tuple[float, tuple[str, ...]]] = {}
        for d, score in acc.items():
            doc_id = self._ext[d]
            assert doc_id is not None
            if accept is None or accept(doc_id):
                out[doc_id] = (score, self._matched(d, found))
        return out

    def score_docs(
        self, query: str, doc_ids: Sequence[str], accept: Callable[[str], bool] | None = None
    ) -> list[IndexHit]:
        """The scores `search` with the same `accept` would give these documents (those matching
        a term), by bisection into the query's postings: for callers that add candidates of
        their own."""
        _, weighted = self._weigh(query, _Acceptance(self._ext, accept))
        acc = {self._ids[i]: 0.0 for i in doc_ids if i in self._ids}
        scorer = _Scorer(self, len(self._ids))
        for w, tid in weighted:
            scorer.refine(acc, w, tid)
        return [IndexHit(doc_id, score, ()) for d, score in acc.items() if score > 0.0 and (doc_id := self._ext[d])]

    def _weigh(self, query: str, ok: _Acceptance) -> tuple[list[tuple[str, int]], list[tuple[float, int]]]:
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
        other = _other_words(query, terms, lambda word: self._held(tid_of.get(word, -1), ok))
        for k, (term, tid) in enumerate(zip(terms + other, tids + self._vocab.lookup(other), strict=True)):
            if tid >= 0 and df[tid]:
                found.append((term, tid))
                f = df[tid]
                w = math.log(1.0 + (n - f + 0.5) / (f + 0.5)) * (BM25_K1 + 1.0)
                weighted.append((w if k < len(terms) else w * C.OTHER_WORD_WEIGHT, tid))
        # Rarest first; a stable sort keeps query order among equal weights (determinism).
        weighted.sort(key=itemgetter(0), reverse=True)
        return found, weighted

    def _held(self, tid: int, ok: _Acceptance) -> bool:
        """Whether a document `ok` accepts holds term `tid`: another project's notes, or items a
        tag filter leaves out, do not keep a word from its other words. The newest
        HELD_SCAN_POSTINGS are asked; a term only older documents hold counts as not held."""
        if tid < 0 or not self._df[tid]:
            return False
        if ok.unfiltered:
            return True
        post = self._post[tid]
        newest = range(len(post) - 1, max(len(post) - 1 - C.HELD_SCAN_POSTINGS, -1), -1)
        return any(ok(post[i] >> _TF_BITS) for i in newest)

    def _accumulate(self, weighted: list[tuple[float, int]], limit: int | None, ok: _Acceptance) -> dict[int, float]:
        """Partial-or-full scores of the `_weigh`ed terms: exact for every document that can be
        in the top `limit`."""
        n = len(self._ids)
        acc: dict[int, float] = {}
        if not weighted:
            return acc
        scorer = _Scorer(self, n)
        # The most the terms from position j on can still add to any one document, and the
        # postings they would scan: pruning pays once that is well above one pass over the
        # candidates, even when no single term is (a long query's tail of common words is many
        # medium-length lists).
        reach = [0.0] * (len(weighted) + 1)
        rest = [0] * (len(weighted) + 1)
        for j in range(len(weighted) - 1, -1, -1):
            reach[j] = reach[j + 1] + weighted[j][0]
            rest[j] = rest[j + 1] + self._post.length(weighted[j][1])
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
                        if j2 > j and len(acc) < self._post.length(weighted[j2][1]):
                            floor = max(floor, ok.kth_score(acc, limit) or floor)
                        cut = floor * (1.0 - _BOUND_SLACK) - reach[j2]
                        acc = {d: s for d, s in acc.items() if s >= cut}
                        scorer.refine(acc, *weighted[j2])
                    break
            scorer.scan(acc, w, tid)
            scanned += self._post.length(tid)
        return acc

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

    def to_state(self, *, binary: bool = False) -> dict[str, Any]:
        """Everything needed to restore without re-tokenising, as str/int/list (orjson-ready).

        O(index size); arrays travel as base64 of their native bytes, or with `binary` as the
        bytes themselves (memoryviews, valid until the index changes). Field weights are not
        part of it: they apply at query time.
        """
        import numpy as np

        doc_terms, doc_terms_lens = self._doc_terms.flat()
        self._post.settle()
        self._vocab.own(indexfile.unmapped)
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
            C.VOCAB_HOT_TERMS,
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


class _Scorer:
    """One query's view of the index: adds terms' contributions to candidate scores.

    Content-only postings add w * tf / (tf + c1 + c2 * dl), i.e. Okapi with k1 * B_content =
    c1 + c2 * dl. Postings with field frequencies add w * x / (x + k) with k = c1 + c2 * dl and
    x = tf + f * k / k1 (f the weighted, normalised field part of tf~): w * tf~ / (tf~ + k1)
    multiplied through by B_content. Every path uses the same arithmetic, so a score does not
    depend on whether it was reached by scanning or by bisection.
    """

    __slots__ = ("c1", "c2", "dl", "index", "s_lens", "s_norm", "t_lens", "t_norm")

    def __init__(self, index: BM25Index, n: int) -> None:
        self.index = index
        self.dl = index._dl
        self.c1 = BM25_K1 * (1.0 - BM25_B)
        self.c2 = BM25_K1 * BM25_B * n / index._total_len if index._total_len else 0.0
        self.s_lens, self.t_lens = index._summary.lens, index._tags.lens
        self.s_norm, self.t_norm = index._summary.norm(n), index._tags.norm(n)

    def scan(self, acc: dict[int, float], w: float, tid: int) -> None:
        """Add the term's contribution to every document that has it."""
        # The hottest loop of a query: kept free of attribute lookups, and content-only
        # postings take a single comparison on top of the Okapi arithmetic.
        p, dl, c1, c2 = self.index._post[tid], self.dl, self.c1, self.c2
        (s1, s2), (t1, t2), s_lens, t_lens = self.s_norm, self.t_norm, self.s_lens, self.t_lens
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
                    f += SUMMARY_WEIGHT * s_tf / (s1 + s2 * s_lens[d])
                if t_tf:
                    f += TAG_WEIGHT * t_tf / (t1 + t2 * t_lens[d])
                k = c1 + c2 * length
                x = tf + f * k / BM25_K1
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
            f += SUMMARY_WEIGHT * s_tf / (f1 + f2 * self.s_lens[d])
        if t_tf:
            f1, f2 = self.t_norm
            f += TAG_WEIGHT * t_tf / (f1 + f2 * self.t_lens[d])
        k = c1 + c2 * length
        x = tf + f * k / BM25_K1
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


def _other_words(query: str, terms: Collection[str], held: Callable[[str], bool]) -> list[str]:
    """Words to search beside the query's own `terms`, for each of its first EXPANDED_WORDS
    words that stand on their own and that no document the query may find holds (`held` is
    false): its synonyms, other English forms and derived nouns or verbs (`wordforms.other_words`:
    "database" for "db", "pool" for "pools", "deployment" for "deploy"). A word documents hold
    keeps to itself: its other words would add the many documents of a common word ("models"
    for "modeling") to a query already answered."""
    if C.OTHER_WORD_WEIGHT <= 0:
        return []
    out: dict[str, None] = {}
    for word in query_words(query, C.EXPANDED_WORDS):
        if not held(word):
            out.update(dict.fromkeys(other_words(word)))
    if not out:
        return []
    have = set(terms)  # a long query has thousands of terms
    return [word for word in out if word not in have]


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
    index: BM25Index, weighted: list[tuple[float, int]], limit: int, ok: _Acceptance
) -> list[tuple[float, int]]:
    """The `limit` best accepted (score, doc) pairs, best first, ties to the newest: the same
    result and the same floating-point arithmetic, term by term in the same order, as scanning
    in Python, done with numpy over every posting of the query's terms (no pruning needed)."""
    import numpy as np  # here: only a query with long postings pays for importing numpy

    n = len(index._ids)
    sc = _Scorer(index, n)
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
            f = np.where(s_tf > 0, SUMMARY_WEIGHT * s_tf / (s1 + s2 * s_lens[pd]), 0.0)
            f = f + np.where(t_tf > 0, TAG_WEIGHT * t_tf / (t1 + t2 * t_lens[pd]), 0.0)
            k = sc.c1 + sc.c2 * pl
            x = ptf + f * k / BM25_K1
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
