"""A command stored alone and its output stored with the `$ cmd` line: asked for the command
again, the output comes first, since it holds the command and what it printed (ISSUE 40): ahead
of the command stored alone (the echo demotion) and of notes that talk about running it (the
re-run lift, for a query that names the command on a line of its own or in backticks)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from compactor.store import Store
from compactor.store.tuning import Tuning
from tests.support.sdk_calls import stored_and_ranked
from tests.support.stdio_client import StdioServer

RUN = "python reproduce_issue.py"
# Long, as outputs are: the command's words weigh less in it than in the command alone.
TRACE = "".join(f'  File "astropy/io/ascii/qdp.py", line {n}, in _line_type\n' for n in range(40))
OUTPUT = f"$ {RUN}\nTraceback (most recent call last):\n{TRACE}ValueError: Unrecognized QDP line"


def _fill(s: Store) -> tuple[str, str]:
    command = s.store(RUN).item.id
    output = s.store(OUTPUT).item.id
    s.store("The reproduction failed as expected; reading qdp.py next.")
    return command, output


@pytest.mark.parametrize("query", [RUN, f"Run the script again.\n{RUN}", "python   reproduce_issue.py"])
def test_the_output_of_a_command_ranks_ahead_of_the_command_stored_alone(store: Store, query: str):
    command, output = _fill(store)
    ranked = [h.item.id for h in store.query(query=query, limit=10)]
    assert ranked[:2] == [output, command]


@contextlib.contextmanager
def _tuned(**knobs: str) -> Iterator[Store]:
    """An in-memory Store with these knobs turned (`--set NAME=VALUE` as evaluations give them)."""
    s = Store(tuning=Tuning().overridden(knobs))
    try:
        yield s
    finally:
        s.close()


def test_without_the_demotion_the_command_alone_would_win():
    # The re-run lift (below) puts the output first too, when the query is the command: off here.
    with _tuned(ECHO_FACTOR="1", RERUN_LIFT="1") as s:
        command, _ = _fill(s)
        assert s.query(query=RUN, limit=10)[0].item.id == command


def test_a_one_line_note_nothing_opens_with_keeps_its_rank(store: Store):
    note = store.store("python reproduce_issue.py fails on lowercase commands").item.id
    store.store("$ python other.py\nok")
    store.store(f"I ran {RUN} twice and it failed both times with the same error.")
    assert store.query(query=RUN, limit=10)[0].item.id == note


def test_a_command_opening_only_its_own_text_is_not_an_echo(store: Store):
    only = store.store(f"$ {RUN}").item.id
    assert [h.item.id for h in store.query(query=RUN, limit=10)] == [only]


def test_the_output_comes_first_over_the_protocol(store: Store):
    (command, output, _), ranked = anyio.run(stored_and_ranked, store, (RUN, OUTPUT, "Reading qdp.py next."), RUN)
    assert ranked[:2] == [output, command]


@pytest.mark.slow
def test_the_output_comes_first_over_stdio(tmp_path: Path):
    with StdioServer("--state-dir", str(tmp_path / "state")) as srv:
        command = srv.ok("store", content=RUN)["id"]
        output = srv.ok("store", content=OUTPUT)["id"]
        ranked = [h["id"] for h in srv.ok("query", query=RUN)["items"]]
        assert ranked[:2] == [output, command]


# A note that says nearly what the query says, in the agent's words: it used to come first.
NOTE = "Now I run the reproduction script again to check the fix."
ASKED = f"Now I run the reproduction script again.\n{RUN}"


# The script's name is common by then: written, announced, run for something else.
AROUND = (
    "cat <<'EOF' > reproduce_issue.py\nfrom astropy.table import Table\n"
    "Table.read('test.qdp', format='ascii.qdp')\nEOF",
    "I'll create a script reproduce_issue.py that reads a QDP file with lowercase commands.",
    "$ python other.py\nok",
)


def _fill_rerun(s: Store) -> tuple[str, str]:
    output = s.store(OUTPUT).item.id
    for text in AROUND:
        s.store(text)
    note = s.store(NOTE).item.id
    return output, note


def test_the_earlier_output_of_a_rerun_command_ranks_ahead_of_a_note_about_running_it(store: Store):
    output, note = _fill_rerun(store)
    ranked = [h.item.id for h in store.query(query=ASKED, limit=10)]
    assert ranked[:2] == [output, note]


def test_without_the_rerun_lift_the_note_would_win():
    with _tuned(RERUN_LIFT="1") as s:
        _, note = _fill_rerun(s)
        assert s.query(query=ASKED, limit=10)[0].item.id == note


SAID = f"Now I run the reproduction script again: {RUN}"


def test_a_command_a_sentence_names_as_written_asks_for_its_output(store: Store):
    output, note = _fill_rerun(store)
    assert [h.item.id for h in store.query(query=SAID, limit=10)][:2] == [output, note]
    assert store.query(query=f"Running {RUN} again, the fix is in.", limit=10)[0].item.id == output


def test_without_the_rerun_in_prose_the_note_would_win():
    with _tuned(RERUN_IN_PROSE="0") as s:
        output, note = _fill_rerun(s)
        ranked = [h.item.id for h in s.query(query=SAID, limit=10)]
        assert ranked.index(note) < ranked.index(output)


def test_a_sentence_naming_part_of_a_command_lifts_nothing(store: Store):
    """The whole command line, not a word of it: "reproduce_issue.py" alone names a file, and
    "python reproduce_issue.pyc" another one."""
    output, note = _fill_rerun(store)
    for query in (
        "Now I run the reproduction script again: reproduce_issue.py",
        "Now I run the reproduction script again: python reproduce_issue.pyc",
    ):
        ranked = [h.item.id for h in store.query(query=query, limit=10)]
        assert ranked.index(note) < ranked.index(output), query


# The command in backticks inside a sentence, as agents and people write one: asked that way,
# the heredoc that wrote the script (a view of reproduce_issue.py) came first and the output second.
TICKED = (
    SAID,
    f"Now I run the reproduction script again: `{RUN}`",
    f"What did `{RUN}` print last time?",
    f"The fix is in.\nRunning `cd /testbed && {RUN}` again.",
)


@pytest.mark.parametrize("query", TICKED)
def test_a_command_in_backticks_inside_a_sentence_asks_for_its_output(store: Store, query: str):
    output, _ = _fill_rerun(store)
    ranked = [h.item.id for h in store.query(query=query, limit=10)]
    assert ranked[0] == output, [store.get(i).content[:40] for i in ranked[:3]]


def test_the_ticked_command_output_comes_first_over_the_protocol():
    for query in TICKED:
        with _tuned() as fresh:
            ids, ranked = anyio.run(stored_and_ranked, fresh, (OUTPUT, *AROUND, NOTE), query)
            assert ranked[0] == ids[0], query


def test_the_rerun_output_comes_first_over_the_protocol(store: Store):
    ids, ranked = anyio.run(stored_and_ranked, store, (OUTPUT, *AROUND, NOTE), ASKED)
    assert ranked[:2] == [ids[0], ids[-1]]


@pytest.mark.slow
def test_the_rerun_output_comes_first_over_stdio(tmp_path: Path):
    with StdioServer("--state-dir", str(tmp_path / "state")) as srv:
        output = srv.ok("store", content=OUTPUT)["id"]
        for text in AROUND:
            srv.ok("store", content=text)
        note = srv.ok("store", content=NOTE)["id"]
        ranked = [h["id"] for h in srv.ok("query", query=ASKED)["items"]]
        assert ranked[:2] == [output, note]
        for query in TICKED:
            assert srv.ok("query", query=query)["items"][0]["id"] == output, query
