import compactor


def test_public_names_are_exactly_all():
    public = {name for name in vars(compactor) if not name.startswith("_")} - {
        # submodules imported as a side effect of the package's own imports
        "errors",
        "models",
        "store",
        "analyze",
        "classify",
        "compaction",
        "condense",
        "constants",
        "dedup",
        "index",
        "persist",
        "redact",
        "render",
        "scoring",
        "tokens",
    }
    assert public | {"__version__"} == set(compactor.__all__)
    for name in compactor.__all__:
        assert getattr(compactor, name) is not None


def test_store_round_trip_through_the_public_api():
    s = compactor.Store()
    item = s.store("public api works").item
    assert isinstance(item, compactor.Item)
    assert s.get(item.id).content == "public api works"
