"""What is acknowledged stays saved: rotations by another process are always seen, a write that
cannot reach the disk is refused (never acknowledged from memory), a changed or missing byte is
refused rather than served, dead writers' temp files go, and symlinks are not followed."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from compactor import doctor
from compactor.cli import main as cli_main
from compactor.errors import PersistenceError, StateCorruptError
from compactor.mcp import build_server
from compactor.store import Store, StoreInput
from tests.conftest import server_command, server_env
from tests.support.stdio_client import StdioServer

SHIM = Path(__file__).resolve().parents[1] / "fixtures" / "diskfull"


# --- 1. another process's rotations ----------------------------------------------------------------
def _same_inode_for_the_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system that hands the rotated journal the same inode number every time (ext4 reuses
    freed inodes; here it happens on every rotation, deterministically)."""
    real_stat = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        st = real_stat(path, *args, **kwargs)
        if str(path).endswith("journal.jsonl"):
            fields = list(st)
            fields[1] = 4242  # st_ino
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(os, "stat", stat)


def test_two_rotations_by_another_process_are_seen_though_inode_and_size_repeat(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    _same_inode_for_the_journal(monkeypatch)
    a = Store(state_dir=state_dir)
    b = Store(state_dir=state_dir)
    first = b.store("written by b before its first rotation").item.id
    b.snapshot()
    second = b.store("written by b before its second rotation").item.id
    b.snapshot()  # the journal is again just its header, the same size a last saw
    # a was idle throughout: its next read must see both of b's items (0 stale reads) ...
    assert a.get(second).content == "written by b before its second rotation"
    assert a.get(first).content == "written by b before its first rotation"
    # ... and its writes and snapshots must build on them (0 lost).
    mine = a.store("written by a after b rotated").item.id
    a.snapshot()
    third = b.store("b again").item.id
    a.close()
    b.close()
    again = Store(state_dir=state_dir)
    assert {again.get(i).content for i in (first, second, mine, third)} == {
        "written by b before its first rotation",
        "written by b before its second rotation",
        "written by a after b rotated",
        "b again",
    }


def test_a_forgotten_secret_is_not_brought_back_by_a_stale_process(state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    _same_inode_for_the_journal(monkeypatch)
    a = Store(state_dir=state_dir)
    b = Store(state_dir=state_dir)
    secret = b.store("the vault phrase is quokka-sunrise-42").item.id
    b.snapshot()
    assert a.get(secret)  # a has caught up: its journal offset is a bare header's length
    b.forget(secret)  # forget writes a snapshot and rotates: the journal is again just its header
    a.store("a writes after the forget")
    a.snapshot()
    a.close()
    b.close()
    for path in state_dir.iterdir():
        assert b"quokka-sunrise-42" not in path.read_bytes(), path.name
    with pytest.raises(Exception, match=secret):
        Store(state_dir=state_dir).get(secret)


@pytest.mark.slow
def test_many_rotations_between_two_real_processes_lose_nothing(state_dir: Path):
    """Two servers over stdio, one writing and rotating (forget rotates), one reading what the
    other just wrote: every read finds it, and every acknowledged write survives."""
    acknowledged: list[str] = []
    # --no-share: two processes each holding the store, not two relays to one host.
    with (
        StdioServer("--state-dir", str(state_dir), "--no-share") as writer,
        StdioServer("--state-dir", str(state_dir), "--no-share") as reader,
    ):
        for round_ in range(12):
            kept = writer.ok("store", content=f"round {round_} keeps this")["id"]
            gone = writer.ok("store", content=f"round {round_} throwaway")["id"]
            writer.ok("forget", id=gone)  # a synchronous snapshot + rotation
            acknowledged.append(kept)
            got = reader.call("get", id=kept)
            assert not got.get("isError"), f"stale read in round {round_}: {got}"
            acknowledged.append(reader.ok("store", content=f"round {round_} from the reader")["id"])
    again = Store(state_dir=state_dir)
    assert all(i in again.ids() for i in acknowledged)


# --- 2. a full disk -----------------------------------------------------------------------------
def _fail_writes(monkeypatch: pytest.MonkeyPatch, err: int, state_dir: Path) -> None:
    """Every write into the state dir fails, as on a full or read-only disk."""
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).startswith(str(state_dir)) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_a_write_that_cannot_be_saved_is_refused_until_the_disk_recovers(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch, err: int
):
    s = Store(state_dir=state_dir)
    first = s.store("saved before the failure").item.id
    on_disk = {p.name: p.read_bytes() for p in state_dir.iterdir()}
    _fail_writes(monkeypatch, err, state_dir)
    for attempt in range(3):  # not just the first: every write while the disk is bad
        with pytest.raises(PersistenceError, match="read-only"):
            s.store(f"refused write {attempt}")
    with pytest.raises(PersistenceError, match="read-only"):
        s.bulk_store([StoreInput(f"bulk {i}") for i in range(5)])
    assert s.ids() == [first]
    assert s.get(first).content == "saved before the failure"  # reads go on
    st = s.status().persistence
    assert st["state"] == "read-only" and st["degraded"] is True and st["unsaved_calls"] == 0
    for name, data in on_disk.items():
        if name != "lock":
            assert (state_dir / name).read_bytes() == data
    monkeypatch.undo()
    after = s.store("after recovery").item.id  # resumes by itself
    assert s.status().persistence["state"] == "saving" and s.degraded is None
    s.close()
    again = Store(state_dir=state_dir)
    assert set(again.ids()) == {first, after}


@pytest.mark.slow
def test_disk_full_over_stdio_is_a_tool_error_and_nothing_unsaved_is_acknowledged(tmp_path: Path):
    """A real server whose journal writes fail while a flag file exists (a sitecustomize shim):
    each refused store is isError with no id; after kill -9, exactly the acknowledged ones are back."""
    state = tmp_path / "state"
    flag = tmp_path / "disk-full"
    env = server_env()
    env["PYTHONPATH"] = str(SHIM) + os.pathsep + env["PYTHONPATH"]
    env["COMPACTOR_TEST_DISKFULL"] = f"{flag}{os.pathsep}{state}"
    acknowledged: list[str] = []
    with StdioServer("--state-dir", str(state), env=env) as server:
        acknowledged.append(server.ok("store", content="before the disk filled")["id"])
        flag.touch()
        for i in range(5):
            result = server.call("store", content=f"while full {i}")
            assert result.get("isError") is True, result
            assert "read-only" in result["content"][0]["text"]
        status = server.ok("status")
        assert status["persistence"]["state"] == "read-only"
        assert server.ok("get", id=acknowledged[0])["content"] == "before the disk filled"
        flag.unlink()
        acknowledged.append(server.ok("store", content="after space returned")["id"])
        assert server.ok("status")["persistence"]["state"] == "saving"
        server.kill()
    again = Store(state_dir=state)
    assert sorted(again.ids()) == sorted(acknowledged)
    assert {again.get(i).content for i in again.ids()} == {"before the disk filled", "after space returned"}


def test_a_refused_forget_over_the_sdk_deletes_nothing(state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    store = Store(state_dir=state_dir)
    kept = [store.store(f"invoice {i} due friday").item.id for i in range(10)]

    async def go() -> None:
        async with Client(build_server(store), mode="legacy") as c:
            _fail_writes(monkeypatch, errno.ENOSPC, state_dir)
            refused = await c.call_tool("forget", {"id": kept[2]})
            assert refused.is_error and "nothing was deleted" in refused.content[0].text  # type: ignore[union-attr]
            status = await c.call_tool("status", {})
            assert status.structured_content is not None
            assert status.structured_content["persistence"]["state"] == "read-only"
            got = await c.call_tool("get", {"id": kept[2]})
            assert not got.is_error

    anyio.run(go)
    monkeypatch.undo()
    store.close()
    assert sorted(Store(state_dir=state_dir).ids()) == sorted(kept)


@pytest.mark.slow
def test_a_refused_forget_over_stdio_deletes_nothing_even_after_a_clean_stop(tmp_path: Path):
    state = tmp_path / "state"
    flag = tmp_path / "disk-full"
    env = server_env()
    env["PYTHONPATH"] = str(SHIM) + os.pathsep + env["PYTHONPATH"]
    env["COMPACTOR_TEST_DISKFULL"] = f"{flag}{os.pathsep}{state}"
    with StdioServer("--state-dir", str(state), "--no-share", env=env) as server:
        ids = [server.ok("store", content=f"invoice {i} due friday")["id"] for i in range(10)]
        flag.touch()
        refused = server.call("forget", id=ids[4])
        assert refused.get("isError") is True and "nothing was deleted" in refused["content"][0]["text"]
        assert server.ok("status")["persistence"]["state"] == "read-only"
        assert server.ok("get", id=ids[4])["content"] == "invoice 4 due friday"
        flag.unlink()
    # The clean stop wrote its final snapshot: with the item still in it.
    assert sorted(Store(state_dir=state).ids()) == sorted(ids)


# --- 4. changed, cut or missing bytes ------------------------------------------------------------
def _amounts(state_dir: Path, n: int = 50) -> list[str]:
    s = Store(state_dir=state_dir)
    ids = [s.store(f"invoice {i}: amount {11500 + 7 * i} due friday").item.id for i in range(n)]
    s.close()
    return ids


def _doctor_errors(state_dir: Path) -> list[str]:
    report = doctor.check(state_dir)
    assert not report.healthy
    return [p.check for p in report.errors]


def test_a_changed_byte_in_the_journal_is_refused_not_served(state_dir: Path):
    _amounts(state_dir)
    journal = state_dir / "journal.jsonl"
    raw = journal.read_bytes()
    journal.write_bytes(raw.replace(b"amount 11535", b"amount 19535"))  # the 6th item's line
    with pytest.raises(StateCorruptError, match="line 7 is damaged"):
        Store(state_dir=state_dir)
    assert "journal" in _doctor_errors(state_dir)
    assert cli_main(["doctor", "--state-dir", str(state_dir)]) == 1
    # The repair keeps what precedes the damage, moves the damaged file aside, and starts clean.
    assert cli_main(["doctor", "--repair", "--state-dir", str(state_dir)]) == 0
    assert any(p.name.startswith("journal.jsonl.damaged-") for p in state_dir.iterdir())
    s = Store(state_dir=state_dir)
    assert sorted(s.get(i).content for i in s.ids()) == [
        f"invoice {i}: amount {11500 + 7 * i} due friday" for i in range(5)
    ]
    s.close()
    assert doctor.check(state_dir).healthy


def test_a_changed_byte_in_the_snapshot_is_refused_not_served(state_dir: Path):
    ids = _amounts(state_dir)
    s = Store(state_dir=state_dir)
    s.snapshot()
    s.close()
    snap = state_dir / "snapshot.json"
    snap.write_bytes(snap.read_bytes().replace(b"amount 11500", b"amount 19500"))
    with pytest.raises(StateCorruptError, match="checksum"):
        Store(state_dir=state_dir)
    assert "snapshot" in _doctor_errors(state_dir)
    assert len(ids) == 50


def _doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli_main(["doctor", *argv])
    return code, capsys.readouterr().out


def test_repair_salvages_a_damaged_snapshots_intact_items_and_the_journal_after_it(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
):
    ids = _amounts(state_dir)
    s = Store(state_dir=state_dir)
    s.snapshot()
    after = [s.store(f"written after the snapshot {i}").item.id for i in range(3)]
    s.close()
    snap = state_dir / "snapshot.json"
    raw = snap.read_bytes()
    snap.write_bytes(raw.replace(b'"invoice 7: amount', b'"invoice 7: amount\x01"', 1))  # that line no longer parses
    code, out = _doctor(capsys, "--state-dir", str(state_dir))
    assert code == 1 and "snapshot" in out
    code, out = _doctor(capsys, "--repair", "--state-dir", str(state_dir))
    assert code == 0, out
    assert "49 item(s) kept, 1 item(s) lost" in out and "best effort" in out
    assert any(p.name.startswith("snapshot.json.damaged-") for p in state_dir.iterdir())
    again = Store(state_dir=state_dir)
    assert set(again.ids()) == (set(ids) - {ids[7]}) | set(after)
    assert again.get(ids[8]).content == "invoice 8: amount 11556 due friday"
    again.close()
    assert doctor.check(state_dir).healthy


def test_repair_counts_the_items_a_damaged_journal_loses(state_dir: Path, capsys: pytest.CaptureFixture[str]):
    _amounts(state_dir, 10)
    journal = state_dir / "journal.jsonl"
    journal.write_bytes(journal.read_bytes().replace(b"amount 11535", b"amount 19535"))  # the 6th item's line
    code, out = _doctor(capsys, "--repair", "--state-dir", str(state_dir))
    assert code == 0, out
    assert "5 item(s) gone, 0 item(s) without their later changes" in out  # items 5..9, not "5 lines"


def test_a_journal_cut_short_says_what_the_repair_cannot_count(state_dir: Path, capsys: pytest.CaptureFixture[str]):
    _amounts(state_dir, 10)
    journal = state_dir / "journal.jsonl"
    raw = journal.read_bytes()
    journal.write_bytes(raw[: raw.index(b"amount 11535")])  # cut inside the 6th item's line
    code, out = _doctor(capsys, "--repair", "--state-dir", str(state_dir))
    assert code == 0, out
    assert "1 item(s) gone" in out and "cannot be counted" in out
    assert len(Store(state_dir=state_dir)) == 5


def test_a_deleted_lock_and_journal_are_not_healthy(state_dir: Path, capsys: pytest.CaptureFixture[str]):
    s = Store(state_dir=state_dir)
    s.store("before the snapshot")
    s.snapshot()
    s.store("after the snapshot: only in the journal")
    s.close()
    (state_dir / "lock").unlink()
    (state_dir / "journal.jsonl").unlink()
    assert not doctor.check(state_dir).healthy
    code, out = _doctor(capsys, "--state-dir", str(state_dir))
    assert code == 1 and "no journal" in out
    code, out = _doctor(capsys, "--repair", "--state-dir", str(state_dir))
    assert code == 0 and doctor.check(state_dir).healthy


def _repaired_with_a_secret_kept_aside(state_dir: Path) -> str:
    s = Store(state_dir=state_dir)
    secret = s.store("the vault phrase is quokka-sunrise-42, keep it safe").item.id
    for i in range(5):
        s.store(f"invoice {i}: amount {11500 + 7 * i} due friday")
    s.close()
    journal = state_dir / "journal.jsonl"
    journal.write_bytes(journal.read_bytes().replace(b"amount 11514", b"amount 91514"))
    assert cli_main(["doctor", "--repair", "--state-dir", str(state_dir)]) == 0
    aside = [p for p in state_dir.iterdir() if ".damaged-" in p.name]
    assert aside and b"quokka-sunrise-42" in aside[0].read_bytes()
    return secret


def _no_file_holds(state_dir: Path, text: bytes) -> None:
    for path in state_dir.iterdir():
        assert text not in path.read_bytes(), path.name


def test_forget_after_a_repair_purges_the_file_the_repair_kept_aside(state_dir: Path):
    secret = _repaired_with_a_secret_kept_aside(state_dir)
    s = Store(state_dir=state_dir)
    s.forget(secret)
    s.close()
    _no_file_holds(state_dir, b"quokka-sunrise-42")
    assert any(".damaged-" in p.name for p in state_dir.iterdir())  # the rest of it is still kept


@pytest.mark.slow
def test_forget_over_stdio_after_a_repair_leaves_the_text_in_no_file(state_dir: Path):
    secret = _repaired_with_a_secret_kept_aside(state_dir)
    with StdioServer("--state-dir", str(state_dir), "--no-share") as server:
        server.ok("forget", id=secret)
    _no_file_holds(state_dir, b"quokka-sunrise-42")


def test_a_journal_cut_short_is_an_error_not_a_warning(state_dir: Path):
    _amounts(state_dir)
    journal = state_dir / "journal.jsonl"
    raw = journal.read_bytes()
    journal.write_bytes(raw[: int(len(raw) * 0.6)])
    with pytest.raises(StateCorruptError, match="acknowledged"):
        Store(state_dir=state_dir)
    assert "acknowledged writes" in _doctor_errors(state_dir)
    assert cli_main(["doctor", "--repair", "--state-dir", str(state_dir)]) == 0
    assert doctor.check(state_dir).healthy
    assert 0 < len(Store(state_dir=state_dir)) < 50


def test_a_deleted_journal_is_an_error_not_a_fresh_start(state_dir: Path):
    _amounts(state_dir, 10)
    (state_dir / "journal.jsonl").unlink()
    with pytest.raises(StateCorruptError, match="missing"):
        Store(state_dir=state_dir)
    assert "acknowledged writes" in _doctor_errors(state_dir)


@pytest.mark.slow
def test_a_server_on_a_damaged_journal_refuses_to_start(state_dir: Path):
    _amounts(state_dir, 5)
    journal = state_dir / "journal.jsonl"
    journal.write_bytes(journal.read_bytes().replace(b"amount 11500", b"amount 91500"))
    proc = subprocess.run(
        server_command("--state-dir", str(state_dir)), input=b"", env=server_env(), capture_output=True, timeout=60
    )
    assert proc.returncode != 0 and b"damaged" in proc.stderr and b"--repair" in proc.stderr
    assert proc.stdout == b""


def test_a_crash_mid_append_is_still_only_a_warning(state_dir: Path):
    """A torn last line that was never acknowledged (the record does not count it) is cut."""
    ids = _amounts(state_dir, 5)
    with open(state_dir / "journal.jsonl", "ab") as fh:
        fh.write(b'{"crc":123,"ops":[{"op":"put"')
    s = Store(state_dir=state_dir)
    assert sorted(s.ids()) == sorted(ids) and s.load_warnings
    s.close()
    assert doctor.check(state_dir).healthy


# --- 5. temp files of dead writers -------------------------------------------------------------
def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(proc.stdout)


def test_dead_writers_temp_files_are_removed_at_start_and_live_ones_kept(state_dir: Path):
    Store(state_dir=state_dir).close()
    dead = _dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        leftovers = [state_dir / f"snapshot.json.{dead}.tmp", state_dir / f"snapshot.json.{dead}.old.tmp"]
        theirs = state_dir / f"snapshot.json.{live.pid}.tmp"
        for path in [*leftovers, theirs]:
            path.write_bytes(b"x" * 4096)
        assert any(p.check == "temp files" for p in doctor.check(state_dir).warnings)
        Store(state_dir=state_dir).close()
        assert not any(p.exists() for p in leftovers)
        assert theirs.exists()  # a running server's snapshot in progress
        assert not any(p.check == "temp files" for p in doctor.check(state_dir).warnings)
    finally:
        live.kill()
        live.wait()


def test_a_background_snapshot_removes_dead_writers_temp_files(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.store("something")
    leftover = state_dir / f"snapshot.json.{_dead_pid()}.tmp"
    leftover.write_bytes(b"x" * 4096)
    anyio.run(s.snapshot_async)
    assert not leftover.exists()
    s.close()


# --- 6. symlinks -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ["lock", "journal.jsonl", "snapshot.json"])
def test_a_symlink_in_the_state_dir_is_refused_and_not_followed(tmp_path: Path, name: str):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_bytes(b"not compactor's\n")
    target.chmod(0o644)
    (state / name).symlink_to(target)
    with pytest.raises(PersistenceError, match="symbolic link"):
        Store(state_dir=state)
    assert target.read_bytes() == b"not compactor's\n" and (target.stat().st_mode & 0o777) == 0o644
    proc = subprocess.run(
        server_command("--state-dir", str(state)), input=b"", env=server_env(), capture_output=True, timeout=60
    )
    assert proc.returncode != 0 and b"symbolic link" in proc.stderr
    assert any(p.check == "permissions" and "symbolic link" in p.what for p in doctor.check(state).errors)


def test_a_deleted_snapshot_is_named_as_missing(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.store("before the snapshot")
    s.snapshot()
    s.store("after it")
    s.close()
    (state_dir / "snapshot.json").unlink()
    with pytest.raises(StateCorruptError, match=r"snapshot\.json is missing"):
        Store(state_dir=state_dir)


def test_repair_restores_private_modes_and_leaves_a_healthy_dir(state_dir: Path):
    ids = _amounts(state_dir, 5)
    (state_dir / "journal.jsonl").chmod(0o644)
    state_dir.chmod(0o755)
    assert "permissions" in _doctor_errors(state_dir)
    assert cli_main(["doctor", "--repair", "--state-dir", str(state_dir)]) == 0
    assert doctor.check(state_dir).healthy
    assert (state_dir / "journal.jsonl").stat().st_mode & 0o777 == 0o600
    assert state_dir.stat().st_mode & 0o777 == 0o700
    assert sorted(Store(state_dir=state_dir).ids()) == sorted(ids)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["deleted", "moved"])
def test_a_state_dir_taken_away_under_a_running_server_leaves_its_memory_readable(tmp_path: Path, how: str):
    """Deleted (rm -rf) or moved while the server ran: every call, reads included, failed with
    "Journal ... is missing, but ... lock records N acknowledged bytes" and a doctor command for
    a directory that was not there. Reads now go on from memory (export can rescue it), and a
    write is refused saying what happened."""
    import shutil

    state = tmp_path / "state"
    with StdioServer("--state-dir", str(state)) as srv:
        kept = srv.ok("store", content="stored before the directory went")["id"]
        if how == "deleted":
            shutil.rmtree(state)
        else:
            state.rename(tmp_path / "elsewhere")
        refused = srv.call("store", content="stored after")
        assert refused["isError"]
        assert f"The state dir {state} was deleted or moved while this server ran" in refused["content"][0]["text"]
        assert [i["id"] for i in srv.ok("query", query="directory")["items"]] == [kept]
        assert [r["id"] for r in srv.export_records()] == [kept]
        assert srv.ok("status")["active_items"] == 1
    assert not state.exists()  # nothing was made again in its place
