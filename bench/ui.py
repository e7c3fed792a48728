"""`compactor ui`'s overview page at N items (issue 41: under 200 ms at 100,000).

Fills a fresh state dir with N items (bulk_store in batches, then one compaction so there are
summaries and an archive), then requests `/` through the app RUNS times after RUNS_WARM
untimed requests, each a full request through the guards and the page's render, and prints the
median and the slowest; then again right after a store each time (the page's pass over every
item, kept until the next change, runs again). The other pages are timed once each for reference.

    python -m bench.ui [N] [--runs 20] [--state-dir DIR]

With --state-dir, a dir already holding items is measured as it is (filling 100,000 takes two
minutes), and an empty one is filled and kept.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from compactor.store import Store, StoreInput
from compactor.ui import UIOptions, ui_app

RUNS_WARM = 3  # the first requests pay for lazy imports and the page's first render
BULK = 1_000


def fill(store: Store, n: int) -> None:
    rnd = random.Random(41)
    words = [f"w{i}" for i in range(3_000)]
    store.configure(auto_compact=False, token_budget=2_000_000)
    for start in range(0, n, BULK):
        batch = [
            StoreInput(
                content=f"note {i}: " + " ".join(rnd.choices(words, k=40)),
                tags=[f"t{i % 50}"],
                importance=1 + i % 9,
            )
            for i in range(start, min(n, start + BULK))
        ]
        store.bulk_store(batch)
    store.configure(token_budget=200_000)
    store.compact()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("n", nargs="?", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--state-dir", type=Path, help="measure this state dir (filled first when empty) and keep it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = args.state_dir or Path(tmp) / "state"
        t0 = time.perf_counter()
        store = Store(state_dir=state)
        verb = "opened"
        if not store.status().active_items + store.status().archived_items:
            fill(store, args.n)
            verb = "filled"
        status = store.status()
        print(
            f"{verb} {status.active_items + status.archived_items:,} items in {time.perf_counter() - t0:.0f} s: "
            f"{status.active_items:,} active, {status.archived_items:,} archived, {len(store.roots()):,} summary roots"
        )
        options = UIOptions(host="127.0.0.1", port=8766, token=None, source=str(state), state_dir=state)
        app = ui_app(store, options)
        client = TestClient(app, base_url="http://127.0.0.1:8766")
        for _ in range(RUNS_WARM):
            assert client.get("/").status_code == 200
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            reply = client.get("/")
            times.append((time.perf_counter() - t) * 1000)
            assert reply.status_code == 200
        print(f"overview at {args.n:,} items: median {statistics.median(times):.1f} ms, max {max(times):.1f} ms")
        # After a change the page's pass over every item runs again.
        changed = []
        for i in range(max(3, args.runs // 4)):
            store.store(f"a change before request {i}")
            t = time.perf_counter()
            assert client.get("/").status_code == 200
            changed.append((time.perf_counter() - t) * 1000)
        print(f"  right after a store: median {statistics.median(changed):.1f} ms, max {max(changed):.1f} ms")
        for path in ("/search?q=w17+w99", "/tree", "/ledger", f"/item/{store.roots()[0].id}"):
            t = time.perf_counter()
            code = client.get(path).status_code
            print(f"  {path}: {(time.perf_counter() - t) * 1000:.1f} ms ({code})")
        client.close()
        store.close()


if __name__ == "__main__":
    main()
