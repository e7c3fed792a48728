"""The domain's records. Plain dataclasses: no MCP, no I/O."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Literal

from . import constants as C

ContentType = Literal["error", "code", "decision", "tool_output", "prose"]
Tier = Literal["active", "archived"]
View = Literal["content", "summary"]
CONTENT_TYPES: tuple[ContentType, ...] = ("error", "code", "decision", "tool_output", "prose")


# A journal op, as written to the journal and applied by `Store._apply`:
# {"op": "put", "item": record} | {"op": "patch", "id", "set": changes} | {"op": "del", "id"}
# | {"op": "config", "set": settings}.
Op = dict[str, Any]


@dataclass(slots=True)
class Item:
    """One memory. Treated as immutable: every change makes a new Item (`Store._apply` makes it
    with `Item.evolve`) and nothing assigns to a field, so a snapshot can take a consistent
    picture of the store by copying a dict of references, without locking the event loop.
    Not `frozen=True` only because frozen construction costs twice as much, which a cold start
    of 100k items pays 100k times."""

    id: str
    seq: int
    content: str
    summary: str | None
    tags: tuple[str, ...]
    importance: int
    content_type: ContentType
    pinned: bool
    created_at: float
    last_accessed_at: float
    access_count: int
    content_tokens: int
    summary_tokens: int
    tier: Tier = "active"
    view: View = "content"
    merged_into: str | None = None
    dup_of: str | None = None  # a near-duplicate noticed on arrival; compaction merges the pair
    # Summary-DAG lineage: depth 0 is a raw item; a summary node has depth >= 1 and children.
    depth: int = 0
    children: tuple[str, ...] = ()
    parents: tuple[str, ...] = ()
    quality: str | None = None
    gone_children: tuple[str, ...] = ()
    # Where a summary node's children were when it was made: dissolve puts them back there.
    children_tier: Tier = "archived"
    scope: str = ""
    # (tag, id of the item it came from) for tags gained when near-duplicates merged into this
    # one: forgetting that item takes back the tags only it gave.
    tags_from: tuple[tuple[str, str], ...] = ()
    # A file view (views.py): the tool output shows these files' lines, made by this command
    # ("sed", "grep", "write", ...); the lines (first, last; last 0 = to the end) when known.
    file_command: str | None = None
    file_paths: tuple[str, ...] = ()
    file_lines: tuple[int, ...] = ()
    # On a team server with a tokens file: the name of the person who stored the item, and of
    # the last one whose call changed it (compaction included). None: no person was named.
    stored_by: str | None = None
    changed_by: str | None = None

    @property
    def view_tokens(self) -> int:
        """What this item costs the budget while active."""
        return self.summary_tokens if self.view == "summary" and self.summary else self.content_tokens

    def to_record(self) -> dict[str, Any]:
        # What dataclasses.asdict gives (no field holds a mutable value), 15x cheaper.
        return dict(zip(_FIELD_ORDER, _ALL_FIELDS(self), strict=True))

    def evolve(self, changes: dict[str, Any]) -> Item:
        """A copy with `changes` applied: what dataclasses.replace does, without its per-call
        checks, as compaction patches thousands of items in one call."""
        new = Item(*_ALL_FIELDS(self))
        for key, value in changes.items():
            setattr(new, key, value)
        return new

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Item:
        if len(record) == len(_FIELD_ORDER) and cls is Item:
            # A record this version wrote has exactly the fields: no filtering (a cold start
            # makes 100k of these).
            try:
                return _from_full_record(record)
            except (KeyError, TypeError):
                pass
        known = _FIELD_NAMES
        data = {k: v for k, v in record.items() if k in known}
        for key in TUPLE_FIELDS:
            if key in data:
                data[key] = tuple(data[key])
        if "tags_from" in data:
            data["tags_from"] = pairs(data["tags_from"])
        return cls(**data)


def pairs(value: Any) -> tuple[tuple[str, str], ...]:
    """`tags_from` as tuples: JSON brings it back as a list of lists."""
    return tuple((tag, source) for tag, source in value)


# Tuple fields: JSON (records, journal patches) brings them back as lists.
TUPLE_FIELDS: tuple[str, ...] = ("tags", "children", "parents", "gone_children", "file_paths", "file_lines")
_FIELD_ORDER = tuple(f.name for f in fields(Item))
_FIELD_NAMES = frozenset(_FIELD_ORDER)
_ALL_FIELDS = attrgetter(*_FIELD_ORDER)


def _full_record_reader() -> Callable[[dict[str, Any]], Item]:
    """`Item(record["id"], record["seq"], ...)` over every field in order, the tuple fields
    made tuples: one positional call, compiled once from the field list (as dataclasses
    compiles __init__). Keyword construction and then a setattr per tuple field cost ~3x as
    much, 100k times at a cold start."""

    def value(name: str) -> str:
        if name == "tags_from":
            # Nearly always empty: pairs() made a generator for each of those (~10% of a read).
            return "(pairs(r['tags_from']) if r['tags_from'] else ())"
        if name in _INTERNED:
            return f"tuple(map(intern, r[{name!r}]))" if name in TUPLE_FIELDS else f"intern(r[{name!r}])"
        if name in _POOLED:
            return f"pooled(r[{name!r}], r[{name!r}])"
        return f"tuple(r[{name!r}])" if name in TUPLE_FIELDS else f"r[{name!r}]"

    namespace: dict[str, Any] = {"Item": Item, "pairs": pairs, "intern": sys.intern, "pooled": _POOL.setdefault}
    exec("def read(r):\n    return Item(" + ", ".join(map(value, _FIELD_ORDER)) + ")\n", namespace)
    reader: Callable[[dict[str, Any]], Item] = namespace["read"]
    return reader


# String fields whose few values repeat across items, shared by one str object each instead of
# one per item as parsing makes them (~30% of a loaded item's memory: 45 MiB at 100k items).
# Values from a fixed set in the code (None included) come from a pool; tags and scopes,
# which a client names, are interned, so they are freed with the last item that holds them.
_POOLED = frozenset({"content_type", "tier", "view", "children_tier", "file_command"})
_INTERNED = frozenset({"tags", "scope"})
_POOL: dict[str | None, str | None] = {}
_from_full_record = _full_record_reader()


@dataclass(slots=True)
class Settings:
    """Runtime-configurable settings. `budget_source` records who set the budget, so a later
    client handshake never overrides a budget a person or the agent chose."""

    token_budget: int
    budget_source: Literal["default", "client", "cli", "configure"] = "default"
    auto_compact: bool = True
    auto_compact_threshold: float = C.AUTO_COMPACT_THRESHOLD
    recall_tokens: int = C.RECALL_TOKENS_DEFAULT
    max_items: int = C.MAX_ITEMS_DEFAULT
    max_archive_tokens: int = C.MAX_ARCHIVE_TOKENS_DEFAULT

    def to_record(self) -> dict[str, Any]:
        return {
            "token_budget": self.token_budget,
            "budget_source": self.budget_source,
            "auto_compact": self.auto_compact,
            "auto_compact_threshold": self.auto_compact_threshold,
            "recall_tokens": self.recall_tokens,
            "max_items": self.max_items,
            "max_archive_tokens": self.max_archive_tokens,
        }


@dataclass(slots=True)
class CompactReport:
    tokens_before: int
    tokens_after: int
    target_tokens: int
    promoted: list[str] = field(default_factory=list)
    deduplicated: list[tuple[str, str]] = field(default_factory=list)  # (archived id, survivor id)
    archived: list[str] = field(default_factory=list)
    needs_summary: list[str] = field(default_factory=list)
    condensed: list[str] = field(default_factory=list)
    needs_text: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # always empty: nothing is dropped automatically
    trigger: Literal["manual", "auto"] = "manual"

    @property
    def changed(self) -> bool:
        return bool(self.promoted or self.deduplicated or self.archived or self.condensed)
