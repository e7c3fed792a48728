"""Resume evaluation (ISSUE 19): does the first `recall` of a new session bring back what it will need?

For each trajectory and each cut X (40, 60, 80 % of its events): a server with a fresh state dir
stores the first X % of the events (as evals.replay stores them) and exits; a NEW server process on
the same state dir answers the new session's first call, `recall(query=<first line of the task>)`.
Score: of the revisits after the cut that point back before it (files re-read, commands re-run,
errors met again; both derivations of evals.replay), the share with a relevant earlier event among
the recall's items. Baseline: the last RECENCY_EVENTS events before the cut. Also reported: the
recall's size in tokens (cl100k, compactor/content/tokens.py) and the harness-side latency of that call.

The cuts of one trajectory are a chain on one state dir: the process that answers the recall at
40 % then stores the events up to 60 % and exits, and so on (recall is read-only), so a trajectory
costs len(cuts) + 1 server starts instead of 2 * len(cuts).

`--fast` is the same evaluation in process, for iterating on recall: a Store per trajectory (no
server, no restart), the same cuts, query, revisits and scoring (first derivation), on the tuning
half unless `--half` says otherwise; it prints one line per cut and writes nothing. It is not
the reported measurement.

    python -m evals.resume [--cuts 40,60,80] [--jobs N] [--budget N] [--half tuning|test] [--quick]
    python -m evals.resume --fast [--half tuning|test] [--limit-trajs N] [--cuts 40,60,80]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python evals/resume.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from compactor.store.tuning import Tuning
from evals.halves import half_of
from evals.replay import CALL_TIMEOUT_S, RESULTS_DIR, _store_arguments, tuning_of
from evals.revisits import Event, Revisit, default_corpus, derive, group_trajectories, load_events
from evals.revisits2 import derive2

log = logging.getLogger("evals.resume")

CUTS = (40, 60, 80)
RECENCY_EVENTS = 20  # the baseline: recalling just the last 20 events before the cut
QUICK_TRAJS = 6
DERIVE = {"first": derive, "second": derive2}


def cut_index(n_events: int, pct: int) -> int:
    """Events [0, cut_index) are stored before the restart."""
    return round(n_events * pct / 100)


def task_query(events: Sequence[Event]) -> str:
    """The first line of the task (the step-0 observation)."""
    for e in events:
        if e.step == 0:
            for line in e.content.split("\n"):
                if line.strip():
                    return line.strip()[:2_000]
    return ""


@dataclass(frozen=True)
class Pending:
    """A later revisit pointing back before the cut: `relevant` are the seqs before the cut."""

    derivation: str
    type: str
    seq: int
    relevant: tuple[int, ...]


def pending_after(revisits_by_derivation: Mapping[str, Iterable[Revisit]], cut: int) -> list[Pending]:
    out: list[Pending] = []
    for name, revisits in revisits_by_derivation.items():
        for r in revisits:
            before = tuple(s for s in r.relevant if s < cut)
            if r.seq >= cut and before:
                out.append(Pending(name, r.type, r.seq, before))
    return out


def covered(pending: Sequence[Pending], shown: Iterable[int]) -> list[bool]:
    """Whether each later revisit has a relevant earlier event among the shown seqs."""
    got = set(shown)
    return [any(s in got for s in p.relevant) for p in pending]


def recency_seqs(cut: int, n: int = RECENCY_EVENTS) -> range:
    return range(max(0, cut - n), cut)


@dataclass
class CutResult:
    traj: str
    cut_pct: int
    cut: int
    events: int
    recall_seqs: list[int]
    recall_items: int
    tokens_reported: int
    tokens_cl100k: int
    latency_ms: float
    budget: dict[str, Any] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    hit: list[bool] = field(default_factory=list)
    recency_hit: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class TrajJob:
    traj: str
    events: tuple[Event, ...]
    argv: tuple[str, ...]
    cuts: tuple[int, ...]
    budget: int | None
    errlog: str


@asynccontextmanager
async def _server(job: TrajJob, state_dir: str, errlog: Any) -> AsyncIterator[Client]:
    args = [*job.argv[1:], "--state-dir", state_dir]
    if job.budget is not None:
        args += ["--budget", str(job.budget)]
    params = StdioServerParameters(command=job.argv[0], args=args, env=dict(os.environ))
    async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
        yield client


async def _call(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments, read_timeout_seconds=CALL_TIMEOUT_S)
    if result.is_error:
        text = " ".join(getattr(b, "text", "") for b in result.content)
        raise RuntimeError(f"{tool} failed: {text[:300]}")
    structured = result.structured_content
    if not isinstance(structured, dict):
        raise TypeError(f"{tool} returned no structured content")
    return structured


def _count_tokens(text: str) -> int:
    from compactor.content.tokens import default_counter

    return default_counter().count(text)


async def resume_one(job: TrajJob) -> list[CutResult]:
    """Store, restart, recall, along the chain of cuts of one trajectory."""
    events = list(job.events)
    revisits = {name: fn(events) for name, fn in DERIVE.items()}
    query = task_query(events)
    seqs_of: dict[str, list[int]] = {}  # an id answers for each identical event stored as it
    results: list[CutResult] = []
    cuts = [(pct, cut_index(len(events), pct)) for pct in sorted(job.cuts)]
    stored = 0
    with tempfile.TemporaryDirectory(prefix="resume-") as state, open(job.errlog, "a", encoding="utf-8") as errlog:
        for i in range(len(cuts) + 1):
            async with _server(job, state, errlog) as client:
                if i > 0:  # this process is the new session after cut i-1: its first call
                    pct, cut = cuts[i - 1]
                    started = time.perf_counter()
                    reply = await _call(client, "recall", {"query": query} if query else {})
                    latency = (time.perf_counter() - started) * 1000
                    items = reply.get("items", [])
                    shown = [seq for it in items for seq in seqs_of.get(str(it.get("id")), ())]
                    pending = pending_after(revisits, cut)
                    results.append(
                        CutResult(
                            traj=job.traj,
                            cut_pct=pct,
                            cut=cut,
                            events=len(events),
                            recall_seqs=shown,
                            recall_items=len(items),
                            tokens_reported=int(reply.get("tokens", 0)),
                            tokens_cl100k=_count_tokens(str(reply.get("text", ""))),
                            latency_ms=latency,
                            budget=dict(reply.get("budget") or {}),
                            pending=pending,
                            hit=covered(pending, shown),
                            recency_hit=covered(pending, recency_seqs(cut)),
                        )
                    )
                if i < len(cuts):
                    for event in events[stored : cuts[i][1]]:
                        reply = await _call(client, "store", _store_arguments(event))
                        seqs_of.setdefault(str(reply["id"]), []).append(event.seq)
                    stored = cuts[i][1]
    return results


def run_job(job: TrajJob) -> tuple[str, list[CutResult], str | None]:
    try:
        return job.traj, anyio.run(resume_one, job), None
    except Exception as exc:  # one broken trajectory must not hide the others' numbers
        log.exception("%s failed", job.traj)
        return job.traj, [], f"{type(exc).__name__}: {exc}"[:500]


# ---- the report ----


def _p50(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def summarize(results: Sequence[CutResult]) -> dict[str, Any]:
    """Per cut, per half (tuning, test, all), per derivation: coverage vs the recency baseline,
    by type; recall tokens (p50, max) and latency (p50)."""
    out: dict[str, Any] = {}
    for pct in sorted({r.cut_pct for r in results}):
        out[str(pct)] = {}
        for half in ("tuning", "test", "all"):
            mine = [r for r in results if r.cut_pct == pct and half in ("all", half_of(r.traj))]
            row: dict[str, Any] = {
                "trajectories": len(mine),
                "tokens_p50": _p50([r.tokens_cl100k for r in mine]),
                "tokens_max": max((r.tokens_cl100k for r in mine), default=0),
                "tokens_reported_p50": _p50([r.tokens_reported for r in mine]),
                "items_p50": _p50([r.recall_items for r in mine]),
                "latency_ms_p50": _p50([r.latency_ms for r in mine]),
                "derivations": {},
            }
            for name in DERIVE:
                by_type: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
                for r in mine:
                    for p, h, b in zip(r.pending, r.hit, r.recency_hit, strict=True):
                        if p.derivation == name:
                            by_type[p.type].append((h, b))
                            by_type["overall"].append((h, b))
                row["derivations"][name] = {
                    t: {
                        "n": len(v),
                        "recall": sum(h for h, _ in v) / len(v) if v else 0.0,
                        "recency": sum(b for _, b in v) / len(v) if v else 0.0,
                    }
                    for t, v in sorted(by_type.items())
                }
            out[str(pct)][half] = row
    return out


def format_summary(summary: Mapping[str, Any]) -> str:
    lines = [
        "| cut | half | first derivation: recall / last-20 (n) | second derivation: recall / last-20 (n) "
        "| recall tokens p50 (max) | latency p50 |",
        "|---|---|---|---|---|---|",
    ]
    for pct, halves in summary.items():
        for half, row in halves.items():
            cells = []
            for name in DERIVE:
                o = row["derivations"][name].get("overall", {"n": 0, "recall": 0.0, "recency": 0.0})
                cells.append(f"{o['recall']:.3f} / {o['recency']:.3f} ({o['n']})")
            lines.append(
                f"| {pct}% | {half} | {cells[0]} | {cells[1]} | {row['tokens_p50']:.0f} ({row['tokens_max']}) "
                f"| {row['latency_ms_p50']:.1f} ms |"
            )
    return "\n".join(lines)


def format_by_type(summary: Mapping[str, Any], half: str = "all") -> str:
    lines = ["| cut | derivation | file_reread | command_rerun | error_repeat |", "|---|---|---|---|---|"]
    for pct, halves in summary.items():
        for name, rows in halves[half]["derivations"].items():
            cells = [
                f"{rows[t]['recall']:.3f} / {rows[t]['recency']:.3f} ({rows[t]['n']})" if t in rows else "-"
                for t in ("file_reread", "command_rerun", "error_repeat")
            ]
            lines.append(f"| {pct}% | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Resume evaluation: store a prefix, restart, recall (ISSUE 19).")
    parser.add_argument("--server", default=f"{shlex.quote(sys.executable)} -m compactor")
    parser.add_argument("--cuts", default=",".join(map(str, CUTS)), help="percentages, comma-separated")
    parser.add_argument("--budget", type=int, default=None, help="--budget for the server (default: its own)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit-trajs", type=int, default=None)
    parser.add_argument(
        "--half", choices=("tuning", "test", "all"), default=None, help="only this half (default: all; --fast: tuning)"
    )
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_TRAJS} trajectories")
    parser.add_argument("--corpus", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "resume.json")
    parser.add_argument("--fast", action="store_true", help="in process, a Store per trajectory (tuning half)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="with --fast: override a knob")
    args = parser.parse_args(argv)
    if args.set and not args.fast:
        parser.error("--set tunes the Store of this process: it works with --fast only")
    tuning = tuning_of(parser, args.set)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    limit = QUICK_TRAJS if args.quick else args.limit_trajs
    started = time.perf_counter()
    corpus: Path = args.corpus or default_corpus()
    half = args.half or ("tuning" if args.fast else None)
    groups = [
        (t, evs)
        for t, evs in sorted(group_trajectories(load_events(corpus)).items())
        if half in (None, "all") or half_of(t) == half
    ][:limit]
    if args.fast:
        return run_fast(groups, tuple(int(c) for c in args.cuts.split(",")), tuning)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    errlog = args.out.parent / "resume-server-stderr.log"
    errlog.write_text("", encoding="utf-8")
    cuts = tuple(int(c) for c in args.cuts.split(","))
    jobs = [
        TrajJob(t, tuple(evs), tuple(shlex.split(args.server)), cuts, args.budget, str(errlog)) for t, evs in groups
    ]
    jobs.sort(key=lambda j: -len(j.events))  # longest first: the pool ends evenly
    log.info("resume: %d trajectories, cuts %s, %d at a time", len(jobs), cuts, args.jobs)
    if args.jobs <= 1:
        done = [run_job(j) for j in jobs]
    else:
        with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("spawn")) as pool:
            done = list(pool.map(run_job, jobs))
    results = [r for _, rs, _ in done for r in rs]
    failed = [(t, e) for t, _, e in done if e is not None]
    summary = summarize(results)
    wall = time.perf_counter() - started
    report = {
        "server": args.server,
        "budget": args.budget,
        "cuts": cuts,
        "recency_events": RECENCY_EVENTS,
        "wall_seconds": round(wall, 1),
        "summary": summary,
        "failed": failed,
        "results": [asdict(r) for r in sorted(results, key=lambda r: (r.traj, r.cut_pct))],
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(format_summary(summary))
    print()
    print(format_by_type(summary))
    print(f"wall time {wall:.1f} s, {len(failed)} failed; wrote {args.out}")
    for t, e in failed[:5]:
        print(f"  FAILED {t}: {e} (server stderr: {errlog})")
    return 1 if failed else 0


def run_fast(groups: Sequence[tuple[str, Sequence[Event]]], cuts: Sequence[int], tuning: Tuning | None = None) -> int:
    """The evaluation in process: one Store per trajectory takes the events up to each cut in turn
    and answers the same recall; the first derivation's later revisits are scored."""
    from compactor.store import Store

    hits: dict[int, list[bool]] = defaultdict(list)
    base: dict[int, list[bool]] = defaultdict(list)
    toks: dict[int, list[int]] = defaultdict(list)
    items: dict[int, list[int]] = defaultdict(list)
    lat: list[float] = []
    for _t, events in groups:
        revisits = {n: fn(events) for n, fn in DERIVE.items()}
        query = task_query(events)
        s = Store(tuning=tuning)
        seqs_of: dict[str, list[int]] = {}
        stored = 0
        for pct in cuts:
            cut = cut_index(len(events), pct)
            for ev in events[stored:cut]:
                seqs_of.setdefault(s.store(**_store_arguments(ev)).item.id, []).append(ev.seq)
            stored = cut
            t0 = time.perf_counter()
            rec = s.recall(query=query or None)
            lat.append((time.perf_counter() - t0) * 1000)
            ids = [it.id for it in rec.pinned] + [it.id for it, _ in rec.items]
            shown = [seq for i in ids for seq in seqs_of.get(i, ())]
            pend = [x for x in pending_after(revisits, cut) if x.derivation == "first"]
            hits[pct] += covered(pend, shown)
            base[pct] += covered(pend, recency_seqs(cut))
            toks[pct].append(rec.tokens)
            items[pct].append(len(ids))
    for pct in cuts:
        h, b = hits[pct], base[pct]
        print(
            f"{pct}%: recall {sum(h) / max(len(h), 1):.3f} last-20 {sum(b) / max(len(b), 1):.3f} (n {len(h)}) "
            f"tokens p50 {_p50(toks[pct]):.0f} max {max(toks[pct], default=0)} "
            f"items p50 {_p50(items[pct]):.0f}"
        )
    print(f"recall latency p50 {_p50(lat):.1f} ms ({len(groups)} trajectories)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
