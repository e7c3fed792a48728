"""`compactor doctor`: finds each kind of damage with a message that says what and how to fix,
agrees with the loader, and never changes a byte of the state dir."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactor import doctor
from compactor.cli import doctor as doctor_cli
from compactor.cli import main as cli_main
from compactor.doctor import checks
from compactor.errors import CompactorError
from compactor.persistence.codec import journal_line, snapshot_chunks
from compactor.store import Store, StoreInput
from tests.conftest import FakeClock


def fingerprint(d: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file's bytes, mtime and mode, and (by the keys) which files exist."""
    if not d.exists():
        return {}
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode) for p in sorted(d.iterdir())}


def run_check(d: Path) -> doctor.DoctorReport:
    before = fingerprint(d)
    report = doctor.check(d)
    assert fingerprint(d) == before, "doctor changed the state dir"
    return report


def only(report: doctor.DoctorReport, severity: str, check: str) -> doctor.Problem:
    found = [p for p in report.problems if p.severity == severity and p.check == check]
    assert len(found) == 1, doctor.render(report)
    return found[0]


def make_state(d: Path, clock: FakeClock | None = None) -> dict[str, Any]:
    """A realistic dir: summaries (active) covering archived items, a near-duplicate merge, a
    forget under a summary (gone_children), a pin, a configure, and a non-empty journal after
    the snapshot."""
    s = Store(state_dir=d, budget=20_000, clock=clock or FakeClock())
    texts = [f"note {i} about topic{i % 7} and the quick brown fox number {i} " * 5 for i in range(120)]
    ids = [it.id for it in s.bulk_store([StoreInput(t) for t in texts]).items]
    s.store(texts[5].replace("note 5", "the note 5"))
    s.compact(0.3)
    s.snapshot()
    s.store("written after the snapshot")
    s.forget(ids[3])
    s.store("written after the forget")
    s.pin(ids[70])
    s.configure(recall_tokens=3_000)
    out = {"ids": ids, "items": len(s)}
    s.close()
    return out


def rewrite_snapshot(d: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = d / "snapshot.json"
    snap = orjson.loads(path.read_bytes())
    change(snap)
    path.write_bytes(orjson.dumps(snap))


def by_id(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in snap["items"]}


def test_healthy_dir_reports_nothing_and_exits_0(state_dir: Path, capsys: pytest.CaptureFixture[str]):
    made = make_state(state_dir)
    report = run_check(state_dir)
    assert report.problems == [], doctor.render(report)
    assert report.checks == [
        "permissions",
        "snapshot",
        "journal",
        "acknowledged writes",
        "generation",
        "replay",
        "index",
        "lineage",
        "ledger",
    ]
    assert report.facts["ledger_entries"] == 1  # the forget
    assert report.facts["items"]["total"] == made["items"]
    assert report.facts["items"]["summaries"] > 0 and report.facts["journal"]["lines"] > 0
    before = fingerprint(state_dir)
    assert cli_main(["doctor", "--state-dir", str(state_dir)]) == 0
    out = capsys.readouterr().out
    assert "Healthy" in out and f"{made['items']:,} items" in out
    lines = report.facts["journal"]["lines"]
    assert f"{lines:,} {'line' if lines == 1 else 'lines'} of writes" in out
    assert doctor_cli.main(["--state-dir", str(state_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["healthy"] is True and data["errors"] == 0 and data["problems"] == []
    assert fingerprint(state_dir) == before


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]):
    assert doctor_cli.main([]) == 2
    assert "--state-dir" in capsys.readouterr().err
    assert doctor_cli.main(["--state-dir"]) == 2


def test_missing_dir_is_an_error_and_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    d = tmp_path / "nowhere"
    assert doctor_cli.main(["--state-dir", str(d)]) == 1
    assert "does not exist" in capsys.readouterr().out
    assert not d.exists()


def test_empty_dir_is_healthy_and_no_lock_file_is_created(tmp_path: Path):
    d = tmp_path / "fresh"
    d.mkdir(mode=0o700)
    report = run_check(d)
    assert report.healthy and report.facts.get("empty")
    assert list(d.iterdir()) == []


def test_corrupt_snapshot(state_dir: Path):
    make_state(state_dir)
    (state_dir / "snapshot.json").write_bytes(b'{"schema": 1, "items": [')
    report = run_check(state_dir)
    p = only(report, "error", "snapshot")
    assert "not valid JSON" in p.what and "snapshot.json" in p.what
    assert "mv " in p.fix and "backup" in p.fix
    assert not report.healthy


def test_snapshot_from_a_newer_schema(state_dir: Path):
    make_state(state_dir)
    rewrite_snapshot(state_dir, lambda s: s.update(schema=999))
    p = only(run_check(state_dir), "error", "snapshot")
    assert "schema version 999" in p.what and "Upgrade" in p.fix


def test_malformed_item_record_is_named(state_dir: Path):
    make_state(state_dir)

    def damage(snap: dict[str, Any]) -> None:
        snap["items"][4]["tier"] = "limbo"
        del snap["items"][7]["content"]

    rewrite_snapshot(state_dir, damage)
    p = only(run_check(state_dir), "error", "snapshot")
    assert "items[4] has a bad tier" in p.what and "items[7] lacks content" in p.what


def test_torn_last_journal_line_is_only_a_warning(state_dir: Path):
    make_state(state_dir)
    with open(state_dir / "journal.jsonl", "ab") as fh:
        fh.write(b'{"ops":[{"op":"put","item":{"id":"ha')
    report = run_check(state_dir)
    p = only(report, "warning", "journal")
    assert "torn" in p.what and "Nothing to do" in p.fix
    assert report.healthy
    assert doctor_cli.main(["--state-dir", str(state_dir)]) == 0


def test_bad_middle_journal_line_names_the_line_and_the_cut(state_dir: Path):
    s = Store(state_dir=state_dir)
    for word in ("one", "two", "three", "four"):
        s.store(word)
    s.close()
    journal = state_dir / "journal.jsonl"
    lines = journal.read_bytes().split(b"\n")
    lines[2] = b'{"ops": [garbage'  # line 3: header is line 1
    journal.write_bytes(b"\n".join(lines))
    report = run_check(state_dir)
    p = only(report, "error", "journal")
    assert "line 3 is corrupt" in p.what
    assert "--repair" in p.fix and "before line 3" in p.fix
    with pytest.raises(CompactorError, match="line 3"):
        Store(state_dir=state_dir)  # the loader agrees on the line


def test_bad_journal_header(state_dir: Path):
    make_state(state_dir)
    journal = state_dir / "journal.jsonl"
    data = journal.read_bytes()
    journal.write_bytes(b'{"journal": 1}' + data[data.index(b"\n") :])
    p = only(run_check(state_dir), "error", "journal")
    assert "bad header" in p.what and "mv " in p.fix


def test_journal_from_another_generation(state_dir: Path):
    make_state(state_dir)
    journal = state_dir / "journal.jsonl"
    data = journal.read_bytes()
    journal.write_bytes(b'{"journal":1,"gen":42}' + data[data.index(b"\n") :])
    p = only(run_check(state_dir), "error", "generation")
    assert "generation 42" in p.what and "do not belong together" in p.what
    assert "backup" in p.fix


def test_snapshot_lost_after_a_rotation(state_dir: Path):
    make_state(state_dir)
    (state_dir / "snapshot.json").unlink()
    p = only(run_check(state_dir), "error", "generation")
    assert "no snapshot" in p.what and "snapshot.json was lost" in p.what


def test_interrupted_rotation_is_a_warning_and_replays_the_tail(state_dir: Path):
    s = Store(state_dir=state_dir)
    a = s.store("before").item.id
    sd = s._backend
    assert sd is not None
    header = s._snapshot_header(sd.gen + 1, sd.gen, sd.offset)
    sd.write_snapshot(snapshot_chunks(header, list(s.iter_items())))  # crash before rotate()
    b = s.store("after").item.id
    s.close()
    report = run_check(state_dir)
    p = only(report, "warning", "generation")
    assert "rotation was interrupted" in p.what
    assert report.healthy and report.facts["items"]["total"] == 2
    assert set(Store(state_dir=state_dir).ids()) == {a, b}


def test_op_that_cannot_be_applied_is_named(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.store("fine")
    s.close()
    with open(state_dir / "journal.jsonl", "ab") as fh:
        fh.write(journal_line([{"op": "explode", "id": "x"}]) + journal_line([]))
    p = only(run_check(state_dir), "error", "replay")
    assert "line 3 op 0 ('explode')" in p.what and "--repair" in p.fix


def test_index_drift_is_detected(state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    """The index is rebuilt at every start, so drift can only come from a bug in its incremental
    upkeep: simulate three such bugs and check the doctor sees each."""
    made = make_state(state_dir)
    victim = ""
    put, drop, swap = Store._put, Store._drop, Store._swap

    def lose_one(self: Store, s: Any, item: Any, **kw: Any) -> None:
        put(self, s, item, **kw)
        if item.id == victim:
            s.index.remove(item.id)

    def keep_dropped(self: Store, s: Any, item: Any, **kw: Any) -> None:
        drop(self, s, item, **kw)
        s.index.add(item.id, item.content, item.summary, item.tags)

    def stale_terms(self: Store, old: Any, new: Any) -> None:
        swap(self, old, new)
        if old.content != new.content:
            self._s.index.update(new.id, old.content, old.summary, old.tags)

    s = Store(state_dir=state_dir)
    node = next(it.id for it in s.roots())
    s.dissolve(node)  # a journaled del
    s.close()
    # A journaled put, in a copy: the loader checks a saved index against the snapshot's items
    # and rebuilds it on a mismatch, so upkeep bugs show in what the journal replays on top.
    other = state_dir.parent / "other"
    shutil.copytree(state_dir, other)
    s = Store(state_dir=other)
    victim = s.store("an item written after the snapshot, lost by the buggy upkeep").item.id
    s.close()
    monkeypatch.setattr(Store, "_put", lose_one)
    p = only(run_check(other), "error", "index")
    assert "not in the search index" in p.what and victim in p.what
    monkeypatch.setattr(Store, "_put", put)
    monkeypatch.setattr(Store, "_drop", keep_dropped)
    p = only(run_check(state_dir), "error", "index")
    assert "no item" in p.what and node in p.what
    monkeypatch.setattr(Store, "_drop", drop)
    monkeypatch.setattr(Store, "_swap", stale_terms)
    s = Store(state_dir=state_dir)
    s.update(made["ids"][20], content="completely different words zebra")
    s.close()
    p = only(run_check(state_dir), "error", "index")
    assert "other terms" in p.what and made["ids"][20] in p.what


def test_saved_index_that_disagrees_with_its_items_is_an_error(state_dir: Path):
    """The loader trusts a saved index whose size matches: a stale one would make search miss."""
    made = make_state(state_dir)
    victim = made["ids"][40]

    def damage(snap: dict[str, Any]) -> None:
        assert snap.get("index"), "snapshots carry the search index"
        by_id(snap)[victim]["content"] = "zebra crossing near the aquarium"

    s = Store(state_dir=state_dir)
    s.snapshot()  # as at shutdown: everything, index included, in the snapshot
    s.close()
    rewrite_snapshot(state_dir, damage)
    s = Store(state_dir=state_dir)
    assert victim not in [h.item.id for h in s.query("zebra aquarium", include_archived=True)]  # the risk
    s.close()
    p = only(run_check(state_dir), "error", "index")
    assert victim in p.what and "other terms" in p.what
    assert "--repair" in p.fix
    assert doctor_cli.main(["--repair", "--state-dir", str(state_dir)]) == 0
    assert doctor.check(state_dir).healthy
    s = Store(state_dir=state_dir)
    assert victim in [h.item.id for h in s.query("zebra aquarium", include_archived=True)]
    s.close()


def test_saved_index_for_other_items_is_only_a_warning(state_dir: Path):
    """A saved index that lacks one of the snapshot's items is rebuilt at start, as the doctor says."""
    make_state(state_dir)
    s = Store(state_dir=state_dir)
    s.snapshot()
    s.close()
    rewrite_snapshot(
        state_dir, lambda snap: snap["items"].append({**snap["items"][0], "id": "zzextra0001", "seq": 10**6})
    )
    report = run_check(state_dir)
    assert "rebuilds it" in only(report, "warning", "index").fix
    assert report.healthy
    assert "zzextra0001" in Store(state_dir=state_dir)._s.index


def test_unusable_saved_index_is_only_a_warning(state_dir: Path):
    make_state(state_dir)
    rewrite_snapshot(state_dir, lambda s: s["index"].update(format=999))
    report = run_check(state_dir)
    assert "rebuilds it" in only(report, "warning", "index").fix
    assert report.healthy


def test_broken_lineage_is_detected(state_dir: Path):
    make_state(state_dir)
    s = Store(state_dir=state_dir)
    s.snapshot()  # everything in the snapshot, so the damage below is what replay sees
    node = next(it for it in s.iter_items() if it.depth and it.tier == "active")
    raw = [it for it in s.iter_items() if not it.depth and it.tier == "active" and not it.parents]
    s.close()

    def damage(snap: dict[str, Any]) -> None:
        items = by_id(snap)
        items[node.id]["children"].append("nosuchchild")
        items[raw[0].id]["parents"] = ["nosuchparent"]
        items[raw[1].id]["merged_into"] = "nosuchsurvivor"
        items[raw[2].id]["parents"] = [node.id]  # node does not list it

    rewrite_snapshot(state_dir, damage)
    report = run_check(state_dir)
    text = doctor.render(report)
    errors = [p for p in report.errors if p.check == "lineage"]
    assert len(errors) == 4, text
    assert f"{node.id}->nosuchchild" in text and "not recorded as forgotten" in text
    assert f"{raw[0].id}->nosuchparent" in text
    assert f"{raw[1].id}->nosuchsurvivor" in text
    assert f"{raw[2].id} lists parent {node.id}, which does not list it" in text
    assert all("cp -a" in p.fix for p in errors)


def test_lineage_cycle_is_detected(state_dir: Path):
    make_state(state_dir)
    s = Store(state_dir=state_dir)
    s.snapshot()
    a, b = [it for it in s.iter_items() if not it.depth and it.tier == "active" and not it.parents][:2]
    s.close()

    def damage(snap: dict[str, Any]) -> None:
        items = by_id(snap)
        for x, y in ((a, b), (b, a)):
            items[x.id].update(tier="archived", depth=1, children=[y.id], parents=[y.id])

    rewrite_snapshot(state_dir, damage)
    report = run_check(state_dir)
    assert any(p.check == "lineage" and "cycles" in p.what for p in report.errors), doctor.render(report)


def test_archived_item_no_summary_reaches_is_a_warning(state_dir: Path):
    s = Store(state_dir=state_dir)
    loose = s.store("archived and uncovered").item.id
    s.store("stays active")
    s._commit([{"op": "patch", "id": loose, "set": {"tier": "archived"}}])  # as a bare restore-evict would
    s.close()
    report = run_check(state_dir)
    p = only(report, "warning", "lineage")
    assert loose in p.what and "compact" in p.fix
    assert report.healthy


def test_forget_ledger_damage_and_phantom_drops_are_warnings(state_dir: Path):
    made = make_state(state_dir)
    ledger = state_dir / "forget-ledger.jsonl"
    present = made["ids"][50]
    with open(ledger, "ab") as fh:
        fh.write(b"not json\n")
        fh.write(orjson.dumps({"id": present, "reason": "max_archive_tokens", "at": 1.0}) + b"\n")
        fh.write(b'{"id": "torn-entr')
    report = run_check(state_dir)
    texts = [p.what for p in report.warnings if p.check == "ledger"]
    assert len(texts) == 3, doctor.render(report)
    assert any("torn line" in t for t in texts)
    assert any("unreadable line(s): 2" in t for t in texts)
    assert any(present in t and "are present" in t for t in texts)
    assert report.healthy


def test_permissions_and_leftover_temp_files(state_dir: Path):
    make_state(state_dir)
    os.chmod(state_dir, 0o755)
    os.chmod(state_dir / "snapshot.json", 0o644)
    tmp = state_dir / "snapshot.json.999.tmp"
    tmp.write_bytes(b"partial")
    os.chmod(tmp, 0o600)
    report = run_check(state_dir)
    perms = [p for p in report.errors if p.check == "permissions"]
    assert len(perms) == 2, doctor.render(report)
    assert any(p.fix == f"`chmod 700 {state_dir}`" and "0755" in p.what for p in perms)
    assert any(p.fix == f"`chmod 600 {state_dir / 'snapshot.json'}`" and "0644" in p.what for p in perms)
    assert str(tmp) in only(report, "warning", "temp files").what


def test_waits_for_a_writer_then_reads_anyway(state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    make_state(state_dir)
    monkeypatch.setattr(checks, "LOCK_WAIT_S", 0.2)
    fd = os.open(state_dir / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        report = run_check(state_dir)
    finally:
        os.close(fd)
    assert "held" in only(report, "warning", "lock").what
    assert report.healthy


def test_render_lists_every_problem_with_its_fix(state_dir: Path):
    make_state(state_dir)
    os.chmod(state_dir / "journal.jsonl", 0o640)
    rewrite_snapshot(state_dir, lambda s: s.update(schema=999))
    report = run_check(state_dir)
    text = doctor.render(report)
    for p in report.problems:
        assert p.what in text and p.fix in text
    assert "Problems found: 2 error(s)" in text and "Nothing was changed" in text


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_doctor_agrees_with_the_loader_on_random_damage(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject):
    """Whatever the damage (a cut or a flipped byte in either file): if the loader refuses the
    dir, the doctor reports an error, and it changes nothing either way."""
    base = tmp_path_factory.getbasetemp() / "doctor-agree-base"
    if not base.exists():
        make_state(base)
    d = tmp_path_factory.mktemp("agree")
    shutil.rmtree(d)
    shutil.copytree(base, d)
    name = data.draw(st.sampled_from(["snapshot.json", "journal.jsonl"]))
    path = d / name
    raw = bytearray(path.read_bytes())
    pos = data.draw(st.integers(0, len(raw) - 1))
    if data.draw(st.booleans()):
        del raw[pos:]
    else:
        raw[pos] ^= data.draw(st.integers(1, 255))
    path.write_bytes(bytes(raw))
    report = run_check(d)
    probe = d.parent / (d.name + "-probe")
    shutil.copytree(d, probe)
    try:
        Store(state_dir=probe).close()
        loads = True
    except Exception:
        loads = False
    assert loads or not report.healthy, f"loader refused but doctor said healthy:\n{doctor.render(report)}"
    shutil.rmtree(probe)


def test_a_snapshot_written_while_the_doctor_checks_does_not_make_its_index_file_missing(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running server's next snapshot deletes the index file the previous one named (off the
    lock). The doctor read the previous snapshot under its shared lock, so it must still be able
    to check that file: it holds the index files open from the same lock."""
    s = Store(state_dir=state_dir)
    s.store("the doctor checks while a server keeps working")
    s.snapshot()
    before = {p.name for p in state_dir.glob("index.*.bin")}
    real = checks._check_snapshot

    def racing(*args: Any, **kwargs: Any) -> Any:
        s.store("written after the doctor read the state files")
        s.snapshot()  # names a new index file and removes the one the doctor is about to check
        assert not any((state_dir / name).exists() for name in before)
        return real(*args, **kwargs)

    monkeypatch.setattr(checks, "_check_snapshot", racing)
    report = doctor.check(state_dir)
    s.close()
    assert report.errors == [], report.errors
    assert "index" not in {e.check for e in report.errors}
