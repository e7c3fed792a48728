"""The doctor for a PostgreSQL database: `check_database` says what is wrong as `check` does
for a state dir, and `repair_database` (`compactor doctor --repair --database URL`) fixes what
can be fixed, deleting nothing:

    schema   the tables are compactor's, of a version this compactor reads (pg_sql.inspect):
             a table by one of its names that is someone else's, a newer version, or tables
             whose compactor_schema went missing (the repair records their version again)
    journal  every entry after the snapshot reads as ops and applies, through the Store's own
             replay; the repair moves those that do not to compactor_journal_aside (as a state
             dir's repair keeps journal.jsonl.damaged-*) and says how many items they touched
    index, lineage
             as for a state dir, on memory as a server loads it

The check writes nothing: it reads the tables through a backend that does not upgrade them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CompactorError, PersistenceError, StateCorruptError
from ..models import Op
from ..persistence.pg_rows import ASIDE_TABLE
from ..persistence.pg_sql import (
    PG_SCHEMA_VERSION,
    display_url,
    import_psycopg,
    parse_entry,
    read_schema,
    record_schema_version,
    refusal,
    schema_problem,
)
from ..persistence.postgres import PgBackend
from ..render import examples
from ..store import Store
from .checks import _check_index, _check_lineage, _ids_in, _item_facts
from .report import DoctorReport


def _no_step(text: str) -> None:
    return None


def _repair_fix(bad: dict[int, str]) -> str:
    them = "it" if len(bad) == 1 else "them"
    fix = (
        f"`compactor doctor --repair --database URL` sets {them} aside (moved to {ASIDE_TABLE}, not deleted) and "
        f"says which items that touches; every server, running or not, then reloads without {them}."
    )
    if any(why.startswith(_NOT_APPLIED) for why in bad.values()):
        fix = (
            "If a newer compactor also serves this database, upgrade this one instead: it may not know those ops. "
            + fix
        )
    return fix


_NOT_APPLIED = "cannot be applied"


def replay_entries(snapshot: dict[str, Any] | None, rows: list[tuple[int, bytes]]) -> tuple[Store, dict[int, str]]:
    """Memory as the snapshot and the journal entries that can be used rebuild it, through the
    Store's own replay, and the entries that cannot (seq -> why): those that do not read as
    ops, and those with an op that does not apply. An entry is a call: one bad op makes the
    whole entry unusable, and leaving it out may make a later one fail too, so the replay runs
    again until every entry left applies."""
    bad: dict[int, str] = {}
    batches: list[tuple[int, list[Op]]] = []
    for seq, raw in rows:
        ops, why = parse_entry(raw)
        if why is not None:
            bad[seq] = f"is damaged ({why})"
        else:
            batches.append((seq, ops))
    while True:
        store, _, failures = Store.replay(snapshot, batches)
        failed: dict[int, str] = {}
        for failure in failures:  # "line SEQ op K ('kind'): error"
            seq = int(failure.split(" ", 2)[1])
            failed.setdefault(seq, f"{_NOT_APPLIED}: {failure.split(' ', 2)[2]}")
        if not failed:
            return store, bad
        bad.update(failed)
        batches = [(seq, ops) for seq, ops in batches if seq not in failed]


def _schema(url: str, report: DoctorReport) -> int | None:
    """The checked schema version, or None when the report says why there is nothing more to check."""
    where = str(report.state_dir)
    report.checks.append("database")
    try:
        schema = read_schema(url)
    except PersistenceError as exc:
        report.error("database", str(exc), "Check the URL, that PostgreSQL is up, and the user's rights.")
        return None
    if schema.empty:
        report.facts["empty"] = True
        return None
    report.checks.append("schema")
    problem = schema_problem(schema, where)
    if problem is not None:
        what, fix = problem
        report.error("schema", what + ".", fix[:1].upper() + fix[1:] + ".")
        return None
    assert schema.version is not None
    report.facts["schema"] = schema.version
    if schema.version < PG_SCHEMA_VERSION:
        report.warn(
            "schema",
            f"compactor schema version {schema.version}; this compactor's is {PG_SCHEMA_VERSION}.",
            "Nothing to do: the next server start upgrades it (docs/team.md, 'Upgrading').",
        )
    return schema.version


def check_database(url: str, step: Callable[[str], None] = _no_step) -> DoctorReport:
    """Check a PostgreSQL database the way `check` checks a state dir: the schema, every
    journal entry and the snapshot (its checksums included), then the index and the summary
    DAG. Writes nothing, and creates nothing in a database compactor never used."""
    where = display_url(url)
    report = DoctorReport(state_dir=where)
    step(f"reading {where}…")
    version = _schema(url, report)
    if version is None:
        return report
    report.checks.append("journal")
    backend = PgBackend(url, upgrade=False)
    try:
        backend.open()
        gen, snapshot, rows = backend.read_raw()
        described = backend.describe()
        if version >= 2:
            report.facts["journal_aside"] = backend.aside_count()
    except CompactorError as exc:
        report.error(
            "snapshot",
            str(exc),
            "Restore the database from a backup (pg_dump/pg_restore or your provider's point-in-time "
            "recovery); compactor never overwrites a row it cannot read.",
        )
        return report
    finally:
        backend.close()
    report.facts["journal"] = {
        "gen": gen,
        "lines": described.get("journal_entries", 0),
        "bytes": described.get("journal_bytes", 0),
    }
    step(f"replaying {len(rows):,} journal entries…")
    store, bad = replay_entries(snapshot, rows)
    if bad:
        shown = [f"entry {seq} {why}" for seq, why in sorted(bad.items())]
        report.error(
            "journal",
            f"{len(bad)} journal entr{'y' if len(bad) == 1 else 'ies'} cannot be used, and a server refuses to "
            f"start on {'it' if len(bad) == 1 else 'them'}: {examples(shown)}.",
            _repair_fix(bad),
        )
    elif version == PG_SCHEMA_VERSION:
        # As a server loads it, the index saved with the snapshot included (a replay rebuilds it).
        report.checks.append("load")
        store.close()
        try:
            store = Store(database=url)
        except CompactorError as exc:
            report.error(
                "load", str(exc), "Restore the database from a backup; compactor never overwrites a row it cannot read."
            )
            return report
    try:
        step(f"checking the index and lineage of {len(store.ids()):,} items…")
        items = _item_facts(store, report)
        _check_index(Path(where), store, None, report)
        _check_lineage(Path(where), items, report)
    finally:
        store.close()
    return report


def repair_database(url: str) -> list[str]:
    """Bring a database back to one compactor serves, deleting nothing: record a schema
    version that went missing, and move the journal entries that cannot be used to
    compactor_journal_aside (under the writers' lock, starting a new generation, so every
    server reloads without them), then rebuild the index with a fresh snapshot. Returns what
    was done, one line each; raises CompactorError for what it cannot repair."""
    where = display_url(url)
    done: list[str] = []
    driver = import_psycopg()
    with driver.connect(url, autocommit=True) as conn:
        version = record_schema_version(conn, where)
    if version is not None:
        done.append(f"recorded compactor schema version {version} in compactor_schema (the table was missing)")
    problem = schema_problem(read_schema(url), where)
    if problem is not None:
        raise StateCorruptError(refusal(problem))
    backend = PgBackend.connect(url)  # upgrades an older schema, as a server start does
    try:
        with backend.locked():
            _, snapshot, rows = backend.read_raw()
            _, bad = replay_entries(snapshot, rows)
            touched = set().union(*(_ids_in(raw) for seq, raw in rows if seq in bad))
            moved = backend.set_aside(bad) if bad else 0
    finally:
        backend.close()
    if not moved:
        return done
    store = Store(database=url)
    try:
        present = store.rebuild_and_list_ids()
    finally:
        store.close()
    lost, changed = len(touched - present), len(touched & present)
    done.append(
        f"set aside {moved} journal entr{'y' if moved == 1 else 'ies'} that could not be used "
        f"({', '.join(str(seq) for seq in sorted(bad))}) in {ASIDE_TABLE}; every server reloads without "
        f"{'it' if moved == 1 else 'them'}"
    )
    done.append(
        f"items touched by the entries set aside: {lost:,} item(s) gone, {changed:,} item(s) without those "
        "changes (counted from the ids the entries name, damaged ones included)"
    )
    done.append("rebuilt the search index from the items and wrote a fresh snapshot")
    return done
