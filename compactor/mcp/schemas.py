"""The tools' structured results: pydantic models that become each tool's outputSchema.

Field names here are a public contract (scripts and other clients read them): add fields,
never rename or remove them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..models import CompactReport, Item
from ..render import item_preview


class _Reply(BaseModel):
    # Each model's validator is built on its first use, not at import: building all 23 took
    # ~7 ms of every start, and a start answers only its first few tools.
    model_config = ConfigDict(defer_build=True)


class Budget(_Reply):
    token_budget: int
    tokens_used: int
    usage: float = Field(description="tokens_used / token_budget")
    pinned_tokens: int = Field(default=0, description="active tokens of pinned items")
    pinned_over_budget: bool = Field(
        default=False, description="pinned items alone exceed the budget: only unpinning or a larger budget helps"
    )


class CompactionSummary(_Reply):
    trigger: Literal["manual", "auto"]
    promoted: int
    deduplicated: int
    archived: int
    condensed: int = 0
    dropped: int = Field(default=0, description="always 0: compaction deletes nothing (see `compactor prune`)")
    tokens_before: int
    tokens_after: int


class ItemBrief(_Reply):
    id: str
    content_type: str
    importance: int
    tags: list[str]
    tier: Literal["active", "archived"]
    view: Literal["content", "summary"]
    pinned: bool
    tokens: int = Field(description="tokens of the current view")
    preview: str = Field(description="the summary if any, else the start of the content")
    depth: int = 0


class ScoredItem(ItemBrief):
    score: float
    matched_terms: list[str] = Field(default_factory=list)
    archived: bool = False
    path: list[str] = Field(default_factory=list, description="ids from this item up to its active ancestor")
    covered_by: str | None = Field(default=None, description="the active summary covering an archived hit")
    reply_to: str | None = Field(default=None, description="the question this hit answers, whose words also found it")


class Redacted(_Reply):
    kind: str
    count: int


class StoreResult(_Reply):
    id: str
    tokens: int
    content_type: str
    tags: list[str]
    importance: int
    pinned: bool
    budget: Budget
    compaction: CompactionSummary | None = None
    redacted: list[Redacted] = Field(default_factory=list, description="credentials replaced before saving")


class BulkStoreResult(_Reply):
    ids: list[str]
    stored: int
    tokens: int
    budget: Budget
    compaction: CompactionSummary | None = None
    redacted: list[Redacted] = Field(default_factory=list)


class RecallResult(_Reply):
    budget: Budget
    items: list[ScoredItem]
    pinned: int
    more: int = Field(description="active items not shown")
    tokens: int = Field(description="tokens of the rendered recall text")
    text: str
    left_out: list[str] = Field(default_factory=list, description="some active ids not shown")
    needs_text: list[str] = Field(default_factory=list, description="summary nodes awaiting your text")


class QueryResult(_Reply):
    items: list[ScoredItem]
    count: int


class GetResult(_Reply):
    id: str
    content: str
    summary: str | None
    tier: Literal["active", "archived"]
    view: Literal["content", "summary"]
    tags: list[str]
    importance: int
    content_type: str
    pinned: bool
    created_at: float
    last_accessed_at: float
    access_count: int
    content_tokens: int
    summary_tokens: int
    merged_into: str | None
    depth: int
    parents: list[str]
    children: list[str]
    file_command: str | None = Field(default=None, description="the program of a file view (cat, sed, grep, write...)")
    file_paths: list[str] = Field(default_factory=list, description="files whose lines this item shows")
    file_lines: list[int] = Field(default_factory=list, description="[first, last] line shown; last 0: to the end")
    content_chars: int = Field(description="the whole content's length in characters; `content` may be a part")
    next_offset: int | None = Field(default=None, description="where the next part starts; null: nothing follows")


class StatusResult(_Reply):
    token_budget: int
    tokens_used: int
    usage_percent: float
    active_items: int
    archived_items: int
    pinned_items: int
    per_type: dict[str, dict[str, int]]
    auto_compact: bool
    auto_compact_threshold: float
    auto_compact_target: float
    recall_tokens: int
    budget_source: str
    token_counter: str
    persistence: dict[str, Any]
    scope: str = ""


class NeedsSummary(_Reply):
    id: str
    tokens: int
    preview: str


class NeedsText(_Reply):
    id: str
    depth: int
    instruction: str
    text: str


class ChildInfo(_Reply):
    id: str
    depth: int
    tier: Literal["active", "archived"]
    preview: str
    tokens: int


class ExpandResult(_Reply):
    id: str
    depth: int
    total: int
    offset: int
    next_offset: int | None
    gone: list[str]
    children: list[ChildInfo]


class DissolveResult(_Reply):
    id: str
    children: list[ChildInfo]
    budget: Budget


class TreeResult(_Reply):
    text: str
    roots: list[str]
    nodes_per_depth: dict[str, int]


class CompactResult(_Reply):
    promoted: int
    deduplicated: int
    archived: int
    tokens_before: int
    tokens_after: int
    target_tokens: int
    needs_summary: list[NeedsSummary]
    promoted_ids: list[str]
    archived_ids: list[str]
    merged: list[dict[str, str]] = Field(description="[{id, merged_into}] for deduplicated items")
    condensed: int = 0
    condensed_ids: list[str] = Field(default_factory=list)
    needs_text: list[NeedsText] = Field(default_factory=list)


class ItemResult(_Reply):
    id: str
    tier: Literal["active", "archived"]
    view: Literal["content", "summary"]
    pinned: bool
    importance: int
    tags: list[str]
    tokens: int
    budget: Budget
    compaction: CompactionSummary | None = None
    warnings: list[str] = Field(default_factory=list)


class ForgetResult(_Reply):
    id: str
    forgotten: bool
    budget: Budget
    dissolved: bool = False


class ListResult(_Reply):
    items: list[ItemBrief]
    total: int
    offset: int
    next_offset: int | None


class ExportResult(_Reply):
    format: Literal["json", "markdown"]
    items: list[dict[str, Any]] = Field(default_factory=list)
    text: str = ""
    count: int
    total: int
    next_cursor: str | None


class ConfigureResult(_Reply):
    token_budget: int
    auto_compact: bool
    auto_compact_threshold: float
    recall_tokens: int
    max_items: int
    max_archive_tokens: int
    budget: Budget
    compaction: CompactionSummary | None = None


# --- builders -----------------------------------------------------------------------------
def budget(used: int, total: int, pinned: int = 0) -> Budget:
    return Budget(
        token_budget=total,
        tokens_used=used,
        usage=round(used / total, 4) if total else 0.0,
        pinned_tokens=pinned,
        pinned_over_budget=pinned > total,
    )


def compaction_summary(report: CompactReport | None) -> CompactionSummary | None:
    if report is None:
        return None
    return CompactionSummary(
        trigger=report.trigger,
        promoted=len(report.promoted),
        deduplicated=len(report.deduplicated),
        archived=len(report.archived),
        condensed=len(report.condensed),
        dropped=len(report.dropped),
        tokens_before=report.tokens_before,
        tokens_after=report.tokens_after,
    )


def redactions(found: dict[str, int]) -> list[Redacted]:
    return [Redacted(kind=k, count=n) for k, n in sorted(found.items())]


def brief(item: Item) -> ItemBrief:
    return ItemBrief(**_brief_fields(item))


def scored(item: Item, score: float, matched: tuple[str, ...] = (), path: list[str] | None = None) -> ScoredItem:
    return ScoredItem.model_validate(scored_record(item, score, matched, path))


def child(item: Item) -> ChildInfo:
    return ChildInfo(
        id=item.id,
        depth=item.depth,
        tier=item.tier,
        preview=item_preview(item),
        tokens=item.view_tokens,
    )


def scored_record(
    item: Item,
    score: float,
    matched: tuple[str, ...] = (),
    path: list[str] | None = None,
    preview_text: str | None = None,
    reply_to: str | None = None,
) -> dict[str, Any]:
    """A ScoredItem as the JSON record it dumps to, built directly: a query result has ten of
    these, and validating them into models only to dump them again was a third of the tool's
    own time. `scored` is this record validated."""
    record = _brief_fields(item, preview_text)
    record["score"] = round(score, 6)
    record["matched_terms"] = list(matched)
    record["archived"] = item.tier == "archived"
    record["path"] = list(path or [])
    record["covered_by"] = path[-1] if path else None
    record["reply_to"] = reply_to
    return record


def _brief_fields(item: Item, preview_text: str | None = None) -> dict[str, Any]:
    return {
        "id": item.id,
        "content_type": item.content_type,
        "importance": item.importance,
        "tags": list(item.tags),
        "tier": item.tier,
        "view": item.view,
        "pinned": item.pinned,
        "tokens": item.view_tokens,
        "preview": item_preview(item) if preview_text is None else preview_text,
        "depth": item.depth,
    }


def full(item: Item, part: tuple[int, int] | None = None) -> GetResult:
    """The item, its content whole, or only `content[start:end]` for `part` (start, end)."""
    content, next_offset = item.content, None
    if part is not None:
        content = item.content[part[0] : part[1]]
        next_offset = part[1] if part[1] < len(item.content) else None
    return GetResult(
        id=item.id,
        content=content,
        content_chars=len(item.content),
        next_offset=next_offset,
        summary=item.summary,
        tier=item.tier,
        view=item.view,
        tags=list(item.tags),
        importance=item.importance,
        content_type=item.content_type,
        pinned=item.pinned,
        created_at=item.created_at,
        last_accessed_at=item.last_accessed_at,
        access_count=item.access_count,
        content_tokens=item.content_tokens,
        summary_tokens=item.summary_tokens,
        merged_into=item.merged_into,
        depth=item.depth,
        parents=list(item.parents),
        children=list(item.children),
        file_command=item.file_command,
        file_paths=list(item.file_paths),
        file_lines=list(item.file_lines),
    )
