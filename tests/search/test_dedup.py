"""DedupIndex buckets: whatever the sequence of adds and removes, candidates are exactly the
items sharing a sketch key (in buckets no larger than DEDUP_MAX_BUCKET), also after a reload."""

import sys
from unittest.mock import patch

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.search import dedup as dedup_mod
from compactor.search.dedup import DedupIndex, json_state, sketch

_WORDS = [f"word{i:02d}" for i in range(12)]
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "remove"]), st.integers(0, 6), st.sets(st.sampled_from(_WORDS), max_size=6)
    ),
    max_size=50,
)


def _expected(model: dict[str, tuple[int, ...]], item_id: str) -> set[str]:
    out: set[str] = set()
    for key in model.get(item_id, ()):
        members = {i for i, keys in model.items() if key in keys}
        if len(members) <= dedup_mod.DEDUP_MAX_BUCKET:
            out |= members
    out.discard(item_id)
    return out


def _entries(index: DedupIndex) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], int]]:
    """Each filed id's keys, signature and word count, however the index keeps them."""
    ids, arrays = index._flat()
    out = {}
    k = g = 0
    for n, item_id in enumerate(ids):
        nk, ng = arrays["key_lens"][n], arrays["sig_lens"][n]
        out[item_id] = (tuple(arrays["keys"][k : k + nk]), tuple(arrays["sigs"][g : g + ng]), arrays["sizes"][n])
        k, g = k + nk, g + ng
    return out


def _reloads(index: DedupIndex) -> list[DedupIndex]:
    """The index read back from JSON (format 1) and from its binary arrays (format 2)."""
    arrays = index.to_arrays()
    assert arrays is not None
    binary = {"format": 2, "byteorder": sys.byteorder, **{k: bytes(v) for k, v in arrays.items()}}
    assert json_state(binary) == index.to_state()
    return [DedupIndex.from_state(orjson.loads(orjson.dumps(index.to_state()))), DedupIndex.from_state(binary)]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    _OPS, _OPS, st.sampled_from([2, 3, dedup_mod.DEDUP_MAX_BUCKET]), st.sampled_from([0, 2, dedup_mod.DEDUP_MERGE_MIN])
)
def test_candidates_follow_shared_keys_through_adds_removes_and_reload(before, after, max_bucket, merge_min):
    """Adds and removes, a reload (the saved state read in place), then more adds and removes
    on the original and on both reloads: all three agree with the model throughout, whether
    the items added since merge into the flat rows after every add, every few, or never."""
    with patch.object(dedup_mod, "DEDUP_MAX_BUCKET", max_bucket), patch.object(dedup_mod, "DEDUP_MERGE_MIN", merge_min):
        index = DedupIndex()
        model: dict[str, tuple[int, ...]] = {}
        apply = [index]

        def run(ops: list[tuple[str, int, set[str]]]) -> None:
            for op, key, words in ops:
                item_id = f"m{key}"
                for each in apply:
                    if op == "add":
                        each.add(item_id, words)
                    else:
                        each.remove(item_id)
                if op == "add":
                    model[item_id] = sketch(words)
                else:
                    model.pop(item_id, None)

        run(before)
        apply.extend(_reloads(index))
        for stage in (before, after):
            if stage is after:
                run(after)
            for each in apply:
                assert each.buckets() == index.buckets()
                assert _entries(each) == _entries(index)
                assert each.ids() == set(model)
                for item_id in [f"m{k}" for k in range(7)]:
                    assert each.candidates(item_id) == _expected(model, item_id)
                    assert (item_id in each) == (item_id in model)
                    for other in [f"m{k}" for k in range(7)]:
                        assert each.similarity(item_id, other) == index.similarity(item_id, other)
            # Saved again after changes on top of a reload, and read back once more.
            for each in apply[1:]:
                for again in _reloads(each):
                    assert again.buckets() == index.buckets() and _entries(again) == _entries(index)
        # No empty buckets linger, and no bucket names a removed item.
        for bucket in index._buckets.values():
            members = {bucket} if isinstance(bucket, str) else bucket
            assert members
            assert members <= model.keys()


def test_a_loaded_index_has_the_same_buckets_as_the_one_saved():
    """Loading files every key at once (shared keys become sets, others hold their one id):
    the buckets must be exactly those the adds and removes left."""
    index = DedupIndex()
    words = {f"i{n}": {f"word{n}_{k}" for k in range(30)} for n in range(40)}
    for item_id, ws in words.items():
        index.add(item_id, ws)
    for n in range(0, 40, 4):  # near-duplicates share most keys; some lose their partner again
        index.add(f"copy{n}", words[f"i{n}"] | {"extra_word"})
    for n in range(0, 40, 8):
        index.remove(f"i{n}")
    assert any(isinstance(b, set) for b in index._buckets.values())
    assert any(isinstance(b, str) for b in index._buckets.values())
    for reloaded in _reloads(index):
        assert reloaded.buckets() == index.buckets()
        assert _entries(reloaded) == _entries(index)
        assert reloaded.candidates("copy4") == index.candidates("copy4") == {"i4"}


def test_a_corrupt_saved_dedup_state_is_refused_at_load():
    index = DedupIndex()
    index.add("a", {"alpha_word", "beta_word", "gamma_word"})
    state = orjson.loads(orjson.dumps(index.to_state()))
    state["keys"] = ""  # lengths that no longer add up to the keys
    with pytest.raises(ValueError, match="inconsistent"):
        DedupIndex.from_state(state)


def _restarted_with_a_near_duplicate(tmp_path):
    from compactor.store import Store

    text = "retry the payment webhook with exponential backoff when stripe returns 429 " * 4
    first = Store(state_dir=tmp_path)
    original = first.store(text + "for invoices").item.id
    for i in range(5):
        first.store(f"unrelated note {i} about kubernetes ingress timeouts and nginx {i}")
    first.snapshot()
    saved = first._s.dedup.to_state()
    first.close()
    return Store(state_dir=tmp_path), text, original, saved


def test_a_restarted_store_notices_a_near_duplicate_of_a_loaded_item(tmp_path):
    """The buckets come back with a restart: the first store after it finds its near-duplicate
    among the loaded items."""
    again, text, original, _saved = _restarted_with_a_near_duplicate(tmp_path)
    copy = again.store(text + "for refunds").item
    assert again.get(copy.id).dup_of == original


def test_a_start_that_only_reads_builds_no_buckets_and_saves_them_as_read(tmp_path):
    """The buckets are only needed by writes and compaction: a start keeps them as saved until
    then, and a snapshot written meanwhile carries them unchanged."""
    again, _text, _original, saved = _restarted_with_a_near_duplicate(tmp_path)
    with patch.object(DedupIndex, "from_state", side_effect=AssertionError("built at start")):
        assert again.query("payment webhook backoff")
        again.snapshot()
    again.close()
    from compactor.store import Store

    reopened = Store(state_dir=tmp_path)
    assert reopened._s.dedup.to_state() == saved
    assert reopened.check_derived() == []


def test_saved_buckets_unusable_at_the_first_write_are_rebuilt_from_the_index(tmp_path, caplog):
    again, text, original, _saved = _restarted_with_a_near_duplicate(tmp_path)
    with patch.object(DedupIndex, "from_state", side_effect=ValueError("inconsistent lengths")):
        copy = again.store(text + "for refunds").item
    assert "near-duplicate buckets unusable" in caplog.text
    assert again.get(copy.id).dup_of == original
    assert again.check_derived() == []


def _reference_similarity(index: DedupIndex, a: str, b: str) -> float:
    """similarity() as first written: both signatures made into sets on every call."""
    na, nb = index._sizes.get(a, 0), index._sizes.get(b, 0)
    if not na or not nb or min(na, nb) <= dedup_mod.DEDUP_JACCARD * max(na, nb):
        return 0.0 if na or nb else 1.0
    sa, sb = index._sigs[a], index._sigs[b]
    both = set(sa) & set(sb)
    if na <= len(sa) and nb <= len(sb):
        return len(both) / (na + nb - len(both))
    union = sorted(set(sa) | set(sb))[: dedup_mod.DEDUP_SIGNATURE]
    return sum(1 for h in union if h in both) / len(union)


_SIM_WORDS = st.lists(st.sampled_from([f"word{i}" for i in range(150)]), min_size=1, max_size=140)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), _SIM_WORDS), min_size=2, max_size=25))
def test_similarity_is_exact_or_estimated_as_before_through_re_adds(writes):
    """similarity() keeps the first item's signature set between calls; re-adding or removing
    that item must not leave a stale one (sets over 64 words take the estimate path)."""
    index = DedupIndex()
    for n, (key, words) in enumerate(writes):
        if n % 5 == 4 and f"i{key}" in index:
            index.remove(f"i{key}")
        else:
            index.add(f"i{key}", words)
        for a in (f"i{k}" for k in range(5)):
            for b in (f"i{k}" for k in range(5)):
                if a in index and b in index:
                    assert index.similarity(a, b) == _reference_similarity(index, a, b)


def test_an_id_with_a_newline_keeps_the_buckets_in_json():
    index = DedupIndex()
    index.add("odd\nid", {"alpha_word", "beta_word"})
    assert index.to_arrays() is None
    assert DedupIndex.from_state(index.to_state()).buckets() == index.buckets()


def test_the_first_write_after_a_start_reads_the_saved_buckets_in_place(tmp_path):
    """A start keeps the buckets as saved; the first write used to turn every saved item into
    dict entries, sets and arrays (~1.1 s and ~120 MiB at 100k items). Now it files only what
    it writes, and the saved items are still found as near-duplicates and forgotten."""
    from compactor.store import Store

    first = Store(state_dir=tmp_path)
    texts = [f"note {i}: the {word} service retries the upstream call after a timeout" for i, word in enumerate(_WORDS)]
    ids = [first.store(text).item.id for text in texts]
    first.snapshot()
    first.close()
    again = Store(state_dir=tmp_path)
    copy = again.store(texts[3] + " twice").item
    dedup = again._s.dedup
    assert dedup._saved is not None and set(dedup._keys) == {copy.id}
    assert again.get(copy.id).dup_of == ids[3]
    again.forget(ids[5])
    assert ids[5] not in dedup and dedup.ids() == (set(ids) - {ids[5]}) | {copy.id}
    assert again.check_derived() == []


def test_a_store_finds_near_duplicates_of_items_its_buckets_merged_into_flat_rows(tmp_path):
    """Past DEDUP_MERGE_MIN items the buckets move into flat rows while the store writes;
    a later copy of a merged item is still noticed, a forgotten one leaves, and a restart
    agrees."""
    from compactor.store import Store

    texts = [f"note {i}: the {word} service retries the upstream call after a timeout" for i, word in enumerate(_WORDS)]
    with patch.object(dedup_mod, "DEDUP_MERGE_MIN", 3):
        store = Store(state_dir=tmp_path)
        ids = [store.store(text).item.id for text in texts]
        dedup = store._s.dedup
        assert dedup._saved is not None and len(dedup._keys) <= 3
        copy = store.store(texts[1] + " again").item
        assert copy.dup_of == ids[1]
        store.forget(ids[2])
        assert ids[2] not in dedup and store.check_derived() == []
        store.snapshot()
        store.close()
        again = Store(state_dir=tmp_path)
        later = again.store(texts[4] + " once more").item
        assert later.dup_of == ids[4]
        assert again._s.dedup.ids() == (set(ids) - {ids[2]}) | {copy.id, later.id}
        assert again.check_derived() == []


def test_a_merge_copies_the_saved_rows_once_and_lets_their_buckets_go_first():
    """A merge reads saved rows of which none was removed as they are, not through a masked
    copy of each array, and frees the saved rows' sorted buckets before it flattens (the
    next lookup makes them for the new rows): both were held at once at its peak, ~40 MiB
    at 100k items. With a removed row, the masked copy leaves it out."""
    from compactor.search.dedup import _Saved

    index = DedupIndex()
    for k in range(6):
        index.add(f"a{k}", {_WORDS[k], _WORDS[k + 1], "shared"})
    index.merge()
    saved = index._saved
    assert saved is not None
    assert index.candidates("a1")  # a lookup makes the saved rows' buckets
    assert saved._bkeys is not None
    ids, arrays = saved.flat()
    assert ids == saved.ids and ids is not saved.ids
    assert arrays["keys"] is saved.keys and arrays["sigs"] is saved.sigs and arrays["sizes"] is saved.sizes
    held: list[object] = []
    flat = _Saved.flat

    def spy(self: _Saved) -> object:
        held.append(self._bkeys)
        return flat(self)

    index.add("b0", {"other", "words"})
    with patch.object(_Saved, "flat", spy):
        index.merge()
    assert held == [None]
    before = _entries(index)
    index.remove("a2")
    ids, arrays = index._saved.flat()
    assert "a2" not in ids and arrays["keys"] is not index._saved.keys
    assert _entries(index) == {i: e for i, e in before.items() if i != "a2"}
