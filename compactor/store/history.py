"""What memory looked like over time, read from the Store's public API: tokens stored per
period with the compactions (summary nodes made) marked, the pinned share and counts per summary
depth (from the items when there are few, else from an even sample of each tier: a glance must
not cost a pass over 100,000 items), one item's story from its own fields, and what a state
dir's journal records about one item since the last snapshot (`compactor show`, the memory
page)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .. import constants as C
from ..errors import StateCorruptError
from ..models import Item, Tier
from ..persistence.statedir import JOURNAL, StateDir
from .facade import Store
from .state import ALL_SCOPES

# Periods in the timeline: enough to see a trend on a phone-width chart, few enough to label.
TIMELINE_BINS = 48
# `show` lists at most this many journal entries, and skips a journal bigger than this.
SHOW_JOURNAL_ENTRIES: Final = 30
SHOW_JOURNAL_MAX_BYTES: Final = 32 * 1024 * 1024
# Items the overview reads per tier: every one up to this, else an even sample this big. 2,000
# keep the timeline's 48 periods and the depth counts within a few percent; reading them costs
# about as much as the page's list of the newest items.
OVERVIEW_SAMPLE: Final = 2_000
# The sample is read in this many runs of neighbouring items (one list call each), spread evenly.
SAMPLE_RUNS: Final = 250


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
    # summary depth -> tier -> nodes; estimated (scaled from the sample) unless `exact`
    per_depth: dict[int, dict[str, int]]
    timeline: Timeline
    items: int = 0  # items in memory (both tiers, every scope)
    read: int = 0  # items read for the per-depth counts and the timeline

    @property
    def exact(self) -> bool:
        return self.read == self.items


def overview(store: Store, sample: int = OVERVIEW_SAMPLE, bins: int = TIMELINE_BINS) -> Overview:
    """Pinned tokens (kept by the Store), nodes per depth and the timeline, from every item of a
    tier that holds up to `sample`, else from `sample` of them spread evenly over the tier's
    order (by seq: by when they were stored) and scaled up. Reads at most twice `sample` items."""
    pinned = store.pinned_tokens
    per_depth: dict[int, dict[str, float]] = {}
    raw: list[tuple[float, float]] = []
    made: list[tuple[float, float]] = []
    total = read = 0
    for tier in ("active", "archived"):
        picked, n = _spread(store, tier, sample)
        total += n
        read += len(picked)
        weight = n / len(picked) if picked else 0.0
        for it in picked:
            if it.depth:
                per_depth.setdefault(it.depth, {"active": 0.0, "archived": 0.0})[it.tier] += weight
                made.append((it.created_at, weight))
            else:
                raw.append((it.created_at, it.content_tokens * weight))
    depths = {d: {t: round(v) for t, v in c.items()} for d, c in sorted(per_depth.items())}
    return Overview(pinned, depths, timeline(raw, made, bins), total, read)


def _spread(store: Store, tier: Tier, sample: int) -> tuple[list[Item], int]:
    """Every item of `tier` if it holds up to `sample`, else `sample` of them in SAMPLE_RUNS runs
    spread evenly over its order (every scope: the counts beside them are of every scope); and
    how many the tier holds."""
    n = store.list_items(limit=1, tier=tier, scope=ALL_SCOPES).total  # caught up with other processes
    if n <= sample:
        runs = [(start, min(C.LIST_LIMIT_MAX, n - start)) for start in range(0, n, C.LIST_LIMIT_MAX)]
    else:
        k = min(SAMPLE_RUNS, sample)
        size = sample // k
        runs = [(i * (n - size) // max(1, k - 1), size) for i in range(k)]
    picked: list[Item] = []
    for offset, limit in runs:
        if limit > 0:
            picked += store.list_items(offset=offset, limit=limit, tier=tier, scope=ALL_SCOPES).items
    return picked, n


def timeline(raw: list[tuple[float, float]], made: list[tuple[float, float]], bins: int = TIMELINE_BINS) -> Timeline:
    """Cumulative stored tokens per period and compactions per period, over the span from the
    oldest item to the newest: `raw` is (stored at, tokens) per raw item, `made` (made at,
    nodes) per summary node (a sampled item stands for several)."""
    times = [t for t, _ in raw] + [t for t, _ in made]
    if not times:
        return Timeline(0.0, 0.0, [], [])
    start, end = min(times), max(times)
    width = (end - start) / bins or 1.0
    added = [0.0] * bins
    compactions = [0.0] * bins
    for t, tokens in raw:
        added[min(bins - 1, int((t - start) / width))] += tokens
    for t, nodes in made:
        compactions[min(bins - 1, int((t - start) / width))] += nodes
    total = 0.0
    cumulative = []
    for n in added:
        total += n
        cumulative.append(round(total))
    return Timeline(start, end, cumulative, [round(c) for c in compactions])


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
