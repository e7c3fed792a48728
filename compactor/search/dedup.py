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
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .analyze import unspaced_pair

# Jaccard of word sets above 0.7, as in the reference.
DEDUP_JACCARD: Final = 0.7
# Candidates are items sharing one of their K smallest word hashes: for Jaccard J the chance
# that a true pair shares none is (1 - J) ** K, i.e. < 0.8% at J = 0.7 with K = 4.
DEDUP_SKETCH_K: Final = 4
# A bucket larger than this is a hash of a ubiquitous word; checking it would be O(n).
DEDUP_MAX_BUCKET: Final = 64
# Bottom-64 min-hash signature: Jaccard estimated within ~0.06 (one standard deviation at
# J = 0.7), in 320 bytes an item instead of the whole word set.
DEDUP_SIGNATURE: Final = 64
# The near-duplicate buckets merge the items added since their saved state into its flat
# arrays once there are this many, or an eighth as many as it holds if that is more: what
# waits in dicts costs ~750 bytes an item against ~400 merged, and each merge is O(items), so
# a step that grows with the state keeps their total linear (as INDEX_SETTLE_* for the index).
DEDUP_MERGE_MIN: Final = 4_096
DEDUP_MERGE_SHARE: Final = 8

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


def _sketch_of(hashed: dict[str, int], k: int = DEDUP_SKETCH_K) -> tuple[int, ...]:
    """The k smallest hashes of the words that say something (3+ letters, not a stop word, or
    a character pair of Chinese, Thai...: without them such a text had no sketch, so no
    near-duplicate candidates)."""
    # sorted() of a set of ~100 ints is a C sort, cheaper than heapq's Python-level selection.
    return tuple(sorted({h for w, h in hashed.items() if (len(w) >= 3 or unspaced_pair(w)) and w not in _STOP})[:k])


def sketch(words: Iterable[str], k: int = DEDUP_SKETCH_K) -> tuple[int, ...]:
    return _sketch_of(_hashed(words), k)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class _Saved:
    """A saved state, read in place: per row (item) its keys, signature and word count in
    flat arrays (memory-mapped from the index file, or decoded from base64), the rows by id,
    and the rows removed since (`dead`). The buckets are these keys sorted, with their rows,
    made at the first `rows_of`. Loading an index of 100k items into dicts and sets took
    ~1.3 s and ~60 MiB at the first write after a start; this takes a few milliseconds."""

    __slots__ = ("_bkeys", "_brows", "dead", "ids", "key_starts", "keys", "row", "sig_starts", "sigs", "sizes")

    def __init__(self, ids: list[str], arrays: Mapping[str, Any]) -> None:
        """`arrays`: numpy arrays by name (ARRAY_KEYS), of the types `array_types` gives."""
        import numpy as np

        self.ids = ids
        self.row = {item_id: r for r, item_id in enumerate(ids)}
        if len(self.row) != len(ids):
            raise ValueError("dedup state is inconsistent: an id is listed twice")
        self.keys, self.sigs, self.sizes = arrays["keys"], arrays["sigs"], arrays["sizes"]
        self.key_starts = np.concatenate(([0], np.cumsum(arrays["key_lens"], dtype=np.int64)))
        self.sig_starts = np.concatenate(([0], np.cumsum(arrays["sig_lens"], dtype=np.int64)))
        self.dead: set[int] = set()
        self._bkeys: Any = None
        self._brows: Any = None

    def alive(self, item_id: str) -> int | None:
        r = self.row.get(item_id)
        return None if r is None or r in self.dead else r

    def keys_of(self, r: int) -> tuple[int, ...]:
        return tuple(self.keys[self.key_starts[r] : self.key_starts[r + 1]].tolist())

    def sig_of(self, r: int) -> list[int]:
        return self.sigs[self.sig_starts[r] : self.sig_starts[r + 1]].tolist()  # type: ignore[no-any-return]

    def drop_buckets(self) -> None:
        """Free the sorted bucket arrays (8 bytes a key); the next `rows_of` makes them again."""
        self._bkeys = self._brows = None

    def rows_of(self, key: int, most: int) -> list[int] | None:
        """The live rows filed under `key`, or None when they are more than `most`."""
        import numpy as np

        if self._bkeys is None:
            all_rows = np.repeat(np.arange(len(self.ids), dtype=np.uint32), np.diff(self.key_starts))
            order = np.argsort(self.keys, kind="stable")
            self._bkeys, self._brows = self.keys[order], all_rows[order]
        # A key of the arrays' own type: a Python int made numpy cast all the keys per call.
        probe = np.uint32(key)
        lo = int(np.searchsorted(self._bkeys, probe, "left"))
        hi = int(np.searchsorted(self._bkeys, probe, "right"))
        if hi - lo > most + len(self.dead):
            return None  # more than `most` live whichever rows are dead
        rows: list[int] = [r for r in self._brows[lo:hi].tolist() if r not in self.dead]
        return rows if len(rows) <= most else None

    def flat(self) -> tuple[list[str], dict[str, Any]]:
        """The live rows' ids and arrays, in row order (`DedupIndex._flat`): with no row
        removed, its own arrays, to read and not to change."""
        import numpy as np

        key_lens, sig_lens = np.diff(self.key_starts), np.diff(self.sig_starts)
        if not self.dead:  # the arrays themselves: a masked copy of each was a third of a merge's peak
            return list(self.ids), {
                "keys": self.keys,
                "key_lens": key_lens.astype(np.uint8),
                "sigs": self.sigs,
                "sig_lens": sig_lens.astype(np.uint8),
                "sizes": self.sizes,
            }
        live = np.ones(len(self.ids), dtype=bool)
        live[np.fromiter(self.dead, dtype=np.int64, count=len(self.dead))] = False
        return [i for i, ok in zip(self.ids, live.tolist(), strict=True) if ok], {
            "keys": self.keys[np.repeat(live, key_lens)],
            "key_lens": key_lens[live].astype(np.uint8),
            "sigs": self.sigs[np.repeat(live, sig_lens)],
            "sig_lens": sig_lens[live].astype(np.uint8),
            "sizes": self.sizes[live],
        }


class DedupIndex:
    """Buckets of item ids keyed by sketch hashes. Incremental: add/remove touch K buckets.

    A loaded index keeps the saved state as it was read (`_Saved`); the dicts below hold only
    the items added since. An item is in one or the other: re-adding a saved one retires its
    saved row."""

    def __init__(self) -> None:
        # A bucket with one member holds its id itself: nearly all buckets have one member,
        # and an empty set alone costs 216 bytes.
        self._buckets: dict[int, str | set[str]] = {}
        self._keys: dict[str, tuple[int, ...]] = {}
        self._sigs: dict[str, array[int] | list[int]] = {}
        self._sizes: dict[str, int] = {}
        self._saved: _Saved | None = None
        self._sig_set: tuple[str, frozenset[int]] | None = None  # see similarity()

    def __contains__(self, item_id: str) -> bool:
        return item_id in self._keys or self._saved_row(item_id) is not None

    def _saved_row(self, item_id: str) -> int | None:
        """The item's live row in the saved state, if that is where it is filed."""
        return self._saved.alive(item_id) if self._saved is not None else None

    def ids(self) -> set[str]:
        """Every item filed here."""
        out = set(self._keys)
        saved = self._saved
        if saved is not None:
            out.update(i for r, i in enumerate(saved.ids) if r not in saved.dead)
        return out

    def add(self, item_id: str, words: Iterable[str]) -> None:
        if item_id in self:
            self.remove(item_id)
        self._sig_set = None
        hashed = _hashed(words)  # once for both the sketch and the signature
        keys = _sketch_of(hashed)
        self._keys[item_id] = keys
        hashes = set(hashed.values())
        self._sigs[item_id] = array("I", sorted(hashes)[:DEDUP_SIGNATURE])
        self._sizes[item_id] = len(hashes)
        for key in keys:
            self._file(key, item_id)
        saved = len(self._saved.ids) if self._saved is not None else 0
        if len(self._keys) > max(DEDUP_MERGE_MIN, saved // DEDUP_MERGE_SHARE):
            self.merge()

    def merge(self) -> None:
        """Move the items added since the saved state into it, as flat arrays (`_Saved`), and
        drop its removed rows. Nothing found changes. The dicts and buckets cost ~750 bytes
        an item and the flat rows ~400; each merge is O(items) in numpy, and as the saved
        state grows by a share of itself each time their total stays linear."""
        import numpy as np

        if self._saved is not None:
            self._saved.drop_buckets()  # made anew for the new rows: not held through the merge
        ids, arrays = self._flat()
        self._buckets, self._keys, self._sigs, self._sizes = {}, {}, {}, {}
        self._sig_set = None
        types = array_types()
        self._saved = _Saved(ids, {k: np.frombuffer(a, dtype=types[k]) for k, a in arrays.items()}) if ids else None

    def _file(self, key: int, item_id: str) -> None:
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = item_id
        elif isinstance(bucket, str):
            if bucket != item_id:
                self._buckets[key] = {bucket, item_id}
        else:
            bucket.add(item_id)

    def _entry(self, item_id: str) -> tuple[int, array[int] | list[int]]:
        """(word count, signature) of a filed item; (0, []) for one not filed."""
        size = self._sizes.get(item_id)
        if size is not None:
            return size, self._sigs[item_id]
        r = self._saved_row(item_id)
        if r is None or self._saved is None:
            return 0, []
        return int(self._saved.sizes[r]), self._saved.sig_of(r)

    def similarity(self, a: str, b: str) -> float:
        """Jaccard of two items' word sets: exact when both fit in a signature, else the
        bottom-k estimate (the share of the union's k smallest hashes found in both)."""
        (na, sa), (nb, sb) = self._entry(a), self._entry(b)
        if not na or not nb or min(na, nb) <= DEDUP_JACCARD * max(na, nb):
            # |A and B| / |A or B| <= min / max: sets this different in size cannot be near-duplicates.
            return 0.0 if na or nb else 1.0
        cached = self._sig_set
        if cached is None or cached[0] != a:
            # A caller checks one item against each of its candidates: its set is made once.
            cached = self._sig_set = (a, frozenset(sa))
        set_a = cached[1]
        both = set_a.intersection(sb)
        if na <= len(sa) and nb <= len(sb):
            return len(both) / (na + nb - len(both))
        union = sorted(set_a.union(sb))[:DEDUP_SIGNATURE]
        return len(both.intersection(union)) / len(union)

    def _flat(self) -> tuple[list[str], dict[str, array[int]]]:
        """The ids, and per id in that order its keys, signature and word count, as flat
        arrays (with the length of each id's run): the saved rows still filed, then the rest."""
        ids: list[str] = []
        out = {
            "keys": array("I"),
            "key_lens": array("B"),
            "sigs": array("I"),
            "sig_lens": array("B"),
            "sizes": array("I"),
        }
        if self._saved is not None:
            import numpy as np

            ids, saved = self._saved.flat()
            for name, arr in out.items():
                arr.frombytes(saved[name].view(np.uint8))  # contiguous (made just now, or as read): read in place
        for i, keys in self._keys.items():
            ids.append(i)
            out["keys"].extend(keys)
            out["key_lens"].append(len(keys))
            out["sigs"].extend(self._sigs[i])
            out["sig_lens"].append(len(self._sigs[i]))
            out["sizes"].append(self._sizes.get(i, 0))
        return ids, out

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
        "byteorder" they were written in). The arrays are read in place, not copied (unless
        their byte order must be swapped)."""
        import numpy as np

        fmt = state.get("format")
        if fmt not in (1, 2):
            raise ValueError("unknown dedup state format")
        swap = state["byteorder"] != sys.byteorder

        def read(key: str, dtype: Any) -> Any:
            value = state[key]
            raw = base64.b64decode(value) if fmt == 1 else memoryview(value).cast("B")
            if len(raw) % np.dtype(dtype).itemsize:
                raise ValueError("dedup state is inconsistent: an array has a partial element")
            arr = np.frombuffer(raw, dtype=dtype)
            return arr.byteswap() if swap and arr.itemsize > 1 else arr

        self = cls()
        arrays = {key: read(key, dtype) for key, dtype in array_types().items()}
        ids = state["ids"] if fmt == 1 else _ids_of(state["ids"])
        if not isinstance(ids, list) or not len(ids) == len(arrays["key_lens"]) == len(arrays["sig_lens"]) == len(
            arrays["sizes"]
        ):
            raise ValueError("dedup state is inconsistent")
        if int(arrays["key_lens"].sum()) != len(arrays["keys"]) or int(arrays["sig_lens"].sum()) != len(arrays["sigs"]):
            raise ValueError("dedup state is inconsistent")
        if fmt == 1 and not all(isinstance(i, str) for i in ids):  # format 2's are decoded text
            raise ValueError("dedup state is inconsistent")
        if ids:
            self._saved = _Saved(ids, arrays)
        return self

    def remove(self, item_id: str) -> None:
        self._sig_set = None
        if item_id not in self._keys:
            r = self._saved_row(item_id)
            if r is not None and self._saved is not None:
                self._saved.dead.add(r)
            return
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
        """The items sharing a key with this one, in buckets of at most DEDUP_MAX_BUCKET."""
        saved = self._saved
        keys = self._keys.get(item_id)
        if keys is None:
            r = self._saved_row(item_id)
            keys = saved.keys_of(r) if saved is not None and r is not None else ()
        out: set[str] = set()
        most = DEDUP_MAX_BUCKET
        for key in keys:
            bucket = self._buckets.get(key)
            held = 0 if bucket is None else 1 if isinstance(bucket, str) else len(bucket)
            if held > most:
                continue  # a key too common to say anything (not even copied)
            if saved is not None:
                rows = saved.rows_of(key, most - held)
                if rows is None:
                    continue
                out.update(saved.ids[r] for r in rows)
            if isinstance(bucket, str):
                out.add(bucket)
            elif bucket is not None:
                out |= bucket
        out.discard(item_id)
        return out

    def buckets(self) -> dict[int, frozenset[str]]:
        """Every key with the items filed under it (for checks: O(items))."""
        out: dict[int, set[str]] = {}
        ids, arrays = self._flat()
        pos = 0
        for item_id, n in zip(ids, arrays["key_lens"], strict=True):
            for key in arrays["keys"][pos : pos + n]:
                out.setdefault(key, set()).add(item_id)
            pos += n
        return {key: frozenset(members) for key, members in out.items()}


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


def array_types() -> dict[str, Any]:
    """Each array's numpy type, by name (the array module codes of `DedupIndex._flat`)."""
    import numpy as np

    return {"keys": np.uint32, "key_lens": np.uint8, "sigs": np.uint32, "sig_lens": np.uint8, "sizes": np.uint32}


BUFFER_KEYS = ("ids", *ARRAY_KEYS)
