"""Item's fast copy helpers must agree with the dataclasses functions they replace."""

from dataclasses import asdict, replace

import pytest

from compactor.models import Item


def _item() -> Item:
    return Item(
        id="m1",
        seq=3,
        content="body",
        summary="sum",
        tags=("a", "b"),
        importance=7,
        content_type="code",
        pinned=True,
        created_at=1.5,
        last_accessed_at=2.5,
        access_count=4,
        content_tokens=10,
        summary_tokens=2,
        tier="archived",
        view="summary",
        parents=("s1",),
        scope="/p",
    )


def test_to_record_is_asdict() -> None:
    item = _item()
    assert item.to_record() == asdict(item)
    assert Item.from_record(item.to_record()) == item


@pytest.mark.parametrize(
    "changes",
    [{}, {"view": "content"}, {"tier": "active", "parents": ("s2", "s3")}, {"tags": ("x",), "access_count": 9}],
)
def test_evolve_is_replace_and_leaves_the_original(changes: dict[str, object]) -> None:
    item = _item()
    before = item.to_record()
    assert item.evolve(changes) == replace(item, **changes)  # type: ignore[arg-type]
    assert item.to_record() == before


def test_evolve_rejects_an_unknown_field() -> None:
    with pytest.raises(AttributeError):
        _item().evolve({"no_such_field": 1})


def test_from_record_reads_json_lists_and_ignores_unknown_or_missing_fields() -> None:
    import orjson

    item = _item()
    record = orjson.loads(orjson.dumps(item.to_record()))  # tuples come back as lists
    assert Item.from_record(record) == item
    assert isinstance(Item.from_record(record).tags, tuple)
    # Same number of fields but one unknown (a future version's): falls back to filtering.
    other = dict(record)
    del other["quality"]
    other["from_the_future"] = 1
    assert Item.from_record(other).id == item.id
    assert Item.from_record(other).quality is None
    # An older record without the newer fields gets their defaults.
    older = {k: v for k, v in record.items() if k not in ("scope", "children_tier")}
    assert Item.from_record(older).scope == ""


def test_from_record_of_a_full_record_sets_every_field_as_keyword_construction_does() -> None:
    """The positional reader compiled from the field list puts every value in its own field."""
    import orjson

    from compactor.models import TUPLE_FIELDS, pairs

    values: dict[str, object] = {}
    for n, name in enumerate(Item.__dataclass_fields__):
        if name in TUPLE_FIELDS:
            values[name] = (f"{name}-a", f"{name}-b") if name != "file_lines" else (n, n + 1)
        elif name == "tags_from":
            values[name] = (("t", "src1"), ("u", "src2"))
        elif name in ("seq", "importance", "access_count", "content_tokens", "summary_tokens", "depth"):
            values[name] = n
        elif name in ("created_at", "last_accessed_at"):
            values[name] = n + 0.5
        elif name == "pinned":
            values[name] = True
        else:
            values[name] = f"value of {name}"
    expected = Item(**values)  # type: ignore[arg-type]
    record = orjson.loads(orjson.dumps(expected.to_record()))
    got = Item.from_record(record)
    assert got == expected
    assert got.to_record() == expected.to_record()
    assert all(isinstance(getattr(got, name), tuple) for name in (*TUPLE_FIELDS, "tags_from"))
    assert got.tags_from == pairs(values["tags_from"])


@pytest.mark.parametrize("saved_in", ["snapshot", "journal"])
def test_a_load_shares_the_strings_that_items_repeat(tmp_path, saved_in: str) -> None:
    """Parsing makes a new str per item for each field; a load keeps one object per value."""
    from compactor.store import Store, StoreInput

    store = Store(state_dir=tmp_path)
    store.bulk_store(
        [
            StoreInput(f"$ cat src/app{i}.py\nprint({i})", tags=["deploy", f"t{i % 3}"], scope="/work/p")
            for i in range(12)
        ]
    )
    if saved_in == "snapshot":
        store.snapshot()
    store.close()
    loaded = list(Store(state_dir=tmp_path)._s.items.values())
    assert len(loaded) == 12
    for field_name in ("content_type", "tier", "view", "children_tier", "scope", "file_command"):
        values = [getattr(it, field_name) for it in loaded]
        assert len({id(v) for v in values}) == len(set(values)), field_name
    assert loaded[0].file_command == "cat" and loaded[0].scope == "/work/p"
    tag_objects = {id(tag) for it in loaded for tag in it.tags}
    assert len(tag_objects) == len({tag for it in loaded for tag in it.tags})
