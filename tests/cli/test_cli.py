"""The human CLI: every subcommand over a real state dir, its exit codes, --json, colour, and
safety beside a running server."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from compactor import cli
from compactor import constants as C
from compactor.cli.common import Out
from compactor.store import Store, StoreInput
from tests.conftest import FakeClock, server_command, server_env
from tests.support.stdio_client import StdioServer


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def subcommands() -> dict[str, object]:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)  # type: ignore[arg-type]


@pytest.fixture
def filled(state_dir: Path) -> dict[str, str]:
    """A state dir with a decision, an error, a pinned preference and enough reading notes
    under a small budget that compaction built summary nodes."""
    clock = FakeClock()
    s = Store(state_dir=state_dir, budget=2_000, clock=clock)
    ids = {
        "decision": s.store(
            "Decision: use PostgreSQL instead of SQLite because we need concurrent writers.",
            summary="Use PostgreSQL for concurrent writers",
            importance=8,
        ).item.id,
        "error": s.store("TypeError: 'NoneType' object is not subscriptable in auth/session.py line 42").item.id,
        "pref": s.store("The user wants tabs, never spaces, in Makefiles.", pinned=True, importance=9).item.id,
    }
    for i in range(150):
        clock.advance(60)
        s.store(f"Read src/mod_{i}.py: class Handler{i} parses config key k{i} and emits event e{i}", tags="reading")
    s.close()
    return ids


def test_every_subcommand_has_help(capsys):
    names = subcommands()
    assert set(names) >= {
        "status", "list", "show", "query", "tree", "pin", "unpin", "forget", "dissolve", "export", "import",
        "doctor", "hook",
    }  # fmt: skip
    for name in names:
        code, out, _ = run(capsys, name, "--help")
        assert code == 0 and out.startswith(f"usage: compactor {name}"), name
        if name != "hook":
            assert "--state-dir" in out, name
    for event in ("session-start", "pre-compact"):
        code, out, _ = run(capsys, "hook", event, "--help")
        assert code == 0 and f"compactor hook {event}" in out
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "--budget" in out and all(n in out for n in names)


def test_usage_errors_exit_2_and_missing_state_exits_1(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("COMPACTOR_STATE_DIR", raising=False)
    assert run(capsys, "nosuchcommand")[0] == 2
    assert run(capsys, "list", "--limit", "0", "--state-dir", str(tmp_path))[0] == 2
    assert run(capsys, "status", "--bogus")[0] == 2
    code, _, err = run(capsys, "status")
    assert code == 2 and "--state-dir" in err
    missing = tmp_path / "nothing-here"
    code, out, err = run(capsys, "status", "--state-dir", str(missing))
    assert code == 0 and "0 active" in out and "nothing stored yet" in out and err == ""  # an empty memory
    assert not missing.exists()  # reading never creates a state dir


def test_status_counts_tiers_types_and_depths(capsys, state_dir, filled, monkeypatch):
    st = run_json(capsys, "status", "--state-dir", str(state_dir))
    with _open(state_dir) as s:
        real = s.status()
        shape = s.dag_shape()
    assert st["active_items"] == real.active_items and st["archived_items"] == real.archived_items
    assert st["tokens_used"] == real.tokens_used and st["token_budget"] == 2_000
    assert st["pinned_items"] == 1 and st["archived_items"] > 0
    assert sum(d["active"] for d in st["per_depth"].values()) == real.active_items
    assert sum(d["archived"] for d in st["per_depth"].values()) == real.archived_items
    assert {int(k) for k in st["per_depth"]} == {0, *shape}
    assert st["per_type"]["decision"]["active"] + st["per_type"]["decision"]["archived"] == 1
    # The env var stands in for --state-dir.
    monkeypatch.setenv("COMPACTOR_STATE_DIR", str(state_dir))
    code, out, _ = run(capsys, "status")
    assert code == 0
    assert "█" in out or "#" in out
    assert f"{real.tokens_used:,} / 2,000 tokens" in out
    assert "d1" in out and "decision" in out and "\x1b[" not in out  # not a terminal: no colour


class _open:
    def __init__(self, path: Path) -> None:
        self.store = Store(state_dir=path)

    def __enter__(self) -> Store:
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()


def test_list_show_query_tree(capsys, state_dir, filled):
    sd = ("--state-dir", str(state_dir))
    page = run_json(capsys, "list", *sd, "--limit", "5")
    with _open(state_dir) as s:
        expected = s.list_items(limit=5)
        assert [i["id"] for i in page["items"]] == [it.id for it in expected.items]
        assert page["total"] == expected.total and page["next_offset"] == 5
        node = s.roots()[0]
        archived_child = next(s.get(c) for c in node.children if s.get(c).tier == "archived")
    code, out, _ = run(capsys, "list", *sd, "--tier", "archived", "--limit", "3")
    assert code == 0 and "ID" in out and "of" in out and "next: --offset 3" in out
    code, out, _ = run(capsys, "list", *sd, "--offset", "100000")
    assert code == 0 and f"No active items from offset 100,000: there are {expected.total:,}." in out

    code, out, _ = run(capsys, "show", filled["decision"], *sd)
    assert code == 0
    assert "concurrent writers" in out and "History" in out and "Lineage" in out and "access count" in out
    shown = run_json(capsys, "show", archived_child.id, *sd)
    assert shown["content"] == archived_child.content and shown["tier"] == "archived"
    assert shown["parents"] and shown["active_via"] and shown["active_via"][-1] in {r.id for r in _roots(state_dir)}
    assert any("stored" in e for e in shown["journal"])  # no snapshot yet: the journal has it all
    code, _, err = run(capsys, "show", "nosuchid", *sd)
    assert code == 1 and "nosuchid" in err

    hits = run_json(capsys, "query", "PostgreSQL writers", *sd, "--archived")
    assert hits["items"][0]["id"] == filled["decision"] and hits["items"][0]["score"] > 0
    code, out, _ = run(capsys, "query", "zzzunknownzzz", *sd)
    assert code == 0 and "No matches" in out

    code, out, _ = run(capsys, "tree", *sd)
    assert code == 0 and node.id in out and " d" in out
    tree = run_json(capsys, "tree", *sd, "--depth", "2")
    top = next(r for r in tree["roots"] if r["id"] == node.id)
    assert [c["id"] for c in top["children"]] == list(node.children)


def _roots(state_dir: Path) -> list:
    with _open(state_dir) as s:
        return s.roots()


def test_pin_unpin_forget_dissolve(capsys, state_dir, filled):
    sd = ("--state-dir", str(state_dir))
    target = filled["error"]
    assert run(capsys, "pin", target, *sd)[0] == 0
    with _open(state_dir) as s:
        assert s.get(target).pinned
    assert run_json(capsys, "unpin", target, *sd)["unpinned"] == [target]
    with _open(state_dir) as s:
        assert not s.get(target).pinned

    # forget is permanent: refused without --yes when stdin is not a terminal.
    code, _, err = run(capsys, "forget", target, *sd)
    assert code == 1 and "--yes" in err
    with _open(state_dir) as s:
        assert target in s.ids()
    # A missing id is reported (exit 1) and the others are still forgotten.
    code, out, err = run(capsys, "forget", target, "nosuchid", "--yes", *sd)
    assert code == 1 and "Forgot" in out and "nosuchid" in err
    with _open(state_dir) as s:
        assert target not in s.ids()
        node = s.roots()[0]
        kids = list(node.children)
    for f in state_dir.iterdir():
        assert b"not subscriptable" not in f.read_bytes()

    out = run_json(capsys, "dissolve", node.id, *sd)
    assert [c["id"] for c in out["children"]] == kids
    with _open(state_dir) as s:
        assert node.id not in s.ids()
        assert all(node.id not in s.get(k).parents for k in kids)
    code, _, err = run(capsys, "dissolve", filled["decision"], *sd)
    assert code == 1 and "not a summary" in err


def test_export_json_covers_every_page_and_imports_back(capsys, tmp_path, clock):
    src, dst = tmp_path / "src", tmp_path / "dst"
    s = Store(state_dir=src, clock=clock)
    body = "x" * 900
    s.bulk_store([StoreInput(f"note {i} {body}", tags="bulk", importance=1 + i % 10) for i in range(150)])
    s.pin(s.list_items(limit=1).items[0].id)
    s.close()
    assert C.EXPORT_PAGE_CHARS < 150 * 900  # more than one page
    out_file = tmp_path / "export.json"
    code, _, err = run(capsys, "export", "--state-dir", str(src), "-o", str(out_file))
    assert code == 0 and "150" in err
    doc = json.loads(out_file.read_text())
    assert doc["count"] == 150 and len({r["id"] for r in doc["items"]}) == 150

    got = run_json(capsys, "import", str(out_file), "--state-dir", str(dst))
    assert len(got["imported"]) == 150 and got["already_present"] == []
    again = run_json(capsys, "import", str(out_file), "--state-dir", str(dst))
    assert again["imported"] == [] and len(again["already_present"]) == 150
    with _open(src) as a, _open(dst) as b:
        for item_id in a.ids():
            x, y = a.get(item_id), b.get(item_id)
            assert (x.content, x.importance, x.pinned, x.tags) == (y.content, y.importance, y.pinned, y.tags)

    code, md, _ = run(capsys, "export", "--state-dir", str(src), "--format", "markdown")
    assert code == 0 and md.count("\n## ") == 150 and "· pinned" in md
    assert run(capsys, "export", "--state-dir", str(src), "--format", "memory-md")[0] == 2  # needs -o DIR


def test_colour_only_on_a_terminal(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert "\x1b[" in Out(Tty()).paint("x", "id")
    assert "\x1b[" not in Out(io.StringIO()).paint("x", "id")
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\x1b[" not in Out(Tty()).paint("x", "id")


def cli_proc(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        server_command(*argv), input=stdin, capture_output=True, text=True, env=server_env(), timeout=120
    )


@pytest.mark.slow
def test_cli_beside_a_running_server(state_dir):
    """The CLI and the server share the dir through the flock and the journal: each sees the
    other's changes at once."""
    with StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "3600") as srv:
        item_id = srv.ok("store", content="the deploy key rotates every 30 days", importance=6)["id"]
        listed = cli_proc("list", "--json", "--state-dir", str(state_dir))
        assert listed.returncode == 0, listed.stderr
        assert [i["id"] for i in json.loads(listed.stdout)["items"]] == [item_id]
        pinned = cli_proc("pin", item_id, "--state-dir", str(state_dir))
        assert pinned.returncode == 0, pinned.stderr
        assert srv.ok("get", id=item_id)["pinned"] is True
        # The server keeps working after the CLI wrote to the journal.
        srv.ok("store", content="second fact about the staging cluster")
        status = json.loads(cli_proc("status", "--json", "--state-dir", str(state_dir)).stdout)
        assert status["active_items"] == 2 and status["pinned_items"] == 1


@pytest.mark.slow
def test_no_subcommand_still_runs_the_server(state_dir):
    with StdioServer("--budget", "5000", "--state-dir", str(state_dir)) as srv:
        assert srv.ok("status")["token_budget"] == 5000


@pytest.mark.slow
def test_doctor_subcommand_reports_health_and_damage(state_dir):
    from compactor.store import Store

    s = Store(state_dir=state_dir)
    s.store("healthy item")
    s.close()
    ok = cli_proc("doctor", "--state-dir", str(state_dir))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    as_json = cli_proc("doctor", "--state-dir", str(state_dir), "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)
    journal = state_dir / "journal.jsonl"
    journal.write_bytes(journal.read_bytes() + b"garbage line\n{}\n")
    bad = cli_proc("doctor", "--state-dir", str(state_dir))
    assert bad.returncode == 1
    assert "journal" in (bad.stdout + bad.stderr).lower()
    assert cli_proc("doctor").returncode == 2  # no state dir given: a usage error


def test_a_long_id_is_not_echoed_by_show_or_pin(capsys, state_dir, filled):
    sd = ("--state-dir", str(state_dir))
    long_id = "z" * 5_000
    for command in ("show", "pin"):
        code, out, err = run(capsys, command, long_id, *sd)
        assert code == 1 and "z" * 100 not in err + out, command
        assert "of 5,000 characters (ids have at most 64)" in err, command
    code, out, _ = run(capsys, "unpin", long_id, filled["error"], *sd, "--json")
    assert code == 1 and json.loads(out)["not_found"] == [long_id]  # JSON keeps it whole


def _files(state_dir: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(state_dir.iterdir())}


def test_reading_commands_change_no_file_of_the_state_dir(capsys, state_dir, filled):
    """status, list, export, query, show and tree leave every file's bytes and mtime as they
    were: a snapshot, a rotation or a journal line would make every running server reload."""
    before = _files(state_dir)
    for argv in (
        ["status"],
        ["list"],
        ["export", "-o", "-"],
        ["query", "Handler"],
        ["query", "--tags", "reading"],
        ["show", filled["decision"]],
        ["tree"],
    ):
        code, _, err = run(capsys, *argv, "--state-dir", str(state_dir))
        assert code == 0, (argv, err)
        assert _files(state_dir) == before, argv


@pytest.mark.slow
def test_reading_commands_beside_a_server_make_it_catch_up_on_nothing(state_dir):
    with StdioServer("--state-dir", str(state_dir), "--no-share", "--snapshot-interval", "3600") as srv:
        item_id = srv.ok("store", content="the deploy key rotates every 30 days")["id"]
        before = _files(state_dir)
        for argv in (["status"], ["list"], ["query", "deploy"], ["show", item_id], ["export", "-o", "-"]):
            done = cli_proc(*argv, "--state-dir", str(state_dir))
            assert done.returncode == 0, done.stderr
        assert _files(state_dir) == before
        assert srv.ok("get", id=item_id)["content"] == "the deploy key rotates every 30 days"
