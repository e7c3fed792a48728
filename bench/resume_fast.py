"""In-process proxy of bench.resume for iterating on recall: a Store per trajectory (no server, no
restart), the same cuts, query, revisits and scoring. Not the reported measurement; that is
`python -m bench.resume`.

    python -m bench.resume_fast [--half tuning|test] [--limit-trajs N] [--cuts 40,60,80]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

from bench.halves import half_of
from bench.replay import _store_arguments
from bench.resume import CUTS, DERIVE, covered, cut_index, pending_after, recency_seqs, task_query
from bench.revisits import default_corpus, group_trajectories, load_events
from compactor.store import Store


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--half", default="tuning")
    p.add_argument("--limit-trajs", type=int, default=None)
    p.add_argument("--cuts", default=",".join(map(str, CUTS)))
    a = p.parse_args()
    cuts = [int(c) for c in a.cuts.split(",")]
    groups = [
        (t, e) for t, e in sorted(group_trajectories(load_events(default_corpus())).items()) if half_of(t) == a.half
    ]
    groups = groups[: a.limit_trajs]
    hits: dict[int, list[bool]] = defaultdict(list)
    base: dict[int, list[bool]] = defaultdict(list)
    toks: dict[int, list[int]] = defaultdict(list)
    items: dict[int, list[int]] = defaultdict(list)
    lat: list[float] = []
    for _t, events in groups:
        revisits = {n: fn(events) for n, fn in DERIVE.items()}
        query = task_query(events)
        s = Store()
        seq_of: dict[str, int] = {}
        stored = 0
        for pct in cuts:
            cut = cut_index(len(events), pct)
            for ev in events[stored:cut]:
                args = _store_arguments(ev)
                r = s.store(args["content"], summary=args["summary"], tags=args["tags"], importance=args["importance"])
                seq_of[r.item.id] = ev.seq
            stored = cut
            t0 = time.perf_counter()
            rec = s.recall(query=query or None)
            lat.append((time.perf_counter() - t0) * 1000)
            ids = [it.id for it in rec.pinned] + [it.id for it, _ in rec.items]
            shown = [seq_of[i] for i in ids if i in seq_of]
            pend = [x for x in pending_after(revisits, cut) if x.derivation == "first"]
            hits[pct] += covered(pend, shown)
            base[pct] += covered(pend, recency_seqs(cut))
            toks[pct].append(rec.tokens)
            items[pct].append(len(ids))
    for pct in cuts:
        h, b = hits[pct], base[pct]
        print(
            f"{pct}%: recall {sum(h) / max(len(h), 1):.3f} last-20 {sum(b) / max(len(b), 1):.3f} (n {len(h)}) "
            f"tokens p50 {statistics.median(toks[pct]):.0f} max {max(toks[pct])} "
            f"items p50 {statistics.median(items[pct]):.0f}"
        )
    print(f"recall latency p50 {statistics.median(lat):.1f} ms ({len(groups)} trajectories)")


if __name__ == "__main__":
    main()
