"""One journal entry a database cannot use (issue 39, point 6): before, every call failed, reads
included, and the doctor only said to restore a backup. Now the doctor names the entry, and
`compactor doctor --repair --database URL` sets it aside in compactor_journal_aside (as a state
dir's repair keeps journal.jsonl.damaged-*), says which items that touched, and every server,
a running one too, reloads without it; forget purges a set-aside entry naming its item."""

from __future__ import annotations

import subprocess
from typing import Any

import orjson
import psycopg
import pytest

from compactor.doctor import check_database, repair_database
from compactor.errors import StateCorruptError
from compactor.store import Store
from tests.conftest import server_command, server_env


def sql(url: str, statement: str, *params: object) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def last_seq(url: str) -> int:
    return int(sql(url, "SELECT max(seq) FROM compactor_journal")[0][0])


def damage(url: str, seq: int) -> None:
    """Cut the entry's bytes in half: it no longer reads as JSON, and the ids before the cut remain."""
    sql(url, "UPDATE compactor_journal SET ops = substring(ops FROM 1 FOR octet_length(ops) / 2) WHERE seq = %s", seq)


def unappliable(url: str, seq: int, item_id: str) -> None:
    """Reads as ops, but one of them cannot be applied: a put of a record that is no item."""
    ops = [{"op": "put", "item": {"id": item_id, "note": "not an item record"}}]
    sql(url, "UPDATE compactor_journal SET ops = %s WHERE seq = %s", orjson.dumps(ops), seq)


def test_a_damaged_entry_is_named_by_the_doctor_and_set_aside_by_the_repair(pg_url: str):
    s = Store(database=pg_url)
    keep = s.store("kept: the deploy checklist").item.id
    lost = s.store("lost with its entry: the pager rota").item.id
    changed = s.store("changed by the damaged entry").item.id
    s.update(changed, summary="the summary the damaged entry held")
    s.close()
    seq = last_seq(pg_url)
    damage(pg_url, seq)  # the update of `changed`
    damage(pg_url, seq - 2)  # the put of `lost`
    with pytest.raises(StateCorruptError, match=r"doctor --repair --database URL` sets it aside"):
        Store(database=pg_url)

    report = check_database(pg_url)
    [problem] = report.errors
    assert problem.check == "journal" and f"entry {seq - 2} is damaged (" in problem.what
    assert "2 journal entries cannot be used" in problem.what
    assert problem.fix.startswith(
        "`compactor doctor --repair --database URL` sets them aside"
    )  # not "restore a backup"

    done = repair_database(pg_url)
    assert done[0].startswith(f"set aside 2 journal entries that could not be used ({seq - 2}, {seq})")
    assert "1 item(s) gone, 1 item(s) without those changes" in done[1]
    assert check_database(pg_url).healthy
    aside = sql(pg_url, "SELECT seq, why FROM compactor_journal_aside ORDER BY seq")
    assert [row[0] for row in aside] == [seq - 2, seq] and aside[0][1].startswith("is damaged (")
    s = Store(database=pg_url)
    try:
        assert set(s.ids()) == {keep, changed} and lost not in s.ids()
        assert s.get(changed).summary != "the summary the damaged entry held"
    finally:
        s.close()


def test_a_running_server_that_failed_on_a_damaged_entry_works_again_after_the_repair(pg_url: str):
    live, writer = Store(database=pg_url), Store(database=pg_url)
    try:
        first = live.store("written before the damage").item.id
        writer.store("its entry gets damaged")
        damage(pg_url, last_seq(pg_url))
        for call in (live.ids, lambda: live.get(first), lambda: live.store("refused")):
            with pytest.raises(StateCorruptError, match="is damaged"):
                call()  # reads too: every call catches up first
        repair_database(pg_url)
        assert live.ids() == [first]  # reloaded: the new generation the repair started
        again = live.store("after the repair").item.id
        assert sorted(writer.ids()) == sorted([first, again])
    finally:
        live.close()
        writer.close()


def test_an_entry_whose_op_does_not_apply_is_named_with_the_upgrade_advice_too(pg_url: str):
    s = Store(database=pg_url)
    x = s.store("an item").item.id
    s.store("another item")
    s.close()
    unappliable(pg_url, last_seq(pg_url), "zz-new-kind")
    with pytest.raises(StateCorruptError, match=r"cannot be applied .*upgrade this one; otherwise `compactor doctor"):
        Store(database=pg_url)  # was: a TypeError traceback
    [problem] = check_database(pg_url).errors
    assert "cannot be applied" in problem.what
    assert problem.fix.startswith("If a newer compactor also serves this database, upgrade this one instead")
    done = repair_database(pg_url)
    assert "1 item(s) gone, 0 item(s) without those changes" in done[1]  # the other item's put was set aside
    s = Store(database=pg_url)
    try:
        assert s.ids() == [x]
    finally:
        s.close()


def test_an_entry_the_repair_set_aside_leaves_with_the_item_it_names_on_forget(pg_url: str):
    s = Store(database=pg_url)
    secret = s.store("the staging password is hunter2-zq81").item.id
    other = s.store("an unrelated note").item.id
    s.update(secret, summary="credentials")
    s.update(other, summary="unrelated")
    s.close()
    seq = last_seq(pg_url)
    damage(pg_url, seq - 1)  # the update of `secret`: its id stays readable
    repair_database(pg_url)
    held = "SELECT count(*) FROM compactor_journal_aside WHERE position(%s IN ops) > 0"
    assert sql(pg_url, held, orjson.dumps(secret)) == [(1,)]
    s = Store(database=pg_url)
    try:
        s.forget(other)
        assert sql(pg_url, "SELECT count(*) FROM compactor_journal_aside") == [(1,)]  # not this one's
        s.forget(secret)
    finally:
        s.close()
    assert sql(pg_url, "SELECT count(*) FROM compactor_journal_aside") == [(0,)]
    assert sql(pg_url, held, orjson.dumps(secret)) == [(0,)]


def test_a_repair_of_a_healthy_database_changes_nothing(pg_url: str):
    s = Store(database=pg_url)
    s.store("fine")
    s.close()
    before = sql(pg_url, "SELECT gen, snap_id, snap_seq, epoch FROM compactor_head")
    assert repair_database(pg_url) == []
    assert sql(pg_url, "SELECT gen, snap_id, snap_seq, epoch FROM compactor_head") == before


@pytest.mark.slow
def test_the_cli_repairs_a_database_then_checks_it(pg_url: str):
    s = Store(database=pg_url)
    s.store("one")
    s.store("two")
    s.close()
    damage(pg_url, last_seq(pg_url))

    def doctor(*args: str) -> subprocess.CompletedProcess[str]:
        argv = server_command("doctor", *args, "--database", pg_url)
        return subprocess.run(argv, env=server_env(), capture_output=True, text=True, timeout=120)

    checked = doctor()
    assert checked.returncode == 1 and "doctor --repair --database URL` sets it aside" in checked.stdout
    repaired = doctor("--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "repaired: set aside 1 journal entry that could not be used" in repaired.stdout
    assert "repaired: items touched by the entries set aside: 1 item(s) gone" in repaired.stdout
    assert repaired.stdout.rstrip().endswith("Healthy. Nothing was changed.")
    assert "Traceback" not in repaired.stderr
