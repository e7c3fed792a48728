"""MEMORY.md interop: import Claude Code's auto-memory dir, its index and flat MEMORY.md files;
export pinned and important items back as such a dir."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor import cli
from compactor.claude_code import memory_md as memory_md_mod
from compactor.claude_code.memory_md import (
    _INDEX_LINE,
    INDEX_MARKER,
    index_line,
    parse_memory_index,
    read_memory_path,
    to_store_input,
)
from compactor.store import Store, StoreInput
from tests.conftest import FakeClock

USER = """---
name: user_role
description: Senior Go engineer, new to React; explain frontend via backend analogies
type: user
---

Ten years of Go, first time in this repo's React side.
"""
FEEDBACK = """---
name: no_db_mocks
description: Integration tests must hit a real database, never mocks
metadata:
  type: feedback
  origin: chat 2025-03-02
source: correction
---

Integration tests must hit a real database, not mocks.
**Why:** mocked tests passed while a broken migration shipped.
**How to apply:** every test under tests/integration.
"""
PROJECT = """---
name: merge_freeze
description: "Merge freeze from 2026-03-05: mobile release branch"
type: project
tags: [release, mobile]
---

Non-critical merges freeze after 2026-03-05 while mobile cuts the release branch.
"""
REFERENCE = """---
name: latency_dashboard
description: grafana.internal/d/api-latency is the on-call latency board
type: reference
---

Check grafana.internal/d/api-latency when touching request paths.
"""
INDEX = """- [User role](user_role.md) — Go expert, React novice
- [No DB mocks](no_db_mocks.md) — integration tests hit a real DB
- [Merge freeze](merge_freeze.md) — from 2026-03-05
- [Latency board](latency_dashboard.md) — grafana on-call board
- [Deploy checklist](deploy_checklist.md) — the file was deleted but the index still says this
"""


def memory_dir(root: Path) -> Path:
    d = root / "memory"
    d.mkdir()
    for name, text in (
        ("user_role.md", USER),
        ("no_db_mocks.md", FEEDBACK),
        ("merge_freeze.md", PROJECT),
        ("latency_dashboard.md", REFERENCE),
    ):
        (d / name).write_text(text)
    (d / "MEMORY.md").write_text(INDEX)
    return d


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code = cli.main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def by_name(store: Store) -> dict[str, object]:
    out = {}
    for item_id in store.ids():
        it = store.get(item_id)
        m = re.search(r"^name: (\S+)", it.content, re.M)
        out[m.group(1) if m else it.content.split(" — ")[0]] = it
    return out


def test_import_auto_memory_dir(capsys, tmp_path, state_dir):
    d = memory_dir(tmp_path)
    got = run_json(capsys, "import", str(d), "--state-dir", str(state_dir))
    assert got["kind"] == "memory dir" and len(got["imported"]) == 5
    assert all(i.startswith("mem-") for i in got["imported"])

    s = Store(state_dir=state_dir)
    items = by_name(s)
    user, feedback, project, ref = (items[n] for n in ("user_role", "no_db_mocks", "merge_freeze", "latency_dashboard"))
    assert "user" in user.tags and user.importance == memory_md_mod.MEMORY_TYPE_IMPORTANCE["user"]
    # type under `metadata:` counts the same as top-level `type:`.
    assert "feedback" in feedback.tags and feedback.importance == memory_md_mod.MEMORY_TYPE_IMPORTANCE["feedback"]
    assert "project" in project.tags and {"release", "mobile"} <= set(project.tags)
    assert "reference" in ref.tags and ref.importance == memory_md_mod.MEMORY_TYPE_IMPORTANCE["reference"]
    # Unknown keys are kept (the file is stored whole), and the description is the summary.
    assert "source: correction" in feedback.content and "origin: chat 2025-03-02" in feedback.content
    assert feedback.summary == "no_db_mocks: Integration tests must hit a real database, never mocks"
    # An index line whose file is gone is imported on its own; lines with files are not doubled.
    assert "Deploy checklist" in items and len(items) == 5
    s.close()

    again = run_json(capsys, "import", str(d), "--state-dir", str(state_dir))
    assert again["imported"] == [] and len(again["already_present"]) == 5


def test_flat_memory_md_entries():
    text = """# Memory

Notes Claude keeps about this repo.

## Preferences
- Use pnpm, never npm.
- Tabs in Makefiles.
  (make fails on spaces)

## Build takes 4 minutes
Run `make fast` for the unit tests only; the full build is for CI.

2025-06-01: switched the queue from RabbitMQ to SQS.
2025-06-03 — staging DB moved to eu-west-1
* [Style guide](style.md) — see docs/style.md
"""
    entries = parse_memory_index(text, base=None)
    bodies = [e.body for e in entries]
    assert bodies == [
        "Notes Claude keeps about this repo.",
        "Use pnpm, never npm.",
        "Tabs in Makefiles.\n  (make fails on spaces)",
        "## Build takes 4 minutes\nRun `make fast` for the unit tests only; the full build is for CI.",
        "2025-06-01: switched the queue from RabbitMQ to SQS.",
        "2025-06-03 — staging DB moved to eu-west-1",
        "see docs/style.md",
    ]
    assert entries[1].tags == ["preferences"] and entries[2].tags == ["preferences"]
    assert entries[6].name == "Style guide"


def test_flat_file_import_is_idempotent(capsys, tmp_path, state_dir):
    f = tmp_path / "MEMORY.md"
    f.write_text("- Use pnpm, never npm.\n- The API base URL is https://api.example.test/v2\n")
    assert len(run_json(capsys, "import", str(f), "--state-dir", str(state_dir))["imported"]) == 2
    assert run_json(capsys, "import", str(f), "--state-dir", str(state_dir))["imported"] == []


def test_malformed_frontmatter_is_kept_as_text(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "broken.md").write_text("---\nname: [unclosed\ntype: user\n---\nbody text\n")
    [entry] = read_memory_path(d)
    assert entry.type is None and entry.name == "broken" and "body text" in entry.text


def test_export_memory_md_round_trip(capsys, tmp_path, state_dir):
    d = memory_dir(tmp_path)
    run_json(capsys, "import", str(d), "--state-dir", str(state_dir))
    s = Store(state_dir=state_dir)
    native = s.store("Deploys go out on Tuesdays only; never on Fridays.", summary="Deploy days", importance=9)
    low = s.store("A trivia note nobody needs.", importance=2)
    s.close()

    out = tmp_path / "exported"
    code = cli.main(["export", "--format", "memory-md", "-o", str(out), "--state-dir", str(state_dir)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "Wrote 4 memory files" in printed.out
    marker, *index = (out / "MEMORY.md").read_text().splitlines()
    assert marker == INDEX_MARKER  # how a later export knows the file is ours to replace
    # importance >= 7: user (7+), feedback, project and the native item; not reference or trivia.
    assert len(index) == 4
    for line in index:
        assert len(line) <= memory_md_mod.MEMORY_INDEX_LINE_CHARS
        m = _INDEX_LINE.match(line)
        assert m and (out / m.group("file")).is_file() and " — " in line
    assert "Deploy days" in index[0]  # newest first

    exported = {e.name: e for e in read_memory_path(out)}
    originals = {e.name: e for e in read_memory_path(d)}
    for name in ("user_role", "no_db_mocks", "merge_freeze"):
        a, b = exported[name], originals[name]
        assert (a.description, a.type, a.body, a.extra) == (b.description, b.type, b.body, b.extra)
    assert "latency_dashboard" not in exported
    assert exported["Deploy days"].type == "project"
    assert "never on Fridays" in exported["Deploy days"].body
    assert all(low.item.id not in (out / f).read_text() for f in (p.name for p in out.iterdir()))

    # Importing the export into the same store finds every item it came from.
    again = run_json(capsys, "import", str(out), "--state-dir", str(state_dir))
    assert again["imported"] == [] and native.item.id in again["already_present"]


@pytest.mark.slow
def test_index_is_capped_newest_first(tmp_path, state_dir):
    clock = FakeClock()
    s = Store(state_dir=state_dir, clock=clock)
    for i in range(230):
        clock.advance(10)
        s.bulk_store([StoreInput(f"lesson {i}: " + "detail " * 40, summary=f"lesson {i}", importance=8)])
    s.close()
    out = tmp_path / "m"
    assert cli.main(["export", "--format", "memory-md", "-o", str(out), "--state-dir", str(state_dir)]) == 0
    lines = (out / "MEMORY.md").read_text().splitlines()
    assert len(lines) == memory_md_mod.MEMORY_INDEX_MAX_LINES  # the marker line counts: Claude Code reads 200 lines
    assert lines[0] == INDEX_MARKER and "lesson 229" in lines[1] and "lesson 31" in lines[-1]
    assert len(list(out.glob("*.md"))) == memory_md_mod.MEMORY_INDEX_MAX_LINES


@given(
    st.text(min_size=1, max_size=300).filter(lambda s: s.strip() and "\n" not in s),
    st.text(max_size=400).filter(lambda s: "\n" not in s),
)
def test_index_lines_fit_and_parse_back(name, description):
    line = index_line(name, "some_file.md", description)
    assert len(line) <= memory_md_mod.MEMORY_INDEX_LINE_CHARS
    m = _INDEX_LINE.match(line)
    assert m and m.group("file") == "some_file.md"


memory_lines = st.lists(
    st.one_of(
        st.sampled_from(["- ", "## ", "# ", "2025-01-02: ", "* [x](y.md) — ", "  ", "---", ""]).flatmap(
            lambda prefix: st.text(max_size=40).map(lambda t: prefix + t.replace("\n", " ").replace("\r", " "))
        ),
    ),
    max_size=15,
)


@given(memory_lines)
def test_any_memory_md_parses_into_storable_entries(lines):
    entries = parse_memory_index("\n".join(lines), base=None)
    for e in entries:
        inp = to_store_input(e)
        assert inp.content.strip() and re.fullmatch(r"[a-z0-9][a-z0-9_-]{2,63}", inp.item_id or "")


@pytest.mark.slow
def test_frontmatter_nested_thousands_deep_is_read_as_plain_text(tmp_path: Path):
    """PyYAML raises RecursionError, not YAMLError, on it: the import ended in a traceback."""
    memory = tmp_path / "memory"
    memory.mkdir()
    (memory / "deep.md").write_text("---\na: " + "[" * 20_000 + "]" * 20_000 + "\n---\nthe body\n")
    (memory / "MEMORY.md").write_text("- [deep](deep.md) — a note\n")
    assert cli.main(["import", str(memory), "--state-dir", str(tmp_path / "state")]) == 0
    store = Store(state_dir=tmp_path / "state")
    try:
        [item] = [store.get(i) for i in store.ids()]
        assert item.content.startswith("---\na: [[[") and "the body" in item.content
    finally:
        store.close()


@pytest.mark.slow
def test_frontmatter_with_aliases_is_read_as_plain_text_not_expanded(tmp_path: Path):
    """Nine levels of YAML aliases ten wide are a billion strings once turned into text:
    `compactor import` of such a memory file ran out of memory. Aliases are refused, and the
    file is kept as plain text like any frontmatter that is not valid. Through the CLI in a
    process of its own, with a 2 GB address-space cap it would have blown through."""
    import resource
    import subprocess

    from tests.conftest import server_command, server_env

    levels = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    previous = "a"
    for name in "bcdefghi":
        levels.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 10) + "]")
        previous = name
    memory = tmp_path / "memory"
    memory.mkdir()
    text = "---\n" + "\n".join(levels) + f"\nname: bomb\ntags: [*{previous}]\ndescription: *{previous}\n---\nthe body\n"
    (memory / "bomb.md").write_text(text)
    (memory / "MEMORY.md").write_text("- [bomb](bomb.md) — a note\n")

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    done = subprocess.run(
        server_command("import", str(memory), "--state-dir", str(tmp_path / "state")),
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=capped,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert "it uses an alias (*name)" in done.stderr and "keeping the file as plain text" in done.stderr
    assert "Imported 1 item from" in done.stdout and "0 were already present" in done.stdout
    store = Store(state_dir=tmp_path / "state", scope="all")
    try:
        [item] = [store.get(i) for i in store.ids()]
        assert "&a" in item.content and "the body" in item.content
    finally:
        store.close()
