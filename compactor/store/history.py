"""What memory looked like over time, read from the Store's public API: tokens stored per
period with the compactions (summary nodes made) marked, the pinned share and counts per summary
depth (from the items when there are few, else from an even sample of each tier: a glance must
not cost a pass over 100,000 items), one item's story from its own fields, and what a journal
records about one item since the last snapshot (`compactor show`; the memory page, in words and
with who made each change where a team server's tokens file names people)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
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
    nodes: list[tuple[Item, float]] = []
    stored: list[tuple[int, float]] = []  # (seq, stored at) of the raw items read
    total = read = 0
    for tier in ("active", "archived"):
        picked, n = _spread(store, tier, sample)
        total += n
        read += len(picked)
        weight = n / len(picked) if picked else 0.0
        for it in picked:
            if it.depth:
                per_depth.setdefault(it.depth, {"active": 0.0, "archived": 0.0})[it.tier] += weight
                nodes.append((it, weight))
            else:
                raw.append((it.created_at, it.content_tokens * weight))
                stored.append((it.seq, it.created_at))
    stored.sort()
    made = [(_made_at(node, stored), weight) for node, weight in nodes]
    depths = {d: {t: round(v) for t, v in c.items()} for d, c in sorted(per_depth.items())}
    return Overview(pinned, depths, timeline(raw, made, bins), total, read)


def _made_at(node: Item, stored: list[tuple[int, float]]) -> float:
    """When a compaction made `node`: a node carries its oldest child's time, but its seq is
    taken when it is made, so the raw item stored last before it (of those read) tells the time
    (the store that set the compaction off)."""
    k = bisect.bisect_left(stored, (node.seq, -math.inf))
    return max(stored[k - 1][1], node.created_at) if k else node.created_at


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


@dataclass(frozen=True, slots=True)
class Event:
    """One line of an item's history, for a person: `what` happened, naming the item `ref` last
    when it names one (a page links it); `who` made it (a team server's person, when its
    tokens file named one); `at` when (None: the record does not say); `times`: how many
    such events in a row (reads)."""

    what: str
    at: float | None = None
    who: str | None = None
    ref: str | None = None
    times: int = 1


@dataclass(slots=True)
class Journal:
    """What a journal records about one item since the last snapshot, oldest first; `note`
    says why it was not read, when it was not."""

    events: list[Event]
    note: str | None = None


def story(store: Store, item: Item) -> list[Event]:
    """An item's history as its fields and its relatives' tell it, oldest first: stored (and by
    whom), the summaries made over it (by whose call), last read. When a summary was made is
    not recorded (a node carries its oldest child's time): those lines have no time. What
    changed since the last snapshot, and by whom, is in the journal (`item_changes`)."""
    if item.depth:
        events = [Event("made by a compaction", None, item.stored_by)]
    else:
        events = [Event("stored", item.created_at, item.stored_by)]
    for parent_id in item.parents:
        try:
            parent = store.get(parent_id)
        except KeyError:
            continue
        # The node was stored by the call that compacted: its person made this change.
        events.append(Event(f"compacted into a depth-{parent.depth} summary", None, parent.stored_by, parent.id))
    if item.access_count:
        events.append(Event("last read", item.last_accessed_at, times=item.access_count))
    return events


# Patch fields that say nothing to a person on their own (counts and caches beside a change).
_QUIET_FIELDS: Final = frozenset(
    {
        "content_tokens",
        "summary_tokens",
        "last_accessed_at",
        "access_count",
        "changed_by",
        "stored_by",
        "quality",
        "tags_from",
        "file_command",
        "file_paths",
        "file_lines",
        "children_tier",
        "seq",
    }
)
_ACCESS: Final = frozenset({"last_accessed_at", "access_count"})


def _target(op: dict[str, Any]) -> object:
    return op.get("id") or (op.get("item") or {}).get("id")


def describe_change(op: dict[str, Any], batch: Sequence[dict[str, Any]] = ()) -> tuple[str, str | None]:
    """One journal op on an item in words for a person, and the item id it names (last), if
    any: "pinned", "archived, compacted into summary" + the node. `batch`: the ops written with
    it, which tell a compaction (the node's put) from a dissolve (the node's delete)."""
    kind = op.get("op")
    if kind == "put":
        return ("made by a compaction" if (op.get("item") or {}).get("depth") else "stored"), None
    if kind == "del":
        return "deleted", None
    changes: dict[str, Any] = dict(op.get("set") or {})
    if changes and changes.keys() <= _ACCESS:
        return "read", None
    parts: list[str] = []
    ref: str | None = None
    tail: tuple[str, str] | None = None  # the phrase that names an item, said last
    for key, value in changes.items():
        if key in _QUIET_FIELDS:
            continue
        if key == "pinned":
            parts.append("pinned" if value else "unpinned")
        elif key == "tier":
            parts.append("archived" if value == "archived" else "back to the active tier")
        elif key == "view":
            parts.append("shown as its summary" if value == "summary" else "shown in full")
        elif key in ("content", "summary"):
            parts.append(f"{key} rewritten" if value else f"{key} removed")
        elif key == "importance":
            parts.append(f"importance set to {value}")
        elif key == "tags":
            shown = [str(t) for t in value or []]
            parts.append(
                f"tags set to {', '.join(shown[:6])}{', …' if len(shown) > 6 else ''}" if shown else "tags cleared"
            )
        elif key == "merged_into":
            if value:
                tail = ("merged into", str(value))
            else:
                parts.append("no longer merged")
        elif key == "dup_of":
            if value:
                tail = ("noticed as a near-duplicate of", str(value))
        elif key == "parents":
            now = [str(p) for p in value or []]
            made = {str(_target(o)) for o in batch if o.get("op") == "put"}
            gone = [str(_target(o)) for o in batch if o.get("op") == "del" and _target(o) not in now]
            new = [p for p in now if p in made]
            if new:
                tail = ("compacted into summary", new[-1])
            elif gone:
                tail = ("no longer covered by summary", gone[-1])
            else:
                parts.append("its summaries changed")
        elif key == "children":
            parts.append(f"now stands for {len(value or [])} children")
        elif key == "gone_children":
            parts.append("a child forgotten")
        elif key == "scope":
            parts.append(f"moved to scope {value or 'global'}")
        else:
            parts.append(f"{key} changed")
    if tail is not None:
        parts.append(tail[0])
        ref = tail[1]
    return (", ".join(parts) or "changed"), ref


def item_changes(
    batches: Iterable[tuple[float | None, list[dict[str, Any]]]], item_id: str, limit: int = SHOW_JOURNAL_ENTRIES
) -> list[Event]:
    """The journal's entries about one item, oldest first, the last `limit` of them: each
    batch is (when it was written, None when the journal does not say; its ops). Reads in a
    row by the same person are one event."""
    found: list[Event] = []
    for at, batch in batches:
        for op in batch:
            if _target(op) != item_id:
                continue
            what, ref = describe_change(op, batch)
            who = op["who"] if isinstance(op.get("who"), str) else None
            when = at
            if when is None and op.get("op") == "put":
                when = (op.get("item") or {}).get("created_at")
            elif when is None and what == "read":
                when = (op.get("set") or {}).get("last_accessed_at")
            if found and what == "read" and found[-1].what == "read" and found[-1].who == who:
                last = found[-1]
                found[-1] = Event("read", when if when is not None else last.at, who, None, last.times + 1)
                continue
            found.append(Event(what, when if isinstance(when, (int, float)) else None, who, ref))
    return found[-limit:]


def state_dir_changes(path: Path, item_id: str, limit: int = SHOW_JOURNAL_ENTRIES) -> Journal:
    """`item_changes` from a state dir's journal (which records who but not when: a put says
    when the item was stored, a read when it was read)."""
    try:
        if (path / JOURNAL).stat().st_size > SHOW_JOURNAL_MAX_BYTES:
            return Journal([], "the journal is too big to read for one item")
        _, batches, _, _ = StateDir(path).read_journal()
    except FileNotFoundError:
        return Journal([])
    except (OSError, StateCorruptError) as exc:
        return Journal([], f"the journal could not be read: {exc}")
    return Journal(item_changes(((None, b) for b in batches), item_id, limit))


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
