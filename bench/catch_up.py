"""The first call after another process's snapshot rotated the journal, against a normal call
(issue 38, point 13: a reload of 0.6-2.2 s at 20k items; goal within 3x a normal call).

Two `python -m compactor --no-share` servers on one state dir of N items: the writer stores one
item and its background snapshot (every --snapshot-interval) rotates the journal; the reader is
then timed on a `get`, the first call after the rotation, and on the `get` after that, a normal
call. In process (--in-process): two Stores on one dir, the writer's snapshot called directly.

    python -m bench.catch_up [N] [--rounds 15] [--in-process]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from bench.recall_latency import BULK, RawClient, items
from compactor.store import Store, StoreInput

SNAPSHOT_INTERVAL_S = 0.3


def journal_gen(state: Path) -> int:
    with open(state / "journal.jsonl", "rb") as fh:
        return int(fh.readline().split(b'"gen":')[1].split(b"}")[0])


def over_stdio(n: int, rounds: int, server: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="catch-up-") as tmp:
        state = Path(tmp) / "state"
        base = [*shlex.split(server), "--state-dir", str(state), "--no-share", "--budget", "100000000"]
        writer = RawClient([*base, "--snapshot-interval", str(SNAPSHOT_INTERVAL_S)], cwd=tmp)
        reader = RawClient([*base, "--snapshot-interval", "3600"], cwd=tmp)
        try:
            batch = items(n)
            for i in range(0, n, BULK):
                writer.request("tools/call", {"name": "bulk_store", "arguments": {"items": batch[i : i + BULK]}})
            some = writer.request("tools/call", {"name": "store", "arguments": {"content": "probe"}})
            probe = {"name": "get", "arguments": {"id": some["structuredContent"]["id"]}}
            reader.request("tools/call", probe)
            first, normal = [], []
            for r in range(rounds):
                gen = journal_gen(state)
                writer.request("tools/call", {"name": "store", "arguments": {"content": f"round {r}"}})
                deadline = time.monotonic() + 30
                while journal_gen(state) == gen:  # the writer's background snapshot rotates
                    if time.monotonic() > deadline:
                        raise TimeoutError("the writer did not snapshot")
                    time.sleep(0.02)
                t0 = time.perf_counter()
                reader.request("tools/call", probe)
                first.append((time.perf_counter() - t0) * 1000)
                t0 = time.perf_counter()
                reader.request("tools/call", probe)
                normal.append((time.perf_counter() - t0) * 1000)
            return statistics.median(first), statistics.median(normal)
        finally:
            writer.close()
            reader.close()


def in_process(n: int, rounds: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="catch-up-") as tmp:
        writer = Store(state_dir=Path(tmp), budget=100_000_000)
        batch = items(n)
        for i in range(0, n, BULK):
            part = batch[i : i + BULK]
            writer.bulk_store([StoreInput(it["content"], None, it["tags"], it["importance"]) for it in part])
        writer.snapshot()
        reader = Store(state_dir=Path(tmp))
        probe = writer.ids()[0]
        first, normal = [], []
        for r in range(rounds):
            writer.store(f"round {r}")
            if r % 2:
                writer.snapshot()
            else:
                anyio.run(writer.snapshot_async)
            t0 = time.perf_counter()
            reader.get(probe)
            first.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            reader.get(probe)
            normal.append((time.perf_counter() - t0) * 1000)
        writer.close()
        reader.close()
        return statistics.median(first), statistics.median(normal)


def main() -> None:
    # The servers run this checkout's code, not an installed copy (their working directory is
    # a temp dir).
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = root + os.pathsep + os.environ.get("PYTHONPATH", "")
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("n", nargs="?", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--in-process", action="store_true")
    p.add_argument("--server", default=f"{shlex.quote(sys.executable)} -m compactor")
    a = p.parse_args()
    first, normal = in_process(a.n, a.rounds) if a.in_process else over_stdio(a.n, a.rounds, a.server)
    where = "in process" if a.in_process else "over stdio"
    print(
        f"{a.n:,} items {where}: first call after another process's rotation p50 {first:.2f} ms, "
        f"a normal call p50 {normal:.2f} ms ({first / normal:.1f}x)"
    )


if __name__ == "__main__":
    main()
