"""Compaction planning: which items change view, merge or move to the archive.

Pure: it reads items and returns the changes as journal ops plus a report. The Store applies
the ops, so a compaction replayed from the journal is byte-for-byte the one that happened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .. import constants as C
from ..models import CompactReport, Item, Op
from ..search.dedup import DEDUP_JACCARD
from ..search.scoring import retention


@dataclass(slots=True)
class CompactionInput:
    active: list[Item]
    used_tokens: int
    target_tokens: int
    now: float
    protected: frozenset[str]
    dedup_pending: list[str]
    candidates: Callable[[str], set[str]]
    similarity: Callable[[str, str], float]
    trigger: str = "manual"
    # Tokens the summary nodes covering `n` newly archived items will cost (phase 4).
    reserve: Callable[[int], int] = lambda n: 0


def _movable(item: Item, protected: frozenset[str]) -> bool:
    return not item.pinned and item.id not in protected


def plan(inp: CompactionInput) -> tuple[list[Op], CompactReport]:
    report = CompactReport(
        tokens_before=inp.used_tokens,
        tokens_after=inp.used_tokens,
        target_tokens=inp.target_tokens,
        trigger="auto" if inp.trigger == "auto" else "manual",
    )
    ops: list[Op] = []
    used = inp.used_tokens
    by_id = {item.id: item for item in inp.active}
    score: dict[str, float] = {}

    def score_of(item: Item) -> float:
        # Computed on first use: most compactions never reach eviction, the only phase that
        # scores every active item.
        value = score.get(item.id)
        if value is None:
            value = score[item.id] = retention(item, inp.now)
        return value

    def lowest_first(items: Iterable[Item]) -> list[Item]:
        # Deterministic: lowest retention first, then oldest first (seq is unique, so no two
        # keys tie and the items themselves are never compared).
        now, get = inp.now, score.get
        keyed = []
        for it in items:
            value = get(it.id)
            if value is None:
                value = score[it.id] = retention(it, now)
            keyed.append((value, it.seq, it))
        keyed.sort()
        return [it for _, _, it in keyed]

    # 1. Summary promotion: an item the agent already summarised costs only its summary.
    if used > inp.target_tokens:
        protected = inp.protected
        promotable = [
            it
            for it in by_id.values()
            if it.summary
            and it.view == "content"
            and it.summary_tokens < it.content_tokens
            and not it.pinned
            and it.id not in protected
        ]
        for it in lowest_first(promotable):
            if used <= inp.target_tokens:
                break
            ops.append({"op": "patch", "id": it.id, "set": {"view": "summary"}})
            used -= it.content_tokens - it.summary_tokens
            report.promoted.append(it.id)
    promoted = set(report.promoted)  # report.promoted is a list: `in` on it was O(promotions)

    # 2. Deduplication: only items added or changed since the last pass need checking.
    losers: set[str] = set()
    gained: dict[str, list[str]] = {}
    gained_from: dict[str, list[tuple[str, str]]] = {}
    for item_id in inp.dedup_pending:
        a = by_id.get(item_id)
        if a is None or item_id in losers:
            continue
        for cand_id in sorted(inp.candidates(item_id)):
            b = by_id.get(cand_id)
            if b is None or cand_id in losers or cand_id == item_id or (a.scope or "global") != (b.scope or "global"):
                continue
            if inp.similarity(item_id, cand_id) <= DEDUP_JACCARD:
                continue
            # The lower-scoring one goes; on a tie the newer copy goes and the original stays.
            pair = sorted((a, b), key=lambda it: (score_of(it), -it.seq))
            loser, survivor = pair
            if not _movable(loser, inp.protected):
                loser, survivor = survivor, loser
                if not _movable(loser, inp.protected):
                    continue
            losers.add(loser.id)
            ops.append({"op": "patch", "id": loser.id, "set": {"tier": "archived", "merged_into": survivor.id}})
            used -= loser.view_tokens if loser.id not in promoted else loser.summary_tokens
            tags = gained.setdefault(survivor.id, list(survivor.tags))
            sources = gained_from.setdefault(survivor.id, list(survivor.tags_from))
            merged = {tag for tag, _ in sources}
            for tag in loser.tags:
                # Where the tag came from: the loser, or whoever gave it to the loser in a merge.
                origins = [src for t, src in loser.tags_from if t == tag] or [loser.id]
                if tag not in tags:
                    if len(tags) >= C.MAX_TAGS:
                        continue
                    tags.append(tag)
                elif tag not in merged:
                    continue  # the survivor's own tag: nobody's forget takes it
                sources.extend((tag, src) for src in origins if (tag, src) not in sources)
            report.deduplicated.append((loser.id, survivor.id))
            if loser.id == item_id:
                break
    for survivor_id, tags in gained.items():
        sources = gained_from[survivor_id]
        if survivor_id not in losers and (tuple(tags), tuple(sources)) != (
            by_id[survivor_id].tags,
            by_id[survivor_id].tags_from,
        ):
            ops.append({"op": "patch", "id": survivor_id, "set": {"tags": tags, "tags_from": sources}})

    # 3. Eviction: the lowest-value raw items move to the archive until the target is met,
    # leaving room for the summary nodes that will cover them. Summary nodes are condensed
    # (phase 4), not evicted here.
    def over() -> bool:
        return used + inp.reserve(len(losers) + len(report.archived)) > inp.target_tokens

    if over():
        protected = inp.protected
        evictable = [
            it
            for it in by_id.values()
            if not it.depth and not it.pinned and it.id not in protected and it.id not in losers
        ]
        for it in lowest_first(evictable):
            if not over():
                break
            ops.append({"op": "patch", "id": it.id, "set": {"tier": "archived"}})
            used -= it.summary_tokens if it.id in promoted else it.view_tokens
            report.archived.append(it.id)

    report.tokens_after = used
    return ops, report
