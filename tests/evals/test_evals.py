"""Held-out halves, the second revisit derivation and the resume scorer (ISSUE 15.1, ISSUE 19).

Everything here runs on trajectories written in the test; nothing reads ../shared.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evals.halves import HALVES, half_of, split
from evals.replay import QueryOutcome, combine_runs, split_metrics
from evals.resume import (
    CutResult,
    Pending,
    TrajJob,
    covered,
    cut_index,
    pending_after,
    recency_seqs,
    resume_one,
    summarize,
    task_query,
)
from evals.revisits import Event, Revisit
from evals.revisits2 import derive2, exception_line, normalize_rerun, parse_command

Spec = tuple[int, str, str, Sequence[str]]  # step, kind, content, files


def traj(*specs: Spec, name: str = "t") -> list[Event]:
    return [
        Event(traj=name, seq=seq, step=step, kind=kind, content=content, files=tuple(files))
        for seq, (step, kind, content, files) in enumerate(specs)
    ]


TASK: Spec = (0, "observation", "Parser drops headers\nDetails: parse_header in pkg/http.py", [])

# ---- the split ----


def test_the_split_is_the_parity_of_the_first_sha256_byte() -> None:
    ids = [f"proj__proj-{i}" for i in range(200)]
    for t in ids:
        assert half_of(t) == ("tuning" if hashlib.sha256(t.encode()).digest()[0] % 2 == 0 else "test")
    # Pinned values: the rule never changes under the corpus.
    assert half_of("django__django-11095") == "tuning"  # first byte 108
    assert half_of("psf__requests-1142") == "test"  # first byte 135
    halves = split(ids)
    assert set(halves) == set(HALVES)
    assert sorted(halves["tuning"] + halves["test"]) == sorted(ids)
    shuffled = ids[::-1] + ids[:50]
    random.Random(7).shuffle(shuffled)
    assert split(shuffled) == halves  # neither order nor repeats move a trajectory
    assert 60 < len(halves["tuning"]) < 140  # a hash, not a constant


def test_split_metrics_reports_each_half_and_all() -> None:
    outcomes = [
        QueryOutcome("django__django-11095", 1, "file_reread", 1),  # tuning
        QueryOutcome("psf__requests-1142", 1, "file_reread", None),  # test
        QueryOutcome("psf__requests-1142", 2, "command_rerun", 2),
    ]
    m = split_metrics(outcomes)
    assert m["tuning"]["overall"] == {"n": 1, "recall@5": 1.0, "mrr": 1.0}
    assert m["test"]["overall"]["n"] == 2
    assert m["test"]["overall"]["recall@5"] == 0.5
    assert m["all"]["overall"]["n"] == 3
    spread = combine_runs([m, split_metrics([*outcomes[:1], QueryOutcome("psf__requests-1142", 1, "file_reread", 1)])])
    assert spread["test"]["file_reread"]["recall@5"] == {"mean": 0.5, "min": 0.0, "max": 1.0}


# ---- the second derivation ----

OUT = "EARLIER_OUTPUT_TEXT"  # in every tool output: a query must never contain it


def test_file_reread_query_is_only_the_path_and_relevant_are_reads_and_whole_writes() -> None:
    events = traj(
        TASK,
        (1, "thought", "Write a helper.", []),
        (1, "code", "cat <<'EOF' > pkg/util.py\ndef helper():\n    return 1\nEOF", ["pkg/util.py"]),  # seq 2
        (2, "thought", "Read the module.", []),
        (2, "action", "cd /testbed && nl -ba pkg/http.py | sed -n '1,40p'", ["pkg/http.py"]),
        (2, "observation", f"$ cd /testbed && nl -ba pkg/http.py\n 1 def parse_header(): {OUT}", []),  # seq 5
        (3, "thought", "List the package.", []),
        (3, "action", "ls pkg", []),
        (3, "observation", f"$ ls pkg\nhttp.py util.py {OUT}", ["pkg/http.py", "pkg/util.py"]),
        (4, "thought", "Now the helper and the parser once more, with more words.", []),
        (4, "action", "cat pkg/util.py ./pkg/http.py", ["pkg/util.py", "pkg/http.py"]),
        (4, "observation", f"$ cat pkg/util.py ./pkg/http.py\n{OUT} again", []),
    )
    [r] = derive2(events)
    assert (r.type, r.seq, r.relevant) == ("file_reread", 10, (2, 5))
    assert r.query == "pkg/util.py pkg/http.py"  # the paths, not the thought, not any output


def test_failed_reads_listings_name_only_greps_and_in_place_edits_show_no_file() -> None:
    events = traj(
        TASK,
        (1, "action", "cat pkg/a.py", ["pkg/a.py"]),
        (1, "error", f"$ cat pkg/a.py\n[exit 1]\ncat: pkg/a.py: No such file or directory {OUT}", []),
        (2, "action", "grep -l foo pkg/b.py", ["pkg/b.py"]),
        (2, "observation", f"$ grep -l foo pkg/b.py\npkg/b.py {OUT}", []),
        (3, "edit", "sed -i 's/a/b/' pkg/c.py", ["pkg/c.py"]),
        (4, "action", "head -n 20 pkg/a.py", ["pkg/a.py"]),
        (4, "observation", f"$ head -n 20 pkg/a.py\n{OUT}", []),
        (5, "action", "grep -n foo pkg/b.py", ["pkg/b.py"]),
        (5, "observation", f"$ grep -n foo pkg/b.py\n3:foo {OUT}", []),
        (6, "action", "sed -n '1,5p' pkg/c.py", ["pkg/c.py"]),
        (6, "observation", f"$ sed -n '1,5p' pkg/c.py\n{OUT}", []),
    )
    assert derive2(events) == []


@pytest.mark.parametrize(
    ("command", "reads", "writes"),
    [
        ("cat pkg/a.py", ("pkg/a.py",), ()),
        ("cd src && grep -n 'def x' a.py b.py 2>/dev/null", ("src/a.py", "src/b.py"), ()),
        ("sed -n '10,20p' /testbed/pkg/a.py", ("pkg/a.py",), ()),
        ("sed -i 's/x/y/' pkg/a.py", (), ()),
        ("sed 's/x/y/' pkg/a.py", (), ()),  # without -n it is a filter, not a view
        ("grep -rn parse_header .", (), ()),
        ("grep -A 3 -n x pkg/a.py", ("pkg/a.py",), ()),
        ("python pkg/a.py", (), ()),
        ("cat <<'EOF' > t.py\nprint(1)\nEOF", (), ("t.py",)),
        ("echo hi > /dev/null", (), ()),
        ("cat 'unbalanced", (), ()),
    ],
)
def test_parse_command(command: str, reads: tuple[str, ...], writes: tuple[str, ...]) -> None:
    parsed = parse_command(command)
    assert (parsed.reads, parsed.writes) == (reads, writes)


def test_command_rerun_normalises_cd_stderr_and_limiters_and_asks_the_command() -> None:
    events = traj(
        TASK,
        (1, "thought", "Run the reproduction.", []),
        (1, "action", "cd /testbed && python repro.py 2>&1 | tail -20", ["repro.py"]),
        (1, "observation", f"$ cd /testbed && python repro.py\n{OUT}", []),
        (2, "thought", "Run it again after the fix.", []),
        (2, "action", "python  repro.py", ["repro.py"]),
        (2, "observation", f"$ python repro.py\n{OUT} 2", []),
        (3, "action", "python other.py", []),
        (3, "observation", f"$ python other.py\n{OUT}", []),
    )
    [r] = derive2(events)
    assert (r.type, r.seq, r.relevant) == ("command_rerun", 5, (3,))
    assert r.query == "python  repro.py"
    assert normalize_rerun("cd /testbed && pytest x.py 2>&1 | head -n 50") == "pytest x.py"


def test_error_repeat_query_is_the_exception_line_and_relevant_hold_it() -> None:
    crash = "ValueError: header too long at 0x7f"
    events = traj(
        (0, "observation", "Parser crashes\n" + crash + "00", []),
        (1, "action", "python repro.py", []),
        (1, "error", f"$ python repro.py\n[exit 1]\n{OUT}\nTraceback (most recent call last):\n  x\n{crash}12", []),
        (2, "action", "pytest tests", []),
        (2, "error", f"$ pytest tests\n[exit 1]\n{OUT}\nE   {crash}3\nE   AssertionError", []),
        (3, "action", "python repro.py --other", []),
        (3, "error", f"$ python repro.py --other\n{OUT}\nKeyError: 'something else'", []),
    )
    first, second = derive2(events)
    assert (first.type, first.seq, first.relevant) == ("error_repeat", 2, (0,))
    assert (second.type, second.seq, second.relevant) == ("error_repeat", 4, (0, 2))
    assert second.query == "ValueError: header too long at 0x?"
    assert OUT not in second.query
    assert exception_line("$ x\nAssertionError\nTypeError: ab") is None  # no message worth a name
    assert exception_line("$ x\nTraceback (most recent call last):\nfoo.BarError: it broke") == "foo.BarError: it broke"


PATHS = ["a.py", "b/c.py"]
COMMANDS = [f"{verb} {p}" for verb in ("cat", "nl -ba", "grep -n x", "python") for p in PATHS]


@st.composite
def trajectories(draw: st.DrawFn) -> list[Event]:
    specs: list[Spec] = [TASK]
    for step in range(1, draw(st.integers(1, 10)) + 1):
        command = draw(st.sampled_from(COMMANDS))
        specs.append((step, "thought", f"thought {step}", []))
        specs.append((step, "action", command, []))
        if draw(st.booleans()):
            body = draw(st.sampled_from([f"{OUT} plain", f"{OUT}\nValueError: same failure"]))
            specs.append((step, draw(st.sampled_from(["observation", "error"])), f"$ {command}\n{body}", []))
    return traj(*specs)


@settings(max_examples=150, deadline=None)
@given(trajectories())
def test_second_derivation_queries_never_copy_output_and_point_backwards(events: list[Event]) -> None:
    first_seq_of_step: dict[int, int] = {}
    for e in events:
        first_seq_of_step.setdefault(e.step, e.seq)
    by_seq = {e.seq: e for e in events}
    for r in derive2(events):
        assert r.relevant
        assert all(s < first_seq_of_step[r.step] for s in r.relevant)
        if r.type == "error_repeat":
            assert r.query == "ValueError: same failure"  # the line met again, nothing else
        else:
            assert OUT not in r.query
            command = next(e for e in events if e.step == r.step and e.kind == "action").content
            assert r.query in {command, command.split()[-1]}
            assert all(r.query not in by_seq[s].content.split("\n", 1)[-1] for s in r.relevant)


# ---- the resume scorer ----


def test_resume_scoring_on_a_toy_case() -> None:
    assert cut_index(10, 60) == 6
    assert list(recency_seqs(6, n=3)) == [3, 4, 5]
    events = traj(TASK, (1, "action", "cat a.py", []))
    assert task_query(events) == "Parser drops headers"
    revisits = {
        "first": [
            # seq 7 goes back to 1 and 8 (only 1 is before a cut at 6); seq 9 to 7 only (after the cut)
            _rev(7, (1, 8)),
            _rev(9, (7,)),
            _rev(3, (1,)),  # before the cut: not a later revisit
        ]
    }
    pending = pending_after(revisits, 6)
    assert pending == [Pending("first", "file_reread", 7, (1,))]
    assert covered(pending, [1, 2]) == [True]
    assert covered(pending, [5]) == [False]
    results = [
        _cut("django__django-11095", [True, False], [False, False], tokens=900),  # tuning
        _cut("psf__requests-1142", [True], [True], tokens=1100),  # test
    ]
    s = summarize(results)["60"]
    assert s["tuning"]["derivations"]["first"]["overall"] == {"n": 2, "recall": 0.5, "recency": 0.0}
    assert s["test"]["derivations"]["first"]["overall"] == {"n": 1, "recall": 1.0, "recency": 1.0}
    assert s["all"]["derivations"]["first"]["overall"]["recall"] == pytest.approx(2 / 3)
    assert s["all"]["tokens_p50"] == 1000


def _rev(seq: int, relevant: tuple[int, ...]) -> Revisit:
    return Revisit("t", seq, seq, "file_reread", "a.py", relevant, "a.py")


def _cut(name: str, hit: list[bool], recency: list[bool], tokens: int) -> CutResult:
    pending = [Pending("first", "file_reread", 10 + i, (1,)) for i in range(len(hit))]
    return CutResult(name, 60, 6, 10, [1], 1, tokens, tokens, 1.0, {}, pending, hit, recency)


@pytest.mark.slow
def test_resume_over_stdio_restarts_on_the_same_state_dir(tmp_path: Path) -> None:
    # Few events: the restarted server's recall shows every one (the newest view of each), so every
    # later revisit is covered; a server that kept nothing across the restart would cover none.
    events = traj(
        TASK,
        (1, "action", "cat pkg/http.py", ["pkg/http.py"]),
        (1, "observation", "$ cat pkg/http.py\ndef parse_header(raw): ...", ["pkg/http.py"]),
        (2, "action", "python repro.py", []),
        (2, "observation", "$ python repro.py\nheaders: {}", []),
        (3, "action", "echo pad", []),
        (4, "action", "cat pkg/http.py", ["pkg/http.py"]),
        (4, "observation", "$ cat pkg/http.py\ndef parse_header(raw): ...", ["pkg/http.py"]),
        (5, "action", "python repro.py", []),
        (5, "observation", "$ python repro.py\nheaders: {}", []),
        name="toy",
    )
    job = TrajJob("toy", tuple(events), (sys.executable, "-m", "compactor"), (60,), None, str(tmp_path / "err.log"))
    [result] = anyio.run(resume_one, job)
    assert result.cut == 6
    # One entry per file or command, its newest view: the observation "$ cat pkg/http.py" stands
    # for the action "cat pkg/http.py" before it (and likewise for repro.py).
    assert sorted(result.recall_seqs) == [0, 2, 4, 5]
    assert {(p.derivation, p.type) for p in result.pending} == {
        ("first", "file_reread"),
        ("first", "command_rerun"),
        ("second", "file_reread"),
        ("second", "command_rerun"),
    }
    assert all(result.hit)
    assert result.tokens_cl100k > 0


def test_the_textbook_baseline_matches_other_forms_of_a_word_and_ignores_stop_words() -> None:
    from evals.questions import Question, ask_textbook
    from evals.revisits import Event

    def ev(seq: int, kind: str, text: str) -> Event:
        return Event("t", seq, seq, kind, text, ())

    events = [
        ev(1, "thought", "We decided to retry the payment twice before failing the order."),
        ev(2, "thought", "What is the plan for the cache? It is what it is."),
        ev(3, "observation", "$ pytest tests/test_cache.py\n3 passed"),
    ]
    asked = [Question("reworded", "what did we decide about retrying payments", -1, 1)]
    assert ask_textbook(events, asked) == [("reworded", 1)]


def test_questions_as_written_keep_acronyms_numbers_and_case_and_ask_about_the_same_notes() -> None:
    from evals.questions import make_questions, prose
    from evals.revisits import Event

    text = "The CI run failed on the 2nd try of the follow-up `fix_it()` in `pkg/mod.py`."
    assert prose(text) == ["the", "run", "failed", "on", "the", "try", "of", "the", "in"]
    words = ["The", "CI", "run", "failed", "on", "the", "2nd", "try", "of", "the", "follow-up", "in"]
    assert prose(text, as_written=True) == words

    def ev(seq: int, step: int, kind: str, content: str) -> Event:
        return Event("t", seq, step, kind, content, ())

    events = [
        ev(0, 0, "thought", "Start by reading the README of the HTTP client."),
        ev(1, 1, "action", "pytest tests/test_http.py"),
        ev(2, 1, "observation", "$ pytest tests/test_http.py\nFAILED test_retry - 3 retries expected"),
        ev(3, 2, "thought", "The HTTP retry test fails because 3 retries were expected after the timeout."),
        ev(4, 3, "thought", "The HTTPS upload retries twice before giving up on the bucket."),
    ]
    plain = make_questions(events, lambda w, _avoid: w)
    written = make_questions(events, lambda w, _avoid: w, as_written=True)
    assert [(q.kind, q.asked_seq, q.answer_seq) for q in plain] == [
        (q.kind, q.asked_seq, q.answer_seq) for q in written
    ]
    back = next(q for q in written if q.kind == "refers back")
    assert back.text.startswith("The HTTP retry test fails because 3 retries")
    assert "HTTPS" in next(q.text for q in written if q.answer_seq == 4).split()
    assert "https" not in " ".join(q.text for q in plain).lower().split()


def _conversation_file(tmp_path: Path, name: str, questions: list[dict[str, object]]) -> Path:
    sessions = [
        {
            "session": 1,
            "date": "1:14 pm on 8 May, 2023",
            "turns": [
                {"id": "s1t1", "speaker": "Jon", "text": "I bought a red kite for my daughter's birthday on Friday."},
                {"id": "s1t2", "speaker": "Mia", "text": "Haha that's awesome! How was your weekend?"},
            ],
        },
        {
            "session": 2,
            "date": "9:02 am on 20 May, 2023",
            "turns": [
                {"id": "s2t1", "speaker": "Mia", "text": "I quit the choir because rehearsals moved to Sundays."},
                {"id": "s2t2", "speaker": "Jon", "text": "Sorry to hear that. We went to the lake with the dogs."},
            ],
        },
    ]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"speakers": ["Jon", "Mia"], "sessions": sessions, "questions": questions}), "utf-8")
    return path


def test_a_conversation_is_stored_turn_by_turn_and_each_question_ranked_by_its_best_evidence(tmp_path: Path) -> None:
    from evals.conversations import ask, ask_baseline, half_of, load, run, shaped

    questions = [
        {"q": "What did Jon buy for his daughter?", "evidence": ["s1t1"], "kind": "single", "answer": "a kite"},
        {"q": "Why did Mia leave the choir?", "evidence": ["s2t1"], "kind": "single", "answer": "Sundays"},
        {"q": "Where did Jon go with his dogs?", "evidence": ["s2t2", "s1t1"], "kind": "multi", "answer": "lake"},
    ]
    conv = load(_conversation_file(tmp_path, "conv03", questions))
    assert [t.id for t in conv.turns] == ["s1t1", "s1t2", "s2t1", "s2t2"]
    assert shaped(conv.turns[2], "said") == "Mia: I quit the choir because rehearsals moved to Sundays."
    assert shaped(conv.turns[2], "dated").startswith("[9:02 am on 20 May, 2023] Mia: I quit")
    assert shaped(conv.turns[2], "bare") == "I quit the choir because rehearsals moved to Sundays."
    assert (half_of("conv03"), half_of("conv08")) == ("tuning", "test")
    for got in (ask(conv), ask_baseline(conv), ask_baseline(conv, stemmed=False)):
        assert [found[0] for _q, found in got][:2] == ["s1t1", "s2t1"]
    # "go" meets "went" through compactor's irregular forms, which a plain BM25 does not know.
    assert ask(conv)[2][1][0] == "s2t2"
    result, answered = run([conv])
    assert result["overall"] == (1.0, 1.0, 3) and result["multi"] == (1.0, 1.0, 1)
    assert len(answered) == 3


def test_a_conversation_whose_evidence_names_no_turn_is_refused(tmp_path: Path) -> None:
    from evals.conversations import load

    bad = [{"q": "What did Jon buy?", "evidence": ["s9t9"], "kind": "single", "answer": "a kite"}]
    with pytest.raises(ValueError, match="s9t9"):
        load(_conversation_file(tmp_path, "conv01", bad))
