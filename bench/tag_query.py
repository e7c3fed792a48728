"""A query by tags alone against text queries at N items, in process (issue 38, point 14: at
100k items a tag-only query took 84 ms p50, a text query 8 ms; goal: the same cost).

The items of `bench.recall_latency` (reads of 500 files, importance 1-9), every one tagged
"observation" as there: the tag-only query ranks all N of them.

    python -m bench.tag_query [N] [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench.recall_latency import BULK, items
from compactor.store import Store, StoreInput

QUERIES: tuple[tuple[str, dict[str, object]], ...] = (
    ("text, 4 words", {"query": "fix w12 in mod42 w99"}),
    ("text, 1 common word", {"query": "w12"}),
    ("tags only (every item)", {"tags": "observation"}),
    ("tags only, active tier", {"tags": "observation", "include_archived": False}),
    # The tag ranks are kept from here on: each query's access re-files its hits in them.
    ("text, 4 words, after queries by tags", {"query": "fix w12 in mod42 w99"}),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("n", nargs="?", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=30)
    a = p.parse_args()
    store = Store(budget=100_000_000)
    batch = items(a.n)
    for i in range(0, a.n, BULK):
        part = batch[i : i + BULK]
        store.bulk_store([StoreInput(it["content"], None, it["tags"], it["importance"]) for it in part])
    for label, args in QUERIES:
        for _ in range(3):  # the first query by tags files every item by its bound
            store.query(limit=10, **args)  # type: ignore[arg-type]
        times = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            store.query(limit=10, **args)  # type: ignore[arg-type]
            times.append((time.perf_counter() - t0) * 1000)
        print(f"{a.n:,} items, {label}: p50 {statistics.median(times):.2f} ms (max {max(times):.2f})")


if __name__ == "__main__":
    main()
