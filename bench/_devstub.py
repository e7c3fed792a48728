"""A development stand-in with the compactor's tool names, for testing the harness only.

Not a benchmark target and not used by default: it exists so the harness and its smoke test can
run without the real server. Naive on purpose (linear search, JSON snapshot written on the event
loop), so its figures mean nothing. Field names follow the tool contract (issue 2).

Run: ``python bench/_devstub.py [--budget N] [--state-dir DIR] [--snapshot-interval S]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

logger = logging.getLogger("bench.devstub")

_WORD = re.compile(r"[a-z0-9]{2,}")


@dataclass
class _Item:
    id: str
    content: str
    summary: str | None
    tags: list[str]
    importance: int
    pinned: bool
    tier: str = "active"
    view: str = "content"

    def tokens(self) -> int:
        text = self.summary if self.view == "summary" and self.summary else self.content
        return max(1, len(text) // 4)


@dataclass
class _State:
    budget: int = 100_000
    auto_compact: bool = True
    items: dict[str, _Item] = field(default_factory=dict)
    next_id: int = 1
    dirty: bool = False
    state_dir: Path | None = None
    last_snapshot_at: float | None = None
    last_snapshot_ms: float | None = None

    def used(self) -> int:
        return sum(i.tokens() for i in self.items.values() if i.tier == "active")

    def snapshot(self) -> None:
        if self.state_dir is None:
            return
        started = time.perf_counter()
        path = self.state_dir / "snapshot.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"next_id": self.next_id, "items": [asdict(i) for i in self.items.values()]}))
        os.replace(tmp, path)
        self.dirty = False
        self.last_snapshot_at = time.time()
        self.last_snapshot_ms = (time.perf_counter() - started) * 1000

    def load(self) -> None:
        if self.state_dir is None:
            return
        path = self.state_dir / "snapshot.json"
        if path.exists():
            data = json.loads(path.read_text())
            self.next_id = data["next_id"]
            self.items = {d["id"]: _Item(**d) for d in data["items"]}


def _tags(value: list[str] | str | None) -> list[str]:
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else value
    return [p.strip() for p in parts if p.strip()]


def build_server(state: _State, interval: float) -> MCPServer:
    @contextlib.asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[None]:
        async def snapshot_loop() -> None:
            while True:
                await anyio.sleep(interval)
                if state.dirty:
                    state.snapshot()

        async with anyio.create_task_group() as tg:
            tg.start_soon(snapshot_loop)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                state.snapshot()

    server = MCPServer(name="bench-devstub", lifespan=lifespan)

    def add(content: str, summary: str | None, tags: list[str] | str | None, importance: int, pinned: bool) -> str:
        if not content.strip():
            raise ValueError("content is empty")
        item_id = f"m{state.next_id}"
        state.next_id += 1
        state.items[item_id] = _Item(item_id, content, summary, _tags(tags), importance, pinned)
        state.dirty = True
        return item_id

    def brief(item: _Item, score: float = 0.0) -> dict[str, Any]:
        return {
            "id": item.id,
            "score": score,
            "preview": (item.summary or item.content)[:80],
            "tier": item.tier,
        }

    @server.tool()
    async def store(
        content: str,
        summary: str | None = None,
        tags: list[str] | str | None = None,
        importance: int = 5,
        pinned: bool = False,
    ) -> dict[str, Any]:
        item_id = add(content, summary, tags, importance, pinned)
        return {"id": item_id, "tokens": state.items[item_id].tokens(), "tokens_used": state.used()}

    @server.tool()
    async def bulk_store(items: list[dict[str, Any]]) -> dict[str, Any]:
        ids = [
            add(
                i["content"],
                i.get("summary"),
                i.get("tags"),
                int(i.get("importance", 5)),
                bool(i.get("pinned", False)),
            )
            for i in items
        ]
        return {"ids": ids, "stored": len(ids)}

    @server.tool()
    async def query(query: str | None = None, tags: list[str] | None = None, limit: int = 10) -> dict[str, Any]:
        words = set(_WORD.findall((query or "").lower()))
        scored = []
        for item in state.items.values():
            if item.tier != "active":
                continue
            hits = len(words & set(_WORD.findall(item.content.lower())))
            if hits:
                scored.append((hits, item.id, item))
        scored.sort(key=lambda t: (-t[0], t[1]))
        state.dirty = True
        return {"items": [brief(i, float(h)) for h, _, i in scored[:limit]], "total": len(scored)}

    @server.tool()
    async def get(id: str) -> dict[str, Any]:
        item = state.items.get(id)
        if item is None:
            raise ValueError(f"no item {id}")
        return asdict(item)

    @server.tool()
    async def recall(limit: int = 20, query: str | None = None) -> dict[str, Any]:
        active = sorted((i for i in state.items.values() if i.tier == "active"), key=lambda i: (-i.importance, i.id))
        return {"items": [brief(i) for i in active[:limit]], "more": max(0, len(active) - limit)}

    @server.tool()
    async def compact(target_usage: float = 0.7) -> dict[str, Any]:
        before = state.used()
        archived = promoted = 0
        goal = int(state.budget * target_usage)
        for item in sorted(state.items.values(), key=lambda i: (i.importance, i.id)):
            if state.used() <= goal:
                break
            if item.tier != "active" or item.pinned:
                continue
            if item.summary and item.view == "content":
                item.view = "summary"
                promoted += 1
            else:
                item.tier = "archived"
                archived += 1
        state.dirty = True
        return {
            "promoted": promoted,
            "deduplicated": 0,
            "archived": archived,
            "tokens_before": before,
            "tokens_after": state.used(),
            "needs_summary": [],
        }

    @server.tool()
    async def status() -> dict[str, Any]:
        active = sum(1 for i in state.items.values() if i.tier == "active")
        return {
            "token_budget": state.budget,
            "tokens_used": state.used(),
            "active_items": active,
            "archived_items": len(state.items) - active,
            "persistence": {
                "state_dir": str(state.state_dir) if state.state_dir else None,
                "last_snapshot_at": state.last_snapshot_at,
                "last_snapshot_ms": state.last_snapshot_ms,
            },
        }

    @server.tool()
    async def configure(token_budget: int | None = None, auto_compact: bool | None = None) -> dict[str, Any]:
        if token_budget is not None:
            state.budget = token_budget
        if auto_compact is not None:
            state.auto_compact = auto_compact
        return {"token_budget": state.budget, "auto_compact": state.auto_compact}

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=int, default=100_000)
    parser.add_argument("--state-dir", type=Path)
    parser.add_argument("--snapshot-interval", type=float, default=30.0)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper())
    state = _State(budget=args.budget, state_dir=args.state_dir)
    if state.state_dir is not None:
        state.state_dir.mkdir(parents=True, exist_ok=True)
        state.load()
    build_server(state, args.snapshot_interval).run("stdio")


if __name__ == "__main__":
    main()
