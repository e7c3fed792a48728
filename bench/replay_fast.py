"""In-process proxy of bench.replay for iterating on search: a Store per trajectory (no server,
no stdio), the same stores, revisits, queries and scoring. Not the reported measurement; that
is `python -m bench.replay`. `--set NAME=VALUE` overrides a constant of compactor/constants.py
for the run (a lever tried on the tuning half before it is written down).

    python -m bench.replay_fast [--half tuning|test|all] [--derivation first|second|both]
                                [--budget generous|tight|both] [--limit-trajs N] [--set VIEW_PATH_LIFT=1.5]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from bench.halves import half_of
from bench.replay import (
    DERIVATIONS,
    GENEROUS_BUDGET,
    QUERY_LIMIT,
    REVISITS_FILE,
    TIGHT_BUDGET,
    _queries_by_step,
    _store_arguments,
    derive_revisits,
    first_relevant_rank,
    mean_reciprocal_rank,
    recall_at,
)
from bench.revisits import REVISIT_TYPES, default_corpus, group_trajectories, load_events
from compactor import constants as C
from compactor.store import Store


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--half", default="tuning", choices=["tuning", "test", "all"])
    p.add_argument("--derivation", default="both", choices=[*DERIVATIONS, "both"])
    p.add_argument("--budget", default="both", choices=["generous", "tight", "both"])
    p.add_argument("--limit-trajs", type=int, default=None)
    p.add_argument("--set", action="append", default=[], help="NAME=VALUE: override a constant")
    a = p.parse_args()
    for assignment in a.set:
        name, _, value = assignment.partition("=")
        setattr(C, name, type(getattr(C, name))(float(value)))
    groups = [
        (t, e)
        for t, e in sorted(group_trajectories(load_events(default_corpus())).items())
        if a.half == "all" or half_of(t) == a.half
    ][: a.limit_trajs]
    budgets = {"generous": GENEROUS_BUDGET, "tight": TIGHT_BUDGET}
    names = list(budgets) if a.budget == "both" else [a.budget]
    derivations = list(DERIVATIONS) if a.derivation == "both" else [a.derivation]
    started = time.perf_counter()
    latencies: list[float] = []
    for derivation in derivations:
        for name in names:
            ranks: dict[str, list[int | None]] = defaultdict(list)
            first = derive_revisits("first", [], REVISITS_FILE) if derivation == "first" else []
            for traj, events in groups:
                own = [r for r in first if r.traj == traj]
                revisits = own if derivation == "first" else derive_revisits(derivation, events, REVISITS_FILE)
                pending = _queries_by_step(revisits)
                store = Store(budget=budgets[name])
                seq_of: dict[str, int] = {}
                for ev in events:
                    for query, revisits in pending.pop(ev.step, {}).items():
                        t0 = time.perf_counter()
                        hits = store.query(query=query, limit=QUERY_LIMIT)
                        latencies.append(time.perf_counter() - t0)
                        returned = [seq_of.get(h.item.id) for h in hits]
                        for r in revisits:
                            rank = first_relevant_rank(returned, r.relevant)
                            ranks[r.type].append(rank)
                            ranks["overall"].append(rank)
                    args = _store_arguments(ev)
                    stored = store.store(
                        args["content"], summary=args["summary"], tags=args["tags"], importance=args["importance"]
                    )
                    seq_of[stored.item.id] = ev.seq
            cells = "  ".join(
                f"{t} {recall_at(ranks[t]):.3f}/{mean_reciprocal_rank(ranks[t]):.3f} ({len(ranks[t])})"
                for t in [*REVISIT_TYPES, "overall"]
            )
            print(f"{derivation:6s} {name:8s} {a.half}: {cells}", flush=True)
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000 if latencies else 0.0
    print(f"{len(groups)} trajectories, {time.perf_counter() - started:.0f} s, query p50 {p50:.2f} ms")


if __name__ == "__main__":
    main()
