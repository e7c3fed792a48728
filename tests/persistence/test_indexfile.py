"""The search index saved as a binary file beside the snapshot (compactor.persistence.indexfile): used at
start when it matches the snapshot, rebuilt from the items when it does not, checked by the
doctor and rebuilt by --repair."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import orjson
import pytest

from compactor import doctor
from compactor.persistence import indexfile
from compactor.persistence import indexfile as indexfile_mod
from compactor.search import index as index_mod
from compactor.search import mapped as memory_map
from compactor.store import Store, StoreInput
from compactor.store import journaled as journaled_mod
from compactor.store import state as state_mod

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def _fill(d: Path) -> list[str]:
    store = Store(state_dir=d)
    ids = [store.store(f"{WORDS[i % 8]} item {i} uses parse_config_{i} in src/mod{i}.py").item.id for i in range(40)]
    store.bulk_store([StoreInput(f"bulk {w} note zz{w}zz") for w in WORDS])
    store.snapshot()
    store.close()
    return ids


def _index_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("index.*.bin"))


def _header(d: Path) -> dict:
    first = (d / "snapshot.json").read_bytes().split(b"\n", 1)[0]
    return orjson.loads(first[: -len(b',"items":[')] + b"}")


def _search_ids(store: Store, text: str) -> list[str]:
    return [h.item.id for h in store.query(text)]


def test_the_snapshot_names_a_binary_index_that_the_next_start_uses(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    d = tmp_path / "state"
    ids = _fill(d)
    header = _header(d)
    assert _index_files(d) == [header["index_file"]["name"]]
    assert "post" not in header["index"] and "vocab_blob" not in header["index"]  # arrays are in the file
    with caplog.at_level(logging.WARNING):
        store = Store(state_dir=d)
    assert not [r for r in caplog.records if "index" in r.getMessage()]
    assert _search_ids(store, "parse_config_7")[0] == ids[7]
    assert store.check_derived() == []
    store.store("charlie joins later with newterm_xyz")  # writes go to private copies
    assert len(_search_ids(store, "newterm_xyz")) == 1
    store.close()


@pytest.mark.parametrize("damage", ["byte", "truncate", "delete"])
def test_a_damaged_index_file_is_rebuilt_at_start_reported_and_repaired(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
):
    d = tmp_path / "state"
    ids = _fill(d)
    path = d / _header(d)["index_file"]["name"]
    raw = bytearray(path.read_bytes())
    if damage == "byte":
        raw[len(raw) // 2] ^= 0x55
        path.write_bytes(bytes(raw))
    elif damage == "truncate":
        path.write_bytes(bytes(raw[: len(raw) // 2]))
    else:
        path.unlink()
    report = doctor.check(d)
    problem = next(p for p in report.errors if p.check == "index" and "beside the snapshot" in p.what)
    assert "--repair" in problem.fix
    with caplog.at_level(logging.WARNING):
        store = Store(state_dir=d)
    assert any("rebuilding it from the items" in r.getMessage() for r in caplog.records)
    assert _search_ids(store, "parse_config_7")[0] == ids[7]
    assert store.check_derived() == []
    store.close()
    doctor.repair(d)
    assert doctor.check(d).healthy
    assert len(_index_files(d)) == 1


def test_forget_leaves_no_index_file_with_the_forgotten_words(tmp_path: Path):
    d = tmp_path / "state"
    _fill(d)
    store = Store(state_dir=d)
    secret = store.store("the launch code is uniqmarkerqq42 remember it").item.id
    store.snapshot()
    assert any(b"uniqmarkerqq42" in (d / n).read_bytes() for n in _index_files(d))
    store.forget(secret)
    store.close()
    for name in os.listdir(d):
        assert b"uniqmarkerqq42" not in (d / name).read_bytes(), name
    assert doctor.check(d).healthy


def test_write_and_read_round_trip_and_refuse_a_wrong_reference(tmp_path: Path):
    arrays = {"a": b"12345", "b": memoryview(bytes(range(16))), "empty": b""}
    ref = indexfile.write(tmp_path, 7, arrays)
    assert ref["name"] == "index.7.bin"
    got = indexfile.read(tmp_path, ref)
    assert {k: bytes(v) for k, v in got.items()} == {k: bytes(v) for k, v in arrays.items()}
    for bad in ({**ref, "crc32": ref["crc32"] ^ 1}, {**ref, "size": 3}, {**ref, "name": "../x"}, {}):
        with pytest.raises(indexfile.IndexFileError):
            indexfile.read(tmp_path, bad)
    indexfile.remove_others(tmp_path, None)
    assert not list(tmp_path.glob("index.*"))


def test_the_checksum_is_checked_a_chunk_at_a_time_over_the_whole_file(tmp_path: Path):
    """The load checks the file in chunks (here of one page each): the arrays are still read
    intact afterwards, and a changed byte in any chunk, the last included, still makes the
    file unusable."""
    from unittest.mock import patch

    d = tmp_path / "state"
    _fill(d)
    ref = _header(d)["index_file"]
    whole = indexfile.read(d, ref)
    page, many = mmap_page(), 1 << 20
    with (
        patch.object(indexfile_mod, "INDEX_FILE_CHECK_MIN_CHUNK", page),
        patch.object(indexfile_mod, "INDEX_FILE_CHECK_CHUNKS", many),
    ):
        chunked = indexfile.read(d, ref)
        assert {k: bytes(v) for k, v in chunked.items()} == {k: bytes(v) for k, v in whole.items()}
        path = d / ref["name"]
        raw = bytearray(path.read_bytes())
        assert len(raw) > 2 * mmap_page()
        raw[-3] ^= 0x01
        path.write_bytes(bytes(raw))
        with pytest.raises(indexfile.IndexFileError, match="checksum"):
            indexfile.read(d, ref)


def mmap_page() -> int:
    import mmap

    return mmap.PAGESIZE


def test_a_background_snapshot_names_the_saved_index_with_the_ids_changed_since(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    """A background snapshot writes no index (it would stall calls). It names the file of the
    last full snapshot again, with the ids changed since: a process killed after it (no final
    snapshot) leaves a state dir whose next start re-indexes only those, and that start still
    has a fresh index to save before it ends."""
    import anyio

    from compactor.search.index import BM25Index

    d = tmp_path / "state"
    ids = _fill(d)
    store = Store(state_dir=d)
    assert not store.needs_final_snapshot  # loaded with its index, nothing changed
    saved = _index_files(d)
    new = store.store("one more delta note about quokkas").item.id
    store.update(ids[3], content="charlie item 3 rewritten: now about wombats")
    store.forget(ids[5])  # a forget writes a full snapshot: what changed before it is in the new file
    store.update(ids[7], tags=["moved"])
    anyio.run(store.snapshot_async)
    assert not store.dirty and len(_index_files(d)) == 1 and _index_files(d) != saved
    header = _header(d)
    assert header["index_file"]["name"] == _index_files(d)[0] and header["index_stale"] == [ids[7]]
    assert store.needs_final_snapshot
    store.close()  # ends without its final snapshot, as a killed process does
    report = doctor.check(d)
    assert report.healthy, report.errors

    indexed: list[int] = []
    add_many = BM25Index.add_many

    def counting(index: BM25Index, docs: list[tuple[str, str, str | None, list[str]]]) -> list[object]:
        indexed.append(len(docs))
        return add_many(index, docs)  # type: ignore[arg-type]

    monkeypatch.setattr(BM25Index, "add_many", counting)
    with caplog.at_level(logging.WARNING):
        reopened = Store(state_dir=d)
    assert not [r for r in caplog.records if "index" in r.getMessage()]  # no rebuild
    assert indexed == [1]  # the one item changed since the file was written
    assert _search_ids(reopened, "quokkas") == [new] and _search_ids(reopened, "wombats") == [ids[3]]
    assert reopened.query("moved")[0].item.id == ids[7] and ids[5] not in reopened.ids()
    assert reopened.check_derived() == []
    assert reopened.needs_final_snapshot  # its index file is older than its items
    reopened.snapshot()
    assert not reopened.needs_final_snapshot and len(_index_files(d)) == 1 and "index_stale" not in _header(d)
    reopened.close()


@pytest.mark.slow
def test_the_snapshot_loop_saves_the_index_once_calls_stop_for_an_interval(tmp_path: Path):
    """After a background snapshot (no index), the loop waits while calls keep coming, then,
    after a whole quiet interval, writes a full snapshot with the index."""
    import time

    import anyio

    from compactor.mcp.server import snapshots

    d = tmp_path / "state"
    _fill(d)
    store = Store(state_dir=d)
    store.store("a delta note for the background snapshot")
    interval = 0.1

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(snapshots, store, interval)
            busy_until = time.monotonic() + 6 * interval
            while time.monotonic() < busy_until:  # a call every 20 ms: never a quiet interval
                store.touch()
                await anyio.sleep(0.02)
            assert not store.dirty  # the background snapshot ran ...
            # ... and left the index out: it names the older file, with the id changed since
            assert store.needs_final_snapshot and _header(d)["index_stale"]
            with anyio.fail_after(20 * interval):
                while store.needs_final_snapshot:
                    await anyio.sleep(interval / 4)
            tg.cancel_scope.cancel()

    anyio.run(scenario)
    assert len(_index_files(d)) == 1 and "index_stale" not in _header(d)
    store.close()
    again = Store(state_dir=d)
    assert again._index_saved and again.check_derived() == []
    again.close()


def test_a_failed_index_save_is_logged_once_and_retried_after_the_next_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    import anyio

    from compactor.mcp.server import snapshots

    d = tmp_path / "state"
    _fill(d)
    store = Store(state_dir=d)
    store.store("a delta note for the background snapshot")
    attempts: list[int] = []

    def failing_snapshot() -> None:
        attempts.append(1)
        raise OSError("disk full")

    store.snapshot = failing_snapshot  # type: ignore[method-assign]
    interval = 0.05

    async def scenario() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(snapshots, store, interval)
            await anyio.sleep(12 * interval)
            assert len(attempts) == 1  # not every interval
            store.store("something new: the next quiet spell tries again")
            with anyio.fail_after(40 * interval):
                while len(attempts) < 2:
                    await anyio.sleep(interval / 4)
            tg.cancel_scope.cancel()

    with caplog.at_level(logging.ERROR):
        anyio.run(scenario)
    assert len(attempts) == 2
    assert sum("saving the search index failed" in r.getMessage() for r in caplog.records) == 2
    store.close()


def test_once_too_much_changed_a_background_snapshot_names_no_index_file_until_a_full_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Past half the items changed, a load would rebuild anyway: the changed ids stop being
    tracked, and stay untracked even when the store grows back past the limit (a list
    begun again would miss the changes made meanwhile)."""
    import anyio

    monkeypatch.setattr(state_mod, "REBUILD_BATCH", 2)
    d = tmp_path / "state"
    store = Store(state_dir=d)
    ids = [store.store(f"note {i} about {WORDS[i]}").item.id for i in range(6)]
    store.snapshot()
    for item_id in ids[:4]:
        store.update(item_id, tags=["changed"])  # 4 of 6 changed: more than half
    store.bulk_store([StoreInput(f"later note {i} zz{i}") for i in range(30)])  # limit now 18
    anyio.run(store.snapshot_async)
    assert "index_file" not in _header(d) and _index_files(d) == []
    store.snapshot()
    store.update(ids[0], tags=["again"])
    anyio.run(store.snapshot_async)
    assert _header(d)["index_stale"] == [ids[0]] and len(_index_files(d)) == 1
    store.close()
    again = Store(state_dir=d)
    assert again.check_derived() == [] and again.query("again")[0].item.id == ids[0]
    again.close()


def _resident_kib(path: Path) -> int:
    """This process's resident KiB of its memory maps of `path` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            inside = len(fields) >= 6 and fields[5] == str(path)
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def test_release_unmaps_the_pages_read_and_later_reads_see_the_same_bytes(tmp_path: Path):
    blocks = {f"a{i}": os.urandom(1 << 20) for i in range(4)}
    ref = indexfile.write(tmp_path, 3, blocks)
    path = tmp_path / ref["name"]
    arrays = indexfile.read(tmp_path, ref)
    mapped = memory_map.mapping(arrays)
    assert mapped is not None and memory_map.mapping({"x": memoryview(b"abc")}) is None
    assert {k: bytes(v) for k, v in arrays.items()} == blocks
    assert _resident_kib(path) >= 4 << 10
    memory_map.release(mapped)
    assert _resident_kib(path) == 0
    assert {k: bytes(v) for k, v in arrays.items()} == blocks  # read again from the page cache
    assert _resident_kib(path) >= 4 << 10


@pytest.mark.slow
def test_copy_out_copies_a_map_a_chunk_at_a_time_and_leaves_none_of_it_resident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Copying an array out of the map whole kept every page of it resident beside the copy:
    ~10 MiB of a 10k-item server's peak at its first settle after a start."""
    chunk = 256 << 10
    monkeypatch.setattr(memory_map, "COPY_CHUNK", chunk)
    blocks = {f"a{i}": os.urandom((12 << 20) + 4 * i) for i in range(2)}
    ref = indexfile.write(tmp_path, 3, blocks)
    path = tmp_path / ref["name"]
    arrays = indexfile.read(tmp_path, ref)
    mapped = memory_map.mapping(arrays)
    assert mapped is not None and memory_map.map_of(arrays["a1"].cast("I")) is mapped
    resident: list[int] = []
    release = memory_map.release

    def measuring(m: object) -> None:
        resident.append(_resident_kib(path))
        release(m)  # type: ignore[arg-type]

    monkeypatch.setattr(memory_map, "release", measuring)
    for name, block in blocks.items():
        copy = bytearray(len(block))
        memory_map.copy_out(arrays[name], copy)
        assert copy == block
        assert _resident_kib(path) == 0
    assert len(resident) == sum(-(-len(b) // chunk) for b in blocks.values())
    # Each chunk's pages, and what the kernel maps around a fault: 64 KiB, or the page cache's
    # folios (up to 2 MiB each on a file system with large folios: two where a chunk spans one).
    assert max(resident) <= (chunk >> 10) + (4 << 10) < (12 << 10)
    plain = bytearray(5)
    memory_map.copy_out(b"abcde", plain)  # not a map: one copy, nothing to release
    assert plain == b"abcde" and len(resident) == sum(-(-len(b) // chunk) for b in blocks.values())
    with pytest.raises(ValueError, match="cannot copy 5 bytes into 4"):
        memory_map.copy_out(b"abcde", bytearray(4))


@pytest.mark.slow
def test_the_first_settle_after_a_start_leaves_none_of_the_index_file_resident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The first settle after a start copies the postings and vocabulary out of the map to grow
    them: it used to leave every page it copied resident beside the copy, with those the
    queries had read; now the map's pages go as each chunk is copied."""

    d = tmp_path / "state"
    store = Store(state_dir=d)
    notes = [StoreInput(f"{WORDS[i % 8]} note {i} about parse_config_{i} in m{i}.py id{i:05x}") for i in range(3000)]
    for lo in range(0, 3000, 1000):
        store.bulk_store(notes[lo : lo + 1000])
    store.snapshot()
    store.close()
    path = d / _header(d)["index_file"]["name"]
    # The arrays a settle grows, each to be copied out of the map once: the postings and their
    # starts, the vocabulary's terms and the arrays that find them.
    names = ("post", "post_starts", "vocab_blob", "vocab_lens", "vocab_starts", "vocab_order", "vocab_sorted")
    grown = sorted(array.nbytes for name, array in indexfile.read(d, _header(d)["index_file"]).items() if name in names)
    store = Store(state_dir=d)
    found = {f"parse_config_{i}": _search_ids(store, f"parse_config_{i}")[0] for i in range(0, 3000, 7)}
    before = _resident_kib(path)
    assert before > 0
    monkeypatch.setattr(index_mod, "INDEX_SETTLE_MIN", 0)
    monkeypatch.setattr(index_mod, "INDEX_SETTLE_SHARE", 1 << 30)  # the next new term settles
    monkeypatch.setattr(memory_map, "COPY_CHUNK", 64 << 10)
    copied: list[int] = []
    copy_out = memory_map.copy_out

    def recording(src: object, dst: object) -> None:
        if memory_map.map_of(src) is not None:
            copied.append(memoryview(src).nbytes)  # type: ignore[arg-type]
        copy_out(src, dst)

    monkeypatch.setattr(memory_map, "copy_out", recording)
    added = store.store("one more note about golf and newterm_after_start").item.id
    assert sorted(copied) == grown
    # What a store reads of the map after its settle (the near-duplicate buckets) may stay.
    assert _resident_kib(path) < min(before, 512)
    assert {term: _search_ids(store, term)[0] for term in found} == found
    assert _search_ids(store, "newterm_after_start") == [added]
    assert store.check_derived() == []
    store.close()


def test_a_large_transaction_unmaps_the_index_file_pages_it_read_and_a_store_does_not(tmp_path: Path):
    """Each scattered read of the memory-mapped index maps the 64 KiB around it: a compaction of
    100k items left ~150 MiB of the file resident. A transaction of many ops unmaps them every
    INDEX_FILE_RELEASE_OPS ops and at its commit; one store leaves them (a release costs ~2 ms)."""
    from unittest.mock import patch

    d = tmp_path / "state"
    store = Store(state_dir=d)
    store.bulk_store([StoreInput(f"{WORDS[i % 8]} note {i} about parse_config_{i} in src/m{i}.py") for i in range(300)])
    store.snapshot()
    store.close()
    path = d / _header(d)["index_file"]["name"]
    store = Store(state_dir=d)
    found = {f"parse_config_{i}": _search_ids(store, f"parse_config_{i}")[0] for i in range(0, 300, 7)}
    assert _resident_kib(path) > 0
    store.store("one more note about golf")
    assert _resident_kib(path) > 0
    from compactor.store.journaled import _Txn

    applied: list[int] = []
    commit = _Txn.commit

    def counted(txn: _Txn, sync: bool = True) -> None:
        applied.append(txn._applied)
        commit(txn, sync)

    with (
        patch.object(journaled_mod, "INDEX_FILE_RELEASE_OPS", 8),
        patch.object(memory_map, "release", wraps=memory_map.release) as release,
        patch.object(_Txn, "commit", counted),
    ):
        store.configure(token_budget=2_000, auto_compact=False)
        report = store.compact()
    assert report.archived and max(applied) > 16
    # Every 8 ops applied, and once more at the commit of a transaction of 8 or more.
    assert release.call_count == sum(n // 8 + (n >= 8) for n in applied)
    assert _resident_kib(path) == 0
    with (
        patch.object(journaled_mod, "INDEX_FILE_RELEASE_OPS", 8),
        patch.object(memory_map, "release", wraps=memory_map.release) as release,
    ):
        store.restore(report.archived[0])  # a few ops: below the threshold, nothing released
        assert release.call_count == 0
    assert {term: _search_ids(store, term)[0] for term in found} == found
    assert store.check_derived() == []  # the index read through the released map equals a rebuild
    store.close()


def test_a_start_reads_the_index_file_on_a_thread_while_it_parses_the_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The checksum reads the whole file (~80 ms at 100k items) and releases the GIL: a start
    runs it beside the parse of the items, and uses the arrays once both are done."""
    import threading

    from compactor.persistence.statedir import StateDir

    d = tmp_path / "state"
    ids = _fill(d)
    seen: list[str] = []
    load = StateDir.load_index

    def recording(self: StateDir, ref: dict[str, object], **kw: object) -> dict[str, memoryview]:
        seen.append(threading.current_thread().name)
        return load(self, ref, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(StateDir, "load_index", recording)
    store = Store(state_dir=d)
    assert seen == ["compactor-index-load"]
    assert store._s.index_file is not None  # the saved index, not a rebuild
    assert _search_ids(store, "parse_config_7")[0] == ids[7] and store.check_derived() == []
    store.close()


def test_a_start_whose_items_are_damaged_waits_for_its_index_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A snapshot that fails to parse ends the start with its error, and no reading thread is
    left behind (here the read takes longer than the parse)."""
    import threading
    import time

    from compactor.errors import StateCorruptError
    from compactor.persistence.statedir import StateDir

    d = tmp_path / "state"
    _fill(d)
    load = StateDir.load_index

    def slow(self: StateDir, ref: dict[str, object], **kw: object) -> dict[str, memoryview]:
        time.sleep(0.5)
        return load(self, ref, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(StateDir, "load_index", slow)
    path = d / "snapshot.json"
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2][:20]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(StateCorruptError):
        Store(state_dir=d)
    assert not [t for t in threading.enumerate() if t.name == "compactor-index-load"]


def test_the_checksum_maps_none_of_the_file(tmp_path: Path):
    """Checking reads the file into a buffer, not through the map: of an 8 MiB file only the
    first MiB (where the layout line is looked for) is resident after `read`, until the arrays
    are read."""
    blocks = {f"a{i}": os.urandom(1 << 20) for i in range(8)}
    ref = indexfile.write(tmp_path, 3, blocks)
    arrays = indexfile.read(tmp_path, ref)
    assert _resident_kib(tmp_path / ref["name"]) <= 1 << 10
    assert {k: bytes(v) for k, v in arrays.items()} == blocks
    assert _resident_kib(tmp_path / ref["name"]) >= 8 << 10


def test_the_checksum_reads_sixteen_chunks_of_at_least_a_mib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Few chunks for a large file (each is a GIL handoff beside a parsing start), no more
    buffer than a MiB for a small one (each page of it is a fault)."""

    calls: list[int] = []
    crc32 = indexfile.zlib.crc32

    def counting(data: memoryview, value: int = 0) -> int:
        calls.append(len(data))
        return crc32(data, value)

    monkeypatch.setattr(indexfile.zlib, "crc32", counting)
    for size in (40 << 20, 3 << 20):
        path = tmp_path / f"f{size}"
        path.write_bytes(os.urandom(1 << 20) * (size >> 20))
        calls.clear()
        fd = os.open(path, os.O_RDONLY)
        try:
            assert indexfile._checksum(fd, size) == crc32(path.read_bytes())
        finally:
            os.close(fd)
        chunk = max(indexfile_mod.INDEX_FILE_CHECK_MIN_CHUNK, size // indexfile_mod.INDEX_FILE_CHECK_CHUNKS)
        assert max(calls) == chunk and sum(calls) == size
        assert len(calls) <= indexfile_mod.INDEX_FILE_CHECK_CHUNKS + 1


def test_a_file_that_cannot_be_read_is_unusable_and_the_start_rebuilds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """A read error while checking (a failing disk) is the file being unusable, not a failed
    start: the index is rebuilt from the items, with a warning."""
    import errno

    d = tmp_path / "state"
    ids = _fill(d)
    ref = _header(d)["index_file"]

    def failing(fd: int, size: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(indexfile, "_checksum", failing)
    with pytest.raises(indexfile.IndexFileError, match="cannot be read: Input/output error"):
        indexfile.read(d, ref)
    with caplog.at_level(logging.WARNING):
        store = Store(state_dir=d)
    assert any("cannot be read" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert _search_ids(store, "parse_config_7")[0] == ids[7] and store.check_derived() == []
    store.close()
