"""ISSUE 3's scenario over real stdio: 3,000 items into a 20,000-token budget."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support.stdio_client import StdioServer

TOPICS = ["auth", "billing", "search", "deploy", "cache", "ui"]


def item(i: int, rng: random.Random) -> dict[str, object]:
    topic = TOPICS[(i // 50) % len(TOPICS)]
    words = " ".join(f"{topic}{rng.randrange(400)}" for _ in range(25))
    return {"content": f"{topic} step {i}: touched src/{topic}/mod{i % 7}.py {words}", "tags": [topic]}


def walk(srv: StdioServer, node_id: str, seen: set[str]) -> None:
    offset = 0
    while True:
        page = srv.ok("expand", id=node_id, offset=offset, limit=200)
        for child in page["children"]:
            if child["id"] not in seen:
                seen.add(child["id"])
                if child["depth"]:
                    walk(srv, child["id"], seen)
        if page["next_offset"] is None:
            return
        offset = page["next_offset"]


@pytest.mark.slow
def test_three_thousand_items_twenty_thousand_tokens(state_dir: Path):
    rng = random.Random(7)
    stored: list[str] = []
    with StdioServer("--state-dir", str(state_dir), "--budget", "20000") as srv:
        for start in range(0, 3_000, 100):
            batch = [item(i, rng) for i in range(start, start + 100)]
            stored.extend(srv.ok("bulk_store", items=batch)["ids"])
            if start % 1_000 == 900:
                srv.ok("compact", target_usage=0.6)
        assert len(stored) == 3_000
        status = srv.ok("status")
        assert status["tokens_used"] <= 20_000

        tree = srv.ok("tree", max_depth=3)
        depths = {int(d): n for d, n in tree["nodes_per_depth"].items()}
        assert max(depths) >= 2, depths

        # Every item is active or reachable by expand from an active summary.
        reachable: set[str] = set()
        offset = 0
        while True:
            page = srv.ok("list", tier="active", offset=offset, limit=200)
            for it in page["items"]:
                reachable.add(it["id"])
                if it["depth"]:
                    walk(srv, it["id"], reachable)
            if page["next_offset"] is None:
                break
            offset = page["next_offset"]
        assert set(stored) <= reachable

        # One dissolve restores the level below.
        deep = next(r for r in tree["roots"] if srv.ok("get", id=r)["depth"] >= 2)
        below = srv.ok("get", id=deep)["children"]
        srv.ok("dissolve", id=deep)
        for child in below:
            got = srv.ok("get", id=child)
            assert got["tier"] == "active" and deep not in got["parents"]

        recall = srv.ok("recall", limit=50)
        assert recall["tokens"] <= status["recall_tokens"]
        print(f"DAG nodes per depth: {depths}; recall {recall['tokens']} tokens")  # for the closing note
