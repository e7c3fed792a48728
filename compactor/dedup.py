"""Near-duplicate candidates without an O(n^2) pass.

Each item is filed under the K smallest hashes of its word set (a bottom-K min-hash sketch).
Two sets with Jaccard J share their union's minimum with probability J; if the i-th smallest
hash of the union lies in both sets it is among both items' K smallest, so a pair with J > 0.7
shares a bucket with probability >= 1 - 0.3**K. Candidates are then checked exactly.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Iterable

from . import constants as C


def _word_hash(word: str) -> int:
    # crc32 is stable across processes (unlike hash()), and fast in C.
    return zlib.crc32(word.encode("utf-8", "surrogatepass"))


def sketch(words: Iterable[str], k: int = C.DEDUP_SKETCH_K) -> tuple[int, ...]:
    return tuple(heapq.nsmallest(k, {_word_hash(w) for w in words}))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class DedupIndex:
    """Buckets of item ids keyed by sketch hashes. Incremental: add/remove touch K buckets."""

    def __init__(self) -> None:
        self._buckets: dict[int, set[str]] = {}
        self._keys: dict[str, tuple[int, ...]] = {}

    def __contains__(self, item_id: str) -> bool:
        return item_id in self._keys

    def add(self, item_id: str, words: Iterable[str]) -> None:
        if item_id in self._keys:
            self.remove(item_id)
        keys = sketch(words)
        self._keys[item_id] = keys
        for key in keys:
            self._buckets.setdefault(key, set()).add(item_id)

    def remove(self, item_id: str) -> None:
        keys = self._keys.pop(item_id, ())
        for key in keys:
            bucket = self._buckets.get(key)
            if bucket is not None:
                bucket.discard(item_id)
                if not bucket:
                    del self._buckets[key]

    def candidates(self, item_id: str) -> set[str]:
        out: set[str] = set()
        for key in self._keys.get(item_id, ()):
            bucket = self._buckets.get(key, set())
            if len(bucket) <= C.DEDUP_MAX_BUCKET:
                out |= bucket
        out.discard(item_id)
        return out
