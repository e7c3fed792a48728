"""The state dir: an fsynced journal of ops, atomic snapshots, and a lock shared by processes.

Layout of DIR (0700; files 0600):
    snapshot.json   {"schema", "gen", "prev_gen", "prev_offset", "settings", "index", "dedup", "items": [...]}
                    as lines: everything before the items on the first, then one item per line
    journal.jsonl   first line {"journal": 1, "gen": G}; then one line per call: {"ops": [...]}
    lock            flock(2) target; LOCK_EX around every append and every snapshot rotation

A call's ops are one line, so a crash mid-write tears at most that line, and the whole call
(a bulk_store of 500 items included) is replayed or skipped as a unit.

Generations make snapshot + truncate crash-safe: a snapshot of generation G says "I hold
everything up to byte prev_offset of journal generation prev_gen". On load, a journal of
generation G is replayed whole, one of generation prev_gen from prev_offset (the rotation
after the snapshot did not finish), anything else is an error.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from . import constants as C
from .errors import PersistenceError, StateCorruptError

log = logging.getLogger(__name__)

Op = dict[str, Any]
SNAPSHOT = "snapshot.json"
JOURNAL = "journal.jsonl"
LOCK = "lock"
ITEMS_LINE = b',"items":[\n'  # ends a snapshot's first line; one item per line follows
ITEMS_END = b"]}"  # a snapshot's last line
RECOVER_HINT = (
    "Nothing was changed. Run `compactor doctor --state-dir {dir}` for details; to start over "
    "while keeping the damaged file, move it aside (e.g. `mv {path} {path}.bad`)."
)


@dataclass(slots=True)
class Loaded:
    """What startup (or a reload after another process rotated the journal) reads from disk."""

    snapshot: dict[str, Any] | None
    batches: list[list[Op]]
    gen: int
    offset: int
    warnings: list[str] = field(default_factory=list)


class SnapshotItems:
    """A snapshot's items, parsed one line at a time; owns the open file. `close()` it if it
    is not read to the end."""

    def __init__(self, fh: BinaryIO, corrupt: Callable[[object], StateCorruptError]) -> None:
        self._fh = fh
        self._corrupt = corrupt
        self._read = 0

    def __iter__(self) -> SnapshotItems:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._fh.closed:
            raise StopIteration
        try:
            line = self._fh.readline()
            if line == ITEMS_END:
                trailing = self._fh.read().strip()
                self.close()
                if trailing:
                    raise self._corrupt("data after the end of the items")
                raise StopIteration
            if not line.endswith(b"\n"):
                raise self._corrupt("it ends before its items do")
            self._read += 1
            record = orjson.loads(line[:-2] if line.endswith(b",\n") else line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
            return record
        except ValueError as exc:
            self.close()
            raise self._corrupt(f"item {self._read}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._fh.close()


def _popping(records: list[dict[str, Any]]) -> Generator[dict[str, Any], None, None]:
    """The records in order, each dropped from the list as it is handed out."""
    records.reverse()
    while records:
        yield records.pop()


# A snapshot's item records, one at a time, each freed once handed out: read line by line
# from the file, or from a snapshot that had to be parsed whole. Closing releases the file.
ItemRecords = SnapshotItems | Generator[dict[str, Any], None, None]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_fsynced(path: Path, chunks: Iterator[bytes] | list[bytes]) -> None:
    """Write `chunks` to a new 0600 file and fsync it; on failure leave no file behind."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb", closefd=True) as fh:
            unsynced = 0
            for chunk in chunks:
                fh.write(chunk)
                unsynced += len(chunk)
                if unsynced >= C.SNAPSHOT_SYNC_BYTES:
                    # A journal fsync on the same file system waits for the data of every file
                    # dirty at that moment (ext4's ordered mode): flushing a 350 MB snapshot
                    # as we go keeps that wait at a few MB's worth instead of ~50 ms.
                    fh.flush()
                    os.fdatasync(fh.fileno())
                    unsynced = 0
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(path, 0o600)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def _journal_header(gen: int) -> bytes:
    return orjson.dumps({"journal": 1, "gen": gen}) + b"\n"


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.snapshot_path = path / SNAPSHOT
        self.journal_path = path / JOURNAL
        self._lock_fd: int | None = None
        self._lock_depth = 0
        self.gen = 0
        self.offset = 0  # bytes of the journal already applied to memory
        self.last_snapshot_at: float | None = None
        self.last_snapshot_seconds: float | None = None
        self._ledger_seen = (0, 0)  # (bytes counted, lines in them)

    # --- setup ----------------------------------------------------------------------------
    def open(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.path, 0o700)
            lock_path = self.path / LOCK
            self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            os.chmod(lock_path, 0o600)
        except OSError as exc:
            raise PersistenceError(f"Cannot open state dir {self.path}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @contextlib.contextmanager
    def locked(self, exclusive: bool = True) -> Iterator[None]:
        """flock around a critical section; re-entrant within one process and thread."""
        assert self._lock_fd is not None
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        self._lock_depth = 1
        try:
            yield
        finally:
            self._lock_depth = 0
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # --- loading --------------------------------------------------------------------------
    def _hint(self, path: Path) -> str:
        return RECOVER_HINT.format(dir=self.path, path=path)

    def _corrupt(self, reason: object) -> StateCorruptError:
        return StateCorruptError(
            f"Snapshot {self.snapshot_path} is corrupt ({reason}). {self._hint(self.snapshot_path)}"
        )

    def _check_version(self, snap: dict[str, Any]) -> None:
        version = snap.get("schema")
        if not isinstance(version, int) or version > C.SCHEMA_VERSION:
            raise StateCorruptError(
                f"Snapshot {self.snapshot_path} has schema version {version!r}; this compactor reads "
                f"up to {C.SCHEMA_VERSION}. Upgrade compactor. {self._hint(self.snapshot_path)}"
            )

    def _unreadable(self, exc: OSError) -> StateCorruptError:
        return StateCorruptError(f"Cannot read {self.snapshot_path}: {exc}. {self._hint(self.snapshot_path)}")

    def _parse_whole(self, raw: bytes) -> dict[str, Any]:
        try:
            snap = orjson.loads(raw)
            if not isinstance(snap, dict) or not isinstance(snap.get("items"), list):
                raise ValueError("not a compactor snapshot (no items list)")
        except ValueError as exc:
            raise self._corrupt(exc) from exc
        self._check_version(snap)
        return snap

    def read_snapshot(self) -> dict[str, Any] | None:
        """The whole snapshot, parsed and checked before anything is built from it."""
        try:
            raw = self.snapshot_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._unreadable(exc) from exc
        return self._parse_whole(raw)

    def read_snapshot_streaming(self) -> dict[str, Any] | None:
        """The snapshot's header, with "items" an `ItemRecords` that parses one item line at a
        time (close it if it is not read to the end).

        Parsing the whole file at once held its bytes and its parse tree together: at 100k
        items a 1.5 GB peak for a 0.9 GB store. A snapshot in the older one-line layout is
        parsed whole, as before. A damaged item line raises StateCorruptError when it is
        reached, so build nothing lasting from the items until they have all been read."""
        try:
            fh = open(self.snapshot_path, "rb")  # noqa: SIM115 -- SnapshotItems closes it
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._unreadable(exc) from exc
        try:
            first = fh.readline()
            if not first.endswith(ITEMS_LINE):
                # The older layout has no line breaks: the first line was the whole file.
                snap = self._parse_whole(first + fh.read())
                fh.close()
                snap["items"] = _popping(snap["items"])
                return snap
            try:
                header = orjson.loads(first[: -len(ITEMS_LINE)] + b"}")
                if not isinstance(header, dict):
                    raise ValueError("not a compactor snapshot")
            except ValueError as exc:
                raise self._corrupt(exc) from exc
            self._check_version(header)
        except OSError as exc:
            fh.close()
            raise self._unreadable(exc) from exc
        except BaseException:
            fh.close()
            raise
        header["items"] = SnapshotItems(fh, self._corrupt)
        return header

    def read_journal(
        self, start: int | None = None, expect_gen: int | None = None
    ) -> tuple[int, list[list[Op]], int, list[str]]:
        """Return (gen, batches from `start` (default: after the header), end offset, warnings).

        A torn final line (a crash mid-write) is reported as a warning and not returned; a bad
        line anywhere else raises StateCorruptError. With `expect_gen`, a journal of another
        generation returns (gen, [], 0, []) unread: `start` is an offset into a file that no
        longer exists, and parsing from it would land mid-line.
        """
        try:
            with open(self.journal_path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return 0, [], 0, []
        except OSError as exc:
            raise StateCorruptError(f"Cannot read {self.journal_path}: {exc}. {self._hint(self.journal_path)}") from exc
        if not data:
            return 0, [], 0, []
        nl = data.find(b"\n")
        try:
            if nl < 0:
                raise ValueError("no complete header line")
            header = orjson.loads(data[:nl])
            gen = int(header["gen"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StateCorruptError(
                f"Journal {self.journal_path} has a bad header ({exc}). {self._hint(self.journal_path)}"
            ) from exc
        if expect_gen is not None and gen != expect_gen:
            return gen, [], 0, []
        pos = nl + 1 if start is None else start
        batches: list[list[Op]] = []
        warnings: list[str] = []
        lineno = data.count(b"\n", 0, pos) + 1
        while pos < len(data):
            end = data.find(b"\n", pos)
            if end < 0:
                warnings.append(
                    f"{self.journal_path}: skipped a torn last line ({len(data) - pos} bytes) left by a crash"
                )
                return gen, batches, pos, warnings
            try:
                entry = orjson.loads(data[pos:end])
                ops = entry["ops"]
                if not isinstance(ops, list):
                    raise TypeError("ops is not a list")
            except (ValueError, KeyError, TypeError) as exc:
                if data.find(b"\n", end + 1) < 0 and not data[end + 1 :].strip():
                    warnings.append(f"{self.journal_path}: skipped a torn last line {lineno} left by a crash")
                    return gen, batches, pos, warnings
                raise StateCorruptError(
                    f"Journal {self.journal_path} line {lineno} is corrupt ({exc}). " + self._hint(self.journal_path)
                ) from exc
            batches.append(ops)
            pos = end + 1
            lineno += 1
        return gen, batches, pos, warnings

    def journal_gen(self) -> int:
        """The journal's generation from its header; 0 if there is no journal yet."""
        try:
            with open(self.journal_path, "rb") as fh:
                first = fh.readline()
        except FileNotFoundError:
            return 0
        if not first:
            return 0
        try:
            return int(orjson.loads(first)["gen"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StateCorruptError(
                f"Journal {self.journal_path} has a bad header ({exc}). {self._hint(self.journal_path)}"
            ) from exc

    def load(self) -> Loaded:
        """Read snapshot + journal. Call under the lock. The snapshot's items come as
        `ItemRecords` the caller reads to the end or closes."""
        snap = self.read_snapshot_streaming()
        try:
            return self._load_with(snap)
        except BaseException:
            if snap is not None:
                snap["items"].close()
            raise

    def _load_with(self, snap: dict[str, Any] | None) -> Loaded:
        snap_gen = int(snap.get("gen", 1)) if snap else 1
        prev_gen = int(snap.get("prev_gen", 0)) if snap else 0
        prev_offset = int(snap.get("prev_offset", 0)) if snap else 0
        jgen = self.journal_gen()
        warnings: list[str] = []
        if snap is not None and jgen != snap_gen:
            # The branches below rewrite the journal: read every item first, so a damaged
            # snapshot is found before anything on disk changes.
            snap["items"] = _popping(list(snap["items"]))
        if jgen == 0:
            # No journal yet (fresh dir, or it was lost): start one at the snapshot's generation.
            self._write_journal(snap_gen, b"")
            batches: list[list[Op]] = []
            end = len(_journal_header(snap_gen))
        elif jgen == snap_gen:
            _, batches, end, warnings = self.read_journal()
        elif snap is not None and jgen == prev_gen:
            # Crash between writing the snapshot and rotating the journal: finish the rotation.
            _, batches, end, warnings = self.read_journal(start=prev_offset)
            tail = self._journal_bytes(prev_offset, end)
            self._write_journal(snap_gen, tail)
            end = len(_journal_header(snap_gen)) + len(tail)
        else:
            raise StateCorruptError(
                f"Journal {self.journal_path} is generation {jgen} but snapshot {self.snapshot_path} "
                f"is generation {snap_gen}: they do not belong together. {self._hint(self.journal_path)}"
            )
        if warnings:
            # Cut the torn tail so the next append starts on a clean line.
            self._truncate_journal(end)
        self.gen = snap_gen
        self.offset = end
        return Loaded(snapshot=snap, batches=batches, gen=snap_gen, offset=end, warnings=warnings)

    def _journal_bytes(self, start: int, end: int) -> bytes:
        with open(self.journal_path, "rb") as fh:
            fh.seek(start)
            return fh.read(max(0, end - start))

    def _truncate_journal(self, size: int) -> None:
        try:
            with open(self.journal_path, "r+b") as fh:
                fh.truncate(size)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            log.warning("could not cut the torn journal tail: %s", exc)

    # --- catching up with other processes -------------------------------------------------
    def journal_changed(self) -> bool:
        """Cheap check (one stat) whether anything was appended or rotated since we last read."""
        try:
            st = os.stat(self.journal_path)
        except FileNotFoundError:
            return True
        return st.st_size != self.offset or st.st_ino != getattr(self, "_ino", st.st_ino)

    def read_new(self) -> list[list[Op]] | None:
        """Batches other processes appended since our offset; None if the journal was rotated
        (a new generation): the caller must reload from the snapshot."""
        gen, batches, end, warnings = self.read_journal(start=self.offset, expect_gen=self.gen)
        if gen != self.gen:
            return None
        if warnings:
            # A torn tail under the lock is a dead writer's (killed mid-append): cut it, or our
            # next O_APPEND line would be glued onto it and lost as "torn" at the next load.
            for warning in warnings:
                log.warning("%s", warning)
            self._truncate_journal(end)
        self.offset = end
        self._remember_inode()
        return batches

    def _remember_inode(self) -> None:
        with contextlib.suppress(OSError):
            self._ino = os.stat(self.journal_path).st_ino

    # --- writing --------------------------------------------------------------------------
    def append(self, ops: list[Op], *, sync: bool = True) -> None:
        """Append one call's ops as one line; fsync before returning when `sync`."""
        line = orjson.dumps({"ops": ops}) + b"\n"
        try:
            fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND)
            try:
                written = os.write(fd, line)
                if written != len(line):
                    # A short write leaves a torn line; cut it so the journal stays parseable.
                    os.ftruncate(fd, self.offset)
                    raise OSError(28, "short write (disk full?)")
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                if os.stat(self.journal_path).st_size > self.offset:
                    os.truncate(self.journal_path, self.offset)
            raise PersistenceError(
                f"Could not write to the journal in {self.path}: {exc.strerror or exc}. "
                "This call was not applied; free disk space or fix permissions and retry."
            ) from exc
        self.offset += len(line)
        self._remember_inode()

    def _write_atomic(self, path: Path, chunks: Iterator[bytes] | list[bytes]) -> None:
        tmp = path.with_name(path.name + ".tmp")
        _write_fsynced(tmp, chunks)
        try:
            os.replace(tmp, path)
            _fsync_dir(self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _write_journal(self, gen: int, tail: bytes) -> None:
        self._write_atomic(self.journal_path, [_journal_header(gen), tail])
        self._remember_inode()

    def write_snapshot(self, chunks: Iterator[bytes]) -> None:
        """Write snapshot.json atomically from pre-serialised chunks (temp, fsync, rename, fsync dir)."""
        started = time.perf_counter()
        try:
            self._write_atomic(self.snapshot_path, chunks)
        except OSError as exc:
            raise PersistenceError(f"Could not write the snapshot in {self.path}: {exc.strerror or exc}") from exc
        self.last_snapshot_seconds = time.perf_counter() - started
        self.last_snapshot_at = time.time()

    def write_snapshot_tmp(self, chunks: Iterator[bytes]) -> None:
        """First half of a background snapshot: the temp file, written and fsynced."""
        started = time.perf_counter()
        try:
            _write_fsynced(self._snapshot_tmp(), chunks)
        except OSError as exc:
            raise PersistenceError(f"Could not write the snapshot in {self.path}: {exc.strerror or exc}") from exc
        self.last_snapshot_seconds = time.perf_counter() - started

    def install_snapshot_tmp(self) -> Path | None:
        """Second half: rename the temp file into place and fsync the dir. Call under the lock.

        Replacing a file frees the old one's blocks inside the rename: ~80 ms for the 350 MB
        snapshot of 100k items, a stall of every call waiting on the lock. The old snapshot is
        hard-linked to a temp name first, so the rename only drops a link; the returned path
        is for the caller to unlink off the event loop (any leftover is a *.tmp file, removed
        with the next synchronous snapshot and reported by doctor)."""
        tmp = self._snapshot_tmp()
        old = self.path / f"{SNAPSHOT}.{os.getpid()}.old.tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old)
            os.link(self.snapshot_path, old)
            linked = True
        except OSError:  # no snapshot yet, or a file system without hard links
            linked = False
        os.replace(tmp, self.snapshot_path)
        _fsync_dir(self.path)
        self.last_snapshot_at = time.time()
        return old if linked else None

    @staticmethod
    def drop_old_snapshot(path: Path) -> None:
        """Delete the replaced snapshot `install_snapshot_tmp` returned (off the event loop:
        freeing 350 MB takes ~30 ms). Not truncated first, which would free it in smaller
        steps: a reader that does not take the lock (`compactor doctor`) may still have it
        open, and must read it whole."""
        with contextlib.suppress(OSError):
            path.unlink()

    def discard_snapshot_tmp(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self._snapshot_tmp())

    def _snapshot_tmp(self) -> Path:
        # Per process: two servers snapshotting the same dir must not write one temp file.
        return self.path / f"{SNAPSHOT}.{os.getpid()}.tmp"

    def remove_temp_files(self) -> None:
        """Delete every temp file, ours or another process's (whose install will then fail
        harmlessly): after a forget no file may still hold the forgotten bytes."""
        for tmp in self.path.glob("*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()

    def rotate(self, new_gen: int, from_offset: int) -> None:
        """Start journal generation `new_gen`, keeping what was appended after `from_offset`."""
        end = os.stat(self.journal_path).st_size
        tail = self._journal_bytes(from_offset, end) if end > from_offset else b""
        try:
            self._write_journal(new_gen, tail)
        except OSError as exc:
            raise PersistenceError(f"Could not rotate the journal in {self.path}: {exc.strerror or exc}") from exc
        self.gen = new_gen
        self.offset = len(_journal_header(new_gen)) + len(tail)

    # --- the forget ledger: append-only, one line per dropped or forgotten id (no content) --
    def append_ledger(self, entries: list[dict[str, Any]]) -> None:
        path = self.path / C.FORGET_LEDGER
        data = b"".join(orjson.dumps(e) + b"\n" for e in entries)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise PersistenceError(f"Could not append to {path}: {exc.strerror or exc}") from exc

    def read_ledger(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        try:
            raw = (self.path / C.FORGET_LEDGER).read_bytes()
        except OSError:
            return out
        for line in raw.splitlines():
            with contextlib.suppress(ValueError):
                out.append(orjson.loads(line))
        return out

    def ledger_count(self) -> int:
        """Lines in the append-only ledger; only bytes appended since the last count are read
        (status asks on every call, and the ledger can hold one line per dropped item)."""
        path = self.path / C.FORGET_LEDGER
        try:
            size = os.stat(path).st_size
            seen, count = self._ledger_seen
            if size < seen:  # replaced by hand: count from the start
                seen, count = 0, 0
            if size > seen:
                with open(path, "rb") as fh:
                    fh.seek(seen)
                    count += fh.read(size - seen).count(b"\n")
        except OSError:
            return 0
        self._ledger_seen = (size, count)
        return count

    def journal_size(self) -> int:
        try:
            return os.stat(self.journal_path).st_size
        except OSError:
            return 0


def snapshot_chunks(header: dict[str, Any], items: list[dict[str, Any]] | list[Any]) -> Iterator[bytes]:
    """Serialise a snapshot as a stream of chunks so a writer thread can yield between them.

    One JSON object, laid out in lines: the header (settings, saved indexes) and the opening
    of the items array on the first, then one item per line (orjson writes no raw newlines),
    then the closing line, so a load can parse it item by item (`read_snapshot_streaming`)."""
    yield orjson.dumps(header)[:-1] + ITEMS_LINE
    for start in range(0, len(items), C.SNAPSHOT_CHUNK_ITEMS):
        part = b",\n".join(map(orjson.dumps, items[start : start + C.SNAPSHOT_CHUNK_ITEMS]))
        yield part if not start else b",\n" + part
    yield b"\n" + ITEMS_END if items else ITEMS_END
