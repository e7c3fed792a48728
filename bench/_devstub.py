"""A stand-in MCP memory server with compactor's tool names and contract, for testing harnesses only.

Not a benchmark target and not used by default: it exists so that the benchmark's harness
(`python -m bench --server ...`) and the replay evaluation's (`python -m evals.replay --server ...`)
and their tests run without the real server. Naive on purpose (search counts the distinct query
words found as substrings, newest first on a tie; a JSON snapshot written on the event loop), so
its figures mean nothing. Field names follow the tool contract: `store` returns `id`, `query`
`items` with `id`, `get` returns `id`, `content`, `summary`, `tier`, `view`.

With auto-compaction on (the default; `configure(auto_compact=False)` turns it off) a store past
AUTO_COMPACT_AT of the budget archives the least important, oldest items (never the one just
stored), which `get` still returns, and then adds an archived digest item of its own, as
compactor's compaction adds summary items: a harness that reuses a server must empty it with `list`.

Run: ``python bench/_devstub.py [--budget N] [--state-dir DIR] [--snapshot-interval S]``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
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

# Mirror the spec's auto-compaction thresholds.
AUTO_COMPACT_AT = 0.9
COMPACT_DOWN_TO = 0.8
CHARS_PER_TOKEN = 4  # a rough token estimate: the stub has no tokenizer

_WORD = re.compile(r"\w{2,}")


@dataclass
class _Item:
    id: str
    order: int
    content: str
    summary: str | None
    tags: list[str]
    importance: int
    pinned: bool
    tier: str = "active"
    view: str = "content"

    def tokens(self) -> int:
        text = self.summary if self.view == "summary" and self.summary else self.content
        return len(text) // CHARS_PER_TOKEN + 1


@dataclass
class _State:
    budget: int = 100_000
    auto_compact: bool = True
    items: dict[str, _Item] = field(default_factory=dict)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    dirty: bool = False
    state_dir: Path | None = None
    last_snapshot_at: float | None = None
    last_snapshot_ms: float | None = None

    def used(self) -> int:
        return sum(i.tokens() for i in self.items.values() if i.tier == "active")

    def add(
        self, content: str, summary: str | None, tags: list[str], importance: int, pinned: bool, *, made: bool = False
    ) -> _Item:
        """A new item; `made`: one the server made itself (a digest, archived at once)."""
        if not content.strip():
            raise ValueError("content is empty: pass the text to remember")
        order = next(self.counter)
        item = _Item(f"{'d' if made else 'm'}{order:05d}", order, content, summary, tags, importance, pinned)
        if made:
            item.tier = "archived"
        self.items[item.id] = item
        self.dirty = True
        return item

    def auto_compact_after(self, stored: _Item) -> list[str]:
        """Archive the least important, oldest items down to COMPACT_DOWN_TO once past AUTO_COMPACT_AT."""
        if not self.auto_compact or self.used() <= AUTO_COMPACT_AT * self.budget:
            return []
        victims = sorted(
            (i for i in self.items.values() if i.tier == "active" and not i.pinned and i.id != stored.id),
            key=lambda i: (i.importance, i.order),
        )
        used, archived = self.used(), []
        for victim in victims:
            if used <= COMPACT_DOWN_TO * self.budget:
                break
            victim.tier = "archived"
            used -= victim.tokens()
            archived.append(victim.id)
        if archived:
            # Like compactor's summary nodes: an item the server made itself (archived, so inert).
            self.add(
                f"digest of {len(archived)} archived items: {' '.join(archived)}", None, ["digest"], 1, False, made=True
            )
        return archived

    def snapshot(self) -> None:
        if self.state_dir is None:
            return
        started = time.perf_counter()
        path = self.state_dir / "snapshot.json"
        tmp = path.with_suffix(".tmp")
        next_order = max((i.order for i in self.items.values()), default=0) + 1
        tmp.write_text(json.dumps({"next": next_order, "items": [asdict(i) for i in self.items.values()]}))
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
            self.counter = itertools.count(data["next"])
            self.items = {d["id"]: _Item(**d) for d in data["items"]}


def _tags(value: list[str] | str | None) -> list[str]:
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else value
    return [p.strip() for p in parts if p.strip()]


def _no_item(item_id: str) -> ValueError:
    return ValueError(f"no item {item_id!r}: use an id returned by store or query")


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

    def brief(item: _Item, score: float = 0.0) -> dict[str, Any]:
        return {"id": item.id, "score": score, "preview": (item.summary or item.content)[:80], "tier": item.tier}

    @server.tool()
    async def store(
        content: str,
        summary: str | None = None,
        tags: list[str] | str | None = None,
        importance: int = 5,
        pinned: bool = False,
    ) -> dict[str, Any]:
        """Store a memory item."""
        item = state.add(content, summary, _tags(tags), importance, pinned)
        archived = state.auto_compact_after(item)
        return {"id": item.id, "tokens": item.tokens(), "tokens_used": state.used(), "archived": archived}

    @server.tool()
    async def bulk_store(items: list[dict[str, Any]]) -> dict[str, Any]:
        """Store several items."""
        added = [
            state.add(
                i["content"], i.get("summary"), _tags(i.get("tags")), int(i.get("importance", 5)), bool(i.get("pinned"))
            )
            for i in items
        ]
        if added:
            state.auto_compact_after(added[-1])
        return {"ids": [i.id for i in added], "stored": len(added)}

    @server.tool()
    async def query(
        query: str | None = None, tags: list[str] | None = None, limit: int = 10, include_archived: bool = False
    ) -> dict[str, Any]:
        """Find stored items by words of the query."""
        words = sorted({w.lower() for w in _WORD.findall(query or "")})
        scored = []
        for item in state.items.values():
            if item.tier != "active" and not include_archived:
                continue
            lowered = item.content.lower()
            hits = sum(1 for w in words if w in lowered)
            if hits:
                scored.append((hits, item.order, item))
        scored.sort(key=lambda t: (-t[0], -t[1]))
        state.dirty = True  # compactor records the access: a query is a write for the snapshot
        return {"items": [brief(i, float(h)) for h, _, i in scored[:limit]], "total": len(scored)}

    @server.tool()
    async def get(id: str) -> dict[str, Any]:
        """Return one item in full, whatever its tier."""
        item = state.items.get(id)
        if item is None:
            raise _no_item(id)
        return {k: v for k, v in asdict(item).items() if k != "order"}

    @server.tool()
    async def forget(id: str) -> dict[str, Any]:
        """Delete one item permanently."""
        if state.items.pop(id, None) is None:
            raise _no_item(id)
        state.dirty = True
        return {"id": id, "forgotten": True}

    @server.tool(name="list")
    async def list_items(offset: int = 0, limit: int = 20, tier: str = "active") -> dict[str, Any]:
        """Items newest first."""
        newest = sorted(state.items.values(), key=lambda i: -i.order)
        chosen = [i for i in newest if tier in ("all", i.tier)][offset : offset + limit]
        return {"items": [{"id": i.id, "tier": i.tier} for i in chosen]}

    @server.tool()
    async def recall(limit: int = 20, query: str | None = None) -> dict[str, Any]:
        """The most important active items."""
        active = sorted((i for i in state.items.values() if i.tier == "active"), key=lambda i: (-i.importance, i.order))
        return {"items": [brief(i) for i in active[:limit]], "more": max(0, len(active) - limit)}

    @server.tool()
    async def compact(target_usage: float = 0.7) -> dict[str, Any]:
        """Summary views first, then the archive, down to target_usage of the budget."""
        before = state.used()
        archived = promoted = 0
        goal = int(state.budget * target_usage)
        for item in sorted(state.items.values(), key=lambda i: (i.importance, i.order)):
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
        """Budget, tokens used, items per tier, persistence."""
        active = sum(1 for i in state.items.values() if i.tier == "active")
        return {
            "token_budget": state.budget,
            "tokens_used": state.used(),
            "active_items": active,
            "archived_items": len(state.items) - active,
            "auto_compact": state.auto_compact,
            "persistence": {
                "state_dir": str(state.state_dir) if state.state_dir else None,
                "last_snapshot_at": state.last_snapshot_at,
                "last_snapshot_ms": state.last_snapshot_ms,
            },
        }

    @server.tool()
    async def configure(token_budget: int | None = None, auto_compact: bool | None = None) -> dict[str, Any]:
        """Set the budget or auto-compaction."""
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
