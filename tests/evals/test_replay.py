"""The replay evaluation: revisit derivation, metric math, and one real stdio run against the stub."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evals.replay import (
    QueryOutcome,
    Task,
    TrajInput,
    VerbatimCheck,
    ask_revisits,
    mean_reciprocal_rank,
    rank_of_ids,
    recall_at,
    run_task,
    summarize,
)
from evals.revisits import (
    REPO_ROOT,
    Event,
    derive,
    derive_all,
    is_reader,
    key_error_line,
    load_events,
    render,
)
from tests.conftest import CORPUS_SLICE

Spec = tuple[int, str, str, Sequence[str]]  # step, kind, content, files


def traj(*specs: Spec, name: str = "t") -> list[Event]:
    return [
        Event(traj=name, seq=seq, step=step, kind=kind, content=content, files=tuple(files))
        for seq, (step, kind, content, files) in enumerate(specs)
    ]


TASK: Spec = (0, "observation", "Fix the bug in pkg/a.py", ["pkg/a.py"])


def test_file_reread_is_found_with_the_earlier_content_as_relevant() -> None:
    events = traj(
        TASK,
        (1, "thought", "Let me look at the module.", []),
        (1, "action", "cat pkg/a.py", ["pkg/a.py"]),
        (1, "observation", "$ cat pkg/a.py\ndef foo():\n    return EARLIER_OUTPUT", ["pkg/a.py"]),
        (2, "thought", "Check foo once more before editing.", []),
        (2, "action", "nl -ba pkg/a.py | sed -n '1,5p'", ["pkg/a.py"]),
        (2, "observation", "$ nl -ba pkg/a.py | sed -n '1,5p'\n 1 def foo():", ["pkg/a.py"]),
    )
    [revisit] = derive(events)
    assert (revisit.type, revisit.seq, revisit.step, revisit.relevant) == ("file_reread", 5, 2, (3,))
    assert revisit.query == "Check foo once more before editing.\nnl -ba pkg/a.py | sed -n '1,5p'"
    assert "EARLIER_OUTPUT" not in revisit.query


def test_a_listing_or_a_failed_read_does_not_count_as_having_seen_the_file() -> None:
    events = traj(
        TASK,
        (1, "thought", "Where is it?", []),
        (1, "action", "find . -name a.py", ["a.py"]),
        (1, "observation", "$ find . -name a.py\n./pkg/a.py", ["pkg/a.py"]),
        (2, "thought", "Read the wrong path.", []),
        (2, "action", "cat pkg/a.py", ["pkg/a.py"]),
        (2, "error", "$ cat pkg/a.py\n[exit 1]\ncat: pkg/a.py: No such file or directory", ["pkg/a.py"]),
        (3, "thought", "Read it.", []),
        (3, "action", "cat pkg/a.py", ["pkg/a.py"]),
        (3, "observation", "$ cat pkg/a.py\ndef foo(): pass", ["pkg/a.py"]),
    )
    revisits = derive(events)
    assert [r.type for r in revisits] == ["command_rerun"]  # the same cat again, not a re-read


def test_grep_lines_naming_a_file_show_its_content() -> None:
    events = traj(
        TASK,
        (1, "thought", "Search.", []),
        (1, "action", "grep -rn foo pkg", []),
        (1, "observation", "$ grep -rn foo pkg\npkg/a.py:1:def foo():", ["pkg/a.py"]),
        (2, "thought", "Open it.", []),
        (2, "action", "sed -n '1,20p' pkg/a.py", ["pkg/a.py"]),
        (2, "observation", "$ sed -n '1,20p' pkg/a.py\ndef foo():", ["pkg/a.py"]),
    )
    [revisit] = derive(events)
    assert (revisit.type, revisit.relevant) == ("file_reread", (3,))


def test_command_rerun_needs_earlier_output_and_ignores_whitespace() -> None:
    events = traj(
        TASK,
        (1, "thought", "Write the script.", []),
        (1, "code", "cat <<'EOF' > repro.py\nprint('hi')\nEOF", ["repro.py"]),
        (2, "thought", "Run it.", []),
        (2, "action", "python repro.py", ["repro.py"]),
        (2, "observation", "$ python repro.py\nRUN_ONE_OUTPUT", ["repro.py"]),
        (3, "thought", "Write the script again.", []),
        (3, "code", "cat <<'EOF' > repro.py\nprint('hi')\nEOF", ["repro.py"]),
        (4, "thought", "Run it again.", []),
        (4, "action", "python   repro.py ", ["repro.py"]),
        (4, "observation", "$ python   repro.py\nRUN_TWO_OUTPUT", ["repro.py"]),
    )
    [revisit] = derive(events)  # the silent heredoc printed nothing, so its repeat is no revisit
    assert (revisit.type, revisit.seq, revisit.relevant) == ("command_rerun", 9, (5,))
    assert "OUTPUT" not in revisit.query


def test_revisits_are_asked_with_the_command_of_their_own_turn() -> None:
    events = traj(
        TASK,
        (1, "thought", "Run it.", []),
        (1, "action", "python repro.py", ["repro.py"]),
        (1, "observation", "$ python repro.py\nOUT", ["repro.py"]),
        (2, "thought", "Run it again.", []),
        (2, "action", "python repro.py", ["repro.py"]),
        (2, "observation", "$ python repro.py\nOUT", ["repro.py"]),
    )
    revisits = derive(events)
    assert ask_revisits(revisits, events, "lines") == revisits
    [question] = ask_revisits(revisits, events, "question")
    assert question.query == "What did `python repro.py` print last time?"
    [said] = ask_revisits(revisits, events, "said")
    assert said.query == "Run it again. Running python repro.py again."
    assert (said.seq, said.relevant) == (revisits[0].seq, revisits[0].relevant)


CRASH = "ValueError: bad value at "


def test_error_repeat_matches_the_key_line_across_commands() -> None:
    events = traj(
        (0, "observation", "It crashes:\n" + CRASH + "0x7f00aa", []),
        (1, "thought", "Reproduce.", []),
        (1, "action", "python repro.py", ["repro.py"]),
        (1, "error", "$ python repro.py\nTraceback (most recent call last):\n" + CRASH + "0x7f12", []),
        (2, "thought", "Run the tests instead.", []),
        (2, "action", "pytest tests/test_x.py", ["tests/test_x.py"]),
        (
            2,
            "error",
            "$ pytest tests/test_x.py\n[exit 1]\n>   raise ValueError\nE   boom\n" + CRASH + "0x7f",
            [],
        ),
    )
    first, second = derive(events)  # the reproduction already repeats the error
    assert (first.type, first.seq, first.relevant) == ("error_repeat", 3, (0,))
    assert (second.type, second.seq, second.relevant) == ("error_repeat", 6, (0, 3))
    assert second.detail == "ValueError: bad value at 0x?"
    assert second.query == "Run the tests instead.\npytest tests/test_x.py"


def test_key_error_line_is_the_last_error_line() -> None:
    out = "$ pytest\n[exit 1]\nE   AssertionError: 1\nFAILED t.py::test_a - AssertionError: x\n= 1 fail ="
    assert key_error_line(out) == "FAILED t.py::test_a - AssertionError: x"
    assert key_error_line("$ ls\nREADME.md\nsetup.py") is None
    assert key_error_line("$ x\nerror: e") is None  # too short to identify an error


@pytest.mark.parametrize(
    ("command", "reads"),
    [
        ("cat pkg/a.py", True),
        ("nl -ba pkg/a.py | sed -n '10,20p'", True),
        ("cd src && grep -n foo a.py 2>/dev/null", True),
        ("sed -i 's/a/b/' pkg/a.py", False),
        ("grep -l foo pkg/a.py", False),
        ("cat pkg/a.py > copy.py", False),
        ("python pkg/a.py", False),
        ("cat 'unbalanced", True),
    ],
)
def test_is_reader(command: str, reads: bool) -> None:
    assert is_reader(command) is reads


PATHS = ["a.py", "b/c.py", "d.py"]
COMMANDS = [f"{verb} {p}" for verb in ("cat", "nl -ba", "grep -n x", "python") for p in PATHS]


@st.composite
def trajectories(draw: st.DrawFn) -> list[Event]:
    specs: list[Spec] = [TASK]
    for step in range(1, draw(st.integers(1, 12)) + 1):
        command = draw(st.sampled_from(COMMANDS))
        files = [p for p in PATHS if command.endswith(f" {p}")]
        specs.append((step, "thought", f"thought {step} about {draw(st.sampled_from(PATHS))}", []))
        specs.append((step, "action", command, files))
        if draw(st.booleans()):
            kind = draw(st.sampled_from(["observation", "error"]))
            body = draw(st.sampled_from(["OUT plain", "OUT ValueError: same failure", "E   OUT assert 0"]))
            specs.append((step, kind, f"$ {command}\n{body} {step}\n{body}", files))
    return traj(*specs)


@settings(max_examples=150, deadline=None)
@given(trajectories())
def test_queries_use_only_the_turn_and_point_only_backwards(events: list[Event]) -> None:
    first_seq_of_step: dict[int, int] = {}
    for e in events:
        first_seq_of_step.setdefault(e.step, e.seq)
    by_seq = {e.seq: e for e in events}
    for r in derive(events):
        assert "OUT" not in r.query
        turn = [e for e in events if e.step == r.step and e.kind in {"thought", "action"}]
        assert r.query == "\n".join(e.content for e in turn)
        assert r.relevant
        assert all(s < first_seq_of_step[r.step] for s in r.relevant)
        assert all(by_seq[s].kind in {"observation", "error"} for s in r.relevant)


def test_revisit_derivation_is_deterministic_on_real_trajectories() -> None:
    """On the corpus slice kept in the repository; `python -m evals.revisits` regenerates the
    committed file from the full corpus with this same function."""
    events = load_events(CORPUS_SLICE)
    text = render(derive_all(events))
    assert text == render(derive_all(list(reversed(events))))  # input order does not matter
    kinds = {r.type for r in derive_all(events)}
    assert {"file_reread", "command_rerun"} <= kinds <= {"file_reread", "command_rerun", "error_repeat"}


def test_the_first_relevant_rank_within_the_limit() -> None:
    seqs_of = {str(seq): [seq] for seq in range(20)}  # one event an id, as most stores are
    assert rank_of_ids(["5", "x", "7", "2"], seqs_of, {2, 7}) == 3
    assert rank_of_ids(["1", "2"], seqs_of, {9}) is None
    ids = [str(seq) for seq in range(20)]
    assert rank_of_ids(ids, seqs_of, {15}) is None
    assert rank_of_ids(ids, seqs_of, {15}, limit=20) == 16


def test_recall_and_mrr_math() -> None:
    ranks = [1, 3, None, 6]
    assert recall_at(ranks, 5) == 0.5
    assert recall_at(ranks, 6) == 0.75
    assert mean_reciprocal_rank(ranks) == pytest.approx((1 + 1 / 3 + 1 / 6) / 4)
    assert mean_reciprocal_rank([11], limit=10) == 0.0
    assert recall_at([]) == mean_reciprocal_rank([]) == 0.0


@given(st.lists(st.one_of(st.none(), st.integers(1, 30)), max_size=40))
def test_metric_bounds(ranks: list[int | None]) -> None:
    mrr = mean_reciprocal_rank(ranks)
    assert 0.0 <= mrr <= recall_at(ranks, 10) <= 1.0
    assert recall_at(ranks, 1) <= mrr + 1e-12


def test_summarize_per_type_and_overall() -> None:
    outcomes = [
        QueryOutcome("t", 1, "file_reread", 1),
        QueryOutcome("t", 2, "file_reread", None),
        QueryOutcome("t", 3, "error_repeat", 2),
    ]
    checks = [
        VerbatimCheck("t", 1, True, "archived", "content", ""),
        VerbatimCheck("t", 2, False, "active", "summary", "len 3 -> 2"),
    ]
    summary = summarize(outcomes, checks)
    assert summary["metrics"]["file_reread"] == {"n": 2, "recall@5": 0.5, "mrr": 0.5}
    assert summary["metrics"]["command_rerun"]["n"] == 0
    overall = summary["metrics"]["overall"]
    assert overall == {"n": 3, "recall@5": pytest.approx(2 / 3), "mrr": pytest.approx(0.5)}
    assert summary["verbatim"]["share"] == 0.5
    assert len(summary["verbatim"]["mismatches"]) == 1


def _stub_task(trajs: Sequence[list[Event]], budget: int, tmp_path: Path) -> Task:
    return Task(
        trajs=tuple(TrajInput(evs[0].traj, tuple(evs), tuple(derive(evs))) for evs in trajs),
        argv=(sys.executable, str(REPO_ROOT / "bench" / "_devstub.py")),
        cwd=str(REPO_ROOT),
        budget=budget,
        errlog=str(tmp_path / "stderr.log"),
    )


def _http_trajectory(name: str, noise: int, decoy: bool = False) -> list[Event]:
    filler: list[Spec] = [(1, "observation", f"$ ls\nline {i} " + "pad " * 60, []) for i in range(noise)]
    if decoy:  # every query word, in an event that is not relevant
        filler.append((1, "observation", "$ echo\nLook at parse_header in pkg/http.py again: sed -n 10,30p", []))
    return traj(
        TASK,
        (1, "action", "grep -n parse_header pkg/http.py", ["pkg/http.py"]),
        (1, "observation", "$ grep -n parse_header pkg/http.py\n12:def parse_header(raw):", ["pkg/http.py"]),
        *filler,
        (2, "thought", "Look at parse_header in pkg/http.py again.", []),
        (2, "action", "sed -n '10,30p' pkg/http.py", ["pkg/http.py"]),
        name=name,
    )


@pytest.mark.slow
@pytest.mark.parametrize(("budget", "tier"), [(1_000_000, "active"), (60, "archived")])
def test_replay_over_stdio_against_the_stub(tmp_path: Path, budget: int, tier: str) -> None:
    events = _http_trajectory("t", noise=6)
    assert [(r.type, r.relevant) for r in derive(events)] == [("file_reread", (2,))]
    [run] = run_task(_stub_task([events], budget, tmp_path))
    assert run.error is None
    assert (run.stores, run.queries) == (len(events), 1)
    assert [o.rank for o in run.outcomes] == ([1] if tier == "active" else [None])
    assert [(c.seq, c.ok, c.tier) for c in run.checks] == [(2, True, tier)]


@pytest.mark.slow
def test_a_reused_server_is_emptied_between_trajectories(tmp_path: Path) -> None:
    # A server that kept the first trajectory's decoy would rank it above the second one's answer.
    first, second = _http_trajectory("a", noise=0, decoy=True), _http_trajectory("b", noise=0)
    runs = run_task(_stub_task([first, second], 1_000_000, tmp_path))
    ranks = [(r.traj, r.error, [o.rank for o in r.outcomes]) for r in runs]
    assert ranks == [("a", None, [2]), ("b", None, [1])]


@pytest.mark.slow
def test_items_the_server_made_itself_are_emptied_too(tmp_path: Path) -> None:
    # Under a tight budget the stub adds digest items nobody stored; the reset must find them.
    trajs = [_http_trajectory(name, noise=6) for name in ("a", "b", "c")]
    runs = run_task(_stub_task(trajs, 60, tmp_path))
    assert [(r.traj, r.error, r.stores) for r in runs] == [(t[0].traj, None, len(t)) for t in trajs]


def test_an_id_stands_for_every_identical_event_stored_as_it():
    """A store of the same content, scope and tags within a minute returns the first id: the
    harness forgot that id twice (196 of 400 runs failed) and ranked it as the later event only."""
    seqs_of = {"a": [3, 9], "b": [5]}
    assert rank_of_ids(["b", "a"], seqs_of, [3]) == 2
    assert rank_of_ids(["b", "a"], seqs_of, [9]) == 2
    assert rank_of_ids(["b", "a"], seqs_of, [7]) is None
    assert rank_of_ids(["x", "b"], seqs_of, [5]) == 2


def test_a_redaction_the_store_announced_is_what_get_should_return():
    from evals.replay import _as_kept

    code = "form = Form(data={'password': 'new_password'})"
    assert _as_kept(code, {"id": "x"}) == code
    kept = _as_kept(code, {"id": "x", "redacted": [{"kind": "password", "count": 1}]})
    assert "new_password" not in kept and "[REDACTED:password]" in kept
