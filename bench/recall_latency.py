"""recall p50 latency at N items (ISSUE 19: <= 10 ms at 10,000 over stdio).

In process (the Store alone), or with --stdio: a `python -m compactor` server on a fresh state
dir, filled with the same N items by bulk_store, then timed from the client's side, each
recall a full tools/call round trip over the pipes (after RUNS_WARM untimed calls), by a bare
JSON-RPC client (a client library adds its own work: the SDK's Client checks each result
against the tool's output schema).

    python -m bench.recall_latency [N] [--stdio] [--runs 30] [--server "CMD"]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compactor.store import Store

QUERIES: tuple[tuple[str, str | None], ...] = (("no query", None), ("query", "fix w12 in mod42 w99"))
RUNS_WARM = 3  # a server's first calls also pay for lazy start-up work (token ranks, caches)
BULK = 1_000


def items(n: int) -> list[dict[str, Any]]:
    """N synthetic reads of 500 files, importance 1-9: the same for every mode."""
    rnd = random.Random(7)
    words = [f"w{i}" for i in range(2_000)]
    return [
        {
            "content": f"$ cat src/mod{i % 500}.py\n{' '.join(rnd.choices(words, k=30))}",
            "tags": ["observation"],
            "importance": rnd.randint(1, 9),
        }
        for i in range(n)
    ]


def in_process(n: int, runs: int) -> None:
    s = Store(budget=100_000_000)
    for it in items(n):
        s.store(it["content"], summary=None, tags=it["tags"], importance=it["importance"])
    for label, q in QUERIES:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            r = s.recall(query=q)
            times.append((time.perf_counter() - t0) * 1000)
        print(f"{n:,} items, {label}: p50 {statistics.median(times):.1f} ms, {r.tokens} tokens, {len(r.lines)} entries")


class RawClient:
    """Line-delimited JSON-RPC over the server's pipes, with no client-side checks: what the
    server and the pipes cost, not a client library's own work (the SDK's Client validates
    every structured result against the tool's output schema)."""

    def __init__(self, argv: list[str], cwd: str) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd
        )
        self.next_id = 0
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}
        self.request("initialize", init)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdout is not None
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise EOFError("the server closed stdout")
            reply: dict[str, Any] = json.loads(line)
            if reply.get("id") == self.next_id:
                if "result" not in reply or reply["result"].get("isError"):
                    raise RuntimeError(f"{method} failed: {str(reply)[:300]}")
                return reply["result"]  # type: ignore[no-any-return]

    def cpu_seconds(self) -> float:
        """The server process's user + system CPU time so far (Linux /proc): unlike wall time, it
        does not grow while the process waits for a core on a shared machine."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


def timed(call: Callable[[], Any], runs: int) -> list[float]:
    for _ in range(RUNS_WARM):
        call()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def over_stdio(n: int, runs: int, server: str) -> None:
    with tempfile.TemporaryDirectory(prefix="recall-latency-") as state:
        argv = [*shlex.split(server), "--state-dir", state, "--budget", "100000000"]
        client = RawClient(argv, cwd=state)
        try:
            batch = items(n)
            for i in range(0, n, BULK):
                client.request("tools/call", {"name": "bulk_store", "arguments": {"items": batch[i : i + BULK]}})
            for label, q in QUERIES:
                params = {"name": "recall", "arguments": {"query": q} if q else {}}
                cpu = client.cpu_seconds()
                times = timed(lambda p=params: client.request("tools/call", p), runs)  # type: ignore[misc]
                cpu_ms = (client.cpu_seconds() - cpu) * 1000 / (runs + RUNS_WARM)
                tokens = client.request("tools/call", params)["structuredContent"]["tokens"]
                print(
                    f"{n:,} items over stdio, {label}: p50 {statistics.median(times):.1f} ms "
                    f"(min {min(times):.1f}, max {max(times):.1f}), server CPU {cpu_ms:.1f} ms a call, "
                    f"{tokens} tokens"
                )
        finally:
            client.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("n", nargs="?", type=int, default=10_000)
    p.add_argument("--stdio", action="store_true", help="time recall over stdio against a server process")
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--server", default=f"{shlex.quote(sys.executable)} -m compactor")
    a = p.parse_args()
    if a.stdio:
        over_stdio(a.n, a.runs, a.server)
    else:
        in_process(a.n, a.runs)


if __name__ == "__main__":
    main()
