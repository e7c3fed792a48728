"""The doctor's checks: `check` a state dir (doctor/database.py checks a PostgreSQL database)
and say what is wrong and how to fix it, in a `DoctorReport` (doctor/report.py). `doctor/repair.py`
fixes what can be fixed; `compactor doctor` (cli/doctor.py) is the command line.

The check is read-only by construction: the state files are read once, under a shared flock on
DIR/lock when that file exists (so no writer is mid-append), and the rest happens in memory,
through the Store's own loading code (`Store.replay`, `Store.check_derived`).

Checks, in order (later ones are skipped when an earlier one makes them meaningless):
    permissions   DIR is 0700, every file in it 0600 (memory may hold secrets)
    snapshot      parses, has an items list, a supported schema version, well-formed records
    journal       header and every line parse and match their CRC-32; a torn last line (no line
                  break) is a warning (compactor cuts it on the next start), any other bad line
                  is an error naming the line
    acknowledged writes
                  the journal holds at least what the lock file records as acknowledged
    generation    the journal belongs with the snapshot (see persistence/statedir.py)
    replay        snapshot + journal rebuild in memory through the Store's own apply path
    index         the rebuilt search index holds exactly the items, with the terms a fresh
                  index gives them; the derived counters (tokens used, tiers) agree too
    lineage       children/parents exist (or are recorded as gone), links are two-way,
                  merged_into points at an item, no cycles, every archived item is reachable
                  from an active summary (a warning: query and get still find it)
    ledger        the forget ledger's lines parse; drops it records are really gone
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any, Final

import orjson

from .. import constants as C
from ..models import CONTENT_TYPES, Item
from ..persistence import indexfile
from ..persistence.codec import SCHEMA_VERSION, JournalRecord, journal_header_len, parse_line, snapshot_checksum_problem
from ..persistence.files import pid_alive, temp_file_pid
from ..persistence.statedir import (
    FORGET_LEDGER,
    JOURNAL,
    LOCK,
    SNAPSHOT,
)
from ..render import REPORT_EXAMPLES, examples
from ..store import Store
from .report import DoctorReport

# A writer holds the lock for one fsync'd append (milliseconds) or one snapshot (well under a
# second for 100k items); 5 s without it means a stuck process, and the doctor reads anyway.
DOCTOR_LOCK_WAIT_S: Final = 5.0

LOCK_WAIT_S = DOCTOR_LOCK_WAIT_S
MAX_EXAMPLES = REPORT_EXAMPLES
_TIERS = ("active", "archived")
_VIEWS = ("content", "summary")


def _bug_fix(dir_: Path) -> str:
    return (
        f"This is a compactor bug, not something you did. Keep a copy (`cp -a {dir_} {dir_}.bak`) and "
        "report it with that copy; the server skips broken links, so memory keeps working meanwhile."
    )


# --- reading (the only I/O) ------------------------------------------------------------------
@contextlib.contextmanager
def _shared_lock(dir_: Path, report: DoctorReport) -> Iterator[None]:
    """Hold LOCK_SH on an existing lock file; never create it (that would be a write)."""
    try:
        fd = os.open(dir_ / LOCK, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        locked = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                locked = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        if not locked:
            report.warn(
                "lock",
                f"another process held {dir_ / LOCK} for over {LOCK_WAIT_S:g} s; read the files without it, so "
                "the check may see a write in progress.",
                "Run the doctor again; if it keeps happening, look for a hung compactor process (`fuser "
                f"{dir_ / LOCK}`).",
            )
        try:
            yield
        finally:
            if locked:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _read(path: Path, report: DoctorReport, check: str) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        report.error(
            check,
            f"cannot read {path}: {exc.strerror or exc}.",
            f"Run the doctor as the user that runs compactor, or fix ownership: `chown $USER {path}`.",
        )
        return None


# --- permissions -----------------------------------------------------------------------------
def _check_mode(report: DoctorReport, path: Path, mode: int, wanted: int, others_can: str) -> None:
    """`wanted` is the owner's bits the state needs (0o700 for the dir, 0o600 for a file)."""
    if mode & 0o077:
        report.error(
            "permissions",
            f"{path} has mode {mode:04o}: other users can {others_can}. Memory can hold secrets.",
            f"`chmod {wanted:o} {path}`",
        )
    elif mode & wanted != wanted:
        report.error(
            "permissions",
            f"{path} has mode {mode:04o}: compactor cannot read and write it.",
            f"`chmod {wanted:o} {path}`",
        )


def _check_permissions(dir_: Path, report: DoctorReport) -> None:
    report.checks.append("permissions")
    mode = stat.S_IMODE(dir_.stat().st_mode)
    if mode & 0o077 and mode & 0o700 == 0o700 and not any(dir_.iterdir()):
        # A fresh `mkdir`: nothing in it to leak yet, and compactor sets 0700 when it first opens it.
        report.warn(
            "permissions",
            f"{dir_} has mode {mode:04o}: other users can list it. It is empty; compactor sets 0700 on first start.",
            f"nothing needed (or `chmod 700 {dir_}` now)",
        )
        return
    _check_mode(report, dir_, mode, 0o700, "list it")
    for entry in sorted(dir_.iterdir()):
        try:
            st = entry.lstat()
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            report.error(
                "permissions",
                f"{entry} is a symbolic link: compactor refuses to start, since writes through it would land "
                "outside the state dir.",
                f"Replace it with the real file, or remove it: `rm {entry}`.",
            )
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        _check_mode(report, entry, stat.S_IMODE(st.st_mode), 0o600, "read it")
        if entry.name.endswith(".tmp"):
            pid = temp_file_pid(entry.name)
            if pid is not None and pid_alive(pid):
                continue  # a snapshot being written right now by a running server
            report.warn(
                "temp files",
                f"{entry} is a temporary file left by an interrupted snapshot ({st.st_size:,} bytes).",
                f"Harmless; compactor deletes it at its next start or snapshot, or delete it now: `rm {entry}`.",
            )


_ID = re.compile(rb'"id":"([^"\\]{1,%d})"' % C.ID_MAX_CHARS)


def _ids_in(raw: bytes) -> set[str]:
    """The item ids journal bytes name (ops name theirs as "id"), read even from a damaged line."""
    return {m.group(1).decode("utf-8", "replace") for m in _ID.finditer(raw)}


# --- records -----------------------------------------------------------------------------------
_REQUIRED = tuple(f.name for f in fields(Item) if f.default is MISSING and f.default_factory is MISSING)


def _record_problem(rec: Any) -> str | None:
    """Why `rec` is not a well-formed item record, or None."""
    if not isinstance(rec, dict):
        return f"is a {type(rec).__name__}, not an object"
    missing = [k for k in _REQUIRED if k not in rec]
    if missing:
        return f"lacks {', '.join(missing)}"

    def bad(key: str, ok: bool) -> str | None:
        return None if ok else f"has a bad {key} ({rec.get(key)!r:.60})"

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def str_list(v: Any) -> bool:
        return isinstance(v, list) and all(isinstance(x, str) for x in v)

    checks = [
        bad("id", isinstance(rec["id"], str) and bool(rec["id"])),
        bad("seq", is_int(rec["seq"]) and rec["seq"] > 0),
        bad("content", isinstance(rec["content"], str)),
        bad("summary", rec["summary"] is None or isinstance(rec["summary"], str)),
        bad("tags", str_list(rec["tags"])),
        bad("content_type", rec["content_type"] in CONTENT_TYPES),
        bad("content_tokens", is_int(rec["content_tokens"]) and rec["content_tokens"] >= 0),
        bad("summary_tokens", is_int(rec["summary_tokens"]) and rec["summary_tokens"] >= 0),
        bad("tier", rec.get("tier", "active") in _TIERS),
        bad("view", rec.get("view", "content") in _VIEWS),
        bad("depth", is_int(rec.get("depth", 0)) and rec.get("depth", 0) >= 0),
        *(bad(k, str_list(rec.get(k, []))) for k in ("children", "parents", "gone_children")),
        bad("merged_into", rec.get("merged_into") is None or isinstance(rec.get("merged_into"), str)),
    ]
    return next((c for c in checks if c), None)


# --- snapshot ----------------------------------------------------------------------------------
def _check_snapshot(
    dir_: Path, raw: bytes | None, report: DoctorReport, held: Mapping[str, int] | None = None
) -> dict[str, Any] | None:
    """The parsed snapshot if it can be used; None if absent or broken (an error says which)."""
    report.checks.append("snapshot")
    path = dir_ / SNAPSHOT
    if raw is None:
        report.facts["snapshot"] = None
        return None
    aside = f"`mv {path} {path}.bad`"
    damage = snapshot_checksum_problem(raw)
    if damage:
        report.error(
            "snapshot",
            f"{path} is damaged: {damage}. compactor refuses to start rather than serve changed memory.",
            f"Restore it from a backup if you have one. Otherwise `compactor doctor --repair --state-dir {dir_}` "
            "keeps every item line that still reads as an item and the journal after it, says how many items "
            "were lost, and keeps the damaged file aside.",
        )
        return None
    try:
        snap = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        report.error(
            "snapshot",
            f"{path} is not valid JSON ({exc}).",
            f"Restore it from a backup if you have one. Otherwise move it aside ({aside}); compactor then "
            "starts from what the journal holds, which may be little if a snapshot truncated it.",
        )
        return None
    if not isinstance(snap, dict) or not isinstance(snap.get("items"), list):
        report.error(
            "snapshot",
            f"{path} is JSON but not a compactor snapshot (no items list).",
            f"Move it aside ({aside}) and check what wrote it.",
        )
        return None
    version = snap.get("schema")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        report.error(
            "snapshot",
            f"{path} has no valid schema version ({version!r}).",
            f"Restore it from a backup, or move it aside ({aside}).",
        )
        return None
    if version > SCHEMA_VERSION:
        report.error(
            "snapshot",
            f"{path} has schema version {version}; this compactor reads up to {SCHEMA_VERSION}.",
            "Upgrade compactor (`pip install -U compactor`); do not let an older version touch this dir.",
        )
        return None
    for key in ("gen", "prev_gen", "prev_offset"):
        value = snap.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            report.error(
                "snapshot",
                f"{path} has a bad {key} ({value!r}).",
                f"Restore it from a backup, or move it aside ({aside}).",
            )
            return None
    if not isinstance(snap.get("settings", {}), dict):
        report.error("snapshot", f"{path} has settings that are not an object.", f"Move it aside ({aside}).")
        return None
    bad: list[str] = []
    seen: set[str] = set()
    dupes: list[str] = []
    for i, rec in enumerate(snap["items"]):
        why = _record_problem(rec)
        if why:
            bad.append(f"items[{i}] {why}")
        elif rec["id"] in seen:
            dupes.append(rec["id"])
        else:
            seen.add(rec["id"])
    if bad:
        report.error(
            "snapshot",
            f"{path} has {len(bad)} malformed item record(s): {'; '.join(bad[:MAX_EXAMPLES])}.",
            f"Restore it from a backup, or move it aside ({aside}) and re-import an export if you have one.",
        )
        return None
    if dupes:
        report.error("snapshot", f"{path} holds these ids more than once: {examples(dupes)}.", _bug_fix(dir_))
    report.facts["snapshot"] = {
        "schema": version,
        "gen": snap.get("gen", 1),
        "items": len(snap["items"]),
        "bytes": len(raw),
    }
    _check_index_file(dir_, snap, report, held)
    return snap


def _check_index_file(dir_: Path, snap: dict[str, Any], report: DoctorReport, held: Mapping[str, int] | None) -> None:
    """The binary index file the snapshot names: present, whole and matching its checksum.
    Its arrays join the snapshot's saved index for the replay, as a start joins them."""
    if "index_file" not in snap:
        return
    ref = snap.pop("index_file")
    try:
        arrays = indexfile.read(dir_, ref if isinstance(ref, dict) else {}, held)
    except indexfile.IndexFileError as exc:
        snap.pop("index", None)
        report.error(
            "index",
            f"the search index saved beside the snapshot is unusable: {exc}.",
            f"`compactor doctor --repair --state-dir {dir_}` rebuilds it from the items and saves it; until "
            "then compactor rebuilds it at every start (a slower start). Nothing stored is lost.",
        )
        return
    if isinstance(snap.get("index"), dict):
        snap["index"] = {**snap["index"], **arrays}


# --- journal -----------------------------------------------------------------------------------
@dataclass(slots=True)
class _Journal:
    gen: int
    lines: list[tuple[int, int, list[dict[str, Any]]]]  # (line number, byte offset, ops)
    size: int
    intact: int  # bytes up to the first torn or damaged line


def _check_journal(dir_: Path, raw: bytes | None, report: DoctorReport) -> _Journal | None:
    report.checks.append("journal")
    path = dir_ / JOURNAL
    if not raw:
        report.facts["journal"] = None
        return None
    nl = raw.find(b"\n")
    try:
        if nl < 0:
            raise ValueError("no complete first line")
        header = orjson.loads(raw[:nl])
        gen = header["gen"]
        version = header.get("journal", 1)
        if not isinstance(gen, int) or isinstance(gen, bool) or gen < 1:
            raise ValueError(f"generation {gen!r}")
    except (ValueError, KeyError, TypeError) as exc:
        report.error(
            "journal",
            f'{path} has a bad header line ({exc}); it should be like {{"journal": 2, "gen": 1}}.',
            f"Keep a copy (`cp {path} {path}.bad`). If the snapshot is healthy and recent, move the journal "
            f"aside (`mv {path} {path}.bad`): compactor starts a new one, losing only writes since the snapshot.",
        )
        return None
    lines: list[tuple[int, int, list[dict[str, Any]]]] = []
    bad: list[tuple[int, str]] = []
    pos, lineno = nl + 1, 2
    intact = pos
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        if end < 0:
            report.warn(
                "journal",
                f"{path} line {lineno} is torn ({len(raw) - pos} bytes without a newline): a crash hit mid-write. "
                "That call was never acknowledged.",
                "Nothing to do: compactor cuts the torn line at its next start.",
            )
            break
        try:
            ops = parse_line(raw[pos:end], int(version))
            if not all(isinstance(o, dict) and isinstance(o.get("op"), str) for o in ops):
                raise TypeError("ops is not a list of {op: ...} objects")
        except (ValueError, KeyError, TypeError) as exc:
            bad.append((lineno, str(exc)))
        else:
            lines.append((lineno, pos, ops))
            if not bad:
                intact = end + 1
        pos, lineno = end + 1, lineno + 1
    if bad:
        first, why = bad[0]
        report.error(
            "journal",
            f"{path} line {first} is corrupt ({why})"
            + (f"; so are lines {examples([str(n) for n, _ in bad[1:]])}" if len(bad) > 1 else "")
            + ". compactor refuses to start rather than serve or drop acknowledged writes.",
            f"`compactor doctor --repair --state-dir {dir_}` keeps the intact lines before line {first}, loses "
            f"line {first} and everything after it, and moves the damaged journal aside as {JOURNAL}.damaged-<time> "
            "so nothing is deleted. Stop every compactor on this state dir first.",
        )
    report.facts["journal"] = {"gen": gen, "lines": len(lines), "bytes": len(raw)}
    return _Journal(gen=gen, lines=lines, size=len(raw), intact=intact)


def _check_record(
    dir_: Path, raw: bytes | None, snap: dict[str, Any] | None, journal: _Journal | None, report: DoctorReport
) -> None:
    """What the lock file records as acknowledged must still be in the journal."""
    report.checks.append("acknowledged writes")
    record = JournalRecord.parse(raw or b"")
    if record is None:
        return
    report.facts["record"] = {"gen": record.gen, "durable_bytes": record.durable, "bytes": record.end}
    fix = (
        "Restore the journal from a backup if you have one. Otherwise `compactor doctor --repair --state-dir "
        f"{dir_}` accepts the loss (it keeps every intact line and notes the new length) so compactor can start."
    )
    if journal is None:
        snap_gen = int(snap.get("gen", 1)) if snap else 1
        if record.gen >= snap_gen and record.durable > journal_header_len(record.gen):
            report.error(
                "acknowledged writes",
                f"{dir_ / JOURNAL} is missing, but {dir_ / LOCK} records {record.durable:,} acknowledged bytes of "
                f"journal generation {record.gen}: writes that were saved are gone.",
                fix,
            )
        return
    if record.gen == journal.gen and journal.intact < record.durable:
        report.error(
            "acknowledged writes",
            f"{dir_ / JOURNAL} holds {journal.intact:,} intact bytes but {record.durable:,} were acknowledged: "
            f"{record.durable - journal.intact:,} bytes of saved writes are gone (the file was cut or damaged).",
            fix,
        )


# --- generation --------------------------------------------------------------------------------
def _batches_to_replay(
    dir_: Path, snap: dict[str, Any] | None, journal: _Journal | None, report: DoctorReport
) -> list[tuple[int, list[dict[str, Any]]]] | None:
    """The (line, ops) compactor would replay on top of the snapshot; None if they don't belong."""
    report.checks.append("generation")
    snap_gen = int(snap.get("gen", 1)) if snap else 1
    if journal is None:
        if snap is not None:
            # compactor always leaves a journal beside its snapshot (a rotation writes the new
            # one before anything else): without one, writes since the snapshot may be gone.
            report.error(
                "generation",
                f"there is no journal ({dir_ / JOURNAL} missing or empty): it was deleted, and any writes "
                "since the last snapshot went with it.",
                f"Restore it from a backup if you have one; otherwise `compactor doctor --repair --state-dir {dir_}` "
                "starts a new journal at the snapshot's generation.",
            )
        return []
    if journal.gen == snap_gen:
        return [(n, ops) for n, _, ops in journal.lines]
    prev_gen = int(snap.get("prev_gen", 0)) if snap else 0
    prev_offset = int(snap.get("prev_offset", 0)) if snap else 0
    if snap is not None and journal.gen == prev_gen:
        starts = {off for _, off, _ in journal.lines}
        if prev_offset > journal.size or (prev_offset < journal.size and prev_offset not in starts):
            report.error(
                "generation",
                f"the snapshot (generation {snap_gen}) says it holds journal generation {prev_gen} up to byte "
                f"{prev_offset}, but that is not a line boundary of the journal ({journal.size} bytes).",
                "Restore both files from the same backup, or move the journal aside "
                f"(`mv {dir_ / JOURNAL} {dir_ / JOURNAL}.bad`) to start from the snapshot.",
            )
            return None
        report.warn(
            "generation",
            f"a journal rotation was interrupted: the journal is still generation {prev_gen} while the snapshot "
            f"is {snap_gen}.",
            "Nothing to do: compactor finishes the rotation at its next start, keeping every write.",
        )
        return [(n, ops) for n, off, ops in journal.lines if off >= prev_offset]
    if snap is None:
        what = (
            f"the journal is generation {journal.gen} but there is no snapshot: generation {journal.gen} "
            "starts only after a snapshot was written, so snapshot.json was lost."
        )
        fix = (
            f"Restore snapshot.json from a backup. Otherwise move the journal aside "
            f"(`mv {dir_ / JOURNAL} {dir_ / JOURNAL}.bad`); compactor then starts empty."
        )
    else:
        what = (
            f"the journal is generation {journal.gen} but the snapshot is generation {snap_gen} "
            f"(follows journal generation {prev_gen}): they do not belong together, e.g. one was restored "
            "from a backup."
        )
        fix = (
            "Restore the matching file from the same backup. Otherwise keep the newer one: to start from the "
            f"snapshot alone, `mv {dir_ / JOURNAL} {dir_ / JOURNAL}.bad` (the journal's writes are lost)."
        )
    report.error("generation", what, fix)
    return None


# --- replay ------------------------------------------------------------------------------------
def _replay(
    dir_: Path, snap: dict[str, Any] | None, batches: list[tuple[int, list[dict[str, Any]]]], report: DoctorReport
) -> Store | None:
    """Rebuild an in-memory Store through the store's own loading and apply path."""
    report.checks.append("replay")
    try:
        store, restored, failures = Store.replay(snap, batches)
    except Exception as exc:
        report.error("replay", f"the snapshot's items cannot be loaded ({exc!r}).", _bug_fix(dir_))
        return None
    if snap and snap.get("index") and not restored:
        report.warn(
            "index",
            "the search index saved in the snapshot is unusable or does not match its items.",
            "Nothing to do: compactor rebuilds it from the items at start (a slower start) and "
            "saves a good one with its next full snapshot.",
        )
    if failures:
        report.error(
            "replay",
            f"{len(failures)} journal op(s) cannot be applied: {'; '.join(failures[:MAX_EXAMPLES])}.",
            f"`compactor doctor --repair --state-dir {dir_}` cuts the journal before the first such line (that "
            "line and everything after it are lost) and moves the whole journal aside first. " + _bug_fix(dir_),
        )
    _item_facts(store, report)
    return store


def _item_facts(store: Store, report: DoctorReport) -> dict[str, Item]:
    """Count the loaded items into the report's facts; returns them by id."""
    items = {it.id: it for it in store.iter_items()}
    active = sum(1 for it in items.values() if it.tier == "active")
    report.facts["items"] = {
        "total": len(items),
        "active": active,
        "archived": len(items) - active,
        "summaries": sum(1 for it in items.values() if it.depth),
        "tokens_used": store.tokens_used,
        "token_budget": store.budget,
    }
    return items


# --- index -------------------------------------------------------------------------------------
def _check_index(dir_: Path, store: Store, snap: dict[str, Any] | None, report: DoctorReport) -> None:
    report.checks.append("index")
    saved = bool(snap and snap.get("index"))
    how = (
        (
            "compactor starts from the index saved in the snapshot, so a restart keeps this. "
            f"`compactor doctor --repair --state-dir {dir_}` rebuilds it from the items and saves it. "
            if saved
            else "The index is rebuilt from the items at every start, so a restart fixes what you see now. "
        )
        + "Either way the incremental index upkeep has a bug. "
        + _bug_fix(dir_)
    )
    for problem in store.check_derived():
        report.error("index", problem + ".", how)


# --- lineage -----------------------------------------------------------------------------------
def _check_lineage(dir_: Path, items: dict[str, Item], report: DoctorReport) -> None:
    report.checks.append("lineage")
    fix = _bug_fix(dir_)
    dangling_child: list[str] = []
    dangling_parent: list[str] = []
    one_way: list[str] = []
    bad_merge: list[str] = []
    shape: list[str] = []
    for it in items.values():
        gone = set(it.gone_children)
        for c in it.children:
            child = items.get(c)
            if child is None:
                if c not in gone:
                    dangling_child.append(f"{it.id}->{c}")
            elif it.id not in child.parents:
                one_way.append(f"{it.id} lists child {c}, which does not list it as parent")
        for p in it.parents:
            parent = items.get(p)
            if parent is None:
                dangling_parent.append(f"{it.id}->{p}")
            elif it.id not in parent.children:
                one_way.append(f"{it.id} lists parent {p}, which does not list it as child")
        if it.merged_into is not None and (it.merged_into not in items or it.merged_into == it.id):
            bad_merge.append(f"{it.id}->{it.merged_into}")
        if it.depth == 0 and it.children:
            shape.append(f"{it.id} is a raw item (depth 0) with children")
        if it.depth and not (it.children or it.gone_children):
            shape.append(f"{it.id} is a depth-{it.depth} summary with no children")
    if dangling_child:
        report.error(
            "lineage",
            f"{len(dangling_child)} summary->child link(s) point at no item and the child is not recorded as "
            f"forgotten: {examples(dangling_child)}.",
            fix,
        )
    if dangling_parent:
        report.error(
            "lineage",
            f"{len(dangling_parent)} item->parent link(s) point at no item: {examples(dangling_parent)}.",
            fix,
        )
    if one_way:
        report.error("lineage", f"{len(one_way)} one-way lineage link(s): {examples(one_way)}.", fix)
    if bad_merge:
        report.error(
            "lineage", f"{len(bad_merge)} merged_into link(s) point at no other item: {examples(bad_merge)}.", fix
        )
    if shape:
        report.error("lineage", f"{len(shape)} malformed node(s): {examples(shape)}.", fix)

    # Cycles and reachability: walk parents upward from every archived item.
    covered: dict[str, bool] = {}
    cyclic: list[str] = []

    def reaches_active(start: Item) -> bool:
        stack: list[str] = list(start.parents)
        seen = {start.id}
        while stack:
            pid = stack.pop()
            if pid in seen:
                if pid == start.id:
                    cyclic.append(start.id)
                continue
            seen.add(pid)
            parent = items.get(pid)
            if parent is None:
                continue
            if parent.tier == "active" or covered.get(pid):
                return True
            stack.extend(parent.parents)
        return False

    orphans: list[str] = []
    for it in sorted(items.values(), key=lambda i: i.seq):
        if it.tier != "archived":
            continue
        ok = reaches_active(it)
        covered[it.id] = ok
        if not ok:
            orphans.append(it.id)
    if cyclic:
        report.error("lineage", f"lineage cycles through {examples(sorted(set(cyclic)))}.", fix)
    if orphans:
        report.warn(
            "lineage",
            f"{len(orphans)} archived item(s) are not reachable from any active summary: {examples(orphans)}.",
            "Nothing is lost: query(include_archived=true) and get(id) still find them, and the next compaction "
            "covers them with a summary. Run `compact` to do it now.",
        )


# --- forget ledger -----------------------------------------------------------------------------
def _check_ledger(dir_: Path, raw: bytes | None, items: dict[str, Item], report: DoctorReport) -> None:
    """The append-only record of every forget and prune (and of drops by older versions)."""
    if raw is None:
        return
    report.checks.append("ledger")
    path = dir_ / FORGET_LEDGER
    lines = raw.split(b"\n")
    torn = lines.pop() if lines and lines[-1] else None  # bytes after the last newline
    if lines and not lines[-1]:
        lines.pop()
    bad: list[int] = []
    entries: list[dict[str, Any]] = []
    for n, line in enumerate(lines, 1):
        try:
            entry = orjson.loads(line)
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                raise ValueError("not an {id, reason, at} object")
        except ValueError:
            bad.append(n)
            continue
        entries.append(entry)
    if torn is not None:
        report.warn(
            "ledger",
            f"{path} ends in a torn line ({len(torn)} bytes without a newline): a crash hit mid-append.",
            "compactor skips unreadable ledger lines; that entry is lost, and the next entry appended is glued "
            f"to it. Cut the fragment while compactor is stopped: `truncate -s {len(raw) - len(torn)} {path}`.",
        )
    if bad:
        report.warn(
            "ledger",
            f"{path} has {len(bad)} unreadable line(s): {examples([str(n) for n in bad])}.",
            "compactor skips them; the entries are lost but nothing else is affected. Keep the file as it is.",
        )
    back = sorted({e["id"] for e in entries if e.get("reason") in ("max_archive_tokens", "prune")} & set(items))
    if back:
        report.warn(
            "ledger",
            f"{len(back)} item(s) recorded as pruned (or dropped past max_archive_tokens) are present: "
            f"{examples(back)}.",
            "Harmless: the ledger entry is written before the drop, so a crash in between leaves an entry "
            "for a drop that did not happen (or the id was stored again later).",
        )
    report.facts["ledger_entries"] = len(entries)


# --- entry points ------------------------------------------------------------------------------
def _no_step(text: str) -> None:
    return None


def check(state_dir: Path, step: Callable[[str], None] = _no_step) -> DoctorReport:
    """Check `state_dir` without changing anything in it. `step(text)` is told each phase of
    the work as it starts ("replaying 9,000 journal lines…"), for a caller to show."""
    dir_ = Path(state_dir)
    report = DoctorReport(state_dir=dir_)
    if not dir_.exists():
        report.error(
            "state dir",
            f"{dir_} does not exist.",
            "Check the path (the one given to `compactor --state-dir`); compactor creates it on first start.",
        )
        return report
    if not dir_.is_dir():
        report.error("state dir", f"{dir_} is not a directory.", "Pass the directory given to --state-dir.")
        return report
    try:
        _check_permissions(dir_, report)
    except OSError as exc:
        report.error("permissions", f"cannot list {dir_}: {exc.strerror or exc}.", f"`chmod 700 {dir_}`")
        return report
    step(f"reading {dir_}…")
    with contextlib.ExitStack() as held_open:
        with _shared_lock(dir_, report):
            snap_raw = _read(dir_ / SNAPSHOT, report, "snapshot")
            journal_raw = _read(dir_ / JOURNAL, report, "journal")
            lock_raw = _read(dir_ / LOCK, report, "lock")
            ledger_raw = _read(dir_ / FORGET_LEDGER, report, "ledger")
            held = held_open.enter_context(indexfile.hold(dir_))
        if snap_raw is None and not journal_raw and not report.errors:
            _check_record(dir_, lock_raw, None, None, report)
            if not report.errors:
                report.facts["empty"] = True
            return report
        # While the index files open under the lock are still open (see `indexfile.hold`).
        snap = _check_snapshot(dir_, snap_raw, report, held)
    if snap_raw is not None and snap is None:
        return report  # nothing after this means anything without the snapshot
    journal = _check_journal(dir_, journal_raw, report)
    if journal_raw and journal is None:
        return report
    _check_record(dir_, lock_raw, snap, journal, report)
    if report.errors:
        return report
    batches = _batches_to_replay(dir_, snap, journal, report)
    if batches is None:
        return report
    snap_items = len(snap["items"]) if snap and isinstance(snap.get("items"), list) else 0
    step(f"replaying {len(batches):,} journal lines over {snap_items:,} snapshot items…")
    store = _replay(dir_, snap, batches, report)
    if store is None:
        return report
    step(f"checking the index, lineage and ledger of {len(store.ids()):,} items…")
    _check_index(dir_, store, snap, report)
    items = {it.id: it for it in store.iter_items()}
    _check_lineage(dir_, items, report)
    _check_ledger(dir_, ledger_raw, items, report)
    return report
