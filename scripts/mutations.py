#!/usr/bin/env python3
"""Which realistic one-line bugs does the suite catch? Each mutation is a file, one exact line
(matched without its indentation, which the new line keeps) and its replacement, plus the tests
that should catch it. In a copy of this checkout (working tree as it is, without .git and the
venv) each is applied alone, the named tests run with this interpreter, the line restored; a
run that fails is "killed", one that passes "SURVIVED". Prints a table; exits 1 if any survived
or no longer applies (a refactor moved its line: retarget `file` and `old`).

    python scripts/mutations.py                 # all of them
    python scripts/mutations.py fsync rotation  # those whose name contains a word given
    python scripts/mutations.py --list

Issue 44 started it: deleting the fsync after a journal append survived every test, because a
killed process's writes outlive it in the page cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 600  # per mutation; a focused subset runs in well under a minute
SKIP = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", "*.egg-info"
)


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


FSYNC_TESTS = ("tests/persistence/test_fsync.py", "tests/system/test_fsync_stdio.py")

MUTATIONS = [
    # --- durability (issue 44) --------------------------------------------------------------
    Mutation(
        "fsync after a journal append deleted",
        "compactor/persistence/statedir.py",
        "if sync:",
        "if False:",
        (*FSYNC_TESTS, "-m", "not slow"),
    ),
    Mutation(
        "directory sync after a journal rotation deleted",
        "compactor/persistence/statedir.py",
        "self._write_journal(new_gen, tail)",
        "tmp = self.journal_path.with_name(JOURNAL + '.tmp'); write_fsynced(tmp, [_journal_header(new_gen), tail]); "
        "os.replace(tmp, self.journal_path)",
        (*FSYNC_TESTS, "-m", "not slow"),
    ),
    Mutation(
        "directory sync after the lock file is made deleted",
        "compactor/persistence/statedir.py",
        "fsync_dir(self.path)  # the lock file (and the dir) may be new: their names must last",
        "pass",
        ("tests/persistence/test_fsync.py",),
    ),
    Mutation(
        "directory sync after the forget ledger's append deleted",
        "compactor/persistence/statedir.py",
        "fsync_dir(self.path)  # the first append creates the file; forget is rare enough to always pay it",
        "pass",
        ("tests/persistence/test_fsync.py",),
    ),
    Mutation(
        "every journal append unsynced (sync=False for changes too)",
        "compactor/store/journaled.py",
        "sd.append(ops, sync=sync)",
        "sd.append(ops, sync=False)",
        (*FSYNC_TESTS, "-m", "not slow"),
    ),
    Mutation(
        "an import chunk unsynced",
        "compactor/store/journaled.py",
        "sd.append(ops, sync=sync)",
        "sd.append(ops, sync=sync and len(ops) < 500)",
        ("tests/system/test_fsync_stdio.py", "-k", "import"),
    ),
    Mutation(
        "synchronous_commit check removed",
        "compactor/persistence/postgres.py",
        "warning = sync_warning(conn, self.where)",
        "warning = None",
        ("tests/system/test_pg_sync.py",),
    ),
    # --- the ten of issue 44 ------------------------------------------------------------------
    Mutation(
        "credential tags kept",
        "compactor/store/inputs.py",
        "if not found:",
        "if True:",
        ("tests/content/test_redaction_wiring.py", "tests/mcp/test_redaction_protocol.py"),
    ),
    Mutation(
        "a scope check reversed",
        "compactor/store/paging.py",
        "if scope == ALL_SCOPES:",
        "if scope != ALL_SCOPES:",
        ("tests/store/test_scopes.py",),
    ),
    Mutation(
        "an off-by-one in the query limit",
        "compactor/store/facade.py",
        "if not 1 <= limit <= C.QUERY_LIMIT_MAX:",
        "if not 1 <= limit < C.QUERY_LIMIT_MAX:",
        ("tests/store/test_limits.py", "tests/store/test_bounds.py"),
    ),
    Mutation(
        "pinned items evicted",
        "compactor/store/compact.py",
        "if not s.items[s.by_seq[q]].pinned and s.by_seq[q] not in protected and not s.items[s.by_seq[q]].depth",
        "if s.by_seq[q] not in protected and not s.items[s.by_seq[q]].depth",
        ("tests/store/test_limits.py", "tests/store/test_pinned_tokens.py", "tests/store/test_budget.py"),
    ),
    Mutation(
        "a journal line's checksum unchecked",
        "compactor/persistence/statedir.py",
        "if zlib.crc32(payload) != recorded:",
        "if False:",
        ("tests/system/test_durability.py", "tests/persistence/test_persist.py", "-m", "not slow"),
    ),
    Mutation(
        "a list page overlapping the next",
        "compactor/store/paging.py",
        "hi = total - offset",
        "hi = total - offset + 1",
        ("tests/store/test_store.py", "tests/store/test_get_parts.py", "-m", "not slow"),
    ),
    Mutation(
        "a child dropped from a summary",
        "compactor/store/dag.py",
        "children=tuple(c.id for c in children),",
        "children=tuple(c.id for c in children[1:]),",
        ("tests/summaries/test_dag.py", "tests/summaries/test_compaction.py", "-m", "not slow"),
    ),
    Mutation(
        "the archive rank factor inverted",
        "compactor/search/scoring.py",
        "score *= rank.archived_factor",
        "score /= rank.archived_factor",
        ("tests/search/test_archive_search.py", "tests/search/test_scoring.py"),
    ),
    Mutation(
        "forget rewriting only the nearest summary",
        "compactor/store/dag.py",
        "nxt.extend(p for p in parent.parents if p in self._s.items)",
        "pass",
        ("tests/summaries/test_dag.py", "tests/summaries/test_dag_scenario.py", "-m", "not slow"),
    ),
]


def apply(path: Path, old: str, new: str) -> str | None:
    """Replace the one line that is `old` (indentation aside) by `new`; the original text, or
    None when `old` is not exactly one line of the file."""
    text = path.read_text()
    lines = text.split("\n")
    hits = [k for k, line in enumerate(lines) if line.strip() == old]
    if len(hits) != 1:
        return None
    k = hits[0]
    indent = lines[k][: len(lines[k]) - len(lines[k].lstrip())]
    lines[k] = indent + new
    path.write_text("\n".join(lines))
    return text


def run(copy: Path, m: Mutation) -> tuple[str, float, str]:
    target = copy / m.file
    original = apply(target, m.old, m.new)
    if original is None:
        return "NOT APPLIED", 0.0, f"{m.file}: the old line is not there exactly once"
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *m.tests],
            cwd=copy,
            env={**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        code, out = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired:
        code, out = -1, "timed out"
    finally:
        target.write_text(original)
    seconds = time.monotonic() - started
    failed = [line.split(" - ")[0].removeprefix("FAILED ") for line in out.splitlines() if line.startswith("FAILED")]
    if code == 0:
        return "SURVIVED", seconds, ""
    if code == 1:
        names = [f.split("::", 1)[-1] for f in failed]
        return "killed", seconds, f"{len(failed)}: " + ", ".join(names)
    return "ERROR", seconds, (out.strip().splitlines() or ["?"])[-1]  # collection error, timeout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("words", nargs="*", help="run only mutations whose name contains one of these")
    parser.add_argument("--list", action="store_true", help="list the mutations and their tests")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.words or any(w.lower() in m.name.lower() for w in args.words)]
    if args.list:
        for m in chosen:
            print(f"{m.name}\n    {m.file}: {m.old!r} -> {m.new!r}\n    tests: {' '.join(m.tests)}")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="compactor-mutations-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=SKIP, symlinks=True)
        for m in chosen:
            verdict, seconds, detail = run(copy, m)
            rows.append((m.name, verdict, seconds, detail))
            print(f"{verdict:<11} {seconds:6.1f}s  {m.name}", file=sys.stderr, flush=True)
    width = max(len(r[0]) for r in rows)
    print(f"\n{'mutation':<{width}}  {'result':<11} {'time':>6}  failing tests: how many, which")
    for name, verdict, seconds, detail in rows:
        print(f"{name:<{width}}  {verdict:<11} {seconds:5.0f}s  {detail[:400]}")
    killed = sum(r[1] == "killed" for r in rows)
    print(f"\n{killed} of {len(rows)} killed")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
