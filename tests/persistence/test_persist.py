import os
import stat
import sys
import zlib
from pathlib import Path

import anyio
import orjson
import pytest

from compactor.errors import StateCorruptError
from compactor.persistence import files as files_mod
from compactor.store import Store, StoreInput
from compactor.store import state as state_mod
from tests.conftest import FakeClock


def test_state_survives_restart(backend: dict[str, str], clock: FakeClock):
    """For the state dir and PostgreSQL alike."""
    s = Store(**backend, clock=clock)
    a = s.store("remember the alamo", tags="history", importance=8).item
    b = s.store("second thing", pinned=True).item
    s.configure(token_budget=50_000)
    s.update(a.id, summary="alamo")
    s.close()
    s2 = Store(**backend, clock=clock)
    got = s2.get(a.id)
    assert got.content == "remember the alamo" and got.summary == "alamo" and got.importance == 8
    assert s2.get(b.id).pinned
    assert s2.budget == 50_000
    assert [h.item.id for h in s2.query("alamo")] == [a.id]


def test_snapshot_truncates_journal_and_restart_reads_it(state_dir: Path, clock: FakeClock):
    s = Store(state_dir=state_dir, clock=clock)
    ids = [s.store(f"item {i}").item.id for i in range(10)]
    size_before = (state_dir / "journal.jsonl").stat().st_size
    s.snapshot()
    size_after = (state_dir / "journal.jsonl").stat().st_size
    assert size_after < size_before and size_after < 40  # just the header
    late = s.store("after the snapshot").item.id
    s.close()
    s2 = Store(state_dir=state_dir, clock=clock)
    assert set(s2.ids()) == {*ids, late}


def test_background_snapshot_keeps_writes_made_while_it_ran(backend: dict[str, str], clock: FakeClock):
    """For the state dir and PostgreSQL alike."""
    s = Store(**backend, clock=clock)
    s.bulk_store([StoreInput(f"bulk {i}") for i in range(200)])

    async def run() -> str:
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.snapshot_async)
            return s.store("written during the snapshot").item.id

    during = anyio.run(run)
    s.close()
    s2 = Store(**backend, clock=clock)
    assert len(s2) == 201 and s2.get(during).content == "written during the snapshot"


def test_background_snapshot_frees_the_old_snapshot_off_the_event_loop(
    state_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
):
    """The old snapshot is linked aside before the rename (so the rename only drops a link) and
    unlinked afterwards in a worker thread; nothing is left behind and the new one is in place."""
    from compactor.persistence.statedir import StateDir

    s = Store(state_dir=state_dir, clock=clock)
    s.store("first")
    s.snapshot()
    old_inode = (state_dir / "snapshot.json").stat().st_ino
    s.store("second")
    unlinked: list[tuple[Path, bool, int]] = []
    real_unlink = StateDir.drop_old_snapshot

    def spy(path: Path) -> None:
        # Still linked here, after the new snapshot is installed: the old file's blocks are
        # freed by this call, in the worker thread, not by the rename under the lock.
        unlinked.append((path, path.exists(), path.stat().st_ino))
        real_unlink(path)

    monkeypatch.setattr(StateDir, "drop_old_snapshot", staticmethod(spy))
    anyio.run(s.snapshot_async)
    assert len(unlinked) == 1
    path, existed, inode = unlinked[0]
    assert existed and inode == old_inode and path.name.endswith(".tmp")
    assert not path.exists()
    assert not list(state_dir.glob("*.tmp"))
    assert (state_dir / "snapshot.json").stat().st_ino != old_inode
    s.close()
    assert {Store(state_dir=state_dir, clock=clock).get(i).content for i in s.ids()} == {"first", "second"}


def test_background_snapshot_deletes_unused_files_off_the_lock(
    state_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
):
    """A background snapshot that names no index file (here: more changed since the last one
    was written than re-indexing at a load would beat a rebuild) lets that file (~25 MB at
    10k items) go, and the replaced snapshot too: both deleted in a worker thread without
    the lock. Freeing their blocks under the lock made the calls waiting on it (and their
    journal fsyncs) stall by 100 ms and more."""
    import threading

    from compactor.persistence import indexfile
    from compactor.persistence.statedir import StateDir

    monkeypatch.setattr(state_mod, "REBUILD_BATCH", 0)
    s = Store(state_dir=state_dir, clock=clock)
    s.store("first")
    s.snapshot()
    index_files = list(state_dir.glob("index.*.bin"))
    assert index_files
    s.store("second")
    s.store("third")  # two of three items changed since the index file: it is not named
    sd = s._backend
    assert sd is not None
    seen: list[tuple[str, bool, int]] = []
    real_remove, real_drop = indexfile.remove, StateDir.drop_old_snapshot
    real_unlink = Path.unlink

    def unlink(path: Path, missing_ok: bool = False) -> None:
        assert sd._lock_depth == 0, f"{path.name} deleted under the lock"
        real_unlink(path, missing_ok=missing_ok)

    def remove(paths: list[Path]) -> None:
        seen.append(("index", threading.current_thread() is threading.main_thread(), sd._lock_depth))
        real_remove(paths)

    def drop(path: Path) -> None:
        seen.append(("snapshot", threading.current_thread() is threading.main_thread(), sd._lock_depth))
        real_drop(path)

    monkeypatch.setattr(indexfile, "remove", remove)
    monkeypatch.setattr(StateDir, "drop_old_snapshot", staticmethod(drop))
    monkeypatch.setattr(Path, "unlink", unlink)
    anyio.run(s.snapshot_async)
    monkeypatch.undo()
    assert sorted(seen) == [("index", False, 0), ("snapshot", False, 0)]
    assert not list(state_dir.glob("index.*.bin")) and not list(state_dir.glob("*.tmp"))
    s.close()
    reopened = Store(state_dir=state_dir, clock=clock)
    assert {reopened.get(i).content for i in s.ids()} == {"first", "second", "third"}


def test_permissions(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.store("x")
    s.snapshot()
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    for f in state_dir.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


def test_torn_last_line_is_skipped_with_a_warning(state_dir: Path):
    s = Store(state_dir=state_dir)
    keep = s.store("acknowledged").item.id
    s.close()
    with open(state_dir / "journal.jsonl", "ab") as fh:
        fh.write(b'{"ops":[{"op":"put","item":{"id":"half')
    s2 = Store(state_dir=state_dir)
    assert s2.ids() == [keep]
    assert any("torn" in w for w in s2.load_warnings)
    s2.store("next write lands on a clean line")
    s2.close()
    assert len(Store(state_dir=state_dir)) == 2


def test_corrupt_snapshot_stops_startup_and_is_not_overwritten(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.store("x")
    s.snapshot()
    s.close()
    snap = state_dir / "snapshot.json"
    snap.write_bytes(b"{not json")
    with pytest.raises(StateCorruptError) as err:
        Store(state_dir=state_dir)
    assert "snapshot.json" in str(err.value) and "doctor" in str(err.value)
    assert snap.read_bytes() == b"{not json"


def test_corrupt_journal_line_in_the_middle_names_the_line(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.store("one")
    s.store("two")
    s.close()
    journal = state_dir / "journal.jsonl"
    lines = journal.read_bytes().split(b"\n")
    lines[1] = b"garbage"
    journal.write_bytes(b"\n".join(lines))
    with pytest.raises(StateCorruptError, match="line 2"):
        Store(state_dir=state_dir)
    assert b"garbage" in journal.read_bytes()


def test_newer_schema_is_refused(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.store("x")
    s.snapshot()
    s.close()
    snap = state_dir / "snapshot.json"
    data = orjson.loads(snap.read_bytes())
    data["schema"] = 999
    snap.write_bytes(orjson.dumps(data))
    with pytest.raises(StateCorruptError, match="schema version 999"):
        Store(state_dir=state_dir)


def test_crash_between_snapshot_and_rotation_loses_nothing(state_dir: Path):
    s = Store(state_dir=state_dir)
    a = s.store("before").item.id
    sd = s._backend
    assert sd is not None
    # Write the snapshot but "crash" before the journal rotation.
    header = s._snapshot_header(sd.gen + 1, sd.gen, sd.offset)
    from compactor.persistence.codec import snapshot_chunks

    sd.write_snapshot(snapshot_chunks(header, list(s.iter_items())))
    # The old-generation journal gets one more acknowledged write after the snapshot offset.
    b = s.store("after").item.id
    s.close()
    s2 = Store(state_dir=state_dir)
    assert set(s2.ids()) == {a, b}


def test_forget_purges_bytes_from_every_file(state_dir: Path):
    s = Store(state_dir=state_dir)
    secret = "hunter2-very-secret-token-zq81"
    keep = s.store("public note").item.id
    gone = s.store(f"the password is {secret}").item.id
    s.snapshot()
    s.update(keep, summary="mentions nothing")
    s.forget(gone)
    for f in state_dir.iterdir():
        assert secret.encode() not in f.read_bytes(), f
    s.close()
    s2 = Store(state_dir=state_dir)
    assert s2.ids() == [keep]


def test_access_data_persists(backend: dict[str, str], clock: FakeClock):
    """For the state dir and PostgreSQL alike."""
    s = Store(**backend, clock=clock)
    it = s.store("findable walrus").item
    clock.advance(500)
    s.query("walrus")
    s.close()
    s2 = Store(**backend, clock=clock)
    got = s2.get(it.id)
    assert got.access_count == 1 and got.last_accessed_at == clock.now


def test_budget_from_configure_survives_restart_and_client(backend: dict[str, str]):
    s = Store(**backend)
    s.configure(token_budget=7_000)
    s.close()
    s2 = Store(**backend)
    s2.adopt_client_budget("claude-code")
    assert s2.budget == 7_000


def test_failed_write_changes_nothing(state_dir: Path, monkeypatch: pytest.MonkeyPatch):
    s = Store(state_dir=state_dir)
    s.store("ok")
    before = (s.ids(), s.tokens_used)

    def boom(*a: object, **k: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", boom)
    from compactor.errors import PersistenceError

    with pytest.raises(PersistenceError, match="not applied"):
        s.store("will fail")
    monkeypatch.undo()
    assert (s.ids(), s.tokens_used) == before
    s.store("disk is back")
    s.close()
    assert len(Store(state_dir=state_dir)) == 2


def test_clean_shutdown_saves_the_index_so_restart_does_not_retokenise(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
):
    from compactor.search.index import BM25Index

    s = Store(state_dir=state_dir)
    ids = [s.store(f"document {i} about parseHTTPResponse and widget{i % 7}").item.id for i in range(50)]
    s.forget(ids[0])
    s.snapshot()
    expected = [(h.item.id, round(h.score, 9)) for h in s.query("widget3 parseHTTPResponse")]
    s.close()

    def no_add(*a: object, **k: object) -> None:
        raise AssertionError("the index was rebuilt instead of loaded")

    monkeypatch.setattr(BM25Index, "add", no_add)
    s2 = Store(state_dir=state_dir)
    got = [(h.item.id, round(h.score, 9)) for h in s2.query("widget3 parseHTTPResponse")]
    assert [g[0] for g in got] == [e[0] for e in expected]
    monkeypatch.undo()
    s2.store("still writable after a loaded index")


def test_unusable_saved_index_is_rebuilt(state_dir: Path):
    s = Store(state_dir=state_dir)
    item = s.store("rebuild me please").item.id
    s.snapshot()
    s.close()
    snap = state_dir / "snapshot.json"
    data = orjson.loads(snap.read_bytes())
    data["index"]["format"] = "something-else"
    snap.write_bytes(orjson.dumps(data))
    s2 = Store(state_dir=state_dir)
    assert [h.item.id for h in s2.query("rebuild")] == [item]


# --- the snapshot's line layout, read item by item -------------------------------------------


def _saved(state_dir: Path, n: int = 12) -> tuple[list[str], bytes]:
    s = Store(state_dir=state_dir)
    ids = [
        s.store(f"note marker{i}x about parse_config\nwith a second line and {{braces}},{{}}").item.id for i in range(n)
    ]
    s.snapshot()
    s.close()
    return ids, (state_dir / "snapshot.json").read_bytes()


def reseal(raw: bytes) -> bytes:
    """A hand-edited snapshot with its checksum made right again (a deliberate edit, not damage)."""
    body = raw[: raw.rindex(b"\n") + 1]
    return body + b'],"crc32":' + str(zlib.crc32(body)).encode() + b"}"


def test_snapshot_is_one_json_object_with_one_item_per_line(state_dir: Path):
    ids, raw = _saved(state_dir)
    lines = raw.split(b"\n")
    assert lines[0].endswith(b',"items":[') and lines[-1].startswith(b'],"crc32":')
    assert len(lines) == len(ids) + 2
    whole = orjson.loads(raw)  # still plain JSON for any other reader (doctor, jq, json.load)
    assert [it["id"] for it in whole["items"]] == [orjson.loads(ln.rstrip(b","))["id"] for ln in lines[1:-1]]
    assert sorted(it["id"] for it in whole["items"]) == sorted(ids)


def test_an_empty_store_snapshot_loads(state_dir: Path):
    s = Store(state_dir=state_dir)
    s.snapshot()
    s.close()
    assert b',"items":[\n],"crc32":' in (state_dir / "snapshot.json").read_bytes()
    assert len(Store(state_dir=state_dir)) == 0


def test_a_snapshot_in_the_older_one_line_layout_still_loads(state_dir: Path):
    ids, raw = _saved(state_dir)
    (state_dir / "snapshot.json").write_bytes(orjson.dumps(orjson.loads(raw)))
    s = Store(state_dir=state_dir)
    assert sorted(s.ids()) == sorted(ids)
    assert [h.item.id for h in s.query("marker3x")] == [ids[3]]


@pytest.mark.parametrize(
    "damage",
    ["cut inside an item", "cut before the end", "bad item line", "data after the end", "item not an object"],
)
def test_a_damaged_item_line_stops_startup_and_changes_no_file(state_dir: Path, damage: str):
    _, raw = _saved(state_dir)
    lines = raw.split(b"\n")
    if damage == "cut inside an item":
        bad = raw[: len(lines[0]) + 1 + len(lines[1]) + 20]
    elif damage == "cut before the end":
        bad = b"\n".join(lines[:-1]) + b"\n"
    elif damage == "bad item line":
        bad = b"\n".join([*lines[:5], b"{garbage},", *lines[6:]])
    elif damage == "data after the end":
        bad = raw + b"\n{}"
    else:
        bad = b"\n".join([*lines[:5], b"[1, 2],", *lines[6:]])
    snap, journal = state_dir / "snapshot.json", state_dir / "journal.jsonl"
    snap.write_bytes(bad)
    journal_before = journal.read_bytes()
    with pytest.raises(StateCorruptError, match=r"snapshot\.json is corrupt") as err:
        Store(state_dir=state_dir)
    assert "doctor" in str(err.value)
    assert snap.read_bytes() == bad and journal.read_bytes() == journal_before


def test_a_damaged_snapshot_is_found_before_an_unfinished_rotation_rewrites_the_journal(state_dir: Path):
    """A crash between snapshot and rotation leaves the journal one generation behind; loading
    finishes that rotation, rewriting the journal, which must wait until every item was read."""
    from compactor.persistence.codec import snapshot_chunks

    s = Store(state_dir=state_dir)
    s.store("before")
    sd = s._backend
    assert sd is not None
    header = s._snapshot_header(sd.gen + 1, sd.gen, sd.offset)
    sd.write_snapshot(snapshot_chunks(header, list(s.iter_items())))
    s.store("after")
    s.close()
    snap, journal = state_dir / "snapshot.json", state_dir / "journal.jsonl"
    cut = snap.read_bytes()[:-10]
    snap.write_bytes(cut)
    journal_before = journal.read_bytes()
    with pytest.raises(StateCorruptError):
        Store(state_dir=state_dir)
    assert journal.read_bytes() == journal_before and snap.read_bytes() == cut


def test_a_saved_index_missing_an_item_is_rebuilt(state_dir: Path):
    """The saved index must hold exactly the loaded items (checked once they are all read)."""
    ids, raw = _saved(state_dir)
    lines = raw.split(b"\n")
    extra = orjson.loads(lines[1].rstrip(b","))
    extra["id"], extra["seq"], extra["content"] = "zzextra0001", 999, "an item the saved index never saw: quokka"
    edited = b"\n".join([lines[0], orjson.dumps(extra) + b",", *lines[1:]])
    (state_dir / "snapshot.json").write_bytes(reseal(edited))
    s = Store(state_dir=state_dir)
    assert [h.item.id for h in s.query("quokka")] == ["zzextra0001"]
    assert len(s._s.index) == len(ids) + 1


# --- near-duplicate buckets saved in the index file ------------------------------------------


def _dup_store(state_dir: Path) -> tuple[Store, dict[str, object]]:
    s = Store(state_dir=state_dir)
    base = "deploy the payments service to staging after the schema migration finishes cleanly"
    for i in range(30):
        s.store(f"{base} run{i % 4}" if i % 3 else f"unrelated note {i} about widget{i} and gadget{i * 7}")
    return s, s._s.dedup.to_state()


def _saved_dup_store(state_dir: Path) -> dict[str, object]:
    """`_dup_store`, snapshotted and closed; its buckets' state."""
    s, before = _dup_store(state_dir)
    s.snapshot()
    s.close()
    return before


def _edit_header(state_dir: Path, **changes: object) -> dict[str, object]:
    """The snapshot's header, and with `changes` those keys changed in the file (resealed: a
    deliberate edit)."""
    path = state_dir / "snapshot.json"
    first, rest = path.read_bytes().split(b"\n", 1)
    header = orjson.loads(first[: -len(b',"items":[')] + b"}")
    if changes:
        path.write_bytes(reseal(orjson.dumps({**header, **changes})[:-1] + b',"items":[\n' + rest))
    return header


def test_a_snapshot_keeps_the_near_duplicate_buckets_in_the_index_file(state_dir: Path):
    before = _saved_dup_store(state_dir)
    header = _edit_header(state_dir)
    assert header["dedup"] == {"format": 2, "byteorder": sys.byteorder}  # no arrays in the JSON
    index_file = (state_dir / header["index_file"]["name"]).read_bytes()
    assert b'"dedup_sigs"' in index_file.split(b"\n", 2)[1]
    s2 = Store(state_dir=state_dir)
    assert s2._s._dedup is None and isinstance(s2._s._dedup_saved["sigs"], memoryview)  # read in place, lazily
    assert s2._s.dedup.to_state() == before
    hint = s2.store("deploy the payments service to staging after the schema migration finishes cleanly run9")
    assert hint.item.dup_of is not None


def test_a_snapshot_with_buckets_in_its_json_header_still_loads(state_dir: Path):
    """The layout written before the buckets moved to the index file (format 1, base64)."""
    before = _saved_dup_store(state_dir)
    _edit_header(state_dir, dedup=before)
    s2 = Store(state_dir=state_dir)
    assert s2._s._dedup is None and s2._s._dedup_saved is not None
    assert s2._s._dedup_saved["format"] == 1
    assert s2._s.dedup.to_state() == before


def test_buckets_the_header_says_are_in_the_file_but_are_not_are_rebuilt(state_dir: Path):
    before = _saved_dup_store(state_dir)
    # No file (so none of its arrays) while the header says the buckets are in it: all rebuilt.
    _edit_header(state_dir, dedup={"format": 2, "byteorder": sys.byteorder}, index_file=None)
    s2 = Store(state_dir=state_dir)
    assert s2._s.dedup.to_state() == before
    assert len([h.item.id for h in s2.query("widget6")]) == 1


def test_a_start_without_the_index_file_rebuilds_the_same_index_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
):
    import shutil

    monkeypatch.setattr(state_mod, "REBUILD_BATCH", 7)  # several batches, the last one short
    saved, rebuilt = tmp_path / "saved", tmp_path / "rebuilt"
    s = Store(state_dir=saved, clock=clock)
    for i in range(40):
        s.store(f"note {i}: parseHTTPResponse in src/app{i % 5}.py raised KeyError widget{i % 9}", tags=[f"t{i % 3}"])
    s.forget(s.query("widget4")[0].item.id)
    s.snapshot()
    s.close()
    shutil.copytree(saved, rebuilt)
    for path in rebuilt.glob("index.*.bin"):
        path.unlink()
    loaded, again = Store(state_dir=saved, clock=clock), Store(state_dir=rebuilt, clock=clock)
    for q in ["parseHTTPResponse widget3", "KeyError app2", "t1 widget8"]:
        assert [(h.item.id, h.score) for h in again.query(q)] == [(h.item.id, h.score) for h in loaded.query(q)]
    assert again.check_derived() == []
    assert again._s.dedup.to_state() == loaded._s.dedup.to_state()


@pytest.mark.parametrize("stale", [5, "not a list", [1, 2], {"a": 1}])
def test_a_damaged_list_of_changed_ids_rebuilds_the_index(state_dir: Path, stale: object):
    before = _saved_dup_store(state_dir)
    _edit_header(state_dir, index_stale=stale)
    s = Store(state_dir=state_dir)
    assert s.check_derived() == [] and s._s.dedup.to_state() == before
    assert len(s.query("widget6")) == 1


_BIRDS = ("kestrel", "osprey", "plover", "shrike")


def _index_file_of(store: Store) -> str | None:
    """The name of the index file the store's search postings are mapped from, if any."""
    flat = store._s.index._post._flat
    if not isinstance(flat, memoryview) or not hasattr(flat.obj, "madvise"):
        return None
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "index." in line and line.split()[-1].startswith(str(store._backend.path)):  # type: ignore[union-attr]
            return Path(line.split()[-1]).name
    return "mapped"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_after_a_full_snapshot_the_index_is_served_from_the_file_it_wrote(state_dir: Path):
    """A full snapshot merges the index into new private arrays to write them; the store then
    maps the file it wrote, as a start would, instead of keeping those (at 100k items ~350 MiB
    of RSS that stayed after every full snapshot of a store that had written)."""
    store = Store(state_dir=state_dir)
    for i in range(30):
        store.store(f"note {i} about the {_BIRDS[i % 4]} queue and its retry budget")
    store.snapshot()
    first = {h.item.id for h in store.query("plover", limit=50)}
    for i in range(30, 40):
        store.store(f"note {i} about the {_BIRDS[i % 4]} queue and its retry budget")
    store.snapshot()
    files = sorted(p.name for p in state_dir.glob("index.*.bin"))
    assert len(files) == 1 and _index_file_of(store) == files[0]
    hits = {h.item.id for h in store.query("plover", limit=50)}
    assert first < hits and len(hits) == 10
    copy = store.store("note 2 about the plover queue and its retry budget, again").item
    assert store.get(copy.id).dup_of is not None and store.check_derived() == []
    store.close()
    again = Store(state_dir=state_dir)
    assert {h.item.id for h in again.query("plover", limit=50)} == hits | {copy.id}
    assert again.check_derived() == []


def test_a_snapshot_whose_index_file_cannot_be_read_back_keeps_the_index_in_memory(state_dir: Path, monkeypatch):
    from compactor.persistence.indexfile import IndexFileError

    store = Store(state_dir=state_dir)
    ids = [store.store(f"note {i} about the osprey_{i % 3} feed").item.id for i in range(12)]
    before = [h.item.id for h in store.query("osprey_1 feed", limit=50)]

    def unreadable(self: object, ref: object, **_: object) -> None:
        raise IndexFileError("x")

    monkeypatch.setattr(type(store._backend), "load_index", unreadable)
    store.snapshot()
    assert _index_file_of(store) is None  # the arrays it merged, kept
    assert [h.item.id for h in store.query("osprey_1 feed", limit=50)] == before and store.check_derived() == []
    store.forget(ids[0])
    assert ids[0] not in {h.item.id for h in store.query("osprey_0 feed")}


def test_a_snapshot_whose_index_file_reads_back_unusable_says_it_keeps_the_index(state_dir: Path, monkeypatch, caplog):
    store = Store(state_dir=state_dir)
    for i in range(8):
        store.store(f"note {i} about the {('avocet', 'stilt')[i % 2]} loop")
    monkeypatch.setattr(type(store._backend), "load_index", lambda self, ref, **_: {})
    store.snapshot()
    assert "keeping the index in memory" in caplog.text and "rebuilding" not in caplog.text
    assert _index_file_of(store) is None and store.check_derived() == []
    assert len(store.query("stilt", limit=50)) == 4


def test_a_saved_index_naming_other_ids_than_the_items_is_rebuilt(state_dir: Path, caplog):
    store = Store(state_dir=state_dir)
    for i in range(6):
        store.store(f"heron note {i} about the weir")
    store.snapshot()
    store.close()
    path = state_dir / "snapshot.json"
    snap = orjson.loads(path.read_bytes())
    renamed = snap["items"][0]["id"] = "renamed00000"  # as many items as the index holds, one id not
    path.write_bytes(orjson.dumps(snap))
    again = Store(state_dir=state_dir)
    assert "saved index does not match the items; rebuilding it" in caplog.text
    assert renamed in {h.item.id for h in again.query("heron weir", limit=10)}
    assert again.check_derived() == []


def test_a_large_snapshot_is_written_where_python_has_no_fdatasync(
    state_dir: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
):
    """macOS's Python has no os.fdatasync: a snapshot large enough to be flushed as it is
    written (SNAPSHOT_SYNC_BYTES, here made small) raised AttributeError there, and no
    snapshot past that size was ever saved. It falls back to fsync."""

    monkeypatch.setattr(files_mod, "SNAPSHOT_SYNC_BYTES", 1024)
    monkeypatch.delattr(os, "fdatasync")
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    s = Store(state_dir=state_dir, clock=clock)
    ids = [s.store(f"item {n}: " + "words to fill the snapshot " * 20).item.id for n in range(40)]
    synced.clear()
    s.snapshot()
    assert (state_dir / "snapshot.json").stat().st_size > 10 * 1024
    assert len(synced) >= 3  # an interim flush or more, as fsyncs, the final one and the directory
    s.close()
    again = Store(state_dir=state_dir, clock=clock)
    assert [again.get(i).content.startswith("item ") for i in ids] == [True] * 40
