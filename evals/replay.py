"""Replay real agent trajectories into a memory server over stdio and measure its search (ISSUE 7).

For each trajectory a fresh server is started (`--server CMD --budget N`, real stdio, legacy
initialize). Its events are stored in order: content verbatim, summary = first line (at most
SUMMARY_MAX_CHARS), tags = [kind], importance by kind (IMPORTANCE_BY_KIND). At each revisit of
evals/data/revisits.jsonl, before any event of that turn is stored, the harness calls
`query(query=<thought + command>, limit=10)` and records the rank of the first relevant earlier
event. After the run it calls `get(id)` for every relevant earlier event and checks that the
content comes back verbatim.

Two runs: a generous budget (no compaction) and a tight one (4,000 tokens, compaction forced).
Metrics per revisit type and overall: recall@5, MRR over the top 10, and the share of relevant
earlier events that `get` returns verbatim. Writes evals/results/replay.json.

`--fast` is the same evaluation in process, for iterating on search: a Store per trajectory (no
server, no stdio), the same stores, revisits, queries and scoring, on the tuning half unless
`--half` says otherwise; it prints one line per derivation and budget and writes nothing. It is
not the reported measurement. `--set NAME=VALUE` (with `--fast`) overrides a knob the
Store is tuned with (compactor.store.tuning) for the run (a lever tried on the tuning half before it is written down).

    python -m evals.replay [--server "CMD"] [--budget N] [--tight-budget N] [--jobs N] [--limit-trajs N]
    python -m evals.replay --fast [--half tuning|test|all] [--derivation first|second|both]
                           [--budgets generous|tight|both] [--limit-trajs N] [--set VIEW_PATH_LIFT=1.5]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import resource
import shlex
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):  # run as `python evals/replay.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from compactor.store.tuning import Tuning, parse_overrides
from evals.halves import half_of
from evals.lookups import ASK_SHAPES, asked_as, bare_query, strict_relevant
from evals.revisits import (
    COMMAND_KINDS,
    REPO_ROOT,
    REVISIT_TYPES,
    REVISITS_FILE,
    Event,
    Revisit,
    default_corpus,
    group_trajectories,
    load_events,
    load_revisits,
)
from evals.revisits2 import derive2_all

log = logging.getLogger("evals.replay")

# ---- evaluation constants (the lead may move these to compactor/constants.py) ----
# Importance by event kind: what an agent would store as worth keeping. Errors cost the most to
# rediscover; edits and written code are the agent's own work; commands are cheap to re-run; raw
# output and thoughts are the bulk.
IMPORTANCE_BY_KIND: Mapping[str, int] = {
    "error": 8,
    "edit": 6,
    "code": 6,
    "action": 5,
    "observation": 4,
    "thought": 3,
}
DEFAULT_IMPORTANCE = 5
SUMMARY_MAX_CHARS = 200  # a first line can be a 2,000-char one-liner; a summary is a headline
GENEROUS_BUDGET = 10_000_000  # far above the largest trajectory (~1M tokens): no compaction
TIGHT_BUDGET = 4_000  # ISSUE 7: "after a tight budget (4,000 tokens) has forced compaction"
QUERY_LIMIT = 10  # MRR is over the top 10
RECALL_AT = 5
CALL_TIMEOUT_S = 120.0
# Importing the MCP SDK costs a server ~1 s of CPU: 200 fresh servers alone would take most of the
# 3-minute allowance on 2 cores. A server replays this many trajectories, emptied in between with
# `forget` (and checked empty with `status`); --trajs-per-server 1 gives every trajectory its own.
TRAJS_PER_SERVER = 10
RESET_PAGE = 100  # list page size while emptying a server
RESET_ROUNDS = 50  # pages of server-made items to forget before calling the server stuck
# -------------------------------------------------------------------------------------

RESULTS_DIR = REPO_ROOT / "evals" / "results"


@dataclass(frozen=True)
class QueryOutcome:
    traj: str
    seq: int
    type: str
    rank: int | None  # 1-based rank of the first relevant earlier event in the top QUERY_LIMIT
    returned: tuple[int | None, ...] = ()  # seqs of the results, None for items the server made


@dataclass(frozen=True)
class VerbatimCheck:
    traj: str
    seq: int
    ok: bool
    tier: str
    view: str
    detail: str  # empty when ok


@dataclass
class TrajRun:
    traj: str
    budget: int
    outcomes: list[QueryOutcome] = field(default_factory=list)
    checks: list[VerbatimCheck] = field(default_factory=list)
    stores: int = 0
    queries: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class TrajInput:
    traj: str
    events: tuple[Event, ...]
    revisits: tuple[Revisit, ...]


@dataclass(frozen=True)
class Task:
    """Trajectories replayed one after another by one server process at one budget."""

    trajs: tuple[TrajInput, ...]
    argv: tuple[str, ...]
    cwd: str | None
    budget: int
    errlog: str


# ---- metric math ----


def rank_of_ids(
    ids: Sequence[str], seqs_of: Mapping[str, Sequence[int]], relevant: Iterable[int], limit: int = QUERY_LIMIT
) -> int | None:
    """1-based rank of the first returned id that stands for a relevant event, within the first
    `limit` results. An id stands for every event stored as it (a store of the same content,
    scope and tags within a minute returns the first one's id)."""
    wanted = set(relevant)
    for rank, item_id in enumerate(ids[:limit], start=1):
        if any(seq in wanted for seq in seqs_of.get(item_id, ())):
            return rank
    return None


def recall_at(ranks: Sequence[int | None], k: int = RECALL_AT) -> float:
    """Share of queries with a relevant earlier event in the top k (0.0 for no queries)."""
    if not ranks:
        return 0.0
    return sum(1 for r in ranks if r is not None and r <= k) / len(ranks)


def mean_reciprocal_rank(ranks: Sequence[int | None], limit: int = QUERY_LIMIT) -> float:
    """Mean of 1/rank, counting a miss or a rank beyond `limit` as 0."""
    if not ranks:
        return 0.0
    return sum(1.0 / r for r in ranks if r is not None and r <= limit) / len(ranks)


def summarize(outcomes: Sequence[QueryOutcome], checks: Sequence[VerbatimCheck]) -> dict[str, Any]:
    by_type: dict[str, list[int | None]] = {t: [] for t in REVISIT_TYPES}
    for o in outcomes:
        by_type.setdefault(o.type, []).append(o.rank)
    rows: dict[str, Any] = {}
    for name, ranks in [*by_type.items(), ("overall", [o.rank for o in outcomes])]:
        rows[name] = {"n": len(ranks), "recall@5": recall_at(ranks), "mrr": mean_reciprocal_rank(ranks)}
    verbatim = sum(1 for c in checks if c.ok)
    tiers: dict[str, int] = defaultdict(int)
    for c in checks:
        tiers[f"{c.tier}/{c.view}"] += 1
    return {
        "metrics": rows,
        "verbatim": {
            "checked": len(checks),
            "verbatim": verbatim,
            "share": verbatim / len(checks) if checks else 0.0,
            "by_tier_view": dict(sorted(tiers.items())),
            "mismatches": [asdict(c) for c in checks if not c.ok][:5],
        },
    }


# ---- one trajectory against one server ----


def _summary(content: str) -> str:
    first = content.strip().split("\n", 1)[0].strip()
    return first[:SUMMARY_MAX_CHARS]


def _store_arguments(event: Event) -> dict[str, Any]:
    return {
        "content": event.content,
        "summary": _summary(event.content),
        "tags": [event.kind],
        "importance": IMPORTANCE_BY_KIND.get(event.kind, DEFAULT_IMPORTANCE),
    }


def _as_kept(content: str, reply: dict[str, Any]) -> str:
    """What `get` should return of `content`: the content itself, or, where the store's reply
    says it replaced credentials (compactor's `redacted`), the content with them replaced, which
    is what compactor keeps on purpose (evals/redaction.py reviews each such hit)."""
    if not reply.get("redacted"):
        return content
    from compactor.content.redact import redact

    return redact(content)[0]


def _describe_mismatch(stored: str, got: str) -> str:
    pairs = enumerate(zip(stored, got, strict=False))
    at = next((i for i, (a, b) in pairs if a != b), min(len(stored), len(got)))
    before, after = stored[at : at + 40], got[at : at + 40]
    return f"len {len(stored)} -> {len(got)}; first difference at {at}: {before!r} -> {after!r}"


class _Session:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.stored_ids: list[str] = []

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.call_tool(tool, arguments, read_timeout_seconds=CALL_TIMEOUT_S)
        if result.is_error:
            text = " ".join(getattr(block, "text", "") for block in result.content)
            raise RuntimeError(f"{tool} failed: {text[:300]}")
        structured = result.structured_content
        if not isinstance(structured, dict):
            raise TypeError(f"{tool} returned no structured content")
        return structured

    async def reset(self) -> None:
        """Empty the server for the next trajectory, and prove it is empty.

        Besides what the harness stored, the server may hold items it made itself (summaries
        written by compaction): `list(tier=all)` finds those.
        """
        for item_id in self.stored_ids:
            await self.call("forget", {"id": item_id})
        self.stored_ids.clear()
        for _ in range(RESET_ROUNDS):
            listed = await self.call("list", {"tier": "all", "limit": RESET_PAGE})
            ids = [str(item["id"]) for item in listed.get("items", [])]
            if not ids:
                break
            for item_id in ids:
                await self.call("forget", {"id": item_id})
        st = await self.call("status", {})
        left = {k: st.get(k) for k in ("active_items", "archived_items", "tokens_used")}
        if any(v != 0 for v in left.values()):
            raise RuntimeError(f"server not empty after forgetting every item: {left}")


@asynccontextmanager
async def _connect(task: Task, errlog: TextIO) -> AsyncIterator[_Session]:
    params = StdioServerParameters(
        command=task.argv[0],
        args=[*task.argv[1:], "--budget", str(task.budget)],
        env=dict(os.environ),
        cwd=task.cwd,
    )
    async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
        yield _Session(client)


def _queries_by_step(revisits: Iterable[Revisit]) -> dict[int, dict[str, list[Revisit]]]:
    """Revisits of a turn share one query: the turn's thought and command."""
    grouped: dict[int, dict[str, list[Revisit]]] = defaultdict(lambda: defaultdict(list))
    for r in revisits:
        grouped[r.step][r.query].append(r)
    return grouped


async def replay_one(session: _Session, inp: TrajInput, budget: int) -> TrajRun:
    """Store one trajectory's events in order, querying at each revisit; then check `get`."""
    if session.stored_ids:
        await session.reset()
    run = TrajRun(traj=inp.traj, budget=budget)
    started = time.perf_counter()
    pending = _queries_by_step(inp.revisits)
    id_of: dict[int, str] = {}
    seqs_of: dict[str, list[int]] = {}  # an id answers for each identical event stored as it
    stored: dict[int, str] = {}
    for event in inp.events:
        for query, revisits in pending.pop(event.step, {}).items():
            reply = await session.call("query", {"query": query, "limit": QUERY_LIMIT})
            run.queries += 1
            ids = [str(item.get("id")) for item in reply.get("items", [])]
            returned = [seqs_of[i][0] if i in seqs_of else None for i in ids]
            for r in revisits:
                rank = rank_of_ids(ids, seqs_of, r.relevant)
                run.outcomes.append(QueryOutcome(r.traj, r.seq, r.type, rank, tuple(returned)))
        try:
            reply = await session.call("store", _store_arguments(event))
        except RuntimeError as exc:
            raise RuntimeError(f"{exc} (storing seq {event.seq}, a {event.kind})") from exc
        run.stores += 1
        item_id = str(reply["id"])
        if item_id not in seqs_of:  # the same content again within a minute is the same item
            session.stored_ids.append(item_id)
        seqs_of.setdefault(item_id, []).append(event.seq)
        id_of[event.seq] = item_id
        stored[event.seq] = _as_kept(event.content, reply)
    for seq in sorted({s for r in inp.revisits for s in r.relevant}):
        got = await session.call("get", {"id": id_of[seq]})
        content = str(got.get("content"))
        ok = content == stored[seq]
        detail = "" if ok else _describe_mismatch(stored[seq], content)
        run.checks.append(VerbatimCheck(inp.traj, seq, ok, str(got.get("tier")), str(got.get("view")), detail))
    run.seconds = time.perf_counter() - started
    return run


def _describe_error(exc: BaseException) -> str:
    """The innermost errors, not "unhandled errors in a TaskGroup"."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe_error(e) for e in exc.exceptions)[:500]
    return f"{type(exc).__name__}: {exc}"[:500]


async def replay_task(task: Task) -> list[TrajRun]:
    """Replay the task's trajectories; after a failure the rest get a fresh server."""
    runs: list[TrajRun] = []
    remaining = list(task.trajs)
    with open(task.errlog, "a", encoding="utf-8") as errlog:
        while remaining:
            try:
                async with _connect(task, errlog) as session:
                    while remaining:
                        runs.append(await replay_one(session, remaining[0], task.budget))
                        remaining.pop(0)
            except Exception as exc:  # one broken trajectory must not hide the others' numbers
                failed = remaining.pop(0)
                log.exception("%s (budget %d) failed", failed.traj, task.budget)
                runs.append(TrajRun(failed.traj, task.budget, error=_describe_error(exc)))
    return runs


def run_task(task: Task) -> list[TrajRun]:
    """Process-pool entry point."""
    return anyio.run(replay_task, task)


# ---- the whole evaluation ----


def build_tasks(
    events: Sequence[Event],
    *,
    revisits: Sequence[Revisit],
    argv: Sequence[str],
    cwd: str | None,
    budgets: Sequence[int],
    errlog: Path,
    limit_trajs: int | None,
    trajs_per_server: int,
) -> list[Task]:
    by_traj: dict[str, list[Revisit]] = defaultdict(list)
    for r in revisits:
        by_traj[r.traj].append(r)
    inputs = [
        TrajInput(traj, tuple(evs), tuple(by_traj.get(traj, ())))
        for traj, evs in sorted(group_trajectories(events).items())[:limit_trajs]
    ]
    # Deal the trajectories longest first, round robin: the chunks come out of similar length.
    inputs.sort(key=lambda t: -sum(len(e.content) for e in t.events))
    n_chunks = max(1, -(-len(inputs) // max(1, trajs_per_server)))
    chunks = [tuple(inputs[i::n_chunks]) for i in range(n_chunks)]
    return [Task(chunk, tuple(argv), cwd, budget, str(errlog)) for budget in budgets for chunk in chunks if chunk]


def run_tasks(tasks: Sequence[Task], jobs: int) -> Iterator[TrajRun]:
    if jobs <= 1:
        for task in tasks:
            yield from run_task(task)
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        for runs in pool.map(run_task, tasks):
            yield from runs


def format_table(title: str, summary: Mapping[str, Any]) -> str:
    lines = [title, f"  {'revisit type':<15} {'n':>5} {'recall@5':>9} {'MRR':>6}"]
    for name, row in summary["metrics"].items():
        lines.append(f"  {name:<15} {row['n']:>5} {row['recall@5']:>9.3f} {row['mrr']:>6.3f}")
    v = summary["verbatim"]
    share = f"{v['verbatim']}/{v['checked']} = {v['share']:.1%}"
    lines.append(f"  get(id) verbatim: {share}  tier/view: {v['by_tier_view']}")
    lines.extend(f"    mismatch {m['traj']}#{m['seq']}: {m['detail']}" for m in v["mismatches"][:2])
    return "\n".join(lines)


def _cpu_seconds() -> float:
    """CPU time of this process and every finished descendant (workers count their servers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# ---- halves, derivations and runs (ISSUE 15.1) ----

# `--fast`'s row of file re-reads scored against the views that show what the query asks for.
STRICT = "file_reread strict"
DERIVATIONS = ("first", "second")  # evals/revisits.py, evals/revisits2.py
BUDGET_NAMES = ("generous", "tight")
QUICK_TRAJS = 8  # --quick: the first trajectories by name, one run


def derive_revisits(name: str, events: Sequence[Event], revisits_file: Path) -> list[Revisit]:
    if name == "first":
        return load_revisits(revisits_file)
    if name == "second":
        return derive2_all(events)
    raise ValueError(f"unknown derivation {name!r}")


def split_metrics(outcomes: Sequence[QueryOutcome]) -> dict[str, dict[str, Any]]:
    """recall@5 / MRR per type and overall, for the tuning half, the test half and all."""
    by_half: dict[str, list[QueryOutcome]] = {"tuning": [], "test": [], "all": list(outcomes)}
    for o in outcomes:
        by_half[half_of(o.traj)].append(o)
    return {h: summarize(os_, [])["metrics"] for h, os_ in by_half.items()}


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)} if values else {}


def combine_runs(per_run: Sequence[Mapping[str, Mapping[str, Mapping[str, Any]]]]) -> dict[str, Any]:
    """Mean, min and max over runs of each half/type metric (the same queries in every run)."""
    out: dict[str, Any] = {}
    if not per_run:
        return out
    for half, rows in per_run[0].items():
        out[half] = {}
        for name, row in rows.items():
            out[half][name] = {"n": row["n"]}
            for metric in ("recall@5", "mrr"):
                out[half][name][metric] = spread([r[half][name][metric] for r in per_run])
    return out


def _cell(m: Mapping[str, Any]) -> str:
    def one(s: Mapping[str, float]) -> str:
        if not s:
            return "-"
        width = s["max"] - s["min"]
        return f"{s['mean']:.3f}" + (f" ±{width / 2:.3f}" if width > 0 else "")

    return f"{one(m['recall@5'])} / {one(m['mrr'])}" if m["n"] else "-"


def format_halves(derivation: str, budget_name: str, budget: int, combined: Mapping[str, Any], runs: int) -> str:
    """A markdown table: one row per half, recall@5 / MRR@10 per type (mean ±half the min-max range)."""
    types = [*REVISIT_TYPES, "overall"]
    head = f"{derivation} derivation, {budget_name} budget {budget:,} ({runs} run{'s' if runs > 1 else ''})"
    lines = [head, "| half | " + " | ".join(f"{t} (n)" for t in types) + " |", "|---" * (len(types) + 1) + "|"]
    for half in ("tuning", "test", "all"):
        rows = combined[half]
        cells = [f"{_cell(rows[t])} ({rows[t]['n']})" for t in types]
        lines.append(f"| {half} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Replay trajectories into a memory server; score search.")
    add = parser.add_argument
    add("--server", default=f"{shlex.quote(sys.executable)} -m compactor", help="server command line")
    add("--server-cwd", default=None, help="working directory of the server (default: this one)")
    add("--budget", type=int, default=GENEROUS_BUDGET, help="the generous budget")
    add("--tight-budget", type=int, default=TIGHT_BUDGET, help="the budget that forces compaction")
    add("--jobs", type=int, default=min(4, (os.cpu_count() or 2) + 1), help="parallel server processes")
    add("--limit-trajs", type=int, default=None, help="only the first N trajectories")
    add(
        "--trajs-per-server",
        type=int,
        default=TRAJS_PER_SERVER,
        help="trajectories a server process replays, emptied by forget in between (1: fresh server each)",
    )
    add("--corpus", type=Path, default=None, help="trajectories.jsonl (default: the shared corpus)")
    add("--revisits", type=Path, default=REVISITS_FILE, help="the first derivation's queries")
    add(
        "--derivation",
        choices=[*DERIVATIONS, "both"],
        default="both",
        help="which revisit queries to ask; each derivation is a separate replay (a query touches items)",
    )
    add("--runs", type=int, default=1, help="repeat every replay N times and report the spread")
    add("--quick", action="store_true", help=f"smoke test: the first {QUICK_TRAJS} trajectories, one run")
    add("--out", type=Path, default=RESULTS_DIR / "replay.json")
    add("--budgets", choices=[*BUDGET_NAMES, "both"], default="both", help="which of the two budgets to run")
    add("--half", choices=["tuning", "test", "all"], default=None, help="only this half (default: all; --fast: tuning)")
    add("--fast", action="store_true", help="in process, a Store per trajectory: for iterating, not the measurement")
    add("--set", action="append", default=[], metavar="NAME=VALUE", help="with --fast: override a knob")
    add(
        "--bare-lookups",
        action="store_true",
        help="with --fast: ask each first-derivation file re-read that names a symbol or lines as"
        " 'path symbol' or 'path lines A-B' (evals/lookups.py)",
    )
    add(
        "--ask",
        choices=ASK_SHAPES,
        default="lines",
        help="how each revisit names its command: on a line of its own (as derived), in"
        " backticks after the thought, in backticks in a question alone, or inside a sentence as"
        " written (evals/lookups.py)",
    )
    args = parser.parse_args(argv)
    if args.set and not args.fast:
        parser.error("--set tunes the Store of this process: it works with --fast only")
    args.tuning = tuning_of(parser, args.set)
    return args


def tuning_of(parser: argparse.ArgumentParser, pairs: list[str]) -> Tuning:
    """The Store's knobs with `--set NAME=VALUE` applied; a name that tunes nothing is a usage error."""
    try:
        return Tuning().overridden(parse_overrides(pairs))
    except ValueError as exc:
        parser.error(str(exc))


def _chosen(args: argparse.Namespace) -> tuple[dict[str, int], list[str]]:
    """The budgets (by name) and derivations the arguments ask for."""
    budgets = {"generous": args.budget, "tight": args.tight_budget}
    if args.budgets != "both":
        budgets = {args.budgets: budgets[args.budgets]}
    return budgets, list(DERIVATIONS) if args.derivation == "both" else [args.derivation]


def ask_revisits(revisits: Sequence[Revisit], events: Sequence[Event], shape: str) -> list[Revisit]:
    """The revisits with their queries asked in `shape` (evals/lookups.py `asked_as`), each with
    the command of its own turn."""
    if shape == "lines":
        return list(revisits)
    command_of: dict[tuple[str, int], str] = {}
    for ev in events:
        if ev.kind in COMMAND_KINDS:
            command_of.setdefault((ev.traj, ev.step), ev.content)
    return [
        dataclasses.replace(r, query=asked_as(shape, r.query, command_of.get((r.traj, r.step), ""))) for r in revisits
    ]


def _bare(r: Revisit) -> Revisit:
    """A file re-read that names a symbol or lines, asked as the path and that alone."""
    query = bare_query(r.detail, r.query) if r.type == "file_reread" else None
    return dataclasses.replace(r, query=query) if query is not None else r


def run_fast(args: argparse.Namespace) -> int:
    """The evaluation in process: a Store per trajectory, the same stores, queries and scoring."""
    from compactor.store import Store

    half = args.half or "tuning"
    groups = [
        (t, e)
        for t, e in sorted(group_trajectories(load_events(args.corpus or default_corpus())).items())
        if half == "all" or half_of(t) == half
    ][: args.limit_trajs]
    budgets, derivations = _chosen(args)
    started = time.perf_counter()
    latencies: list[float] = []
    for derivation in derivations:
        for name, budget in budgets.items():
            ranks: dict[str, list[int | None]] = defaultdict(list)
            first = derive_revisits("first", [], args.revisits) if derivation == "first" else []
            for traj, events in groups:
                own = [r for r in first if r.traj == traj]
                revisits = own if derivation == "first" else derive_revisits(derivation, events, args.revisits)
                content_of = {ev.seq: ev.content for ev in events}
                strict_of = {
                    r.seq: strict_relevant(r.query, r.relevant, content_of)
                    for r in revisits
                    if r.type == "file_reread" and derivation == "first"
                }
                if args.bare_lookups:
                    revisits = [_bare(r) for r in revisits] if derivation == "first" else revisits
                revisits = ask_revisits(revisits, events, args.ask)
                pending = _queries_by_step(revisits)
                store = Store(budget=budget, tuning=args.tuning)
                seqs_of: dict[str, list[int]] = {}
                for ev in events:
                    for query, asked in pending.pop(ev.step, {}).items():
                        t0 = time.perf_counter()
                        hits = store.query(query=query, limit=QUERY_LIMIT)
                        latencies.append(time.perf_counter() - t0)
                        ids = [h.item.id for h in hits]
                        for r in asked:
                            rank = rank_of_ids(ids, seqs_of, r.relevant)
                            ranks[r.type].append(rank)
                            ranks["overall"].append(rank)
                            strict = strict_of.get(r.seq, ())
                            if strict:  # evals/lookups.py: the views that show what the query asks for
                                ranks[STRICT].append(rank_of_ids(ids, seqs_of, strict))
                    stored = store.store(**_store_arguments(ev))
                    seqs_of.setdefault(stored.item.id, []).append(ev.seq)
            cells = "  ".join(
                f"{t} {recall_at(ranks[t]):.3f}/{mean_reciprocal_rank(ranks[t]):.3f} ({len(ranks[t])})"
                for t in [*REVISIT_TYPES, "overall", *([STRICT] if ranks[STRICT] else [])]
            )
            print(f"{derivation:6s} {name:8s} {half}: {cells}", flush=True)
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else 0.0
    print(f"{len(groups)} trajectories, {time.perf_counter() - started:.0f} s, query p50 {p50:.2f} ms")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.limit_trajs, args.runs = min(args.limit_trajs or QUICK_TRAJS, QUICK_TRAJS), 1
    if args.fast:
        return run_fast(args)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    started = time.perf_counter()
    corpus: Path = args.corpus or default_corpus()
    events = [e for e in load_events(corpus) if args.half in (None, "all") or half_of(e.traj) == args.half]
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    errlog = out.parent / "server-stderr.log"
    errlog.write_text("", encoding="utf-8")
    budgets, derivations = _chosen(args)
    labelled: list[tuple[str, int, Task]] = []  # (derivation, run, task)
    for run in range(args.runs):
        for name in derivations:
            tasks = build_tasks(
                events,
                revisits=ask_revisits(derive_revisits(name, events, args.revisits), events, args.ask),
                argv=shlex.split(args.server),
                cwd=args.server_cwd,
                budgets=list(budgets.values()),
                errlog=errlog,
                limit_trajs=args.limit_trajs,
                trajs_per_server=args.trajs_per_server,
            )
            labelled.extend((name, run, t) for t in tasks)
    log.info(
        "replaying %d trajectory runs (%s derivation(s), %d run(s)) in %d server processes, %d at a time: %s",
        sum(len(t.trajs) for _, _, t in labelled),
        "+".join(derivations),
        args.runs,
        len(labelled),
        args.jobs,
        args.server,
    )
    results = run_labelled([t for _, _, t in labelled], args.jobs)
    runs_by: dict[tuple[str, int, int], list[TrajRun]] = defaultdict(list)
    for (name, run, task), trajruns in zip(labelled, results, strict=True):
        runs_by[(name, task.budget, run)].extend(trajruns)
    wall = time.perf_counter() - started
    cpu = _cpu_seconds()
    report: dict[str, Any] = {
        "server": args.server,
        "corpus": str(corpus),
        "revisits_file": str(args.revisits),
        "jobs": args.jobs,
        "trajs_per_server": args.trajs_per_server,
        "runs_per_setting": args.runs,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "importance_by_kind": dict(IMPORTANCE_BY_KIND),
        "asked": args.ask,
        "halves": "tuning when the first byte of sha256(traj) is even, else test (evals/halves.py)",
        "derivations": {},
    }
    failed = [r for rs in runs_by.values() for r in rs if r.error is not None]
    for name in derivations:
        report["derivations"][name] = {}
        for budget_name, budget in budgets.items():
            per_run = []
            first_summary: dict[str, Any] = {}
            for run in range(args.runs):
                mine = [r for r in runs_by[(name, budget, run)] if r.error is None]
                outcomes = [o for r in mine for o in r.outcomes]
                per_run.append(split_metrics(outcomes))
                if run == 0:
                    first_summary = summarize(outcomes, [c for r in mine for c in r.checks])
                    first_summary.update(
                        budget=budget,
                        trajectories=len(mine),
                        stores=sum(r.stores for r in mine),
                        queries=sum(r.queries for r in mine),
                        server_seconds=round(sum(r.seconds for r in mine), 1),
                        ranks=[asdict(o) for r in sorted(mine, key=lambda r: r.traj) for o in r.outcomes],
                    )
            combined = combine_runs(per_run)
            report["derivations"][name][budget_name] = {
                "budget": budget,
                "by_half": combined,
                "per_run": per_run,
                "first_run": first_summary,
            }
            print(format_halves(name, budget_name, budget, combined, args.runs))
            v = first_summary["verbatim"]
            print(f"  get(id) verbatim (run 1): {v['verbatim']}/{v['checked']}  tier/view: {v['by_tier_view']}\n")
    report["failed"] = [{"traj": r.traj, "budget": r.budget, "error": r.error} for r in failed]
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(
        f"wall time {wall:.1f} s with {args.jobs} parallel servers ({cpu:.0f} CPU-seconds in the harness "
        f"and its servers); {len(failed)} failed runs; wrote {out}"
    )
    for r in failed[:5]:
        print(f"  FAILED {r.traj} budget {r.budget}: {r.error} (server stderr: {errlog})")
    return 1 if failed else 0


def run_labelled(tasks: Sequence[Task], jobs: int) -> list[list[TrajRun]]:
    """Each task's runs, in task order."""
    if jobs <= 1:
        return [run_task(t) for t in tasks]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        return list(pool.map(run_task, tasks))


if __name__ == "__main__":
    raise SystemExit(main())
