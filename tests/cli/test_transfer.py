"""Export and import: JSON round-trips every field of every item (CLI and MCP export), imports
are idempotent and keep lineage consistent, a markdown export is refused, export files are
private and never replace what they should not, and CLI views say what the scope filter hides."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from compactor import cli
from compactor.claude_code.memory_md import INDEX_MARKER
from compactor.mcp import build_server
from compactor.store import Store, StoreInput
from tests.conftest import FakeClock

# Every field that describes an item: all of Item's but the store-local seq and token counts.
FIELDS = (
    "id", "content", "summary", "tags", "importance", "content_type", "tier", "view", "pinned", "scope",
    "depth", "children", "parents", "gone_children", "children_tier", "merged_into", "dup_of", "quality",
    "created_at", "last_accessed_at", "access_count",
)  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def build(state_dir: Path, n: int = 250, seed: int = 0) -> None:
    """A compacted state: a small budget, two projects, pinned, summarised and accessed items."""
    clock = FakeClock()
    s = Store(state_dir=state_dir, budget=3_000, clock=clock, scope="/p/one")
    for i in range(n):
        clock.advance(30 + seed)
        s.store(
            f"Read src/mod_{i}_{seed}.py: class Handler{i} parses config key k{i} and emits event e{i} "
            + "detail " * ((i + seed) % 7),
            summary=f"mod {i} handler" if i % 4 == 0 else None,
            tags=["reading"] if i % 2 else None,
            importance=1 + (i + seed) % 10,
            pinned=i % 50 == 0,
            scope="/p/two" if (i + seed) % 3 == 0 else None,
        )
    clock.advance(5)
    s.query("Handler17 config", include_archived=True)
    s.query("Handler42", scope="all")
    s.close()


def export(capsys: pytest.CaptureFixture[str], state_dir: Path, out: Path) -> dict[str, dict[str, Any]]:
    code, _, err = run(capsys, "export", "--state-dir", str(state_dir), "--scope", "all", "-o", str(out))
    assert code == 0, err
    return {r["id"]: r for r in json.loads(out.read_text())["items"]}


def differing(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> dict[str, int]:
    """field -> how many items differ in it (an item missing from `b` counts under "missing")."""
    diffs: dict[str, int] = {}
    for item_id, rec in a.items():
        other = b.get(item_id)
        if other is None:
            diffs["missing"] = diffs.get("missing", 0) + 1
            continue
        for key in FIELDS:
            if rec.get(key) != other.get(key):
                diffs[key] = diffs.get(key, 0) + 1
    extra = len(set(b) - set(a))
    if extra:
        diffs["extra"] = extra
    return diffs


def doctor_ok(capsys: pytest.CaptureFixture[str], state_dir: Path) -> None:
    code, out, _ = run(capsys, "doctor", "--state-dir", str(state_dir))
    assert code == 0 and "Healthy" in out, out


def test_json_export_import_export_is_identical(capsys, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    build(src)
    a = export(capsys, src, tmp_path / "a.json")
    assert sum(1 for r in a.values() if r["depth"]) >= 5  # summary nodes
    assert {r["tier"] for r in a.values()} == {"active", "archived"}
    assert {r["scope"] for r in a.values()} == {"/p/one", "/p/two"}
    assert any(r["view"] == "summary" for r in a.values()) and any(r["access_count"] for r in a.values())

    code, out, err = run(capsys, "import", str(tmp_path / "a.json"), "--state-dir", str(dst), "--json")
    assert code == 0, err
    assert len(json.loads(out)["imported"]) == len(a)
    b = export(capsys, dst, tmp_path / "b.json")
    assert differing(a, b) == {}
    doctor_ok(capsys, dst)

    # Importing again stores nothing: not even a journal line.
    journal = dst / "journal.jsonl"
    size = journal.stat().st_size
    code, out, _ = run(capsys, "import", str(tmp_path / "a.json"), "--state-dir", str(dst), "--json")
    again = json.loads(out)
    assert code == 0 and again["imported"] == [] and len(again["already_present"]) == len(a)
    assert journal.stat().st_size == size
    # And a restart brings back the same (the ops were journaled, not only applied).
    assert differing(a, export(capsys, dst, tmp_path / "c.json")) == {}


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(min_value=1, max_value=160), seed=st.integers(min_value=0, max_value=40))
def test_round_trip_of_any_state(capsys, tmp_path_factory, n, seed):
    tmp = tmp_path_factory.mktemp("rt")
    build(tmp / "src", n=n, seed=seed)
    a = export(capsys, tmp / "src", tmp / "a.json")
    assert run(capsys, "import", str(tmp / "a.json"), "--state-dir", str(tmp / "dst"))[0] == 0
    assert differing(a, export(capsys, tmp / "dst", tmp / "b.json")) == {}


@pytest.mark.slow
def test_import_beside_other_items_keeps_lineage_consistent(capsys, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    build(src)
    full = export(capsys, src, tmp_path / "a.json")
    nodes = [r for r in full.values() if r["depth"] == 1]
    # A file that lacks one child of the first node: that node cannot come, its other children do.
    node = nodes[0]
    lost_child = node["children"][0]
    partial = [r for r in full.values() if r["id"] != lost_child]
    (tmp_path / "partial.json").write_text(json.dumps({"items": partial}))
    other = Store(state_dir=dst, scope="/p/one")
    mine = other.store("an item this store had before the import").item.id
    other.close()

    code, out, err = run(capsys, "import", str(tmp_path / "partial.json"), "--state-dir", str(dst), "--json")
    got = json.loads(out)
    assert code == 0, err
    assert node["id"] in got["dropped_nodes"]
    with _open(dst) as s:
        assert mine in s.ids() and node["id"] not in s.ids()
        for kid in node["children"][1:]:
            # Covered again by a new summary, never left pointing at the node that did not come.
            assert node["id"] not in s.get(kid).parents and s.get(kid).parents
        assert s.get(nodes[1]["id"]).children == tuple(nodes[1]["children"])
    doctor_ok(capsys, dst)

    # The active tier alone: no node's archived children come with it, so no node does.
    dst2 = tmp_path / "dst2"
    code, _, _ = run(capsys, "export", "--state-dir", str(src), "--scope", "all", "--tier", "active",
                     "-o", str(tmp_path / "active.json"))  # fmt: skip
    assert code == 0
    code, out, err = run(capsys, "import", str(tmp_path / "active.json"), "--state-dir", str(dst2), "--json")
    assert code == 0, err
    assert len(json.loads(out)["dropped_nodes"]) == sum(
        1 for r in full.values() if r["depth"] and r["tier"] == "active"
    )
    doctor_ok(capsys, dst2)


class _open:
    def __init__(self, path: Path) -> None:
        self.store = Store(state_dir=path)

    def __enter__(self) -> Store:
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()


def test_invalid_record_imports_nothing(capsys, tmp_path):
    dst = tmp_path / "dst"
    good = {"id": "good-one", "content": "fine"}
    bads = [
        {"id": "bad-tier", "content": "x", "tier": "gone"},
        {"id": "Bad Id!", "content": "x"},
        {"id": "bad-imp", "content": "x", "importance": 11},
        {"id": "bad-node", "content": "x", "depth": 1},
    ]
    for bad in bads:
        path = tmp_path / "bad.json"
        path.write_text(json.dumps({"items": [good, bad]}))
        code, _, err = run(capsys, "import", str(path), "--state-dir", str(dst))
        assert code == 1 and "items[1]" in err, err
    assert not (dst / "journal.jsonl").exists() or "good-one" not in (dst / "journal.jsonl").read_text()


def test_a_file_nested_thousands_deep_is_refused_in_one_sentence(capsys, tmp_path):
    """The decoder's RecursionError came out as a traceback; and a tag that is a list was
    echoed whole, without the sentence's full stop."""
    path = tmp_path / "deep.json"
    path.write_text('{"items": ' + "[" * 100_000 + "]" * 100_000 + "}")
    code, _, err = run(capsys, "import", str(path), "--state-dir", str(tmp_path / "dst"))
    assert code == 1
    assert err.strip() == (
        f"compactor import: {path} is nested too deeply to be an export. Import a file written by `compactor export`."
    )
    path.write_text(json.dumps({"items": [{"id": "listed", "content": "x", "tags": [["a", "b"]]}]}))
    code, _, err = run(capsys, "import", str(path), "--state-dir", str(tmp_path / "dst"))
    assert code == 1
    assert err.strip() == "compactor import: items[0]: tags must be strings, got a list. Nothing was imported."


def test_a_record_without_text_content_is_refused_for_what_it_is(capsys, tmp_path):
    """A record the MCP export wrote with summaries_only gets the hint to export again; a
    content of the wrong type or a record that is not an object is named as such."""
    path = tmp_path / "bad.json"
    cases = [
        ({"id": "a-one", "text": "a summary"}, "items[0] has no content (a summaries_only export)"),
        ({"id": "a-one"}, "items[0] has no content"),
        ({"id": "a-one", "content": 5}, "items[0].content is int; it must be a string"),
        (["a-one"], "items[0] is list, not an object"),
    ]
    for record, said in cases:
        path.write_text(json.dumps({"items": [record]}))
        code, _, err = run(capsys, "import", str(path), "--state-dir", str(tmp_path / "dst"))
        assert code == 1 and said in err, err
        assert "summaries_only" not in err or "text" in record
    assert not (tmp_path / "dst" / "journal.jsonl").exists()


def test_markdown_export_is_refused_on_import(capsys, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    build(src, n=60)
    md = tmp_path / "export.md"
    assert run(capsys, "export", "--state-dir", str(src), "--scope", "all", "--format", "markdown",
               "-o", str(md))[0] == 0  # fmt: skip
    code, out, err = run(capsys, "import", str(md), "--state-dir", str(dst))
    assert code == 1 and "--format json" in err and "Imported" not in out
    assert not dst.exists()  # nothing created, let alone junk items
    # The MCP tool's markdown pages (no title line) are recognised too.
    body = "\n".join(md.read_text().split("\n")[3:])
    (tmp_path / "page.md").write_text(body)
    code, _, err = run(capsys, "import", str(tmp_path / "page.md"), "--state-dir", str(dst))
    assert code == 1 and "json" in err and not dst.exists()


def test_export_file_is_private_never_through_a_symlink_never_over_a_file(capsys, tmp_path):
    src = tmp_path / "src"
    s = Store(state_dir=src)
    s.store("the deploy key lives in vault path secret/deploy")
    s.close()
    old_umask = os.umask(0o022)
    try:
        out = tmp_path / "e.json"
        assert run(capsys, "export", "--state-dir", str(src), "-o", str(out))[0] == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        for fmt in ("json", "markdown"):
            code, _, err = run(capsys, "export", "--state-dir", str(src), "--format", fmt, "-o", str(out))
            assert code == 1 and "--force" in err
        out.write_text("precious")
        out.chmod(0o644)
        assert run(capsys, "export", "--state-dir", str(src), "-o", str(out), "--force")[0] == 0
        assert "vault path" in out.read_text() and stat.S_IMODE(out.stat().st_mode) == 0o600

        target = tmp_path / "elsewhere.txt"
        target.write_text("not yours")
        link = tmp_path / "link.json"
        link.symlink_to(target)
        for extra in ((), ("--force",)):
            code, _, err = run(capsys, "export", "--state-dir", str(src), "-o", str(link), *extra)
            assert code == 1 and "symbolic link" in err
            assert target.read_text() == "not yours" and link.is_symlink()
    finally:
        os.umask(old_umask)


def test_memory_md_export_never_clobbers_a_hand_written_memory_md(capsys, tmp_path):
    src = tmp_path / "src"
    s = Store(state_dir=src)
    s.store("Deploys go out on Tuesdays only.", summary="Deploy days", importance=9)
    s.close()
    d = tmp_path / "memory"
    d.mkdir()
    (d / "MEMORY.md").write_text("- my own notes, written by hand\n")
    (d / "deploy_days.md").write_text("hand-written, same name as ours\n")
    argv = ("export", "--state-dir", str(src), "--format", "memory-md", "-o", str(d))
    for extra in ((), ("--force",)):
        code, _, err = run(capsys, *argv, *extra)
        assert code == 1 and "not written by compactor" in err
    assert (d / "MEMORY.md").read_text() == "- my own notes, written by hand\n"

    (d / "MEMORY.md").unlink()
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    assert (d / "deploy_days.md").read_text() == "hand-written, same name as ours\n"  # ours took another name
    index = (d / "MEMORY.md").read_text()
    assert index.startswith(INDEX_MARKER) and "(deploy_days_2.md)" in index
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in (d / "MEMORY.md", d / "deploy_days_2.md"))
    # The same export again changes nothing and needs no --force; a different one needs it.
    assert run(capsys, *argv)[0] == 0
    s = Store(state_dir=src)
    s.store("Releases are tagged vX.Y.Z.", summary="Release tags", importance=9)
    s.close()
    code, _, err = run(capsys, *argv)
    assert code == 1 and "--force" in err and "Release tags" not in (d / "MEMORY.md").read_text()
    assert run(capsys, *argv, "--force")[0] == 0
    assert "Release tags" in (d / "MEMORY.md").read_text()
    # Importing our own memory-md export back reads no marker line as an item.
    code, out, _ = run(capsys, "import", str(d / "MEMORY.md"), "--state-dir", str(tmp_path / "x"), "--dry-run")
    assert code == 0 and "written by" not in out


def test_cli_views_say_what_the_scope_filter_hides(capsys, tmp_path):
    sd = tmp_path / "state"
    s = Store(state_dir=sd, scope="/work/alpha")
    for i in range(6):
        s.store(f"alpha note {i} about zanzibar")
    s.close()
    here = ("--state-dir", str(sd), "--scope", "/work/beta")
    code, out, _ = run(capsys, "list", *here)
    assert code == 0 and "No active items." in out
    assert "6 active item(s) of other projects not listed" in out and "--scope all" in out
    code, out, _ = run(capsys, "list", *here, "--json")
    assert json.loads(out)["hidden_by_scope"] == 6
    code, out, _ = run(capsys, "query", "zanzibar", *here)
    assert "No matches" in out and "6 item(s) of other projects not searched" in out
    code, _, err = run(capsys, "export", *here)
    assert code == 0 and "6 item(s) of other projects not exported" in err and "--scope all" in err
    # Nothing hidden, nothing said.
    code, out, _ = run(capsys, "list", "--state-dir", str(sd), "--scope", "all")
    assert code == 0 and "other projects" not in out and out.count("alpha note") == 6
    code, out, _ = run(capsys, "list", "--state-dir", str(sd), "--scope", "/work/alpha")
    assert "other projects" not in out


def test_mcp_export_pages_import_back_identically(capsys, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    build(src, n=120)
    reference = export(capsys, src, tmp_path / "a.json")

    async def pages() -> list[dict[str, Any]]:
        store = Store(state_dir=src, scope="/p/one")
        records: list[dict[str, Any]] = []
        try:
            async with Client(build_server(store), mode="legacy") as c:
                cursor: str | None = None
                while True:
                    args: dict[str, Any] = {"format": "json", "scope": "all"}
                    if cursor:
                        args["cursor"] = cursor
                    res = await c.call_tool("export", args)
                    assert not res.is_error and res.structured_content is not None
                    records.extend(res.structured_content["items"])
                    cursor = res.structured_content["next_cursor"]
                    if not cursor:
                        return records
        finally:
            store.close()

    records = anyio.run(pages)
    assert differing(reference, {r["id"]: r for r in records}) == {}
    (tmp_path / "mcp.json").write_text(json.dumps(records))
    assert run(capsys, "import", str(tmp_path / "mcp.json"), "--state-dir", str(dst))[0] == 0
    assert differing(reference, export(capsys, dst, tmp_path / "b.json")) == {}
    doctor_ok(capsys, dst)


def test_store_import_records_directly():
    """Without a state dir too: the same path, journaled or not."""
    clock = FakeClock()
    s = Store(clock=clock, budget=2_000)
    s.bulk_store([StoreInput(f"entry {i} " + "word " * 40) for i in range(60)])
    records = [it.to_record() for it in sorted(s.iter_items(), key=lambda it: it.seq)]
    t = Store(clock=clock)
    res = t.import_records(records)
    assert len(res.items) == len(records) and res.dropped_nodes == []
    assert {it.id: (it.tier, it.parents) for it in t.iter_items()} == {
        it.id: (it.tier, it.parents) for it in s.iter_items()
    }
    assert t.import_records(records).items == []


def test_a_file_an_editor_saved_with_a_byte_order_mark_imports_as_without_it(capsys, tmp_path):
    """An export opened and saved by an editor on Windows starts with U+FEFF: the import refused
    it ("Unexpected UTF-8 BOM"), and a memory file kept the mark in its stored text."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    build(src, n=30)
    a = export(capsys, src, tmp_path / "a.json")
    marked = tmp_path / "marked.json"
    marked.write_bytes(b"\xef\xbb\xbf" + (tmp_path / "a.json").read_bytes())
    code, _, err = run(capsys, "import", str(marked), "--state-dir", str(dst), "--json")
    assert code == 0, err
    assert differing(a, export(capsys, dst, tmp_path / "b.json")) == {}

    texts = {
        "note.md": "The staging database listens on 6543.\n",
        "fronted.md": "---\nname: ports\ntype: project\n---\nRedis runs on 6380.\n",
    }
    imported = {}
    for mark in ("", "\ufeff"):
        state = tmp_path / f"memory{len(mark)}"
        for name, text in texts.items():
            (tmp_path / name).write_bytes((mark + text).encode())
            code, _, err = run(capsys, "import", str(tmp_path / name), "--state-dir", str(state))
            assert code == 0, err
        records = export(capsys, state, tmp_path / f"m{len(mark)}.json").values()
        imported[mark] = sorted((r["content"], r["tags"], r["importance"]) for r in records)
    assert imported["\ufeff"] == imported[""]
    assert not any("\ufeff" in content for content, _, _ in imported["\ufeff"])


def test_export_says_one_item_in_the_singular(capsys, tmp_path):
    s = Store(state_dir=tmp_path / "s")
    s.store("the only note", importance=9)
    s.close()
    code, _, err = run(capsys, "export", "--state-dir", str(tmp_path / "s"), "-o", str(tmp_path / "one.json"))
    assert code == 0 and f"Wrote 1 item to {tmp_path / 'one.json'}." in err
    code, out, err = run(
        capsys, "export", "--state-dir", str(tmp_path / "s"), "--format", "memory-md", "-o", str(tmp_path / "mem")
    )
    assert code == 0 and "Wrote 1 memory file and " in out, out + err


def test_a_memory_file_that_is_not_utf8_is_refused_in_one_sentence_and_nothing_is_stored(capsys, tmp_path):
    """A Latin-1 memory file ended the import with a UnicodeDecodeError traceback."""
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "good.md").write_text("The staging database listens on 6543.\n", encoding="utf-8")
    (folder / "latin.md").write_bytes("caf\u00e9 au lait\n".encode("latin-1"))
    state = tmp_path / "state"
    for path in (folder / "latin.md", folder):
        code, out, err = run(capsys, "import", str(path), "--state-dir", str(state))
        assert code == 1 and out == "", err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"{folder / 'latin.md'} is not UTF-8 text (byte 0xe9 at offset 3)" in err
        assert "Nothing was imported." in err
    assert not state.exists() or Store(state_dir=state).ids() == []


def test_export_force_replaces_regular_files_only(capsys, tmp_path):
    """Issue 38 point 15: `export -o PATH --force` as root replaced a device node with a file
    holding the whole memory. A pipe, a socket and (as root) a device node stay as they are."""
    import socket

    src = tmp_path / "src"
    s = Store(state_dir=src)
    s.store("the deploy key lives in vault path secret/deploy")
    s.close()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    nodes = [fifo, sock_path]
    if os.geteuid() == 0:  # only root may make a device node; the case
        device = tmp_path / "null"
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        nodes.append(device)
    try:
        for node in nodes:
            kind = stat.S_IFMT(node.lstat().st_mode)
            for extra in ((), ("--force",)):
                code, _, err = run(capsys, "export", "--state-dir", str(src), "-o", str(node), *extra)
                assert code == 1 and "not a regular file" in err, (node, err)
                assert err.count("\n") == 1
                assert stat.S_IFMT(node.lstat().st_mode) == kind
    finally:
        sock.close()


def _secret_shape(name: str) -> str:
    from evals.secret_shapes import SHAPES

    return next(shape.secret for shape in SHAPES if shape.name == name)


def test_import_redacts_every_text_field_the_store_tool_does(capsys, tmp_path):
    """Issue 38 point 3: content and summary were redacted on import, but not quality, tags
    or scope; a scope holding a credential is refused, as the store tool refuses it."""
    github = _secret_shape("github classic pat ghp_")
    stripe = _secret_shape("stripe secret sk_live_")
    dst = tmp_path / "dst"
    record = {
        "id": "imp-one",
        "content": "billing worker notes",
        "quality": f"extractive password=Hunter2-{stripe[-8:]}",
        "tags": ["billing", github],
        "scope": "/p/one",
    }
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"items": [record]}))
    code, out, err = run(capsys, "import", str(path), "--state-dir", str(dst))
    assert code == 0, err
    s = Store(state_dir=dst, scope="/p/one")
    item = s.get("imp-one")
    s.close()
    assert item.tags == ("billing",)
    assert item.quality == "extractive password=[REDACTED:password]"
    for f in dst.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert github.encode() not in data and stripe[-8:].encode() not in data, f

    for scope in (f"proj token={github}", f"proj {github}"):
        bad = dict(record, id="imp-two", scope=scope)
        path.write_text(json.dumps({"items": [bad]}))
        code, out, err = run(capsys, "import", str(path), "--state-dir", str(dst))
        assert code == 1 and "items[0]" in err and "credential" in err, err
        assert github not in out + err
        assert err.count("\n") == 1
    s = Store(state_dir=dst, scope="/p/one")
    assert [it.id for it in s.iter_items()] == ["imp-one"]
    s.close()


def test_an_invalid_imported_field_is_named_without_echoing_a_credential(capsys, tmp_path):
    github = _secret_shape("github classic pat ghp_")
    path = tmp_path / "in.json"
    path.write_text(json.dumps({"items": [{"id": "imp-x", "content": "x", "tier": f"token {github}"}]}))
    code, out, err = run(capsys, "import", str(path), "--state-dir", str(tmp_path / "dst"))
    assert code == 1 and "tier has an invalid value" in err
    assert github not in out + err


@pytest.mark.slow
def test_cli_export_writes_an_item_larger_than_a_page_once_and_whole(capsys, tmp_path):
    """The export pages give such an item in parts (issue 38 point 8); the CLI file holds it once."""
    src = tmp_path / "src"
    s = Store(state_dir=src)
    big = s.store("\n".join(f"line {n} of a long log" for n in range(20_000))).item.id
    s.store("a small note after it")
    s.close()
    out = tmp_path / "e.json"
    assert run(capsys, "export", "--state-dir", str(src), "-o", str(out))[0] == 0
    records = json.loads(out.read_text())["items"]
    assert [r["id"] for r in records].count(big) == 1
    assert next(r for r in records if r["id"] == big)["content"].endswith("line 19999 of a long log")
