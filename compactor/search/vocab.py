"""The search index's vocabulary: term <-> dense term id, in a few flat arrays.

A dict of str -> int costs ~150 bytes a term (the str, the int, the dict slot), and an index of
100k agent items holds ~2M distinct terms (ids, hashes, paths, names). Here the settled terms
live in flat arrays instead, ~30 bytes a term, with nothing per term for Python to build or
free:

- every term's UTF-8 bytes in one blob, located by ``starts``/``lens`` per term id;
- the term ids sorted by their term's CRC-32, and those CRCs in that order: a lookup bisects
  the sorted CRCs (vectorised over all terms of a document at once) and confirms the bytes,
  so two terms with the same CRC-32 are still told apart.

Terms added since the last `settle` sit in a plain dict (the overlay) until there are enough
of them to merge, in C-speed numpy passes, into the arrays. A term whose last document goes
is `release`d: its id may then be reused for another term (`assign`).
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Callable, Sequence
from itertools import accumulate
from typing import Any

import numpy as np
import numpy.typing as npt

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
Offsets = npt.NDArray[np.unsignedinteger[Any]]
Buffer = bytes | memoryview


def _crc(data: Buffer) -> int:
    return zlib.crc32(data)


def offsets_dtype(end: int) -> type[np.unsignedinteger[Any]]:
    """The type of byte offsets below `end`: 4 bytes while it is under 4 GiB (2M terms take
    ~50 MB), 8 beyond. At 2M terms the narrower starts are 8 MiB less."""
    return np.uint32 if end <= 0xFFFF_FFFF else np.uint64


def saved_offsets_dtype(nbytes: int, count: int) -> type[np.unsignedinteger[Any]]:
    """The type of `count` saved offsets taking `nbytes`: either width of `offsets_dtype` (a
    file of an earlier version holds 8 bytes each)."""
    return np.uint32 if nbytes == 4 * count else np.uint64


# Output elements a `gather` pass works on at once: its index temporaries (three int64s an
# element) stay ~6 MiB however large the index grows.
GATHER_CHUNK = 1 << 18
# Entries `Vocab._insert_into` moves per step (`insert_grown`): 320 KiB of temporaries,
# against np.insert's copy of the whole array.
INSERT_CHUNK = 1 << 16


def insert_grown(buf: npt.NDArray[Any], dest: npt.NDArray[np.int64], values: Any, step: int) -> None:
    """`np.insert` made in place: `buf` holds the old entries, then room for `values`, and
    value k goes to dest[k] (ascending: its np.insert position plus k). The old entries move
    up around the values from the top down, `step` places at a time (a mask of a byte each
    and a copy of their source), each step's entries coming from at or below it, where
    nothing has been written yet."""
    hi = len(buf)
    bottom = int(dest[0]) if len(dest) else hi  # below the first value nothing moves
    while hi > bottom:
        lo = max(hi - step, bottom)
        below, upto = int(np.searchsorted(dest, lo)), int(np.searchsorted(dest, hi))
        keep = np.ones(hi - lo, dtype=bool)
        keep[dest[below:upto] - lo] = False
        buf[lo:hi][keep] = buf[lo - below : hi - upto].copy()  # a copy: the two overlap
        hi = lo
    buf[dest] = values


def gather(
    src: npt.NDArray[Any], starts: npt.NDArray[Any], lens: npt.NDArray[Any], more: npt.NDArray[Any] | None = None
) -> npt.NDArray[Any]:
    """The segments src[starts[i] : starts[i] + lens[i]], concatenated, without a Python loop
    per segment, in chunks of the output so that temporaries stay small. With `more`, a start
    past the end of `src` reads from `more` instead, as if it followed `src`: the caller need
    not copy the two into one array first."""
    lens64 = lens.astype(np.int64)
    ends = np.cumsum(lens64)
    total = int(ends[-1]) if len(ends) else 0
    out = np.empty(total, dtype=src.dtype)
    shift = starts.astype(np.int64) - (ends - lens64)  # source minus destination, per segment
    edge = len(src)
    # Whole segments at a time, about GATHER_CHUNK elements (or one longer segment): each
    # element's shift comes from np.repeat, not from a search of `ends` per element.
    first, count = 0, len(lens64)
    while first < count:
        lo = int(ends[first] - lens64[first])
        stop = max(int(np.searchsorted(ends, lo + GATHER_CHUNK, side="right")), first + 1)
        hi = int(ends[stop - 1])
        if hi > lo:
            at = np.arange(lo, hi, dtype=np.int64)
            at += np.repeat(shift[first:stop], lens64[first:stop])
            if more is None:
                out[lo:hi] = src[at]
            else:
                chunk = out[lo:hi]
                old = at < edge
                chunk[old] = src[at[old]]
                chunk[~old] = more[at[~old] - edge]
        first = stop
    return out


class Vocab:
    """Term <-> id for the search index (see the module doc). Ids are dense: the index keeps
    per-term arrays (document frequency, postings) indexed by them."""

    __slots__ = (
        "_added",
        "_blob",
        "_dead",
        "_hashes",
        "_hot",
        "_hot_max",
        "_lens",
        "_lens_at",
        "_n",
        "_new",
        "_new_names",
        "_order",
        "_sorted",
        "_starts",
        "_starts_at",
    )

    def __init__(self, hot_terms: int = 16_384) -> None:
        self._hot_max = hot_terms
        self._n = 0  # term id slots, settled or not
        # Settled terms: ids below len(self._lens).
        self._blob: Buffer = b""
        self._starts: Offsets = np.zeros(0, dtype=np.uint32)  # `offsets_dtype` of the blob
        self._lens: U32 = np.zeros(0, dtype=np.uint32)
        # The same two as memoryviews: indexing one gives a Python int ~5x faster than numpy.
        self._starts_at = self._starts.data
        self._lens_at = self._lens.data
        # Per id, as a load reads them; None once a settle has made `_order` and `_sorted`,
        # which hold the same for the live ids (`settled_hashes`): 8 MiB less at 2M terms.
        self._hashes: U32 | None = np.zeros(0, dtype=np.uint32)
        self._order: U32 = np.zeros(0, dtype=np.uint32)  # live settled ids, by hash
        self._sorted: U32 = np.zeros(0, dtype=np.uint32)  # their hashes, ascending
        # The overlay: terms given an id since the last settle (a reused settled id included).
        self._new: dict[str, int] = {}
        self._new_names: dict[int, str] = {}  # settled ids given another term
        # The terms of the ids past the settled ones, by id (None: released): a list slot a
        # term, not a dict entry (~40 bytes more), for every term waiting for a settle.
        self._added: list[str | None] = []
        # Settled ids released since the last settle: their settled name no longer holds.
        self._dead: set[int] = set()
        # Settled terms found by recent lookups: the common words of every new document are
        # then one dict probe, not a pass through the arrays. At most `hot_terms` of them.
        self._hot: dict[str, int] = {}

    def __len__(self) -> int:
        return self._n

    @property
    def unsettled(self) -> int:
        """Terms in the overlay: what the next `settle` merges."""
        return len(self._new)

    @property
    def settled(self) -> int:
        return len(self._lens)

    # --- lookups ---------------------------------------------------------------------------

    def lookup(self, terms: Sequence[str]) -> list[int]:
        """Each term's id, -1 for a term not in the vocabulary."""
        new, hot = self._new, self._hot
        out = [new.get(t, -1) for t in terms]
        if not len(self._sorted):
            return out
        miss = [i for i, tid in enumerate(out) if tid < 0]
        if not miss:
            return out
        if hot:
            still = []
            for i in miss:
                tid = hot.get(terms[i], -1)
                if tid < 0:
                    still.append(i)
                else:
                    out[i] = tid
            miss = still
            if not miss:
                return out
        encoded = [terms[i].encode("utf-8", "surrogatepass") for i in miss]
        hashes = np.fromiter(map(_crc, encoded), dtype=np.uint32, count=len(encoded))
        pos = np.searchsorted(self._sorted, hashes)
        size = len(self._sorted)
        at = np.minimum(pos, size - 1)
        hit = (pos < size) & (self._sorted[at] == hashes)
        if not hit.any():
            return out
        found = np.flatnonzero(hit)
        cands = self._order[at[found]]
        blob, dead, renamed = self._blob, self._dead, self._new_names
        for k, cand, start in zip(found.tolist(), cands.tolist(), self._starts[cands].tolist(), strict=True):
            data = encoded[k]
            if (
                cand not in dead
                and cand not in renamed
                and blob[start : start + len(data)] == data
                and self._lens_at[cand] == len(data)
            ):
                tid = cand
            else:  # another term with the same CRC-32 (or a released id): look along the run
                tid = self._scan(int(pos[k]), int(hashes[k]), data)
                if tid < 0:
                    continue
            out[miss[k]] = tid
            if len(hot) >= self._hot_max:
                hot.clear()
            hot[terms[miss[k]]] = tid
        return out

    def _scan(self, pos: int, crc: int, encoded: bytes) -> int:
        size = len(self._sorted)
        while pos < size and int(self._sorted[pos]) == crc:
            tid = int(self._order[pos])
            if tid not in self._dead and tid not in self._new_names and self._settled_bytes(tid) == encoded:
                return tid
            pos += 1
        return -1

    def get(self, term: str) -> int | None:
        tid = self.lookup([term])[0]
        return tid if tid >= 0 else None

    def _settled_bytes(self, tid: int) -> bytes:
        start = self._starts_at[tid]
        return bytes(self._blob[start : start + self._lens_at[tid]])

    def name(self, tid: int) -> str:
        """The term of a live id."""
        settled = len(self._lens)
        if tid >= settled:
            added = self._added[tid - settled]
            if added is None:
                raise IndexError(tid)
            return added
        renamed = self._new_names.get(tid)
        if renamed is not None:
            return renamed
        start = self._starts_at[tid]
        return str(self._blob[start : start + self._lens_at[tid]], "utf-8", "surrogatepass")

    # --- changes ---------------------------------------------------------------------------

    def assign(self, term: str, tid: int) -> None:
        """Give `term` the id `tid`: the next new id (len(self)) or one released before."""
        if tid == self._n:
            self._n += 1
        elif not 0 <= tid < self._n:
            raise IndexError(tid)
        self._new[term] = tid
        settled = len(self._lens)
        if tid < settled:
            self._new_names[tid] = term
        elif tid - settled == len(self._added):
            self._added.append(term)
        else:
            self._added[tid - settled] = term

    def release(self, tid: int) -> None:
        """The term of `tid` is gone; the id may be assigned again."""
        settled = len(self._lens)
        if tid >= settled:
            term = self._added[tid - settled]
            self._added[tid - settled] = None
        else:
            term = self._new_names.pop(tid, None)
        if term is not None:
            del self._new[term]
        elif tid < len(self._lens):
            self._hot.pop(self._settled_bytes(tid).decode("utf-8", "surrogatepass"), None)
        if tid < len(self._lens):
            self._dead.add(tid)

    def own(self, unmapped: Callable[[Any], Any]) -> None:
        """Replace each array that reads a memory-mapped file (a load's) by `unmapped(array)`,
        a copy of its own; the others stay. A settle replaces or grows every array, and grows
        in place only what it owns (the index passes `mapped.unmapped`, whose copy drops the
        map's pages as it goes)."""
        blob = unmapped(self._blob)
        if blob is not self._blob:
            self._blob = memoryview(blob)
        for name in ("_lens", "_starts", "_order", "_sorted"):
            setattr(self, name, unmapped(getattr(self, name)))
        self._lens_at, self._starts_at = self._lens.data, self._starts.data
        if self._hashes is not None and not self._hashes.flags.owndata:
            self._hashes = None  # `settled_hashes` makes them from `_order` and `_sorted`

    def settle(self, live: npt.NDArray[np.bool_]) -> None:
        """Merge the overlay into the arrays; `live[tid]` says which ids hold a term now (the
        others are released, and get no bytes). O(vocabulary), all of it in numpy."""
        n = self._n
        if len(live) != n:
            raise ValueError("live mask does not cover the vocabulary")
        old = len(self._lens)
        if self._appends_only(live):
            self._settle_appended()
            return
        lens = np.zeros(n, dtype=np.uint32)
        lens[:old] = self._lens
        hashes = np.zeros(n, dtype=np.uint32)
        hashes[:old] = self.settled_hashes()
        ids, joined, extra_lens, extra_hashes = self._overlay()
        extra = np.frombuffer(joined, dtype=np.uint8)
        lens[ids] = extra_lens
        hashes[ids] = extra_hashes
        # Where each id's bytes are now: the old blob, or after it for the overlay's terms.
        src_starts = np.zeros(n, dtype=np.uint64)
        src_starts[:old] = self._starts
        src_starts[ids] = len(self._blob) + np.cumsum(extra_lens, dtype=np.uint64) - extra_lens
        lens[~live] = 0
        # Kept as the gathered array itself: a bytes copy of it doubled the settle's peak.
        self._blob = gather(np.frombuffer(self._blob, dtype=np.uint8), src_starts, lens, extra).data
        self._set_lens(lens)
        self._index_hashes(hashes, live)
        self._hashes = None
        self._new, self._new_names, self._added, self._dead, self._hot = {}, {}, [], set(), {}

    def _overlay(self) -> tuple[npt.NDArray[np.int64], bytes, U32, U32]:
        """The overlay's ids in ascending order, their terms' UTF-8 joined in that order, and
        each term's length and CRC-32."""
        renamed = sorted(self._new_names.items())
        settled = len(self._lens)
        names = [term for _, term in renamed]
        # The ids past the settled ones, less the released: no pair made a term (~200k a merge).
        kept = np.fromiter((term is not None for term in self._added), dtype=bool, count=len(self._added))
        added = np.flatnonzero(kept) + settled
        names.extend(term for term in self._added if term is not None)
        ids = np.concatenate((np.fromiter((tid for tid, _ in renamed), dtype=np.int64, count=len(renamed)), added))
        # Encoded as one string, not a bytes object a term: at 200k new terms those were
        # ~30 MiB more at the settle's peak, the largest part of it.
        text = "".join(names)
        joined = text.encode("utf-8", "surrogatepass")
        if len(joined) == len(text):  # every character is one byte: a term's length is its str's
            sizes = list(map(len, names))
        else:
            sizes = [len(term.encode("utf-8", "surrogatepass")) for term in names]
        del text
        view = memoryview(joined)
        crcs = (_crc(view[end - size : end]) for end, size in zip(accumulate(sizes), sizes, strict=True))
        lens = np.array(sizes, dtype=np.uint32)
        return ids, joined, lens, np.fromiter(crcs, dtype=np.uint32, count=len(sizes))

    def _appends_only(self, live: npt.NDArray[np.bool_]) -> bool:
        """Whether the overlay only adds terms after the settled ones, all live, and no settled
        term changed since the last settle: what a load of new items leaves."""
        old = len(self._lens)
        return (
            not self._dead
            and not self._new_names
            and len(self._added) == self._n - old
            and None not in self._added
            and bool(live[old:].all())
            and bool(np.array_equal(live[:old], self._lens > 0))
        )

    def _settle_appended(self) -> None:
        """`settle` when the overlay only appends (`_appends_only`): the arrays grow at their
        end and the new hashes are merged into the sorted ones, O(vocabulary) copies instead
        of a gather of every byte and a sort of every hash (~0.3 of ~1 s at 1M terms)."""
        old = len(self._lens)
        _, joined, extra_lens, extra_hashes = self._overlay()  # ids old, old + 1, ...
        end = len(self._blob)  # where the new terms' bytes start: nothing was released
        self._blob = self._grown_blob(joined)
        # Grown in place, one after another: a copy beside the old array (2 MiB of starts at
        # 264k terms) was a 10k-item load's last settle's peak.
        self._lens_at = self._starts_at = memoryview(b"")  # views would forbid the growth
        self._append_to("_lens", extra_lens)
        self._lens_at = self._lens.data
        extra_starts = np.cumsum(extra_lens, dtype=np.uint64)
        extra_starts -= extra_lens
        extra_starts += np.uint64(end)
        wanted = offsets_dtype(len(self._blob))
        if self._starts.dtype != wanted:  # a loaded file's 8-byte starts, or a blob past 4 GiB
            self._starts = self._starts.astype(wanted)
        self._append_to("_starts", extra_starts.astype(wanted, copy=False))
        self._starts_at = self._starts.data
        # Ties keep id order, as the stable sort of `_index_hashes` would: settled ids first.
        by_hash = np.argsort(extra_hashes, kind="stable")
        new_sorted = extra_hashes[by_hash]
        at = np.searchsorted(self._sorted, new_sorted, side="right")
        self._insert_into("_order", at, (by_hash + old).astype(np.uint32))
        self._insert_into("_sorted", at, new_sorted)
        self._hashes = None  # `settled_hashes` makes them from `_order` and `_sorted`
        self._new, self._new_names, self._added, self._dead, self._hot = {}, {}, [], set(), {}

    def _append_to(self, name: str, extra: npt.NDArray[Any]) -> bool:
        """Append `extra` to the array in attribute `name`: the same array, grown in place
        (realloc: a large block is remapped, not copied), when it owns its data and nothing
        else refers to it (numpy checks); else a new one (the first time after a load, whose
        arrays are the index file's, or while a reader holds a view). True when in place."""
        arr = getattr(self, name)
        setattr(self, name, None)  # `arr` is then the one reference, as numpy's check needs
        try:
            size = len(arr)
            grown = bool(arr.flags.owndata and arr.flags.writeable)
            if grown:
                try:
                    arr.resize(size + len(extra), refcheck=True)
                except ValueError:
                    grown = False
            if grown:
                arr[size:] = extra
            else:
                arr = np.concatenate((arr, extra))
        finally:
            setattr(self, name, arr)  # the old array, should anything fail
        return grown

    def _insert_into(self, name: str, at: npt.NDArray[np.intp], values: U32) -> None:
        """`np.insert(array, at, values)` for the array in attribute `name` (`at` ascending),
        made in place when the array can grow (`_append_to`, then `insert_grown`). np.insert
        made the whole array anew beside the old one."""
        self._append_to(name, np.zeros(len(values), dtype=values.dtype))
        insert_grown(getattr(self, name), at + np.arange(len(at)), values, INSERT_CHUNK)

    def _grown_blob(self, extra: bytes) -> memoryview:
        """The blob with `extra` appended: the same bytearray grown in place (a large block is
        remapped, not copied) when it is ours and nothing else reads it; else a copy (the
        first time, or of a memory-mapped file). A copy beside the old blob was an appending
        settle's peak once its new terms were encoded in one piece (~50 MiB at 2M terms)."""
        blob = self._blob
        owner = blob.obj if isinstance(blob, memoryview) else None
        if isinstance(owner, bytearray):
            self._blob = b""  # our own view of it would forbid the resize
            del blob
            try:
                owner.extend(extra)
            except BufferError:  # a reader still holds a view: it keeps the bytes it reads
                pass
            else:
                return memoryview(owner)
            finally:
                self._blob = memoryview(owner)  # as it was, should anything fail from here
            blob = self._blob
        grown = bytearray(blob)
        grown.extend(extra)
        return memoryview(grown)

    def _set_lens(self, lens: U32) -> None:
        self._lens = lens
        # The blob holds the bytes `lens` count: its size is their sum, without a pass over them.
        starts = np.cumsum(lens, dtype=offsets_dtype(memoryview(self._blob).nbytes))
        starts -= lens  # in place, not two more copies of every start (8 MiB each at 2M terms)
        self._starts = starts
        self._starts_at = self._starts.data
        self._lens_at = self._lens.data

    def _index_hashes(self, hashes: U32, live: npt.NDArray[np.bool_]) -> None:
        order = np.flatnonzero(live).astype(np.uint32)
        order = order[np.argsort(hashes[order], kind="stable")]
        self._order = order
        self._sorted = hashes[order]

    def settled_hashes(self) -> U32:
        """Each settled id's CRC-32 (a released id's means nothing), made from the sorted ones
        after a settle: a snapshot's save and a full settle ask for it."""
        if self._hashes is not None:
            return self._hashes
        hashes = np.zeros(len(self._lens), dtype=np.uint32)
        hashes[self._order] = self._sorted
        return hashes

    def free_ids(self) -> list[int]:
        """Settled ids that hold no term (for the index's free list after a load)."""
        return [int(t) for t in np.flatnonzero(self._lens == 0)]

    # --- persistence -----------------------------------------------------------------------

    def to_state(self, live: npt.NDArray[np.bool_]) -> dict[str, memoryview]:
        """Settle, then the arrays' bytes (native byte order; valid until the next change):
        the terms' UTF-8, each term's length and CRC-32, by id. A released term's bytes are
        not in it: a forgotten item's words leave the saved index with it."""
        self.settle(live)
        return {
            "blob": memoryview(self._blob),
            "lens": self._lens.data,
            "hashes": self.settled_hashes().data,
            # Derived from the three above; saved so that a start reads them in place (shared
            # between processes) instead of computing them: a sort of every term among them.
            "starts": self._starts.data,
            "order": self._order.data,
            "sorted": self._sorted.data,
        }

    @classmethod
    def from_state(
        cls,
        blob: Buffer,
        lens: Buffer | array[int],
        hashes: Buffer | array[int],
        hot_terms: int = 16_384,
        derived: tuple[Buffer, Buffer, Buffer] | None = None,
    ) -> Vocab:
        """Inverse of `to_state` (arrays in this machine's byte order), read in place: a
        memory-mapped file's pages are shared, not copied. `derived` is the saved (starts,
        order, sorted); without it they are computed (a sort of every term, in numpy).
        ValueError if the arrays do not fit together."""
        self = cls(hot_terms)
        lens_arr: U32 = np.frombuffer(lens, dtype=np.uint32)
        hashes_arr: U32 = np.frombuffer(hashes, dtype=np.uint32)
        if len(lens_arr) != len(hashes_arr) or int(lens_arr.sum(dtype=np.uint64)) != memoryview(blob).nbytes:
            raise ValueError("vocabulary state is inconsistent: lengths do not add up")
        self._blob, self._hashes = blob, hashes_arr
        self._n = len(lens_arr)
        if derived is None:
            self._set_lens(lens_arr)
            self._index_hashes(hashes_arr, lens_arr > 0)
            return self
        starts: Offsets = np.frombuffer(
            derived[0], dtype=saved_offsets_dtype(memoryview(derived[0]).nbytes, len(lens_arr))
        )
        order: U32 = np.frombuffer(derived[1], dtype=np.uint32)
        sorted_: U32 = np.frombuffer(derived[2], dtype=np.uint32)
        if len(starts) != len(lens_arr) or len(order) != len(sorted_) or len(order) > len(lens_arr):
            raise ValueError("vocabulary state is inconsistent: derived arrays differ in length")
        if len(order) and int(order.max()) >= len(lens_arr):
            raise ValueError("vocabulary state is inconsistent: a term id out of range")
        self._lens, self._starts = lens_arr, starts
        self._starts_at, self._lens_at = starts.data, lens_arr.data
        self._order, self._sorted = order, sorted_
        return self
