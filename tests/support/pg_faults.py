"""A PostgreSQL session that fails a test's way: the journal entry commits, then the connection
goes before the answer comes (an ambiguous commit, issue 39), for the tests of what a Store says
and does then."""

from __future__ import annotations

from typing import Any

import psycopg

from compactor.persistence.pg_sql import APPEND_SQL


class LostAfterCommit:
    """A connection whose append commits, then is closed before its answer comes; every other
    statement runs as on the connection it wraps. Installed in place of `PgBackend._live`."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: Any, params: Any = None) -> Any:
        cur = self.conn.execute(sql, params)
        if sql is APPEND_SQL:
            self.conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return cur

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)
