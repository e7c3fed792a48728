"""What the Store's commands return: plain result records, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..models import CompactReport, Item, Settings


@dataclass(slots=True)
class Stored:
    item: Item
    compaction: CompactReport | None
    redacted: dict[str, int] = field(default_factory=dict)  # kind -> count


@dataclass(slots=True)
class BulkStored:
    items: list[Item]
    compaction: CompactReport | None
    skipped: list[str] = field(default_factory=list)  # explicit ids that already existed
    redacted: dict[str, int] = field(default_factory=dict)  # kind -> count, over all items


@dataclass(slots=True)
class ImportedRecords(BulkStored):
    dropped_nodes: list[str] = field(default_factory=list)  # summary nodes left out: children missing


@dataclass(slots=True)
class Pruned:
    items: list[Item]  # removed, or that would be without `apply`
    bytes: int  # UTF-8 bytes of their content and summaries
    tokens: int
    archived_tokens: int  # the archive's size before
    max_archive_tokens: int
    applied: bool


@dataclass(slots=True)
class Updated:
    item: Item
    warnings: list[str]


@dataclass(slots=True)
class Hit:
    item: Item
    score: float
    matched: tuple[str, ...]
    # The question this hit replies to, whose score it gained (a question in words; search.py).
    reply_to: str | None = None


@dataclass(slots=True)
class Recall:
    pinned: list[Item]
    items: list[tuple[Item, float]]
    lines: list[str]
    more: int
    tokens: int
    left_out: list[str] = field(default_factory=list)
    needs_text: list[str] = field(default_factory=list)
    text: str = ""


@dataclass(slots=True)
class Page:
    items: list[Item]
    total: int
    offset: int


@dataclass(slots=True)
class Status:
    token_budget: int
    tokens_used: int
    active_items: int
    archived_items: int
    per_type: dict[str, dict[str, int]]
    settings: Settings
    token_counter: str
    persistence: dict[str, Any]
    pinned_items: int = 0
    needs_summary: int = 0


@dataclass(slots=True)
class ExportPage:
    items: list[Item]
    next_cursor: str | None
    total: int
    # (id, start, end): the one item of this page whose content is given only in part, from
    # character `start` to `end` (an item larger than a page goes over several).
    part: tuple[str, int, int] | None = None
