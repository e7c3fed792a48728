"""A write that finds the writers' lock of the database held past its wait is refused, and the
session it waited on stays fit for the next call. Queries try the lock for a millisecond to
record access times, so timeouts are routine: one that fell on the round in which the driver
would have prepared the head query left a statement it believed prepared and never was, and a
store then failed with `prepared statement "_pg3_2" does not exist` (CI, two servers)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from compactor.errors import WriteLockTimeoutError
from compactor.persistence.pg_sql import PG_WRITE_LOCK
from compactor.store import Store


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    s = Store(database=pg_url)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.parametrize("timeouts_in_a_row", [1, 2])
def test_every_store_after_a_lock_timeout_is_applied(pg_url: str, store: Store, timeouts_in_a_row: int):
    stored = []
    with psycopg.connect(pg_url, autocommit=True) as holder:
        for round_ in range(8):
            holder.execute("SELECT pg_advisory_lock(%s)", (PG_WRITE_LOCK,))
            for _ in range(timeouts_in_a_row):
                with pytest.raises(WriteLockTimeoutError, match="not applied"), store._locked(wait_s=0.01):
                    pass
            holder.execute("SELECT pg_advisory_unlock(%s)", (PG_WRITE_LOCK,))
            stored.append(store.store(f"note {round_} about the retry budget").item.id)
    assert len(set(stored)) == 8
    other = Store(database=pg_url)
    try:
        assert {i.id for i in other.list_items(limit=100).items} >= set(stored)
    finally:
        other.close()


def test_queries_while_another_server_writes_record_their_accesses(pg_url: str, store: Store):
    """The public path of the same timeouts: every query tries the lock for a millisecond."""
    target = store.store("the retry budget is three attempts with jitter").item.id
    with psycopg.connect(pg_url, autocommit=True) as holder:
        for _ in range(8):
            holder.execute("SELECT pg_advisory_lock(%s)", (PG_WRITE_LOCK,))
            assert [h.item.id for h in store.query("retry budget")][:1] == [target]
            holder.execute("SELECT pg_advisory_unlock(%s)", (PG_WRITE_LOCK,))
            store.store("another note on the payment gateway")
    store.flush_accesses()
    other = Store(database=pg_url)
    try:
        assert other.get(target).access_count >= 8
    finally:
        other.close()
