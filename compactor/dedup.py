"""Near-duplicate candidates without an O(n^2) pass.

Each item is filed under the K smallest hashes of its word set (a bottom-K min-hash sketch)
and keeps a bottom-64 signature from which Jaccard is estimated (exactly, for sets that fit).
Two sets with Jaccard J share their union's minimum with probability J; if the i-th smallest
hash of the union lies in both sets it is among both items' K smallest, so a pair with J > 0.7
shares a bucket with probability >= 1 - 0.3**K. Candidates are then checked exactly.
"""

from __future__ import annotations

import base64
import sys
import zlib
from array import array
from collections.abc import Iterable
from itertools import accumulate, chain, repeat
from typing import Any

from . import constants as C

# Words so common that sharing one says nothing; filed under them, every item would land in
# the same few buckets and each check would compare against most of the store.
_STOP = frozenset(
    {
        "the",
        "and",
        "for",
        "that",
        "this",
        "with",
        "from",
        "are",
        "was",
        "were",
        "not",
        "but",
        "have",
        "has",
        "had",
        "you",
        "your",
        "its",
        "our",
        "their",
        "they",
        "them",
        "then",
        "than",
        "into",
        "onto",
        "out",
        "over",
        "under",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "been",
        "being",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "how",
        "all",
        "any",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "only",
        "own",
        "same",
        "very",
        "just",
        "also",
        "there",
        "here",
        "about",
        "above",
        "below",
        "after",
        "before",
        "again",
        "once",
        "off",
        "too",
        "none",
        "true",
        "false",
        "self",
        "def",
        "return",
        "import",
        "class",
        "null",
        "let",
        "var",
        "const",
        "func",
        "new",
        "int",
        "str",
    }
)


def _hashed(words: Iterable[str]) -> dict[str, int]:
    """Each distinct word's hash: crc32, stable across processes (unlike hash()) and fast in C."""
    distinct = set(words)
    return dict(zip(distinct, map(zlib.crc32, [w.encode("utf-8", "surrogatepass") for w in distinct]), strict=True))


def _sketch_of(hashed: dict[str, int], k: int = C.DEDUP_SKETCH_K) -> tuple[int, ...]:
    """The k smallest hashes of the words that say something (3+ letters, not a stop word)."""
    # sorted() of a set of ~100 ints is a C sort, cheaper than heapq's Python-level selection.
    return tuple(sorted({h for w, h in hashed.items() if len(w) >= 3 and w not in _STOP})[:k])


def sketch(words: Iterable[str], k: int = C.DEDUP_SKETCH_K) -> tuple[int, ...]:
    return _sketch_of(_hashed(words), k)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class DedupIndex:
    """Buckets of item ids keyed by sketch hashes. Incremental: add/remove touch K buckets."""

    def __init__(self) -> None:
        # A bucket with one member holds its id itself: at 100k items nearly all of the ~2M
        # buckets have one member, and an empty set alone costs 216 bytes.
        self._buckets: dict[int, str | set[str]] = {}
        self._keys: dict[str, tuple[int, ...]] = {}
        self._sigs: dict[str, array[int]] = {}
        self._sizes: dict[str, int] = {}
        self._sig_set: tuple[str, frozenset[int]] | None = None  # see similarity()

    def __contains__(self, item_id: str) -> bool:
        return item_id in self._keys

    def add(self, item_id: str, words: Iterable[str]) -> None:
        if item_id in self._keys:
            self.remove(item_id)
        self._sig_set = None
        hashed = _hashed(words)  # once for both the sketch and the signature
        keys = _sketch_of(hashed)
        self._keys[item_id] = keys
        hashes = set(hashed.values())
        self._sigs[item_id] = array("I", sorted(hashes)[: C.DEDUP_SIGNATURE])
        self._sizes[item_id] = len(hashes)
        for key in keys:
            self._file(key, item_id)

    def _file(self, key: int, item_id: str) -> None:
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = item_id
        elif isinstance(bucket, str):
            if bucket != item_id:
                self._buckets[key] = {bucket, item_id}
        else:
            bucket.add(item_id)

    def similarity(self, a: str, b: str) -> float:
        """Jaccard of two items' word sets: exact when both fit in a signature, else the
        bottom-k estimate (the share of the union's k smallest hashes found in both)."""
        na, nb = self._sizes.get(a, 0), self._sizes.get(b, 0)
        if not na or not nb or min(na, nb) <= C.DEDUP_JACCARD * max(na, nb):
            # |A and B| / |A or B| <= min / max: sets this different in size cannot be near-duplicates.
            return 0.0 if na or nb else 1.0
        sa, sb = self._sigs[a], self._sigs[b]
        cached = self._sig_set
        if cached is None or cached[0] != a:
            # A caller checks one item against each of its candidates: its set is made once.
            cached = self._sig_set = (a, frozenset(sa))
        set_a = cached[1]
        both = set_a.intersection(sb)
        if na <= len(sa) and nb <= len(sb):
            return len(both) / (na + nb - len(both))
        union = sorted(set_a.union(sb))[: C.DEDUP_SIGNATURE]
        return len(both.intersection(union)) / len(union)

    def _flat(self) -> tuple[list[str], dict[str, array[int]]]:
        """The ids, and per id in that order its keys, signature and word count, as flat
        arrays (with the length of each id's run)."""
        ids = list(self._keys)
        keys = array("I")
        key_lens = array("B")
        sigs = array("I")
        sig_lens = array("B")
        for i in ids:
            keys.extend(self._keys[i])
            key_lens.append(len(self._keys[i]))
            sigs.extend(self._sigs[i])
            sig_lens.append(len(self._sigs[i]))
        sizes = array("I", (self._sizes.get(i, 0) for i in ids))
        return ids, {"keys": keys, "key_lens": key_lens, "sigs": sigs, "sig_lens": sig_lens, "sizes": sizes}

    def to_state(self) -> dict[str, Any]:
        """Flat arrays (base64 of native bytes) in JSON, format 1: one decode on load, not one
        per item. For a snapshot that keeps everything inside itself."""
        ids, arrays = self._flat()
        return {
            "format": 1,
            "byteorder": sys.byteorder,
            "ids": ids,
            **{key: base64.b64encode(arr.tobytes()).decode("ascii") for key, arr in arrays.items()},
        }

    def to_arrays(self) -> dict[str, memoryview] | None:
        """The same arrays as raw native bytes, and the ids joined by newlines, for a binary
        file beside the snapshot (`from_state` reads them back as format 2). None if an id
        holds a newline."""
        ids, arrays = self._flat()
        joined = "\n".join(ids)
        if joined.count("\n") != max(len(ids) - 1, 0):
            return None
        out = {"ids": memoryview(joined.encode("utf-8", "surrogatepass"))}
        out.update((key, memoryview(arr)) for key, arr in arrays.items())
        return out

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> DedupIndex:
        """Inverse of `to_state` (format 1: base64 in JSON) or of `to_arrays` (format 2: the
        arrays as buffers, e.g. memory-mapped from the index file, with "format": 2 and the
        "byteorder" they were written in)."""
        fmt = state.get("format")
        if fmt not in (1, 2):
            raise ValueError("unknown dedup state format")
        swap = state["byteorder"] != sys.byteorder

        def read(key: str, code: str) -> array[int]:
            arr = array(code)
            value = state[key]
            arr.frombytes(base64.b64decode(value) if fmt == 1 else memoryview(value).cast("B"))
            if swap and arr.itemsize > 1:
                arr.byteswap()
            return arr

        self = cls()
        keys, key_lens = read("keys", "I"), read("key_lens", "B")
        sigs, sig_lens = read("sigs", "I"), read("sig_lens", "B")
        sizes = read("sizes", "I")
        ids = state["ids"] if fmt == 1 else _ids_of(state["ids"])
        if not isinstance(ids, list) or not len(ids) == len(key_lens) == len(sig_lens) == len(sizes):
            raise ValueError("dedup state is inconsistent")
        if sum(key_lens) != len(keys) or sum(sig_lens) != len(sigs) or not all(isinstance(i, str) for i in ids):
            raise ValueError("dedup state is inconsistent")
        key_list = keys.tolist()
        key_ends, sig_ends = accumulate(key_lens), accumulate(sig_lens)
        self._keys = {i: tuple(key_list[e - n : e]) for i, e, n in zip(ids, key_ends, key_lens, strict=True)}
        self._sigs = {i: sigs[e - n : e] for i, e, n in zip(ids, sig_ends, sig_lens, strict=True)}
        self._sizes = dict(zip(ids, sizes, strict=True))
        # Filing keys one _file call at a time is a large share of a cold start: group them
        # first, then make each bucket once.
        groups: dict[int, list[str]] = {}
        for key, item_id in zip(key_list, chain.from_iterable(map(repeat, ids, key_lens)), strict=True):
            group = groups.get(key)
            if group is None:
                groups[key] = [item_id]
            else:
                group.append(item_id)
        for key, group in groups.items():
            members = set(group) if len(group) > 1 else None
            self._buckets[key] = group[0] if members is None or len(members) == 1 else members
        return self

    def remove(self, item_id: str) -> None:
        self._sig_set = None
        self._sigs.pop(item_id, None)
        self._sizes.pop(item_id, None)
        keys = self._keys.pop(item_id, ())
        buckets = self._buckets
        for key in keys:
            bucket = buckets.get(key)
            if bucket is None:
                continue
            if isinstance(bucket, str):
                if bucket == item_id:
                    del buckets[key]
                continue
            bucket.discard(item_id)
            if len(bucket) == 1:
                buckets[key] = next(iter(bucket))
            elif not bucket:
                del buckets[key]

    def candidates(self, item_id: str) -> set[str]:
        out: set[str] = set()
        for key in self._keys.get(item_id, ()):
            bucket = self._buckets.get(key)
            if bucket is None:
                continue
            if isinstance(bucket, str):
                out.add(bucket)
            elif len(bucket) <= C.DEDUP_MAX_BUCKET:
                out |= bucket
        out.discard(item_id)
        return out


def json_state(state: dict[str, Any]) -> dict[str, Any]:
    """A saved state of either format as format 1 (JSON only), without building buckets."""
    if state.get("format") != 2:
        return state
    return {
        "format": 1,
        "byteorder": state["byteorder"],
        "ids": _ids_of(state["ids"]),
        **{key: base64.b64encode(memoryview(state[key]).cast("B")).decode("ascii") for key in ARRAY_KEYS},
    }


def _ids_of(buffer: Any) -> list[str]:
    """Format 2's ids: one buffer of them joined by newlines (`to_arrays`)."""
    text = bytes(memoryview(buffer).cast("B")).decode("utf-8", "surrogatepass")
    return text.split("\n") if text else []


# The arrays of a saved state besides its ids; format 2 keeps each, and the ids, as a buffer.
ARRAY_KEYS = ("keys", "key_lens", "sigs", "sig_lens", "sizes")
BUFFER_KEYS = ("ids", *ARRAY_KEYS)
