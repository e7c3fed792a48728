"""recall p50 latency in process at N items (ISSUE 19: <= 10 ms at 10,000).

python -m bench.recall_latency [N]
"""

from __future__ import annotations

import random
import statistics
import sys
import time

from compactor.store import Store


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    rnd = random.Random(7)
    words = [f"w{i}" for i in range(2_000)]
    s = Store(budget=100_000_000)
    for i in range(n):
        body = " ".join(rnd.choices(words, k=30))
        s.store(f"$ cat src/mod{i % 500}.py\n{body}", summary=None, tags=["observation"], importance=rnd.randint(1, 9))
    for label, q in (("no query", None), ("query", "fix w12 in mod42 w99")):
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            r = s.recall(query=q)
            times.append((time.perf_counter() - t0) * 1000)
        print(f"{n:,} items, {label}: p50 {statistics.median(times):.1f} ms, {r.tokens} tokens, {len(r.lines)} entries")


if __name__ == "__main__":
    main()
