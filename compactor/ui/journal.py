"""What the team database's journal records about one item since the last snapshot, for the
item page: who made each change (a team server with `--tokens-file` signs every entry) and
when it was written. A state dir's journal is read by `store.history.state_dir_changes`."""

from __future__ import annotations

from typing import Any, Final

import orjson

from ..persistence.pg_sql import import_psycopg, one_line, without_password
from ..store.history import SHOW_JOURNAL_ENTRIES, Journal, item_changes

# The newest journal rows naming the item that a page reads: reads come in runs, and the page
# shows at most SHOW_JOURNAL_ENTRIES events.
DB_JOURNAL_ROWS: Final = 200
# A page waits this long for the database at most (connecting, then the search of the journal,
# which scans the rows written since the last snapshot).
DB_CONNECT_TIMEOUT_S: Final = 3
DB_QUERY_TIMEOUT_MS: Final = 1_000

# Rows whose ops name the item (as JSON: the id in quotes), newest first; the ops are parsed and
# matched exactly in Python (a row naming it only as another item's parent is dropped there).
ROWS_SQL: Final = """
SELECT extract(epoch FROM written_at)::float8, ops FROM compactor_journal
WHERE position(%s::bytea IN ops) > 0 ORDER BY seq DESC LIMIT %s
"""


def database_changes(url: str, item_id: str, limit: int = SHOW_JOURNAL_ENTRIES) -> Journal:
    """The item's changes in the database's journal, oldest first, with when each was written;
    a Journal with a note (and no events) when the database cannot be read now."""
    psycopg = import_psycopg()
    try:
        with (
            psycopg.connect(
                url, autocommit=True, connect_timeout=DB_CONNECT_TIMEOUT_S, application_name="compactor ui"
            ) as conn,
            conn.transaction(),
        ):
            conn.execute(f"SET LOCAL statement_timeout = {DB_QUERY_TIMEOUT_MS}")
            rows: list[Any] = conn.execute(ROWS_SQL, (orjson.dumps(item_id), DB_JOURNAL_ROWS)).fetchall()
    except psycopg.Error as exc:
        return Journal([], f"the database's journal could not be read: {without_password(one_line(exc), url)}")
    batches: list[tuple[float | None, list[dict[str, Any]]]] = []
    for at, raw in reversed(rows):
        try:
            ops = orjson.loads(bytes(raw))
        except orjson.JSONDecodeError:
            continue  # a damaged entry: the doctor reports it; the page shows the rest
        if isinstance(ops, list):
            batches.append((float(at), [op for op in ops if isinstance(op, dict)]))
    return Journal(item_changes(batches, item_id, limit))


__all__ = ["database_changes"]
