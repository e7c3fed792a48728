"""The state dir: an fsynced journal of ops, atomic snapshots, and a lock shared by processes.

Layout of DIR (0700; files 0600):
    snapshot.json   {"schema", "gen", "prev_gen", "prev_offset", "settings", "index", "dedup", "items": [...]}
                    as lines: everything before the items on the first, then one item per line
                    closed by a trailer line `],"crc32":N}`: the CRC-32 of every byte before it
    journal.jsonl   first line {"journal": 2, "gen": G}; then one line per call:
                    {"crc":N,"ops":[...]}, N the CRC-32 of the ops array's bytes
    journal.prev.G.L  journal generation G as a checkpoint snapshot replaced it, the snapshot
                    holding its first L bytes (the rest went on into G+1): the last few are kept
                    so that a process that had not read them all catches up from them instead of
                    reloading everything (`read_across_rotation`); a purge deletes them all
    lock            flock(2) target; LOCK_EX around every append and every snapshot rotation.
                    Its first bytes record "generation G holds at least L acknowledged bytes":
                    rewritten after every append and rotation, read on every call under the lock

A process learns that another one appended or rotated from that record (never from the
journal's inode and size: ext4 reuses inode numbers, and a fresh journal is always just its
header, so that pair repeats across rotations). At load, a journal shorter than the recorded
length, or missing while the record says it held writes, has lost acknowledged writes: an
error, never a warning.

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
import zlib
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Final

import orjson

from ..errors import PersistenceError, StateCorruptError, WouldWaitError
from ..models import Item, Op
from . import indexfile
from .base import Loaded, ReentrantLock
from .codec import (
    ITEMS_LINE,
    RECORD_SIZE,
    SCHEMA_VERSION,
    JournalRecord,
    SnapshotItems,
    journal_header,
    journal_header_len,
    journal_line,
    snapshot_chunks,
)
from .files import NOFOLLOW, fsync_dir, pid_alive, read_nofollow, tail_lines, temp_file_pid, write_fsynced
from .journalfile import JournalReader

FORGET_LEDGER: Final = "forget-ledger.jsonl"

log = logging.getLogger(__name__)

SNAPSHOT = "snapshot.json"
JOURNAL = "journal.jsonl"
PREV_JOURNAL = "journal.prev"  # journal.prev.G.L: a generation a checkpoint replaced (see the layout)
# Replaced generations kept: a server's background snapshot and its idle full one are two
# rotations, so a process idle for a while is a few behind; each is a journal's worth of disk.
KEPT_GENERATIONS = 4
# ... and at most this many bytes of them: a reader further behind than that reloads, which
# then costs about what applying that many bytes of ops would (a 100k-item import's journal
# is ~350 MB, which four copies would otherwise keep on disk).
KEPT_JOURNAL_BYTES = 64 << 20
LOCK = "lock"
RECOVER_HINT = (
    "Nothing was changed. Run `compactor doctor --state-dir {dir}` for details; to start over "
    "while keeping the damaged file, move it aside (e.g. `mv {path} {path}.bad`)."
)


def _popping(records: list[dict[str, Any]]) -> Generator[dict[str, Any], None, None]:
    """The records in order, each dropped from the list as it is handed out."""
    records.reverse()
    while records:
        yield records.pop()


class StateDir(ReentrantLock):
    """Memory kept in a state dir (see the module docstring): the `Persistence` the Store uses
    by default."""

    remote = False  # catching up reads local files

    def __init__(self, path: Path) -> None:
        self.path = path
        self.snapshot_path = path / SNAPSHOT
        self.journal_path = path / JOURNAL
        self._lock_fd: int | None = None
        self._dir_ino = 0  # the state dir's inode when opened: a lock file is made again only in it
        self._inodes_unstable = False  # set by `_acquire` where st_ino cannot identify a file
        self.gen = 0
        self.offset = 0  # bytes of the journal already applied to memory
        self.last_snapshot_at: float | None = None
        self.last_snapshot_seconds: float | None = None
        self._ledger_seen = (0, 0)  # (bytes counted, lines in them)
        self._record: JournalRecord | None = None  # the lock file's record as last read or written
        self._journal = JournalReader(
            self.journal_path, hint=self._hint(self.journal_path), repair_hint=self._repair_hint()
        )

    # --- setup ----------------------------------------------------------------------------
    def open(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.path, 0o700)
            self.refuse_symlinks()
            lock_path = self.path / LOCK
            self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
            os.fchmod(self._lock_fd, 0o600)
            fsync_dir(self.path)  # the lock file (and the dir) may be new: their names must last
            self._dir_ino = os.stat(self.path).st_ino
        except OSError as exc:
            raise PersistenceError(f"Cannot open state dir {self.path}: {exc.strerror or exc}") from exc
        self.remove_dead_temp_files()

    def refuse_symlinks(self) -> None:
        """A symlink in place of a state file would send our writes (and chmod) elsewhere."""
        for entry in self.path.iterdir():
            if entry.is_symlink():
                raise PersistenceError(
                    f"{entry} is a symbolic link; compactor does not follow links inside its state dir. "
                    "Replace it with the real file (or remove it) and start again."
                )

    @property
    def is_open(self) -> bool:
        return self._lock_fd is not None

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _acquire(self, exclusive: bool) -> None:
        """flock: held by one process (and, re-entrant, one thread) at a time (`ReentrantLock`).

        The lock is only the lock if the file we hold is the one at the path: a lock file
        deleted while servers run and made again by the next one to start would leave the
        older servers locking a file nobody else sees. So once locked, the descriptor's file is
        compared with the path's (st_dev, st_ino); when they differ, the lock is let go and the
        file at the path opened (made again if it is missing) and locked instead, before
        anything is written."""
        assert self._lock_fd is not None
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if self._acquire_wait_s == 0:
            try:
                fcntl.flock(self._lock_fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                raise WouldWaitError(
                    "Another server holds the writers' lock; this call was not applied. Retry it in a moment."
                ) from None
        else:
            fcntl.flock(self._lock_fd, mode)
        if self._inodes_unstable or self._lock_is_at_path():
            return
        try:
            if os.stat(self.path).st_ino != self._dir_ino:
                return  # the state dir itself was replaced or moved: `gone` refuses writes
            fresh = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
        except OSError:
            return  # the state dir is gone: `gone` refuses writes
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)
        self._lock_fd = fresh
        self._record = None  # the record we read was in the old file
        fcntl.flock(self._lock_fd, mode)
        # A file just opened that is not the one at its path: inode numbers are not stable here
        # (some FUSE mounts), and this check cannot tell; it is not made again.
        self._inodes_unstable = not self._lock_is_at_path()
        if not self._inodes_unstable:
            log.warning("the lock file %s was replaced; locked the one now at that path", self.path / LOCK)

    def _lock_is_at_path(self) -> bool:
        assert self._lock_fd is not None
        try:
            named = os.stat(self.path / LOCK, follow_symlinks=False)
        except OSError:
            return False
        held = os.fstat(self._lock_fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def _release(self) -> None:
        assert self._lock_fd is not None
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
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise StateCorruptError(
                f"Snapshot {self.snapshot_path} has schema version {version!r}; this compactor reads "
                f"up to {SCHEMA_VERSION}. Upgrade compactor. {self._hint(self.snapshot_path)}"
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

    def read_snapshot_streaming(self) -> dict[str, Any] | None:
        """The snapshot's header, with "items" an `ItemRecords` that parses one item line at a
        time (close it if it is not read to the end).

        Parsing the whole file at once held its bytes and its parse tree together: at 100k
        items a 1.5 GB peak for a 0.9 GB store. A snapshot in the older one-line layout is
        parsed whole, as before. A damaged item line raises StateCorruptError when it is
        reached, so build nothing lasting from the items until they have all been read."""
        try:
            fh = os.fdopen(os.open(self.snapshot_path, os.O_RDONLY | NOFOLLOW), "rb")
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
        header["items"] = SnapshotItems(fh, self._corrupt, zlib.crc32(first))
        return header

    def read_journal(
        self, start: int | None = None, expect_gen: int | None = None
    ) -> tuple[int, list[list[Op]], int, list[str]]:
        """Return (gen, batches from `start`, end offset, warnings): `JournalReader.read`."""
        return self._journal.read(start, expect_gen)

    def _repair_hint(self) -> str:
        return (
            f"Nothing was changed. `compactor doctor --state-dir {self.path}` shows what is damaged; "
            f"`compactor doctor --repair --state-dir {self.path}` keeps every intact line before the damage "
            "and moves the damaged journal aside."
        )

    def journal_gen(self) -> int:
        """The journal's generation from its header; 0 if there is no journal yet."""
        return self._journal.gen()

    # --- the journal record in the lock file ----------------------------------------------
    def read_record(self) -> JournalRecord | None:
        """What the lock file says of the journal: None if it says nothing readable."""
        assert self._lock_fd is not None
        try:
            raw = os.pread(self._lock_fd, RECORD_SIZE, 0)
        except OSError:
            return None
        self._record = JournalRecord.parse(raw)
        return self._record

    def _write_record(self, *, durable: int | None = None) -> None:
        """Say that this generation's journal is `self.offset` bytes, of which `durable` (by
        default all) were fsynced before a call was acknowledged. Call under the lock."""
        if self._lock_fd is None:
            return
        if durable is None:
            durable = self.offset
        else:
            previous = self._record  # read under this same hold of the lock (journal_changed, load)
            if previous is not None and previous.gen == self.gen:
                durable = max(durable, previous.durable)
        record = JournalRecord(self.gen, min(durable, self.offset), self.offset)
        self._record = record
        try:
            os.pwrite(self._lock_fd, record.encode(), 0)
        except OSError as exc:  # the lock file's first block is already allocated: unlikely
            log.warning("could not update the journal record in %s: %s", self.path / LOCK, exc)

    def forget_record(self) -> None:
        """Clear the record (doctor --repair, after the loss was accepted); the next load writes it anew."""
        assert self._lock_fd is not None
        os.pwrite(self._lock_fd, b" " * (RECORD_SIZE - 1) + b"\n", 0)
        self._record = None

    def check_against_record(self, gen: int, end: int, *, exists: bool) -> None:
        """Raise if the journal (generation `gen`, `end` bytes intact) holds less than the lock
        file says was acknowledged: writes were lost after they were saved."""
        record = self.read_record()
        if record is None or record.gen != gen:
            lost = record is not None and record.gen >= gen and record.durable > journal_header_len(record.gen)
            if lost and record is not None and not exists:
                raise StateCorruptError(
                    f"Journal {self.journal_path} is missing, but {self.path / LOCK} records "
                    f"{record.durable:,} acknowledged bytes of journal generation {record.gen}: "
                    f"writes that were saved are gone. {self._repair_hint()}"
                )
            return
        if not exists and record.durable > journal_header_len(gen):
            raise StateCorruptError(
                f"Journal {self.journal_path} is missing, but {self.path / LOCK} records {record.durable:,} "
                f"acknowledged bytes of it: writes that were saved are gone. {self._repair_hint()}"
            )
        if end < record.durable:
            raise StateCorruptError(
                f"Journal {self.journal_path} holds {end:,} intact bytes, but {record.durable:,} were "
                f"acknowledged: {record.durable - end:,} bytes of saved writes are gone (truncated or "
                f"damaged). {self._repair_hint()}"
            )

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
            # No journal yet (fresh dir), or it was lost: that is an error when the lock file
            # says it held acknowledged writes; otherwise start one at the snapshot's generation.
            self.check_against_record(snap_gen, 0, exists=False)
            self._write_journal(snap_gen, b"")
            batches: list[list[Op]] = []
            end = len(journal_header(snap_gen))
        elif jgen == snap_gen:
            _, batches, end, warnings = self.read_journal()
            self.check_against_record(jgen, end, exists=True)
        elif snap is not None and jgen == prev_gen:
            # Crash between writing the snapshot and rotating the journal: finish the rotation.
            _, batches, end, warnings = self.read_journal(start=prev_offset)
            self.check_against_record(jgen, end, exists=True)
            tail = self._journal.bytes_between(prev_offset, end)
            self._write_journal(snap_gen, tail)
            end = len(journal_header(snap_gen)) + len(tail)
        elif snap is None:
            raise StateCorruptError(
                f"Journal {self.journal_path} is generation {jgen}, which starts after a snapshot, but "
                f"{self.snapshot_path} is missing: the memory the journal builds on is gone. Restore "
                f"snapshot.json from a backup. {self._hint(self.journal_path)}"
            )
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
        self.remove_dead_temp_files()
        record = self.read_record() if self._lock_fd is not None else None
        if record is None or record.gen != self.gen or record.end != end:
            # Rewritten only when it changed: a read-only command changes no file (issue 38).
            self._write_record(durable=0)  # keeps what the record said was durable
        return Loaded(snapshot=snap, batches=batches, gen=snap_gen, offset=end, warnings=warnings)

    def _truncate_journal(self, size: int) -> None:
        try:
            with os.fdopen(os.open(self.journal_path, os.O_RDWR | NOFOLLOW), "r+b") as fh:
                fh.truncate(size)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            log.warning("could not cut the torn journal tail: %s", exc)

    # --- catching up with other processes -------------------------------------------------
    def gone(self) -> bool:
        """Whether the state dir this process opened was deleted or moved away since (its lock
        file is no longer at its path): this process then holds the only copy of its memory.
        By path alone: inode numbers are not stable on every file system (some FUSE mounts)."""
        if self._lock_fd is None:
            return False
        try:
            os.stat(self.path / LOCK)
        except FileNotFoundError:
            return True
        except OSError:  # there but unreadable (permissions): not gone
            pass
        return False

    def journal_changed(self) -> bool:
        """Whether another process appended or rotated since we last read: the lock file's
        record (one pread on a descriptor we hold) and the journal's size. Call under the lock.
        False once the state dir is gone: memory is all that is left, and reads go on from it."""
        if self.gone():
            return False
        record = self.read_record()
        if record is None or record.gen != self.gen or record.end != self.offset:
            return True
        try:
            return os.stat(self.journal_path).st_size != self.offset
        except FileNotFoundError:
            return True

    def read_new(self) -> list[list[Op]] | None:
        """Batches other processes appended since our offset; None if the journal was rotated
        (a new generation): the caller must reload from the snapshot."""
        gen, batches, end, warnings = self.read_journal(start=self.offset, expect_gen=self.gen)
        if gen != self.gen:
            return None
        self.check_against_record(gen, end, exists=True)
        if warnings:
            # A torn tail under the lock is a dead writer's (killed mid-append): cut it, or our
            # next O_APPEND line would be glued onto it and lost as "torn" at the next load.
            for warning in warnings:
                log.warning("%s", warning)
            self._truncate_journal(end)
        self.offset = end
        record = self._record  # as check_against_record just read it
        if record is None or record.gen != self.gen or record.end != end:
            self._write_record(durable=0)
        return batches

    # --- writing --------------------------------------------------------------------------
    def append(self, ops: list[Op], *, sync: bool = True) -> None:
        """Append one call's ops as one line; fsync before returning when `sync`."""
        if self.gone():
            raise PersistenceError(
                f"The state dir {self.path} was deleted or moved while this server ran, so nothing more can be "
                "saved there, and this process holds the only copy of its memory. This call was not applied. "
                "Export what it holds now if you need it (the `export` tool), then restart the server: it starts "
                "an empty memory there."
            )
        line = journal_line(ops)
        try:
            fd = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | NOFOLLOW)
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
        self._write_record(durable=self.offset if sync else 0)

    def _write_atomic(self, path: Path, chunks: Iterator[bytes] | list[bytes]) -> None:
        tmp = path.with_name(path.name + ".tmp")
        write_fsynced(tmp, chunks)
        try:
            os.replace(tmp, path)
            fsync_dir(self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _write_journal(self, gen: int, tail: bytes) -> None:
        self._write_atomic(self.journal_path, [journal_header(gen), tail])

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
            write_fsynced(self._snapshot_tmp(), chunks)
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
        fsync_dir(self.path)
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

    def remove_dead_temp_files(self) -> None:
        """Delete temp files whose writer is gone: a snapshot killed mid-write leaves a full-size
        `snapshot.json.PID.tmp` (or `.PID.old.tmp`) that nothing else would remove. A live
        process's files stay; a journal.jsonl.tmp is only ever written under the lock we hold."""
        for tmp in self.path.glob("*.tmp"):
            pid = temp_file_pid(tmp.name)
            if pid is not None and (pid == os.getpid() or pid_alive(pid)):
                continue
            if pid is None and not self._lock_depth:
                continue  # journal.jsonl.tmp: only under the lock
            with contextlib.suppress(OSError):
                tmp.unlink()

    def purge_kept_aside(self, needles: Sequence[bytes]) -> list[str]:
        """Lines holding a forgotten item leave the files a repair kept aside (`*.damaged-*`):
        a snapshot's hold one item each and a journal's one call each, so the rest stays."""
        changed: list[str] = []
        for path in sorted(self.path.glob("*.damaged-*")):
            try:
                lines = read_nofollow(path).split(b"\n")
                kept = [line for line in lines if not any(needle in line for needle in needles)]
                if len(kept) != len(lines):
                    self._write_atomic(path, [b"\n".join(kept)])
                    changed.append(path.name)
            except OSError as exc:
                raise PersistenceError(f"Could not purge {path}: {exc.strerror or exc}") from exc
        return changed

    def remove_temp_files(self) -> None:
        """Delete every temp file, ours or another process's (whose install will then fail
        harmlessly): after a forget no file may still hold the forgotten bytes."""
        for tmp in self.path.glob("*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()

    def rotate(self, new_gen: int, from_offset: int, *, keep_previous: bool = False) -> None:
        """Start journal generation `new_gen`, keeping what was appended after `from_offset`.
        `keep_previous`: the replaced generation stays as PREV_JOURNAL for processes still
        reading it (a checkpoint); otherwise (a purge) no copy of it is left."""
        end = os.stat(self.journal_path).st_size
        tail = self._journal.bytes_between(from_offset, end) if end > from_offset else b""
        try:
            self._keep_previous(keep_previous, from_offset)
            self._write_journal(new_gen, tail)
        except OSError as exc:
            raise PersistenceError(f"Could not rotate the journal in {self.path}: {exc.strerror or exc}") from exc
        self.gen = new_gen
        self.offset = len(journal_header(new_gen)) + len(tail)
        self._write_record()

    def _kept(self) -> dict[int, tuple[Path, int]]:
        """The kept generations: gen -> (file, bytes the next snapshot holds)."""
        kept: dict[int, tuple[Path, int]] = {}
        for path in self.path.glob(f"{PREV_JOURNAL}.*.*"):
            parts = path.name[len(PREV_JOURNAL) + 1 :].split(".")
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                kept[int(parts[0])] = (path, int(parts[1]))
        return kept

    def _keep_previous(self, keep: bool, upto: int) -> None:
        """Keep the journal about to be replaced (a hard link: no copy) with the last few
        generations before it, or (a purge) none of them."""
        kept = self._kept()
        room = KEPT_JOURNAL_BYTES - self.journal_size() if keep else -1
        for gen in sorted(kept, reverse=True):  # the newest kept first
            path = kept[gen][0]
            with contextlib.suppress(OSError):
                room -= path.stat().st_size
            if room < 0 or gen <= self.gen - KEPT_GENERATIONS:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        if keep and self.journal_size() <= KEPT_JOURNAL_BYTES:
            with contextlib.suppress(OSError):  # no hard links here: readers reload instead
                os.link(self.journal_path, self.path / f"{PREV_JOURNAL}.{self.gen}.{upto}")

    def read_across_rotation(self) -> list[list[Op]] | None:
        """After other processes' checkpoints rotated the journal we were reading: the ops we
        had not read of each replaced generation (kept as journal.prev.G.L) up to where the
        next snapshot took over, then the current journal's, so that memory catches up without
        a reload. None when that is not possible (a purge, more rotations than are kept, an
        older writer): reload. Call under the lock."""
        kept = self._kept()
        batches: list[list[Op]] = []
        gen, offset = self.gen, self.offset
        while gen in kept:
            path, upto = kept[gen]
            more = self._journal.batches_between(path, gen, offset, upto)
            if more is None:
                return None
            batches.extend(more)
            gen, offset = gen + 1, journal_header_len(gen + 1)
        try:
            new_gen, new, end, warnings = self.read_journal(start=offset, expect_gen=gen)
        except StateCorruptError:
            return None  # not where we stopped reading (a writer under a replaced lock file): reload
        if gen == self.gen or new_gen != gen or warnings:
            return None
        self.check_against_record(new_gen, end, exists=True)
        self.gen, self.offset = new_gen, end
        record = self._record
        if record is None or record.gen != self.gen or record.end != end:
            self._write_record(durable=0)
        return batches + new

    # --- the forget ledger: append-only, one line per dropped or forgotten id (no content) --
    def append_ledger(self, entries: list[dict[str, Any]]) -> None:
        path = self.path / FORGET_LEDGER
        data = b"".join(orjson.dumps(e) + b"\n" for e in entries)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.path)  # the first append creates the file; forget is rare enough to always pay it
        except OSError as exc:
            raise PersistenceError(f"Could not append to {path}: {exc.strerror or exc}") from exc

    def read_ledger(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` entries, oldest first, read from the end of the file: the ledger
        holds a line per item ever forgotten or pruned."""
        try:
            lines = tail_lines(self.path / FORGET_LEDGER, limit)
        except OSError:
            return []
        out: list[dict[str, Any]] = []
        for line in lines:
            with contextlib.suppress(ValueError):
                out.append(orjson.loads(line))
        return out

    def ledger_count(self) -> int:
        """Lines in the append-only ledger; only bytes appended since the last count are read
        (status asks on every call, and the ledger can hold one line per dropped item)."""
        path = self.path / FORGET_LEDGER
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

    # --- the Persistence interface's snapshot and index calls ----------------------------
    def reading(self, wait_s: float | None = None) -> AbstractContextManager[None]:
        # Exclusive, not shared: catching up cuts a dead writer's torn tail and a reload
        # re-reads the journal. A guest of a hold another thread of this process has taken.
        return self.locked(exclusive=True, guest=True, wait_s=wait_s)

    def snapshot_now(self, header: dict[str, Any], items: list[Item]) -> None:
        """All or nothing: a snapshot written whose journal rotation then fails is replaced by
        the one it replaced (kept as a hard link until then), so a refused forget leaves the
        state dir as it was. Its index file is removed then too."""
        gen, offset = self.gen, self.offset
        before = self.path / f"{SNAPSHOT}.{os.getpid()}.undo.tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(before)
            os.link(self.snapshot_path, before)
            linked = True
        except OSError:  # no snapshot yet, or a file system without hard links
            linked = False
        try:
            self.write_snapshot(snapshot_chunks(header, items))
            self.rotate(gen + 1, offset, keep_previous=header.get("checkpoint") is True)
        except BaseException:
            if self.gen == gen:  # not rotated: the journal still follows the old snapshot
                with contextlib.suppress(OSError):
                    if linked:
                        os.replace(before, self.snapshot_path)
                    else:
                        os.unlink(self.snapshot_path)
                    fsync_dir(self.path)
                ref = header.get("index_file")
                if isinstance(ref, dict) and ref.get("name") == indexfile.file_name(gen + 1):
                    indexfile.remove([self.path / indexfile.file_name(gen + 1)])
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(before)
        self.remove_temp_files()

    def write_pending_snapshot(self, header: dict[str, Any], items: list[Item]) -> None:
        self.write_snapshot_tmp(snapshot_chunks(header, items))

    def install_pending_snapshot(
        self, gen: int, offset: int, keep_index: str | None = None
    ) -> Callable[[], None] | None:
        old = self.install_snapshot_tmp()
        self.rotate(gen + 1, offset, keep_previous=True)  # a pending snapshot is a checkpoint
        self.remove_dead_temp_files()
        # The pending snapshot names at most `keep_index`, so no other index file is needed
        # any more; listed here under the lock (a later snapshot's file has a later
        # generation's name, never one of these) and deleted with the old snapshot in the
        # cleanup, off the lock.
        stale = indexfile.others(self.path, keep_index)
        if old is None and not stale:
            return None

        def cleanup() -> None:
            if old is not None:
                self.drop_old_snapshot(old)
            indexfile.remove(stale)

        return cleanup

    def discard_pending_snapshot(self) -> None:
        self.discard_snapshot_tmp()

    def save_index(self, gen: int, arrays: Mapping[str, memoryview]) -> dict[str, Any]:
        return indexfile.write(self.path, gen, arrays)

    def load_index(self, ref: Mapping[str, Any], *, verify: bool = True) -> dict[str, memoryview]:
        return indexfile.read(self.path, ref, verify=verify)

    def keep_only_index(self, name: str | None) -> None:
        indexfile.remove_others(self.path, name)

    def describe(self) -> dict[str, Any]:
        try:
            # The snapshot on disk, whoever wrote it (last_snapshot_at is this process's own).
            snapshot_at: float | None = self.snapshot_path.stat().st_mtime
        except OSError:
            snapshot_at = None
        return {
            "state_dir": str(self.path),
            "journal_bytes": self.journal_size(),
            "generation": self.gen,
            "last_snapshot_at": self.last_snapshot_at,
            "last_snapshot_seconds": self.last_snapshot_seconds,
            "snapshot_at": snapshot_at,
        }
