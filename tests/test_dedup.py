"""DedupIndex buckets: whatever the sequence of adds and removes, candidates are exactly the
items sharing a sketch key (in buckets no larger than DEDUP_MAX_BUCKET), also after a reload."""

from unittest.mock import patch

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor import constants as C
from compactor.dedup import DedupIndex, sketch

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
        if len(members) <= C.DEDUP_MAX_BUCKET:
            out |= members
    out.discard(item_id)
    return out


@settings(max_examples=150, deadline=None)
@given(_OPS, st.sampled_from([2, 3, C.DEDUP_MAX_BUCKET]))
def test_candidates_follow_shared_keys_through_adds_removes_and_reload(ops, max_bucket):
    with patch.object(C, "DEDUP_MAX_BUCKET", max_bucket):
        index = DedupIndex()
        model: dict[str, tuple[int, ...]] = {}
        for op, key, words in ops:
            item_id = f"m{key}"
            if op == "add":
                index.add(item_id, words)
                model[item_id] = sketch(words)
            else:
                index.remove(item_id)
                model.pop(item_id, None)
        reloaded = DedupIndex.from_state(orjson.loads(orjson.dumps(index.to_state())))
        for item_id in [f"m{k}" for k in range(7)]:
            assert index.candidates(item_id) == _expected(model, item_id)
            assert reloaded.candidates(item_id) == _expected(model, item_id)
            assert (item_id in index) == (item_id in model)
        # No empty buckets linger, and no bucket names a removed item.
        for bucket in index._buckets.values():
            members = {bucket} if isinstance(bucket, str) else bucket
            assert members
            assert members <= model.keys()


def test_a_loaded_index_files_its_buckets_on_first_use():
    index = DedupIndex()
    words = {f"i{n}": {f"word{n}_{k}" for k in range(30)} for n in range(20)}
    for item_id, ws in words.items():
        index.add(item_id, ws)
    index.add("copy", words["i3"] | {"extra_word"})
    reloaded = DedupIndex.from_state(orjson.loads(orjson.dumps(index.to_state())))
    assert not reloaded.filed and not reloaded._buckets  # nothing built at load
    assert reloaded.candidates("copy") == index.candidates("copy") == {"i3"}
    assert reloaded.filed and reloaded._buckets == index._buckets
    assert reloaded.similarity("copy", "i3") == index.similarity("copy", "i3")
    for first_use in ("ids", "to_state", "similarity", "remove", "add", "contains"):
        again = DedupIndex.from_state(orjson.loads(orjson.dumps(index.to_state())))
        if first_use == "ids":
            assert again.ids() == set(words) | {"copy"}
        elif first_use == "to_state":
            assert again.to_state() == index.to_state()
        elif first_use == "similarity":
            assert again.similarity("i1", "i2") == index.similarity("i1", "i2")
        elif first_use == "remove":
            again.remove("i3")
            assert again.candidates("copy") == set()
        elif first_use == "add":
            again.add("copy2", words["i5"])
            assert again.candidates("copy2") == {"i5"}
        else:
            assert "i7" in again
        assert again.filed


def test_a_corrupt_saved_dedup_state_is_refused_at_load():
    index = DedupIndex()
    index.add("a", {"alpha_word", "beta_word", "gamma_word"})
    state = orjson.loads(orjson.dumps(index.to_state()))
    state["keys"] = ""  # lengths that no longer add up to the keys
    with pytest.raises(ValueError, match="inconsistent"):
        DedupIndex.from_state(state)


def test_a_restarted_store_notices_a_near_duplicate_of_a_loaded_item(tmp_path):
    """The buckets of a loaded store are filed on first use: a start does not build them, and
    the first store after it still finds its near-duplicate among the loaded items."""
    from compactor.store import Store

    text = "retry the payment webhook with exponential backoff when stripe returns 429 " * 4
    first = Store(state_dir=tmp_path)
    original = first.store(text + "for invoices").item.id
    for i in range(5):
        first.store(f"unrelated note {i} about kubernetes ingress timeouts and nginx {i}")
    first.snapshot()
    first.close()

    again = Store(state_dir=tmp_path)
    assert not again._s.dedup.filed
    again.query("kubernetes ingress")
    assert not again._s.dedup.filed  # a query does not need them
    copy = again.store(text + "for refunds").item
    assert again._s.dedup.filed
    assert again.get(copy.id).dup_of == original
