"""Postings storage and encoding for the search index (`compactor.search.index`): each term's
sorted postings and each document's terms in flat arrays, settled back into them as they grow,
and the arrays' encoding in a saved state.

Layout, chosen for memory at ~100k documents, where postings dominate everything else:

- terms and documents get dense int ids (a document gets a new one on every add, so ids also
  give insertion order, and each term's postings stay sorted by document);
- a posting is ONE uint32 in one ``array('I')`` per term, ``doc << 8 | code``, for every
  document that has the term in any field (the code byte: `compactor.search.topk`). 4 bytes
  instead of a dict entry's ~100, and sorted, so a single document can be found in it by
  bisection;
- each document keeps the sorted ids of its distinct terms (over all fields): that is what
  removal, ``terms()`` and the matched-terms report need.
"""

from __future__ import annotations

import base64
from array import array
from collections.abc import Iterator, Mapping, Sequence
from itertools import accumulate
from typing import Any, Final, Literal

from .mapped import unmapped
from .vocab import gather, insert_grown, offsets_dtype, saved_offsets_dtype

if array("I").itemsize != 4:  # pragma: no cover - every CPython platform we target has it
    raise ImportError("compactor.search.postings needs a 4-byte array('I')")


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
        self._flat, self._starts = unmapped(self._flat), unmapped(self._starts)
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
