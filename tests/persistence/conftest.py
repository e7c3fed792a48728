"""A Store on a fresh database of the suite's PostgreSQL cluster, for the tests of its backend.
In this folder `store` is this one, not the root conftest's in-memory Store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from compactor.store import Store


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store(database=pg_url)
    try:
        yield s
    finally:
        s.close()
