import inspect

import compactor


def test_public_names_are_exactly_all():
    # Submodules become package attributes once anything imports them: not part of the surface.
    public = {
        name for name, value in vars(compactor).items() if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public | {"__version__"} == set(compactor.__all__)
    for name in compactor.__all__:
        assert getattr(compactor, name) is not None


def test_store_round_trip_through_the_public_api():
    s = compactor.Store()
    item = s.store("public api works").item
    assert isinstance(item, compactor.Item)
    assert s.get(item.id).content == "public api works"
