import zlib
from itertools import accumulate
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.search import vocab as vocab_module
from compactor.search.vocab import Vocab


def _live(v: Vocab, gone: set[int]) -> np.ndarray:
    return np.array([tid not in gone for tid in range(len(v))], dtype=bool)


def _reload(v: Vocab, live: np.ndarray) -> Vocab:
    state = v.to_state(live)  # views into v's arrays: copied, as a file holds them
    return Vocab.from_state(bytes(state["blob"]), bytes(state["lens"]), bytes(state["hashes"]))


def _roundtrip(v: Vocab, gone: set[int]) -> Vocab:
    return _reload(v, _live(v, gone))


def test_terms_keep_their_ids_through_settle_and_reload():
    v = Vocab()
    for tid, term in enumerate(["alpha", "beta", "gamma", "naïve", "x" * 128]):
        v.assign(term, tid)
    assert v.lookup(["beta", "nope", "naïve"]) == [1, -1, 3]
    v.settle(_live(v, set()))
    assert v.unsettled == 0 and v.settled == 5
    assert v.lookup(["beta", "nope", "naïve", "x" * 128]) == [1, -1, 3, 4]
    assert [v.name(t) for t in range(5)] == ["alpha", "beta", "gamma", "naïve", "x" * 128]
    v.assign("delta", 5)  # after a settle: in the overlay
    again = _roundtrip(v, set())
    assert again.lookup(["alpha", "delta", "gamma"]) == [0, 5, 2]
    assert again.name(5) == "delta"
    assert again.free_ids() == []


def test_a_released_id_is_not_found_and_can_be_reused():
    v = Vocab()
    for tid, term in enumerate(["alpha", "beta", "gamma"]):
        v.assign(term, tid)
    v.settle(_live(v, set()))
    v.release(1)
    assert v.get("beta") is None
    v.assign("omega", 1)
    assert v.get("omega") == 1 and v.get("beta") is None and v.name(1) == "omega"
    v.release(1)
    assert v.get("omega") is None
    again = _roundtrip(v, {1})
    assert again.get("beta") is None and again.get("omega") is None
    assert again.free_ids() == [1]
    assert again.lookup(["alpha", "gamma"]) == [0, 2]


def test_released_terms_leave_the_saved_state():
    v = Vocab()
    v.assign("keepme", 0)
    v.assign("secretword", 1)
    v.settle(_live(v, set()))
    v.release(1)
    blob = bytes(v.to_state(_live(v, {1}))["blob"])
    assert b"secretword" not in blob and b"keepme" in blob


def test_terms_with_the_same_crc_are_told_apart():
    with patch.object(vocab_module, "_crc", lambda data: 7):
        v = Vocab()
        terms = ["aa", "bb", "cc", "dd"]
        for tid, term in enumerate(terms):
            v.assign(term, tid)
        v.settle(_live(v, set()))
        assert v.lookup([*terms, "ee"]) == [0, 1, 2, 3, -1]
        v.release(0)
        v.assign("ff", 0)
        assert v.lookup(["aa", "ff", "dd"]) == [-1, 0, 3]


def test_inconsistent_state_is_refused():
    v = Vocab()
    v.assign("alpha", 0)
    state = v.to_state(_live(v, set()))
    with pytest.raises(ValueError, match="inconsistent"):
        Vocab.from_state(bytes(state["blob"]), np.array([9], dtype=np.uint32).tobytes(), bytes(state["hashes"]))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "release", "settle", "reload"]), st.integers(0, 30))))
def test_any_sequence_behaves_like_a_dict(ops):
    with patch.object(vocab_module, "_crc", lambda data: len(data) % 3):  # many shared hashes
        v = Vocab()
        model: dict[str, int] = {}
        free: list[int] = []
        for op, k in ops:
            term = f"t{k}"
            if op == "add" and term not in model:
                tid = free.pop() if free else len(v)
                v.assign(term, tid)
                model[term] = tid
            elif op == "release" and term in model:
                tid = model.pop(term)
                v.release(tid)
                free.append(tid)
            elif op in ("settle", "reload"):
                live = _live(v, set(free))
                if op == "settle":
                    v.settle(live)
                else:
                    v = _reload(v, live)
                    assert sorted(v.free_ids()) == sorted(free)
            probe = [f"t{i}" for i in range(31)]
            assert v.lookup(probe) == [model.get(t, -1) for t in probe]
            assert all(v.name(tid) == t for t, tid in model.items())


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), max_size=40),
    st.sampled_from([1, 3, 16, vocab_module.GATHER_CHUNK]),
    st.integers(0, 100),
)
def test_gather_concatenates_the_segments_for_any_chunk_size(segments, chunk, edge):
    src = np.arange(100, dtype=np.uint32) * 7
    starts = np.array([min(s, 100 - n) if n <= 100 else 0 for s, n in segments], dtype=np.uint64)
    lens = np.array([n for _, n in segments], dtype=np.uint32)
    want = [int(x) for s, n in zip(starts.tolist(), lens.tolist(), strict=True) for x in src[s : s + n]]
    with patch.object(vocab_module, "GATHER_CHUNK", chunk):
        got = vocab_module.gather(src, starts, lens)
        # The same segments when src arrives as two arrays, the second read past the first's end.
        split = vocab_module.gather(src[:edge], starts, lens, src[edge:])
    assert got.dtype == src.dtype and got.tolist() == want
    assert split.dtype == src.dtype and split.tolist() == want


def _settled_arrays(v: Vocab) -> dict[str, bytes]:
    return {
        "blob": bytes(v._blob),
        "lens": v._lens.tobytes(),
        "hashes": v.settled_hashes().tobytes(),
        "starts": v._starts.tobytes(),
        "order": v._order.tobytes(),
        "sorted": v._sorted.tobytes(),
    }


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["add", "add", "release", "settle", "reload"]), st.integers(0, 40))),
    st.sampled_from([1, 2, 5, vocab_module.INSERT_CHUNK]),
)
def test_a_settle_of_appended_terms_leaves_the_arrays_a_full_settle_leaves(ops, chunk):
    """The settle that only appends (`_settle_appended`, which inserts the new terms into
    the hash order in place, `chunk` entries a step) and the general one agree array for
    array, CRC ties included (the hash below makes many)."""
    with (
        patch.object(vocab_module, "_crc", lambda data: len(data) % 3),
        patch.object(vocab_module, "INSERT_CHUNK", chunk),
    ):
        fast, full = Vocab(), Vocab()
        model: dict[str, int] = {}
        free: list[int] = []
        for op, k in ops:
            term = f"t{k}" * (1 + k % 3)
            if op == "add" and term not in model:
                tid = free.pop() if free else len(fast)
                for v in (fast, full):
                    v.assign(term, tid)
                model[term] = tid
            elif op == "release" and term in model:
                tid = model.pop(term)
                for v in (fast, full):
                    v.release(tid)
                free.append(tid)
            elif op in ("settle", "reload"):
                live = _live(fast, set(free))
                fast.settle(live)
                with patch.object(Vocab, "_appends_only", lambda self, live: False):
                    full.settle(live)
                assert _settled_arrays(fast) == _settled_arrays(full)
                if op == "reload":
                    fast, full = _reload(fast, live), _reload(full, live)
            probe = [f"t{i}" * (1 + i % 3) for i in range(41)]
            assert fast.lookup(probe) == [model.get(t, -1) for t in probe]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 30), max_size=80),
    st.lists(st.integers(0, 30), max_size=40),
    st.sampled_from([1, 2, 5, vocab_module.INSERT_CHUNK]),
    st.booleans(),
)
def test_inserting_in_place_gives_what_np_insert_gives(old_keys, new_keys, chunk, loaded):
    """`_insert_into` (the hash order's insert at an appending settle) equals np.insert for
    any insert positions and chunk size, on an array the vocabulary owns (moved in place)
    and on a loaded one (copied first). Each entry is distinct, so a misplaced one shows."""
    at = np.searchsorted(
        np.sort(np.array(old_keys, dtype=np.uint32)), np.sort(np.array(new_keys, dtype=np.uint32)), side="right"
    )
    old = np.arange(len(old_keys), dtype=np.uint32)
    values = np.arange(1_000, 1_000 + len(new_keys), dtype=np.uint32)
    v = Vocab()
    v._order = np.frombuffer(old.tobytes(), dtype=np.uint32) if loaded else old.copy()
    with patch.object(vocab_module, "INSERT_CHUNK", chunk):
        v._insert_into("_order", at, values)
    assert v._order.tolist() == np.insert(old, at, values).tolist()


def test_a_load_of_new_terms_settles_by_appending():
    v = Vocab()
    for tid in range(50):
        v.assign(f"first{tid}", tid)
    v.settle(_live(v, set()))
    for tid in range(50, 120):
        v.assign(f"then{tid}", tid)
    with patch.object(Vocab, "_settle_appended", autospec=True, side_effect=Vocab._settle_appended) as appended:
        v.settle(_live(v, set()))
    assert appended.call_count == 1
    assert v.lookup(["first3", "then99", "nope"]) == [3, 99, -1]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=30, unique=True),
    st.lists(st.text(min_size=1, max_size=12), max_size=30, unique=True),
)
def test_terms_of_any_characters_keep_their_bytes_and_hashes_through_a_settle(first, then):
    """A settle encodes its new terms in one piece and cuts it by each term's UTF-8 length:
    non-ASCII and lone surrogates (which agent text carries) included, each term keeps its
    own bytes and CRC-32, found and named as before."""
    then = [t for t in then if t not in first]
    v = Vocab()
    for tid, term in enumerate(first):
        v.assign(term, tid)
    v.settle(_live(v, set()))
    for term in then:
        v.assign(term, len(v))
    v.settle(_live(v, set()))
    terms = [*first, *then]
    assert v.lookup(terms) == list(range(len(terms)))
    assert [v.name(tid) for tid in range(len(terms))] == terms
    encoded = [t.encode("utf-8", "surrogatepass") for t in terms]
    assert v._hashes is None  # made from the sorted ones when asked for
    assert v.settled_hashes().tolist() == [zlib.crc32(e) for e in encoded]
    assert bytes(v._blob) == b"".join(encoded)


def _add_terms(v: Vocab, names: dict[str, int], prefix: str, count: int) -> None:
    """Give `count` new terms the next ids, and note each term's id in `names`."""
    for _ in range(count):
        term = f"{prefix}{len(v)}"
        names[term] = len(v)
        v.assign(term, len(v))


def test_an_appending_settle_grows_the_blob_in_place_unless_it_is_read():
    """Appended terms' bytes go on the end of the blob the vocabulary owns, without a copy of
    it; while a reader holds a view of it (a snapshot writing it), a copy is made instead and
    the view keeps the bytes it reads."""
    v = Vocab()
    names: dict[str, int] = {}

    def grow(prefix: str, count: int) -> None:
        _add_terms(v, names, prefix, count)
        v.settle(_live(v, set()))

    grow("first", 40)
    grow("then", 30)  # the blob becomes the vocabulary's own here (a copy of what it was)
    owner = v._blob.obj
    grow("more", 30)
    assert v._blob.obj is owner and isinstance(owner, bytearray)
    held = v.to_state(_live(v, set()))["blob"]
    seen = bytes(held)
    grow("again", 30)
    assert v._blob.obj is not owner and bytes(held) == seen
    del held
    grow("last", 5)
    assert v.lookup(list(names)) == list(names.values()) and v.lookup(["absent"]) == [-1]
    assert all(v.name(tid) == term for term, tid in names.items())


def test_an_appending_settle_grows_the_term_arrays_in_place_unless_they_are_read():
    """Each new term's length, start and CRC-32 go on the end of the arrays the vocabulary
    owns, as its bytes go on the blob's (a copy beside the old starts, 2 MiB at 264k terms,
    was a 10k-item load's last settle's peak), and its place in the hash order is made in
    the arrays of that order. A loaded state's arrays (a file's, read in place) are copied
    at the first settle instead, as is an array a reader holds a view of, and the view keeps
    the values it reads. (Holding an array itself would stop numpy from
    growing it, so the test asks `_append_to` which way it went.)"""
    v = Vocab()
    names: dict[str, int] = {}
    ways: list[tuple[str, bool]] = []
    append_to = Vocab._append_to

    def spy(self: Vocab, name: str, extra: np.ndarray) -> bool:
        grown = append_to(self, name, extra)
        ways.append((name, grown))
        return grown

    def grow(prefix: str, count: int) -> dict[str, bool]:
        _add_terms(v, names, prefix, count)
        ways.clear()
        with patch.object(Vocab, "_append_to", spy):
            v.settle(_live(v, set()))
        return dict(ways)

    grow("first", 40)
    state = v.to_state(_live(v, set()))
    v = Vocab.from_state(
        bytes(state["blob"]),
        bytes(state["lens"]),
        bytes(state["hashes"]),
        derived=(bytes(state["starts"]), bytes(state["order"]), bytes(state["sorted"])),
    )
    del state
    every = ("_lens", "_starts", "_order", "_sorted")
    assert grow("then", 30) == dict.fromkeys(every, False)
    assert grow("more", 30) == dict.fromkeys(every, True)
    held = v.to_state(_live(v, set()))["lens"]
    seen = bytes(held)
    assert grow("again", 30) == {**dict.fromkeys(every, True), "_lens": False}
    assert bytes(held) == seen
    del held
    assert grow("last", 5) == dict.fromkeys(every, True)
    assert v.lookup(list(names)) == list(names.values()) and v.lookup(["absent"]) == [-1]
    assert all(v.name(tid) == term for term, tid in names.items())
    assert v.settled_hashes().tolist() == [zlib.crc32(term.encode()) for term in names]
    assert v._starts.tolist() == [0, *accumulate(len(term) for term in names)][:-1]


def test_a_new_term_released_before_the_settle_leaves_its_id_empty():
    """Terms added since the last settle are held by id; one released before the settle
    (its item forgotten at once) leaves a gap that the terms after it do not slide into,
    and its id can be given to another term after the settle."""
    v = Vocab()
    v.assign("kept", 0)
    v.settle(_live(v, set()))
    for tid, term in enumerate(("gone", "after", "last"), start=1):
        v.assign(term, tid)
    v.release(1)
    v.settle(_live(v, {1}))
    assert v.lookup(["kept", "gone", "after", "last"]) == [0, -1, 2, 3]
    assert [v.name(t) for t in (0, 2, 3)] == ["kept", "after", "last"] and v.free_ids() == [1]
    v.assign("again", 1)
    assert v.lookup(["again", "after"]) == [1, 2] and v.name(1) == "again"
    v.settle(_live(v, set()))
    assert v.lookup(["again", "after", "last"]) == [1, 2, 3]


def _reload_derived(v: Vocab, gone: frozenset[int] = frozenset()) -> Vocab:
    """A reload that reads the saved starts, order and sorted hashes too, as a start does."""
    state = v.to_state(_live(v, set(gone)))
    return Vocab.from_state(
        bytes(state["blob"]),
        bytes(state["lens"]),
        bytes(state["hashes"]),
        derived=(bytes(state["starts"]), bytes(state["order"]), bytes(state["sorted"])),
    )


def test_term_starts_take_four_bytes_until_the_blob_passes_four_gib():
    """Starts are 4 bytes while the blob fits under 4 GiB (8 MiB less at 2M terms), 8 beyond;
    a save keeps either width and a load tells them apart by size. The 4 GiB line is moved
    to 300 bytes here to cross it."""
    real = vocab_module.offsets_dtype

    def low_line(end: int) -> type:
        return np.uint32 if end <= 300 else np.uint64

    names: dict[str, int] = {}
    v = Vocab()
    _add_terms(v, names, "first", 20)
    v.settle(_live(v, set()))
    assert v._starts.dtype == np.uint32 and v._starts.nbytes == 4 * len(v)
    with patch.object(vocab_module, "offsets_dtype", low_line):
        for prefix, count in (("few", 3), ("crossing", 40), ("past", 10)):
            _add_terms(v, names, prefix, count)
            v.settle(_live(v, set()))  # appending settles
            wide = len(v._blob) > 300
            assert v._starts.dtype == (np.uint64 if wide else np.uint32)
            assert v.lookup(list(names)) == list(names.values())
        assert v._starts.dtype == np.uint64
        loaded = _reload_derived(v)
        assert loaded._starts.dtype == np.uint64 and loaded._starts.tolist() == v._starts.tolist()
        v.release(names.pop("first3"))
        v.settle(_live(v, {3}))  # a full settle: starts made anew
        assert v._starts.dtype == np.uint64
        assert all(v.name(tid) == term for term, tid in names.items())
    assert real is vocab_module.offsets_dtype
    # A file of an earlier version holds 8-byte starts under the line: read as they are, and
    # narrowed by the next settle.
    state = v.to_state(_live(v, {3}))
    assert v._starts.dtype == np.uint32  # the settle of the save narrowed them already
    v = Vocab.from_state(
        bytes(state["blob"]),
        bytes(state["lens"]),
        bytes(state["hashes"]),
        derived=(v._starts.astype(np.uint64).tobytes(), bytes(state["order"]), bytes(state["sorted"])),
    )
    assert v._starts.dtype == np.uint64
    assert all(v.name(tid) == term for term, tid in names.items())
    _add_terms(v, names, "after", 5)
    v.settle(_live(v, {3}))
    assert v._starts.dtype == np.uint32
    assert v.lookup(list(names)) == list(names.values())
    assert all(v.name(tid) == term for term, tid in names.items())
    assert _reload_derived(v, frozenset({3}))._starts.dtype == np.uint32
