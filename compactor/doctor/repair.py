"""`compactor doctor --repair`: bring a damaged state dir back to a state compactor starts
from, losing no more than the damage already did. Under the exclusive lock it cuts a damaged
journal (the whole file kept aside first), accepts writes the record says were lost, restores
file modes, and rebuilds the index with a fresh snapshot. A damaged snapshot it cannot cut
back: the report says to restore it from a backup."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from ..errors import StateCorruptError
from ..persistence.statedir import JOURNAL, SNAPSHOT, StateDir
from ..store import Store
from .checks import _batches_to_replay, _check_journal, _check_snapshot, _read, _replay, check
from .report import DoctorReport


def repair(state_dir: Path) -> list[str]:
    """Bring a damaged state dir back to a state compactor starts from, losing as little as the
    damage forces and deleting nothing: a damaged journal is moved aside before it is cut.
    Works under the state dir's exclusive lock. Returns what was done, one line each."""
    dir_ = Path(state_dir)
    done: list[str] = []
    before = check(dir_)
    if any(p.check == "snapshot" for p in before.errors):
        raise StateCorruptError(
            f"{dir_ / SNAPSHOT} is damaged, and a snapshot cannot be cut back to an intact part. Restore it from "
            f"a backup, or move it aside (`mv {dir_ / SNAPSHOT} {dir_ / SNAPSHOT}.bad`) to start from the journal."
        )
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
            if any(p.check in ("acknowledged writes", "journal") for p in before.errors) or cut is not None:
                sd.forget_record()
                done.append("accepted the journal as it now is (the lock file's record of acknowledged bytes reset)")
    finally:
        sd.close()
    store = Store(state_dir=dir_)
    try:
        store.rebuild_and_snapshot()
    finally:
        store.close()
    done.append("rebuilt the search index from the items and wrote a fresh snapshot")
    return done


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
