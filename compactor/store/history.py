"""What memory looked like over time, read from the Store's public API: tokens stored per
period with the compactions (summary nodes made) marked, the pinned share, counts per summary
depth, and one item's story from its own fields (one pass over the items), and what a state dir's
journal records about one item since the last snapshot (`compactor show`, the memory page)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..errors import StateCorruptError
from ..models import Item
from ..persistence.statedir import JOURNAL, StateDir
from .facade import Store

# Periods in the timeline: enough to see a trend on a phone-width chart, few enough to label.
TIMELINE_BINS = 48
# `show` lists at most this many journal entries, and skips a journal bigger than this.
SHOW_JOURNAL_ENTRIES: Final = 30
SHOW_JOURNAL_MAX_BYTES: Final = 32 * 1024 * 1024


@dataclass(slots=True)
class Timeline:
    """`tokens[i]`: tokens of the items still held that were stored up to the end of period i
    (content tokens of raw items); `compactions[i]`: summary nodes made in period i."""

    start: float
    end: float
    tokens: list[int]
    compactions: list[int]


@dataclass(slots=True)
class Overview:
    pinned_tokens: int  # budget tokens held by pinned active items
    per_depth: dict[int, dict[str, int]]  # summary depth -> tier -> nodes
    timeline: Timeline
    items: int = 0


def overview(store: Store, bins: int = TIMELINE_BINS) -> Overview:
    """Pinned tokens, nodes per depth and the timeline in one pass over every item."""
    items = store.iter_items()
    pinned = 0
    per_depth: dict[int, dict[str, int]] = {}
    raw: list[tuple[float, int]] = []
    made: list[float] = []
    count = 0
    for it in items:
        count += 1
        if it.depth:
            per_depth.setdefault(it.depth, {"active": 0, "archived": 0})[it.tier] += 1
            made.append(it.created_at)
        else:
            raw.append((it.created_at, it.content_tokens))
        if it.pinned and it.tier == "active":
            pinned += it.view_tokens
    return Overview(pinned, dict(sorted(per_depth.items())), timeline(raw, made, bins), count)


def timeline(raw: list[tuple[float, int]], made: list[float], bins: int = TIMELINE_BINS) -> Timeline:
    """Cumulative stored tokens per period and compactions per period, over the span from the
    oldest item to the newest."""
    times = [t for t, _ in raw] + made
    if not times:
        return Timeline(0.0, 0.0, [], [])
    start, end = min(times), max(times)
    width = (end - start) / bins or 1.0
    added = [0] * bins
    compactions = [0] * bins
    for t, tokens in raw:
        added[min(bins - 1, int((t - start) / width))] += tokens
    for t in made:
        compactions[min(bins - 1, int((t - start) / width))] += 1
    total = 0
    cumulative = []
    for n in added:
        total += n
        cumulative.append(total)
    return Timeline(start, end, cumulative, compactions)


def story(store: Store, item: Item) -> list[tuple[float, str]]:
    """An item's history as its fields and its relatives' tell it, oldest first: stored, the
    summaries made over it, merged, last read. (What changed since the last snapshot is in the
    journal; adapters that can read it add those lines.)"""
    events: list[tuple[float, str]] = [(item.created_at, "made by a compaction" if item.depth else "stored")]
    for parent_id in item.parents:
        try:
            parent = store.get(parent_id)
        except KeyError:
            continue
        events.append((parent.created_at, f"compacted into summary {parent.id} (depth {parent.depth})"))
    if item.access_count:
        events.append((item.last_accessed_at, f"last read (read {item.access_count} time(s))"))
    now_state = [
        "pinned" if item.pinned else "",
        "archived" if item.tier == "archived" else "",
        "shown as its summary" if item.view == "summary" else "",
        f"merged into {item.merged_into}" if item.merged_into else "",
    ]
    state = ", ".join(s for s in now_state if s)
    if state:
        events.append((max(t for t, _ in events), f"now {state}"))
    return sorted(events, key=lambda e: e[0])


def journal_entries(path: Path, item_id: str, limit: int = SHOW_JOURNAL_ENTRIES) -> list[str]:
    """What the journal (changes since the last snapshot) records about one item; [] when the
    journal is too big to read for a glance or cannot be read."""
    try:
        if (path / JOURNAL).stat().st_size > SHOW_JOURNAL_MAX_BYTES:
            return []
        _, batches, _, _ = StateDir(path).read_journal()
    except (OSError, StateCorruptError):
        return []
    found: list[str] = []
    for lineno, batch in enumerate(batches, start=2):  # line 1 is the journal header
        for op in batch:
            target = op.get("id") or (op.get("item") or {}).get("id")
            if target == item_id:
                who = f" by {op['who']}" if isinstance(op.get("who"), str) else ""
                found.append(f"line {lineno}: {_describe_op(op)}{who}")
    return found[-limit:]


def _describe_op(op: dict[str, Any]) -> str:
    kind = op.get("op")
    if kind == "put":
        return "stored (put)"
    if kind == "del":
        return "deleted"
    changes = dict(op.get("set") or {})
    if set(changes) <= {"last_accessed_at", "access_count"}:
        return f"accessed (count {changes.get('access_count', '?')})"
    shown: list[str] = []
    for key, value in changes.items():
        if key in ("content_tokens", "summary_tokens", "last_accessed_at", "access_count", "changed_by"):
            continue
        if key in ("content", "summary"):
            shown.append(f"{key} rewritten")
        elif isinstance(value, list):
            shown.append(f"{key}=[{', '.join(map(str, value[:4]))}{', …' if len(value) > 4 else ''}]")
        else:
            shown.append(f"{key}={value}")
    return "changed " + ", ".join(shown)
