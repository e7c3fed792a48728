"""A tiny stand-in MCP memory server (store, query, get, forget, list, status) for bench.replay.

Scoring is deliberately naive (distinct query words found as substrings); it is a baseline for
the harness, not a model of compactor. It keeps the tool contract of compactor: `store` returns
`id`, `query` returns `items` with `id`, `get` returns `id`, `content`, `summary`, `tier`, `view`.
Over budget it archives the least important, oldest items (never the one just stored), and
`get` still returns them; it then adds an archived digest item of its own, as compactor's
compaction adds summary items, so the harness must empty a reused server with `list`.

Run: python -m bench._replay_stub [--budget N]
"""

from __future__ import annotations

import argparse
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

# ---- stub constants (mirror the spec's auto-compaction thresholds) ----
AUTO_COMPACT_AT = 0.9
COMPACT_DOWN_TO = 0.8
CHARS_PER_TOKEN = 4  # rough token estimate; the stub has no tokenizer
# -----------------------------------------------------------------------

_WORD = re.compile(r"\w{2,}")


class StoreResult(BaseModel):
    id: str
    tokens: int
    archived: list[str]


class QueryItem(BaseModel):
    id: str
    score: float
    summary: str


class QueryResult(BaseModel):
    items: list[QueryItem]


class ForgetResult(BaseModel):
    id: str
    forgotten: bool


class ListItem(BaseModel):
    id: str
    tier: str


class ListResult(BaseModel):
    items: list[ListItem]


class StatusResult(BaseModel):
    token_budget: int
    tokens_used: int
    active_items: int
    archived_items: int


class GetResult(BaseModel):
    id: str
    content: str
    summary: str | None
    tier: str
    view: str


@dataclass
class _Item:
    id: str
    order: int
    content: str
    lowered: str
    summary: str | None
    tags: list[str]
    importance: int
    tokens: int
    tier: str = "active"


@dataclass
class StubMemory:
    budget: int
    items: dict[str, _Item] = field(default_factory=dict)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def used(self) -> int:
        return sum(i.tokens for i in self.items.values() if i.tier == "active")

    def store(self, content: str, summary: str | None, tags: list[str], importance: int) -> StoreResult:
        if not content.strip():
            raise ValueError("content is empty: pass the text to remember")
        order = next(self.counter)
        item = _Item(
            id=f"m{order:05d}",
            order=order,
            content=content,
            lowered=content.lower(),
            summary=summary,
            tags=tags,
            importance=importance,
            tokens=len(content) // CHARS_PER_TOKEN + 1,
        )
        self.items[item.id] = item
        archived: list[str] = []
        if self.used() > AUTO_COMPACT_AT * self.budget:
            victims = sorted(
                (i for i in self.items.values() if i.tier == "active" and i.id != item.id),
                key=lambda i: (i.importance, i.order),
            )
            used = self.used()
            for victim in victims:
                if used <= COMPACT_DOWN_TO * self.budget:
                    break
                victim.tier = "archived"
                used -= victim.tokens
                archived.append(victim.id)
        if archived:
            self._add_digest(archived)
        return StoreResult(id=item.id, tokens=item.tokens, archived=archived)

    def _add_digest(self, archived: list[str]) -> None:
        """Like compactor's summary nodes: an item the server made itself (archived, so inert)."""
        order = next(self.counter)
        content = f"digest of {len(archived)} archived items: {' '.join(archived)}"
        self.items[f"d{order:05d}"] = _Item(
            id=f"d{order:05d}",
            order=order,
            content=content,
            lowered=content.lower(),
            summary=None,
            tags=["digest"],
            importance=1,
            tokens=len(content) // CHARS_PER_TOKEN + 1,
            tier="archived",
        )

    def query(self, text: str, limit: int, include_archived: bool) -> QueryResult:
        words = sorted({w.lower() for w in _WORD.findall(text)})
        scored: list[tuple[float, int, _Item]] = []
        for item in self.items.values():
            if item.tier != "active" and not include_archived:
                continue
            hits = sum(1 for w in words if w in item.lowered)
            if hits:
                scored.append((float(hits), item.order, item))
        scored.sort(key=lambda t: (-t[0], -t[1]))
        return QueryResult(
            items=[
                QueryItem(id=i.id, score=s, summary=i.summary or i.content[:80]) for s, _, i in scored[:limit]
            ]
        )

    def get(self, item_id: str) -> GetResult:
        item = self.items.get(item_id)
        if item is None:
            raise ValueError(f"no item {item_id!r}: use an id returned by store or query")
        return GetResult(
            id=item.id, content=item.content, summary=item.summary, tier=item.tier, view="content"
        )

    def forget(self, item_id: str) -> ForgetResult:
        if self.items.pop(item_id, None) is None:
            raise ValueError(f"no item {item_id!r}: use an id returned by store or query")
        return ForgetResult(id=item_id, forgotten=True)

    def list_items(self, offset: int, limit: int, tier: str) -> ListResult:
        newest = sorted(self.items.values(), key=lambda i: -i.order)
        chosen = [i for i in newest if tier in ("all", i.tier)][offset : offset + limit]
        return ListResult(items=[ListItem(id=i.id, tier=i.tier) for i in chosen])

    def status(self) -> StatusResult:
        active = sum(1 for i in self.items.values() if i.tier == "active")
        return StatusResult(
            token_budget=self.budget,
            tokens_used=self.used(),
            active_items=active,
            archived_items=len(self.items) - active,
        )


def build_server(budget: int) -> MCPServer:
    memory = StubMemory(budget=budget)
    server = MCPServer("replay-stub")

    @server.tool()
    def store(
        content: str,
        summary: str | None = None,
        tags: list[str] | str | None = None,
        importance: int = 5,
        pinned: bool = False,
    ) -> StoreResult:
        """Store a memory item."""
        tag_list = [t.strip() for t in tags.split(",")] if isinstance(tags, str) else list(tags or [])
        return memory.store(content, summary, tag_list, importance)

    @server.tool()
    def query(
        query: str | None = None,
        tags: list[str] | None = None,
        limit: int = 10,
        include_archived: bool = False,
    ) -> QueryResult:
        """Find stored items by words of the query."""
        return memory.query(query or "", limit, include_archived)

    @server.tool()
    def get(id: str) -> GetResult:
        """Return one item in full, whatever its tier."""
        return memory.get(id)

    @server.tool()
    def forget(id: str) -> ForgetResult:
        """Delete one item permanently."""
        return memory.forget(id)

    @server.tool(name="list")
    def list_tool(offset: int = 0, limit: int = 20, tier: str = "active") -> ListResult:
        """Items newest first."""
        return memory.list_items(offset, limit, tier)

    @server.tool()
    def status() -> StatusResult:
        """Budget, tokens used, items per tier."""
        return memory.status()

    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="stand-in memory server for bench.replay")
    parser.add_argument("--budget", type=int, default=100_000)
    args = parser.parse_args(argv)
    build_server(args.budget).run("stdio")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
