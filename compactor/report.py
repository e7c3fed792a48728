"""Text for people: the status report and the full view of one item, shared by the CLI and the
MCP resources. Plain strings; the caller decides on colour through `paint`. No I/O."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from . import constants as C
from .models import Item
from .render import examples
from .search.views import describe as describe_view
from .store import Status, Store
from .summaries.condense import gist

# (text, role) -> text. Roles: head, dim, ok, warn, bad, id.
Paint = Callable[[str, str], str]


def plain(text: str, role: str) -> str:
    return text


@dataclass(slots=True)
class StateFiles:
    """What the state dir holds on disk, as any process sees it."""

    path: str
    journal_bytes: int
    snapshot_bytes: int
    snapshot_at: float | None


def fmt_time(ts: float | None) -> str:
    if not ts:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def ago(ts: float, now: float) -> str:
    secs = max(0.0, now - ts)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if secs >= size:
            return f"{int(secs // size)}{unit}"
    return f"{int(secs)}s"


def bar(used: int, budget: int, width: int, unicode: bool) -> str:
    share = min(used / budget, 1.0) if budget else 0.0
    filled = round(share * width)
    full, empty = ("█", "░") if unicode else ("#", ".")
    return full * filled + empty * (width - filled)


def usage_role(used: int, budget: int) -> str:
    share = used / budget if budget else 0.0
    return "ok" if share < C.AUTO_COMPACT_THRESHOLD - C.AUTO_COMPACT_GAP else "warn" if share < 1.0 else "bad"


def per_depth(status: Status, shape: dict[int, dict[str, int]]) -> dict[int, dict[str, int]]:
    """Items per DAG depth and tier; depth 0 (raw items) is what the nodes do not account for."""
    nodes_active = sum(v["active"] for v in shape.values())
    nodes_archived = sum(v["archived"] for v in shape.values())
    out = {0: {"active": status.active_items - nodes_active, "archived": status.archived_items - nodes_archived}}
    out.update(shape)
    return out


def status_report(
    status: Status,
    shape: dict[int, dict[str, int]],
    files: StateFiles | None,
    *,
    paint: Paint = plain,
    unicode: bool = True,
    width: int = 30,
) -> list[str]:
    pct = 100.0 * status.tokens_used / status.token_budget if status.token_budget else 0.0
    role = usage_role(status.tokens_used, status.token_budget)
    lines = [
        f"{paint('Budget', 'head')}   {paint(bar(status.tokens_used, status.token_budget, width, unicode), role)} "
        f"{paint(f'{pct:5.1f}%', role)}  {status.tokens_used:,} / {status.token_budget:,} tokens "
        f"({status.settings.budget_source})",
        f"{paint('Items', 'head')}    {status.active_items:,} active ({status.pinned_items:,} pinned) · "
        f"{status.archived_items:,} archived",
        f"{paint('By type', 'head')}  {paint('active / archived', 'dim')}",
    ]
    for ctype, counts in status.per_type.items():
        if counts["active"] or counts["archived"]:
            lines.append(f"  {ctype:<12} {counts['active']:>6,} / {counts['archived']:,}")
    if not any(c["active"] or c["archived"] for c in status.per_type.values()):
        lines.append(paint("  (empty)", "dim"))
    lines.append(f"{paint('By depth', 'head')} {paint('active / archived (d0 = raw items, d1+ = summaries)', 'dim')}")
    for depth, counts in per_depth(status, shape).items():
        if counts["active"] or counts["archived"] or depth == 0:
            lines.append(f"  d{depth:<11} {counts['active']:>6,} / {counts['archived']:,}")
    s = status.settings
    lines.append(
        f"{paint('Compact', 'head')}  {'auto' if s.auto_compact else 'manual only'}: above "
        f"{s.auto_compact_threshold:.0%} down to {s.auto_compact_threshold - C.AUTO_COMPACT_GAP:.0%}; "
        f"recall cap {s.recall_tokens:,} tokens"
    )
    if files is not None:
        lines.append(
            f"{paint('State', 'head')}    {files.path} · journal {files.journal_bytes:,} B · "
            f"snapshot {files.snapshot_bytes:,} B at {fmt_time(files.snapshot_at)}"
        )
    return lines


def item_report(
    store: Store,
    item: Item,
    *,
    paint: Paint = plain,
    journal: list[str] | None = None,
    now: float | None = None,
    max_children: int = 20,
    content_end: int | None = None,
) -> list[str]:
    """Everything about one item: content, lineage and history. `content_end`: show the content
    only up to there (a reply's page, `render.page_end`), saying where `get` reads on."""
    now = time.time() if now is None else now
    flags = [item.content_type, f"importance {item.importance}", item.tier, f"view {item.view}"]
    if item.pinned:
        flags.append("pinned")
    if item.depth:
        flags.append(f"summary d{item.depth} ({item.quality or 'extractive'})")
    lines = [f"{paint(item.id, 'id')}  {paint(' · '.join(flags), 'dim')}"]
    if item.tags:
        lines.append(f"{paint('tags', 'head')}     {', '.join(item.tags)}")
    tokens = f"{item.content_tokens:,} content"
    if item.summary:
        tokens += f", {item.summary_tokens:,} summary"
    lines.append(f"{paint('tokens', 'head')}   {tokens}; {item.view_tokens:,} count against the budget while active")
    if item.file_paths:
        shown = describe_view(item.file_command, item.file_paths, item.file_lines)
        lines.append(f"{paint('file', 'head')}     {shown}")

    lines += ["", paint("History", "head")]
    lines.append(f"  created        {fmt_time(item.created_at)} ({ago(item.created_at, now)} ago)")
    lines.append(f"  last accessed  {fmt_time(item.last_accessed_at)} ({ago(item.last_accessed_at, now)} ago)")
    lines.append(f"  access count   {item.access_count:,}")
    if item.stored_by:
        lines.append(f"  stored by      {item.stored_by}")
    if item.changed_by:
        lines.append(f"  changed by     {item.changed_by} (the last change)")
    lines.append(f"  tier / view    {item.tier} / {item.view}")
    if journal:
        lines.append(f"  journal since the last snapshot ({len(journal)}):")
        lines.extend(f"    {entry}" for entry in journal)

    lines += ["", paint("Lineage", "head")]
    lineage = False
    if item.merged_into:
        lines.append(f"  merged into    {item.merged_into} (a near-duplicate that stayed active)")
        lineage = True
    if item.parents:
        lines.append(f"  parents        {examples(item.parents, max_children)}")
        lineage = True
    path = store.ancestors(item)
    if path:
        lines.append(f"  active via     {' -> '.join([item.id, *path])}")
    if item.children:
        lineage = True
        lines.append(f"  children ({len(item.children)}, were {item.children_tier}):")
        for child_id in item.children[:max_children]:
            try:
                child = store.get(child_id)
            except KeyError:
                lines.append(f"    {child_id}  (gone)")
                continue
            lines.append(f"    {paint(child.id, 'id')}  d{child.depth} {child.tier}: {gist(child, 90)}")
        if len(item.children) > max_children:
            lines.append(paint(f"    … {len(item.children) - max_children} more", "dim"))
    if item.gone_children:
        lineage = True
        lines.append(f"  forgotten      {examples(item.gone_children, max_children)}")
    if not lineage:
        lines.append(paint("  none: a raw item no summary covers yet", "dim"))

    if item.summary:
        lines += ["", paint("Summary", "head"), item.summary]
    lines += ["", paint("Content", "head")]
    if content_end is None or content_end >= len(item.content):
        lines.append(item.content)
    else:
        lines.append(item.content[:content_end])
        more = f"get({item.id!r}, offset={content_end})"
        lines.append(paint(f"(characters 0-{content_end:,} of {len(item.content):,}; more: {more})", "dim"))
    return lines
