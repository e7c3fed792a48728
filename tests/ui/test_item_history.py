"""The item page's history over HTTP: who stored an item and who changed it, where a team server
with a tokens file names its people (each journal entry is signed with the caller's name, the
item keeps `stored_by` and `changed_by`), on a state dir and on the team database; what each
change was, in words; and what the page says when nobody was named or the journal is gone."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from compactor.store import Store
from compactor.store.access import Caller
from compactor.ui import UIOptions, ui_app
from compactor.ui.journal import database_changes

PORT = 8766
BASE = f"http://127.0.0.1:{PORT}"
ALICE = Caller.of("alice", ["*"], True)
BOB = Caller.of("bob", ["*"], True)
CAROL = Caller.of("carol", ["*"], False)  # a reader: her reads are signed, she changes nothing


def page_of(store: Store, backend: dict[str, str]) -> TestClient:
    options = UIOptions(
        host="127.0.0.1",
        port=PORT,
        token=None,
        source="test",
        state_dir=Path(backend["state_dir"]) if "state_dir" in backend else None,
        database=backend.get("database"),
    )
    app = ui_app(store, options)
    return TestClient(app, base_url=BASE, follow_redirects=False)


def text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def history(page: str) -> list[list[str]]:
    """The page's history lists (its story, then the journal's changes), each line as text."""
    lists = re.findall(r'<ol class="history">(.*?)</ol>', page, re.S)
    # A line whose time is not recorded starts with a dash in the time column.
    return [[text(li).removeprefix("\N{EN DASH} ") for li in re.findall(r"<li>(.*?)</li>", ol, re.S)] for ol in lists]


def fact(page: str, name: str) -> str:
    found = re.search(rf"<dt>{re.escape(name)}</dt><dd>(.*?)</dd>", page, re.S)
    assert found, f"no fact {name!r}"
    return text(found.group(1))


@pytest.fixture
def team(backend: dict[str, str]) -> Iterator[Store]:
    """The team server's Store: each call made by one of its people."""
    s = Store(**backend)
    yield s
    s.close()


@pytest.fixture
def page(backend: dict[str, str]) -> Iterator[TestClient]:
    """The page, on its own Store over the same memory (as `compactor ui` beside the server)."""
    s = Store(**backend)
    s.record_access = False  # as the command opens it
    with page_of(s, backend) as client:
        yield client
    s.close()


def test_the_page_names_who_stored_it_and_who_pinned_it(team: Store, page: TestClient, backend: dict[str, str]):
    with team.serving(caller=ALICE):
        it = team.store("the deploy key rotates monthly", tags="deploy").item
    with team.serving(caller=BOB):
        team.pin(it.id)
        team.update(it.id, importance=9, tags="deploy,keys")
    with team.serving(caller=CAROL):
        team.query("deploy key")
        team.query("rotates monthly")

    reply = page.get(f"/item/{it.id}")
    assert reply.status_code == 200
    assert fact(reply.text, "stored").endswith("by alice")
    assert fact(reply.text, "last changed") == "by bob"
    story, changes = history(reply.text)
    assert story[0].endswith("stored by alice")
    assert [line.split(" ", 2)[-1] if line[:2] == "20" else line for line in changes] == [
        "stored by alice",
        "pinned by bob",
        "importance set to 9, tags set to deploy, keys, prose by bob",
        "read 2 times by carol",
    ]
    on_db = "database" in backend
    # The database writes down when each entry was written; a state dir's journal does not.
    assert all(line.startswith("20") for line in changes) is on_db
    assert ("records who made a change, not when" in reply.text) is not on_db


def test_after_a_snapshot_the_item_still_says_who(team: Store, page: TestClient):
    with team.serving(caller=ALICE):
        it = team.store("a note alice stored").item
    with team.serving(caller=BOB):
        team.unpin(it.id)
    team.snapshot()  # the journal is folded into the snapshot: its entries are gone
    reply = page.get(f"/item/{it.id}").text
    assert "No change to it since the last snapshot." in reply
    assert fact(reply, "stored").endswith("by alice") and fact(reply, "last changed") == "by bob"
    assert history(reply)[0][0].endswith("stored by alice")


def test_without_people_the_page_says_where_names_come_from(team: Store, page: TestClient):
    it = team.store("stored over stdio, where no caller is named").item
    team.pin(it.id)
    reply = page.get(f"/item/{it.id}").text
    assert "by " not in " ".join(line for lines in history(reply) for line in lines)
    assert "last changed" not in reply
    assert "a team server with <code>--tokens-file</code>" in reply


@pytest.mark.parametrize("backend", ["state-dir"], indirect=True)
def test_a_compaction_and_a_dissolve_in_words_with_links(team: Store, page: TestClient):
    with team.serving(caller=ALICE):
        notes = [f"step {i} of the migration: copy table t{i} q{i * 7} r{i * 13}; notes z{i} " * 3 for i in range(30)]
        ids = [team.store(note).item.id for note in notes]
        team.configure(token_budget=1_000)
        team.compact()
    child = next(team.get(i) for i in ids if team.get(i).parents)
    node = child.parents[-1]
    reply = page.get(f"/item/{child.id}").text
    changes = history(reply)[1]
    assert changes[1:] == ["archived by alice", f"compacted into summary {node} by alice"]
    assert f'compacted into summary <a class="id" href="/item/{node}">{node}</a>' in reply
    assert history(page.get(f"/item/{node}").text)[0][0].endswith("made by a compaction by alice")
    with team.serving(caller=BOB):
        team.dissolve(node)
    changes = history(page.get(f"/item/{child.id}").text)[1]
    assert changes[-1].endswith(f"no longer covered by summary {node} by bob"), changes


def test_an_unreachable_database_is_a_note_not_an_error():
    journal = database_changes("postgresql://nobody@127.0.0.1:1/none", "abc")
    assert journal.events == [] and journal.note and journal.note.startswith("the database's journal could not be read")
