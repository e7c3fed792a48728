"""A database compactor cannot use as it is (issue 39, point 13): tables whose compactor_schema
went missing, someone else's table by one of compactor's names, a newer schema, a damaged
journal entry. The server (a stdio start with --database), the CLI and the doctor each say one
plain sentence, the same advice everywhere, and change nothing."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from compactor.doctor import check_database, repair_database
from compactor.errors import PersistenceError, StateCorruptError
from compactor.persistence.pg_sql import PG_SCHEMA_VERSION
from compactor.store import Store
from tests.conftest import server_command, server_env


def sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def used(url: str) -> None:
    s = Store(database=url)
    s.store("a note")
    s.store("another note")
    s.close()


def schema_gone(url: str) -> None:
    used(url)
    sql(url, "DROP TABLE compactor_schema")


def foreign_table(url: str) -> None:
    sql(url, "CREATE TABLE compactor_journal (id integer PRIMARY KEY, note text)")


def newer_schema(url: str) -> None:
    used(url)
    sql(url, f"INSERT INTO compactor_schema (version) VALUES ({PG_SCHEMA_VERSION + 1})")


def damaged_entry(url: str) -> None:
    used(url)
    sql(
        url,
        "UPDATE compactor_journal SET ops = '\\x5b7b226f70223a' WHERE seq = (SELECT max(seq) FROM compactor_journal)",
    )


# (how the database is made so, what every one of them says, the advice)
CASES: dict[str, tuple[Callable[[str], None], str, str]] = {
    "schema gone": (
        schema_gone,
        "holds compactor's tables but not the compactor_schema table that records their version",
        f"`compactor doctor --repair --database URL` records version {PG_SCHEMA_VERSION} again",
    ),
    "foreign table": (
        foreign_table,
        "already has a table named compactor_journal that compactor did not make",
        "give compactor a database or a schema of its own",
    ),
    "newer schema": (
        newer_schema,
        f"has compactor schema version {PG_SCHEMA_VERSION + 1}, and this compactor reads up to {PG_SCHEMA_VERSION}",
        "upgrade compactor",
    ),
    "damaged entry": (damaged_entry, "is damaged", "`compactor doctor --repair --database URL` sets it aside"),
}


def tables(url: str) -> list[tuple[Any, ...]]:
    return sql(url, "SELECT relname, reltuples FROM pg_class WHERE relname LIKE 'compactor%' ORDER BY relname")


def one_sentence(text: str) -> None:
    assert "Traceback" not in text and "psycopg" not in text and "DuplicateTable" not in text, text
    assert text.strip().count("\n") == 0, text


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_store_and_the_doctor_say_the_same_thing(pg_url: str, case: str):
    make, what, advice = CASES[case]
    make(pg_url)
    before = tables(pg_url)
    with pytest.raises(StateCorruptError) as caught:
        Store(database=pg_url)
    one_sentence(str(caught.value))
    assert what in str(caught.value) and advice in str(caught.value)
    [problem] = check_database(pg_url).errors  # was "Healthy" with compactor_schema gone
    assert what in problem.what and advice.lower() in problem.fix.lower()
    assert "run the doctor" not in problem.fix and "restore" not in problem.fix.lower()
    assert tables(pg_url) == before


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_server_start_and_the_cli_say_it_in_one_sentence(pg_url: str, case: str):
    make, what, advice = CASES[case]
    make(pg_url)
    server = subprocess.run(
        server_command("--database", pg_url), env=server_env(), input="", capture_output=True, text=True, timeout=60
    )
    assert server.returncode != 0 and server.stdout == ""
    one_sentence(server.stderr)
    assert what in server.stderr and advice in server.stderr
    status = subprocess.run(
        server_command("status", "--database", pg_url), env=server_env(), capture_output=True, text=True, timeout=60
    )
    assert status.returncode != 0
    one_sentence(status.stderr)
    assert what in status.stderr and advice in status.stderr
    doctor = subprocess.run(
        server_command("doctor", "--database", pg_url), env=server_env(), capture_output=True, text=True, timeout=60
    )
    assert doctor.returncode == 1 and what in doctor.stdout and "Traceback" not in doctor.stdout + doctor.stderr


def test_the_repair_records_a_schema_version_that_went_missing(pg_url: str):
    schema_gone(pg_url)
    assert repair_database(pg_url) == [
        f"recorded compactor schema version {PG_SCHEMA_VERSION} in compactor_schema (the table was missing)"
    ]
    assert check_database(pg_url).healthy
    s = Store(database=pg_url)
    try:
        assert len(s.ids()) == 2
    finally:
        s.close()


def test_the_repair_leaves_someone_elses_table_alone(pg_url: str):
    foreign_table(pg_url)
    with pytest.raises(StateCorruptError, match="did not make"):
        repair_database(pg_url)
    assert tables(pg_url)[0][0] == "compactor_journal" and len(tables(pg_url)) == 2  # the table and its key


def test_tables_of_an_older_version_without_their_record_are_recognised(pg_url: str):
    """Version 1's tables (no epoch, no compactor_journal_aside) and no compactor_schema."""
    schema_gone(pg_url)
    sql(pg_url, "DROP TABLE compactor_journal_aside")
    sql(pg_url, "DROP TRIGGER compactor_head_epoch ON compactor_head")
    sql(pg_url, "DROP FUNCTION compactor_new_epoch()")
    sql(pg_url, "ALTER TABLE compactor_head DROP COLUMN epoch")
    with pytest.raises(StateCorruptError, match="records version 1 again"):
        Store(database=pg_url)
    repair_database(pg_url)  # records 1, then upgrades as a start does
    assert sql(pg_url, "SELECT max(version) FROM compactor_schema") == [(PG_SCHEMA_VERSION,)]
    assert check_database(pg_url).healthy


def test_an_older_schema_is_upgraded_by_a_start_and_only_named_by_the_doctor(pg_url: str):
    used(pg_url)
    sql(pg_url, "DROP TABLE compactor_journal_aside")
    sql(pg_url, "DROP TRIGGER compactor_head_epoch ON compactor_head")
    sql(pg_url, "DROP FUNCTION compactor_new_epoch()")
    sql(pg_url, "ALTER TABLE compactor_head DROP COLUMN epoch")
    sql(pg_url, "DELETE FROM compactor_schema WHERE version > 1")
    report = check_database(pg_url)
    assert report.healthy and report.warnings[0].what.startswith("compactor schema version 1;")
    assert sql(pg_url, "SELECT max(version) FROM compactor_schema") == [(1,)]  # the doctor changed nothing
    s = Store(database=pg_url)
    try:
        assert len(s.ids()) == 2
    finally:
        s.close()
    assert sql(pg_url, "SELECT max(version) FROM compactor_schema") == [(PG_SCHEMA_VERSION,)]


def test_a_table_of_that_name_in_a_later_schema_of_the_search_path_is_left_alone(pg_url: str):
    """compactor makes its tables in the first schema of the search path, where queries find
    them first: someone else's compactor_journal further down the path is not in the way."""
    sql(pg_url, "CREATE SCHEMA other")
    sql(pg_url, "CREATE TABLE other.compactor_journal (id integer PRIMARY KEY, note text)")
    url = pg_url + "?options=-csearch_path%3Dpublic,other"
    s = Store(database=url)
    try:
        s.store("a note")
        assert len(s.ids()) == 1
    finally:
        s.close()
    assert sql(pg_url, "SELECT count(*) FROM other.compactor_journal") == [(0,)]
    assert check_database(url).healthy


def test_no_right_to_create_the_tables_is_one_sentence(pg_url: str):
    sql(pg_url, "DROP ROLE IF EXISTS compactor_reader")
    sql(pg_url, "CREATE ROLE compactor_reader LOGIN")
    sql(pg_url, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    url = pg_url.replace("compactor@", "compactor_reader@")
    with pytest.raises(
        PersistenceError, match=r"Could not open compactor's tables in database .*permission denied"
    ) as caught:
        Store(database=url)
    one_sentence(str(caught.value))
