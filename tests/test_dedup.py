"""DedupIndex buckets: whatever the sequence of adds and removes, candidates are exactly the
items sharing a sketch key (in buckets no larger than DEDUP_MAX_BUCKET), also after a reload."""

from unittest.mock import patch

import orjson
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
