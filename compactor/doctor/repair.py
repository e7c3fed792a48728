"""`compactor doctor --repair`: bring a damaged state dir back to a state compactor starts
from, losing no more than the damage already did. Under the exclusive lock it cuts a damaged
journal (the whole file kept aside first), accepts writes the record says were lost, restores
file modes, and rebuilds the index with a fresh snapshot. A damaged snapshot is rewritten from
its item lines that still read as items (kept aside first), and what was lost is counted in
items, not lines."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import orjson

from ..errors import StateCorruptError
from ..models import Item
from ..persistence.codec import ITEMS_LINE, SCHEMA_VERSION, snapshot_chunks
from ..persistence.statedir import JOURNAL, SNAPSHOT, StateDir
from ..store import Store
from .checks import (
    _batches_to_replay,
    _check_journal,
    _check_snapshot,
    _ids_in,
    _read,
    _record_problem,
    _replay,
    check,
)
from .report import DoctorReport


def repair(state_dir: Path) -> list[str]:
    """Bring a damaged state dir back to a state compactor starts from, losing as little as the
    damage forces and deleting nothing: a damaged journal is moved aside before it is cut.
    Works under the state dir's exclusive lock. Returns what was done, one line each."""
    dir_ = Path(state_dir)
    done: list[str] = []
    before = check(dir_)
    if any(p.check == "snapshot" for p in before.errors):
        done.append(_salvage_snapshot(dir_))
        before = check(dir_)
    if any(p.check == "permissions" and "symbolic link" in p.what for p in before.errors):
        raise StateCorruptError(
            "a symbolic link in the state dir: replace it with the real file or remove it first; --repair "
            "does not follow or delete links."
        )
    done.extend(_repair_modes(dir_))
    sd = StateDir(dir_)
    sd.open()
    try:
        with sd.locked():
            cut = _first_bad_line(dir_)
            if cut is not None:
                path = dir_ / JOURNAL
                raw = path.read_bytes()
                aside = dir_ / f"{JOURNAL}.damaged-{int(time.time())}"
                fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(raw)
                    fh.flush()
                    os.fsync(fh.fileno())
                lineno, offset = cut
                kept = raw[:offset]
                dropped = raw[offset:].count(b"\n") + (0 if raw.endswith(b"\n") else 1)
                touched = _ids_in(raw[offset:])
                tmp = path.with_name(JOURNAL + ".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(kept)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
                done.append(
                    f"cut {JOURNAL} before line {lineno} ({dropped} line(s) lost); the whole damaged journal "
                    f"is kept as {aside.name}"
                )
            if cut_short := _acknowledged_but_missing(before):
                done.append(cut_short)
            if any(p.check in ("acknowledged writes", "journal") for p in before.errors) or cut is not None:
                sd.forget_record()
                done.append("accepted the journal as it now is (the lock file's record of acknowledged bytes reset)")
    finally:
        sd.close()
    store = Store(state_dir=dir_)
    try:
        present = store.rebuild_and_list_ids()
    finally:
        store.close()
    if cut is not None:
        lost, changed = len(touched - present), len(touched & present)
        done.append(
            f"items lost with the cut lines: {lost:,} item(s) gone, {changed:,} item(s) without their later changes"
            " (counted from the ids the lost lines name, damaged ones included)"
        )
    done.append("rebuilt the search index from the items and wrote a fresh snapshot")
    return done


def _acknowledged_but_missing(report: DoctorReport) -> str | None:
    """What a journal cut short lost, in the words the repair reports: the bytes are gone, so
    the items in them cannot be counted."""
    for problem in report.errors:
        if problem.check == "acknowledged writes":
            return (
                "the journal lost acknowledged bytes before this repair (cut short or deleted): the items they "
                "held are gone from the disk and cannot be counted; " + problem.what
            )
    return None


def _salvage_snapshot(dir_: Path) -> str:
    """Rewrite a damaged snapshot from what is intact, the damaged file kept aside: the header
    (or, if it is damaged too, a bare one at the journal's generation) and every item line that
    parses as a well-formed item record. A snapshot's checksum covers the whole file, not each
    line, so this is a best effort: an item whose line still parses is kept as it reads now.
    The saved search index is left out (the repair rebuilds it). Returns what was done."""
    path = dir_ / SNAPSHOT
    sd = StateDir(dir_)
    sd.open()
    try:
        with sd.locked():
            raw = path.read_bytes()
            lines = raw.split(b"\n")
            header = _header_of(lines[0], dir_)
            records: list[dict[str, Any]] = []
            seen: set[str] = set()
            lost = 0
            for line in lines[1:]:
                if not line or line.startswith(b"]"):
                    continue
                try:
                    rec = orjson.loads(line[:-1] if line.endswith(b",") else line)
                    if _record_problem(rec) is not None or rec["id"] in seen:
                        raise ValueError("not a well-formed item")
                    Item.from_record(rec)
                except (ValueError, TypeError, KeyError):
                    lost += 1
                    continue
                seen.add(rec["id"])
                records.append(rec)
            if not records and lost:
                raise StateCorruptError(
                    f"{path} is damaged and none of its item lines can be read; restore it from a backup."
                )
            aside = dir_ / f"{SNAPSHOT}.damaged-{int(time.time())}"
            _write_new(aside, [raw])
            _write_new(path.with_name(SNAPSHOT + ".tmp"), list(snapshot_chunks(header, records)), replace=path)
    finally:
        sd.close()
    return (
        f"rewrote {SNAPSHOT} from its intact parts: {len(records):,} item(s) kept, {lost:,} item(s) lost "
        f"(a best effort: snapshot lines carry no checksum of their own); the damaged file is kept as {aside.name}"
    )


def _header_of(first: bytes, dir_: Path) -> dict[str, Any]:
    """A snapshot's header from its first line, without the saved index; a bare header at the
    journal's generation when that line is damaged."""
    try:
        if not first.endswith(ITEMS_LINE.rstrip(b"\n")):
            raise ValueError("no items")
        header = orjson.loads(first[: -len(ITEMS_LINE.rstrip(b"\n"))] + b"}")
        if not isinstance(header, dict) or not isinstance(header.get("gen"), int):
            raise ValueError("no generation")
    except ValueError:
        header = {"schema": SCHEMA_VERSION, "gen": _journal_gen(dir_), "prev_gen": 0, "prev_offset": 0}
    for key in ("index", "index_file", "dedup", "index_stale"):
        header.pop(key, None)
    return header


def _journal_gen(dir_: Path) -> int:
    try:
        with open(dir_ / JOURNAL, "rb") as fh:
            gen = orjson.loads(fh.readline()).get("gen", 1)
    except (OSError, ValueError, AttributeError):
        return 1
    return gen if isinstance(gen, int) and gen >= 1 else 1


def _write_new(path: Path, chunks: list[bytes], replace: Path | None = None) -> None:
    """Write a new 0600 file and fsync it; then rename it over `replace` when given."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        for chunk in chunks:
            fh.write(chunk)
        fh.flush()
        os.fsync(fh.fileno())
    if replace is not None:
        os.replace(path, replace)


def _repair_modes(dir_: Path) -> list[str]:
    """0700 for the dir, 0600 for its files: memory may hold secrets."""
    fixed: list[str] = []
    if stat.S_IMODE(dir_.stat().st_mode) != 0o700:
        os.chmod(dir_, 0o700)
        fixed.append(f"set {dir_} to mode 0700")
    for entry in sorted(dir_.iterdir()):
        st = entry.lstat()
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != 0o600:
            os.chmod(entry, 0o600, follow_symlinks=False)
            fixed.append(f"set {entry.name} to mode 0600")
    return fixed


def _first_bad_line(dir_: Path) -> tuple[int, int] | None:
    """(line number, byte offset) of the journal's first damaged, torn or unappliable line."""
    report = DoctorReport(state_dir=dir_)
    raw = _read(dir_ / JOURNAL, report, "journal")
    if not raw:
        return None
    journal = _check_journal(dir_, raw, report)
    if journal is None:
        return None
    if journal.intact < len(raw):
        offset = journal.intact
        return raw.count(b"\n", 0, offset) + 1, offset
    snap = _check_snapshot(dir_, _read(dir_ / SNAPSHOT, report, "snapshot"), report)
    batches = _batches_to_replay(dir_, snap, journal, report)
    store = _replay(dir_, snap, batches or [], report)
    failed = [p for p in report.errors if p.check == "replay"]
    if store is None or not failed:
        return None
    first = min(int(p.what.split("line ", 1)[1].split(" ", 1)[0]) for p in failed)
    offsets = {n: off for n, off, _ in journal.lines}
    return first, offsets[first]
