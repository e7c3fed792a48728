"""Claude Code hooks on transcripts built in Claude Code's JSONL shape, run as Claude Code runs
them: a process with the hook JSON on stdin."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor.claude_code import hooks as hooks_mod
from compactor.claude_code.hooks import digest_transcript, session_tag
from compactor.store import Store
from compactor.summaries import digest as digest_mod
from tests.conftest import server_command, server_env
from tests.support.cc_transcript import Transcript, sample, text_block
from tests.support.recall_layout import groups_of
from tests.support.stdio_client import StdioServer

SID = "5f0c1d2e-7a3b-4c59-9e21-0b8d4f6a7c13"


def hook(event: str, payload: dict | str, state_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    stdin = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run(
        server_command("hook", event, "--state-dir", str(state_dir), *extra),
        input=stdin,
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=120,
    )


def pre_compact_payload(path: Path, sid: str = SID, cwd: str = "/home/me/shop") -> dict:
    return {
        "session_id": sid,
        "transcript_path": str(path),
        "cwd": cwd,
        "hook_event_name": "PreCompact",
        "trigger": "auto",
        "custom_instructions": "",
    }


def session_items(state_dir: Path, sid: str = SID) -> dict[str, str]:
    s = Store(state_dir=state_dir)
    try:
        hits = s.query(tags=session_tag(sid), limit=20, include_archived=True, scope="all")
        return {next(t for t in h.item.tags if t in hooks_mod.DIGEST_IMPORTANCE): h.item.content for h in hits}
    finally:
        s.close()


@pytest.mark.slow
def test_pre_compact_stores_a_digest_of_each_kind(tmp_path, state_dir):
    path = sample(SID).write(tmp_path / f"{SID}.jsonl")
    res = hook("pre-compact", pre_compact_payload(path), state_dir, "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["session_id"] == SID and report["malformed_lines"] == 1
    assert set(report["sections"]) == {"requirements", "decisions", "errors", "files", "tasks"}

    items = session_items(state_dir)
    req = items["requirements"]
    assert "Refactor the checkout flow" in req and "keep Python 3.9 compatibility" in req
    assert "PaymentDeclined" in req and "/model" not in req  # injected command echoes are not requirements
    assert "adapter instead of subclassing" in items["decisions"] and "root cause" in items["decisions"]
    assert "AttributeError: 'NoneType' object has no attribute 'charge'" in items["errors"]
    assert "pytest tests/test_checkout.py" in items["errors"]
    assert "edited shop/checkout.py" in items["files"] and "edited shop/gateway_adapter.py" in items["files"]
    assert "[in_progress] Route checkout() through the adapter" in items["tasks"]
    assert "[pending] Update tests for declined cards" in items["tasks"]
    assert "Add PaymentGateway adapter" not in items["tasks"]  # completed

    # The same transcript again stores nothing new.
    again = json.loads(hook("pre-compact", pre_compact_payload(path), state_dir, "--json").stdout)
    assert again["stored"] == [] and sorted(again["already_present"]) == sorted(report["stored"])


@pytest.mark.slow
def test_session_start_prints_hook_json_with_recall_and_the_session_digest(tmp_path, state_dir):
    path = sample(SID).write(tmp_path / "t.jsonl")
    assert hook("pre-compact", pre_compact_payload(path), state_dir).returncode == 0
    s = Store(state_dir=state_dir)
    pinned = s.store("Always run the linter before committing.", pinned=True).item.id
    s.close()

    base = {"session_id": SID, "transcript_path": str(path), "cwd": "/home/me/shop", "hook_event_name": "SessionStart"}
    res = hook("session-start", {**base, "source": "compact"}, state_dir)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    ctx = out["hookSpecificOutput"]["additionalContext"]
    assert "Budget:" in ctx and pinned in ctx and "Saved from this session" in ctx
    assert "keep Python 3.9 compatibility" in ctx and "[pending] Update tests for declined cards" in ctx
    assert len(ctx) <= hooks_mod.HOOK_CONTEXT_CHARS
    # ISSUE 17.5: the same recall layout, and no item twice (the saved digest is not also in recall).
    recall_text, saved_text = ctx.split("Saved from this session before it was compacted:")
    groups = groups_of(recall_text)
    assert groups["Pinned"] == [pinned]
    saved_ids = re.findall(r"^\[([\w-]+)\] ", saved_text, re.M)
    assert saved_ids and not set(saved_ids) & {i for v in groups.values() for i in v}

    fresh = json.loads(hook("session-start", {**base, "source": "startup"}, state_dir).stdout)
    ctx2 = fresh["hookSpecificOutput"]["additionalContext"]
    assert pinned in ctx2 and "Saved from this session" not in ctx2
    # A fresh start shows the digest's items in the recall itself, once each.
    assert set(saved_ids) <= {i for v in groups_of(ctx2).values() for i in v}


@pytest.mark.slow
def test_session_start_is_valid_without_state_or_input(tmp_path):
    empty = tmp_path / "none"
    for stdin in ("", "not json at all", "[1, 2]"):
        res = hook("session-start", stdin, empty)
        assert res.returncode == 0, res.stderr
        ctx = json.loads(res.stdout)["hookSpecificOutput"]["additionalContext"]
        assert "no memories" in ctx
    assert not empty.exists()


@pytest.mark.slow
def test_session_start_context_stays_under_the_cap(tmp_path, state_dir):
    """A long session's digest plus recall would pass Claude Code's limit: the output is cut."""
    t = Transcript(SID)
    for i in range(40):
        words = " ".join(f"w{i}x{j}" for j in range(40))
        t.user(f"Task {i}: the importer must handle case {i} {words}.")
        t.say(f"I'll use strategy {i} instead of the old one because {words}.")
        t.say(f"TODO: follow up on case {i} {words}")
        t.tool("Bash", {"command": f"run case {i}"}, f"ValueError: case {i} {words}", is_error=True)
    path = t.write(tmp_path / "long.jsonl")
    assert hook("pre-compact", pre_compact_payload(path), state_dir).returncode == 0
    res = hook("session-start", {"session_id": SID, "source": "compact", "cwd": "/home/me/shop"}, state_dir)
    ctx = json.loads(res.stdout)["hookSpecificOutput"]["additionalContext"]
    assert len(ctx) <= hooks_mod.HOOK_CONTEXT_CHARS and ctx.endswith("query compactor for the rest)")
    assert "Saved from this session" in ctx


@pytest.mark.slow
def test_pre_compact_without_a_transcript_fails_cleanly(state_dir, tmp_path):
    res = hook("pre-compact", {"session_id": SID}, state_dir)
    assert res.returncode == 1 and "transcript_path" in res.stderr
    res = hook("pre-compact", pre_compact_payload(tmp_path / "missing.jsonl"), state_dir)
    assert res.returncode == 1 and "does not exist" in res.stderr


@pytest.mark.slow
def test_pre_compact_beside_a_running_server(tmp_path, state_dir):
    path = sample(SID).write(tmp_path / "t.jsonl")
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    # Claude Code runs the hook with the project as cwd, where the server runs too.
    with StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "3600", cwd=project) as srv:
        srv.ok("store", content="stored by the agent before compaction")
        res = hook("pre-compact", pre_compact_payload(path, cwd=str(project)), state_dir)
        assert res.returncode == 0, res.stderr
        found = srv.ok("query", tags=[session_tag(SID)], limit=10)
        assert len(found["items"]) == 5
        assert srv.ok("status")["active_items"] == 6


def test_block_shapes_user_text_blocks_and_tool_result_lists(tmp_path):
    t = Transcript("abc")
    t.user_blocks([text_block("We must support Windows paths in the loader.")])
    t.tool(
        "Bash",
        {"command": "make build"},
        [{"type": "text", "text": "make: *** [build] Error 2\ngcc: fatal error: no input files"}],
        is_error=True,
    )
    t.say("Next steps: port the path joining to pathlib.\nTODO: add a Windows CI job")
    t.tool("NotebookEdit", {"notebook_path": "/home/me/shop/analysis.ipynb", "new_source": "x"}, "ok")
    d = digest_transcript(t.write(tmp_path / "t.jsonl"), cwd="/home/me/shop")
    assert d.session_id == "abc"
    assert d.requirements == ["We must support Windows paths in the loader."]
    assert d.errors == ["Bash `make build`: make: *** [build] Error 2"]
    assert d.tasks == ["port the path joining to pathlib.", "add a Windows CI job"]
    assert d.files_edited == ["analysis.ipynb"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
entry_like = st.fixed_dictionaries(
    {"type": st.sampled_from(["user", "assistant", "system", "summary"]), "message": json_values},
    optional={"sessionId": json_values, "cwd": json_values, "isMeta": json_values},
)
line = st.one_of(
    st.text(max_size=60).filter(lambda s: "\n" not in s and "\r" not in s),
    json_values.map(json.dumps),
    entry_like.map(json.dumps),
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(line, max_size=12))
def test_digest_survives_any_lines(lines):
    fd, name = tempfile.mkstemp(suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines))
        d = digest_transcript(Path(name))
        assert d.lines == sum(1 for ln in "\n".join(lines).split("\n") if ln.strip())
        assert d.malformed <= d.lines
        for section in (d.requirements, d.decisions, d.errors, d.tasks):
            assert all(0 < len(x) <= digest_mod.DIGEST_LINE_CHARS for x in section)
    finally:
        os.unlink(name)


@pytest.mark.slow
def test_pre_compact_ends_within_the_budget(tmp_path, state_dir):
    """The hook adds content like any write, so it ends within the budget like any write."""
    s = Store(state_dir=state_dir, budget=1_000)
    for i in range(12):
        s.store(f"note {i}: the checkout service retries payment {i} times before failing " * 3)
    s.close()
    path = sample(SID).write(tmp_path / f"{SID}.jsonl")
    res = hook("pre-compact", pre_compact_payload(path), state_dir)
    assert res.returncode == 0, res.stderr
    s = Store(state_dir=state_dir)
    try:
        assert len(session_items(state_dir)) == 5  # every digest kept, none lost to the budget
        assert s.tokens_used <= s.budget == 1_000
    finally:
        s.close()


@pytest.mark.slow
def test_one_session_start_entry_answers_every_source_of_the_readme_matcher(tmp_path, state_dir):
    """README: one SessionStart matcher `startup|resume|clear|compact`; each source gets recall,
    and only compact and resume add what pre-compact saved from the session."""
    path = sample(SID).write(tmp_path / "t.jsonl")
    assert hook("pre-compact", pre_compact_payload(path), state_dir).returncode == 0
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert '"matcher": "startup|resume|clear|compact"' in readme
    for source in ("startup", "resume", "clear", "compact"):
        res = hook("session-start", {"session_id": SID, "source": source, "cwd": "/home/me/shop"}, state_dir)
        assert res.returncode == 0, res.stderr
        ctx = json.loads(res.stdout)["hookSpecificOutput"]["additionalContext"]
        assert "Budget:" in ctx
        assert ("Saved from this session" in ctx) == (source in ("resume", "compact")), source


@pytest.mark.slow
def test_session_end_saves_the_digest_that_pre_compact_shares(tmp_path, state_dir):
    """SessionEnd stores the same digest as PreCompact: after a compaction, the unchanged
    sections are the same items, not second copies."""
    path = sample(SID).write(tmp_path / "t.jsonl")
    first = json.loads(hook("pre-compact", pre_compact_payload(path), state_dir, "--json").stdout)
    res = hook("session-end", {**pre_compact_payload(path), "hook_event_name": "SessionEnd"}, state_dir, "--json")
    assert res.returncode == 0, res.stderr
    end = json.loads(res.stdout)
    assert end["stored"] == [] and sorted(end["already_present"]) == sorted(first["stored"])
    res = hook("session-end", {"session_id": SID}, state_dir)
    assert res.returncode == 1 and "transcript_path" in res.stderr


@pytest.mark.slow
def test_session_start_recalls_with_the_projects_last_task(tmp_path, state_dir):
    """The SessionStart recall is asked with the project's last task (the requests the last
    session-end or pre-compact digest saved in this project): items about it that are too old
    for recent work come back under "Related to the task"; another project has no last task."""
    project = tmp_path / "shop"
    (project / ".git").mkdir(parents=True)
    s = Store(state_dir=state_dir, scope=str(project))
    related = [
        s.store("PaymentGateway retries declined cards three times before raising PaymentDeclined.").item.id,
        s.store("The checkout flow calls cart.total() then pay(); payments moved to PaymentGateway.").item.id,
    ]
    for i in range(150):
        s.store(f"$ ls build/out_{i}\nartifact_{i}.o artifact_{i}.d")
    s.close()
    before = json.loads(
        hook("session-start", {"session_id": "new", "source": "startup", "cwd": str(project)}, state_dir).stdout
    )
    assert "last task" not in before["hookSpecificOutput"]["additionalContext"]  # none saved yet

    path = sample(SID, cwd=str(project)).write(tmp_path / "t.jsonl")
    end = hook("session-end", pre_compact_payload(path, cwd=str(project)), state_dir)
    assert end.returncode == 0, end.stderr
    assert end.stdout.startswith("compactor hook session-end: session ")
    res = hook("session-start", {"session_id": "next", "source": "startup", "cwd": str(project)}, state_dir)
    assert res.returncode == 0, res.stderr
    ctx = json.loads(res.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Recalled for this project's last task: Refactor the checkout flow" in ctx
    groups = groups_of(ctx)
    assert set(related) <= set(groups["Related to the task"])
    assert not set(related) & set(groups.get("Recent work", []))

    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    res = hook("session-start", {"session_id": "o", "source": "startup", "cwd": str(other)}, state_dir)
    ctx = json.loads(res.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "last task" not in ctx and "Related to the task" not in ctx


_INJECTED_OLD = re.compile(r"<(system-reminder|command-[\w-]+|local-command-[\w-]+)>.*?</\1>", re.S)
_FRAGMENTS = st.sampled_from(
    [
        "<system-reminder>",
        "</system-reminder>",
        "<command-name>",
        "</command-name>",
        "<command-a-b>",
        "</command-a-b>",
        "<local-command-stdout>",
        "</local-command-stdout>",
        "</command-",
        "<command->",
        "keep this",
        " ",
        "\n",
        "x",
    ]
)


@given(st.lists(_FRAGMENTS, max_size=30).map("".join))
def test_injected_blocks_are_cut_as_the_lazy_regex_cut_them(text: str) -> None:
    from compactor.claude_code.transcript import _clean

    assert _clean(text) == _INJECTED_OLD.sub("", text).strip()


@pytest.mark.slow
def test_a_transcript_full_of_unclosed_injected_tags_is_digested_at_once(tmp_path, state_dir):
    """The lazy regex scanned to the end of the text for each opening tag left unclosed:
    20,000 of them in one turn took 22 s, past a hook's time to run."""
    t = Transcript(SID)
    t.user("Please keep the public API stable. " + "<system-reminder>" * 20_000 + " and <command-x> too")
    path = t.write(tmp_path / f"{SID}.jsonl")
    started = time.monotonic()
    res = hook("pre-compact", pre_compact_payload(path), state_dir, "--json")
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - started < 15
    assert "keep the public API stable" in session_items(state_dir)["requirements"]


@pytest.mark.slow
def test_json_nested_thousands_deep_is_malformed_input_not_a_crash(tmp_path, state_dir):
    """Python's decoder raises RecursionError, not ValueError, on it: the hook input and a
    transcript line ended the hooks with a traceback."""
    deep = "[" * 100_000 + "]" * 100_000
    start = hook("session-start", deep, state_dir)
    assert start.returncode == 0 and "hook input is nested too deeply to read" in start.stderr
    assert json.loads(start.stdout)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    t = Transcript(SID)
    t.user("Please keep the public API stable.")
    t.raw('{"type": "user", "message": {"role": "user", "content": ' + deep + "}}")
    path = t.write(tmp_path / f"{SID}.jsonl")
    res = hook("pre-compact", pre_compact_payload(path), state_dir, "--json")
    assert res.returncode == 0, res.stderr[-300:]
    assert json.loads(res.stdout)["malformed_lines"] == 1
    assert "keep the public API stable" in session_items(state_dir)["requirements"]


@pytest.mark.slow
def test_session_start_after_a_compaction_does_not_say_nothing_fits_when_all_is_shown_apart(tmp_path, state_dir):
    """Only the session's digest is stored: it is shown below, so recall itself has nothing else
    to show, and says so rather than "No active items fit within recall_tokens"."""
    path = sample(SID).write(tmp_path / "t.jsonl")
    assert hook("pre-compact", pre_compact_payload(path), state_dir).returncode == 0
    payload = {"session_id": SID, "source": "compact", "cwd": "/home/me/shop", "hook_event_name": "SessionStart"}
    res = hook("session-start", payload, state_dir)
    ctx = json.loads(res.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Saved from this session" in ctx
    assert "fit within recall_tokens" not in ctx and "Left out" not in ctx
    assert re.search(r"No active items besides the \d+ items shown apart\.", ctx), ctx[:600]


@pytest.mark.slow
def test_pre_compact_keeps_every_instruction_of_the_first_request(tmp_path, state_dir):
    """An imperative sentence is a requirement though it has no keyword ("Keep money as Decimal.")."""
    t = Transcript(SID)
    t.user(
        "Refactor the invoice totals in billing/totals.py. The rounding is off by a cent on refunds. "
        "Fix it and add a test. Keep money as Decimal. Leave the public API as it is."
    )
    t.say("I'll start with the rounding.")
    path = t.write(tmp_path / "t.jsonl")
    assert hook("pre-compact", pre_compact_payload(path), state_dir).returncode == 0
    req = session_items(state_dir)["requirements"]
    for sentence in ("Fix it and add a test.", "Keep money as Decimal.", "Leave the public API as it is."):
        assert sentence in req, req
    assert "off by a cent" not in req  # a statement of fact, not an instruction
