"""Compaction orchestration: the auto-compaction a write triggers, the passes that keep a call
within budget, max_items, near-duplicate hints, and what `prune` would remove.
"""

from __future__ import annotations

import heapq
from typing import Final

from .. import constants as C
from ..models import CompactReport, Item, Op
from ..search import scoring
from ..search.dedup import DEDUP_JACCARD
from ..summaries import planning as compaction
from ..summaries.condense import NODE_MAX_TOKENS
from .dag import CHUNK_SIZE, _Dag
from .journaled import _Txn
from .state import scope_key

# Crossing it moves more than the excess, a tenth of the limit: the pass that picks them reads
# every active item, so it is paid once per many stores. But at most MAX_ITEMS_SLACK more: one
# store archives and condenses them all (a tenth of the default limit took one store 3.6 s).
MAX_ITEMS_SLACK_SHARE: Final = 10
MAX_ITEMS_SLACK: Final = 1_000
# When a call's own items do not all fit, the ones kept active leave room for this many nodes:
# the summaries covering the rest condense under pressure down to about one per level.
FIT_RESERVE_NODES: Final = 2


def _item_bytes(item: Item) -> int:
    return len(item.content.encode("utf-8", "replace")) + len((item.summary or "").encode("utf-8", "replace"))


def _merge_reports(into: CompactReport, more: CompactReport) -> None:
    """Fold a further compaction pass of the same call into its report."""
    into.promoted.extend(more.promoted)
    into.deduplicated.extend(more.deduplicated)
    into.archived.extend(more.archived)
    into.condensed.extend(more.condensed)
    into.needs_text = more.needs_text
    into.tokens_after = more.tokens_after


class _Compaction(_Dag):
    """Compaction orchestration, limits and prune candidates."""

    def _transact(
        self, ops: list[Op], *, protected: frozenset[str], hint_ids: list[str] | None = None
    ) -> CompactReport | None:
        """Apply `ops` and the auto-compaction they trigger, then journal all of it as one line.

        Ops are applied before journaling so compaction can plan on the resulting state; if
        planning or the journal write fails, everything is undone and memory is as it was.
        """
        with self._txn() as txn:
            txn.apply(ops)
            if hint_ids:
                txn.apply(self._dup_hint_ops(hint_ids))
            report = self._auto_compact(txn, protected)
            report = self._enforce_limits(txn, protected, report)
        return report

    def _enforce_limits(
        self, txn: _Txn, protected: frozenset[str], report: CompactReport | None
    ) -> CompactReport | None:
        """max_items bounds the active tier: the excess moves to the archive, never out of it.
        max_archive_tokens deletes nothing here: it only sets what `prune` proposes."""
        s, settings = self._s, self.settings
        over_items = len(s.order["active"]) - settings.max_items
        if over_items <= 0:
            return report
        if report is None:
            report = CompactReport(tokens_before=s.used, tokens_after=s.used, target_tokens=s.used, trigger="auto")
        now = self._clock()
        # The oldest low-value items go to the archive (and are condensed like any other),
        # some more than the excess so the O(active) pass is paid once per many stores.
        over_items += min(settings.max_items // MAX_ITEMS_SLACK_SHARE, MAX_ITEMS_SLACK)
        movable = [
            s.items[s.by_seq[q]]
            for q in s.order["active"]
            if not s.items[s.by_seq[q]].pinned and s.by_seq[q] not in protected and not s.items[s.by_seq[q]].depth
        ]
        victims = heapq.nsmallest(over_items, movable, key=lambda it: (scoring.retention(it, now), it.seq))
        txn.apply([{"op": "patch", "id": it.id, "set": {"tier": "archived"}} for it in victims])
        report.archived.extend(it.id for it in victims)
        report.condensed.extend(self._condense(txn, s.used, protected, last_resort=False))
        report.tokens_after = s.used
        return report

    def prune_candidates(self, max_archive_tokens: int | None = None) -> list[Item]:
        """The lowest-value archived raw items whose removal brings the archive down to
        `max_archive_tokens` (the setting by default). Pinned items and summaries never."""
        limit = self.settings.max_archive_tokens if max_archive_tokens is None else max_archive_tokens
        with self._read():
            return self._prune_candidates(limit)

    def _prune_candidates(self, limit: int) -> list[Item]:
        s = self._s
        excess = s.archived_tokens - limit
        if excess <= 0:
            return []
        now = self._clock()
        leaves = sorted(
            (
                it
                for it in map(s.items.__getitem__, map(s.by_seq.__getitem__, s.order["archived"]))
                if not it.depth and not it.pinned
            ),
            key=lambda it: (scoring.retention(it, now), it.seq),
        )
        out: list[Item] = []
        for leaf in leaves:
            if excess <= 0:
                break
            out.append(leaf)
            excess -= leaf.content_tokens
        return out

    def _dup_partner(self, item_id: str) -> set[str]:
        partner = self._s.items[item_id].dup_of
        return {partner} if partner and partner in self._s.items else set()

    def _dup_hint_ops(self, ids: list[str]) -> list[Op]:
        """Near-duplicate detection happens when an item arrives (a few bucket lookups), and its
        finding is journaled as `dup_of`, so compaction merges without searching and a restart
        neither loses nor recomputes it."""
        s = self._s
        ops: list[Op] = []
        for item_id in ids:
            item = s.items.get(item_id)
            if item is None or item.tier != "active" or item.depth:
                continue
            best: tuple[float, str] | None = None
            for cand in s.dedup.candidates(item_id):
                other = s.items.get(cand)
                if other is None or scope_key(other.scope) != scope_key(item.scope):
                    continue
                sim = s.dedup.similarity(item_id, cand)
                if sim > DEDUP_JACCARD and (best is None or (sim, cand) > best):
                    best = (sim, cand)
            partner = best[1] if best else None
            if partner != item.dup_of:
                ops.append({"op": "patch", "id": item_id, "set": {"dup_of": partner}})
        return ops

    def _auto_compact(self, txn: _Txn, protected: frozenset[str]) -> CompactReport | None:
        settings, s = self.settings, self._s
        if not settings.auto_compact:
            return None  # the agent compacts itself; replies show usage over budget
        if s.used <= settings.auto_compact_threshold * settings.token_budget:
            if len(s.uncovered) > CHUNK_SIZE:
                # The archive grew by more than a chunk that no summary covers (a dissolve,
                # a restore-and-evict): condense it without a full compaction.
                self._condense(
                    txn, int(settings.auto_compact_threshold * settings.token_budget), protected, last_resort=False
                )
            if s.used <= settings.token_budget:
                return None
        target = int((settings.auto_compact_threshold - C.AUTO_COMPACT_GAP) * settings.token_budget)
        return self._compact_in(txn, target, protected, "auto")

    def _compact_in(self, txn: _Txn, target_tokens: int, protected: frozenset[str], trigger: str) -> CompactReport:
        """Phases 1-3 (promote, dedup, evict), then 4: condense the archive into summary nodes,
        all applied inside `txn`. The call's own items are protected only as far as they fit:
        if the budget is still exceeded, a second pass protects the newest that fit, and a
        third none, so the call ends within budget unless pinned items alone exceed it."""
        with self.runtime.bulk_work():
            s = self._s
            mine = (s.items[i] for i in protected if i in s.items and s.items[i].tier == "active")
            if protected and sum(it.view_tokens for it in mine if not it.pinned) + self.pinned_tokens > target_tokens:
                # They cannot all fit: squeezing everything else for them first would only
                # condense older summaries for nothing (each such pass adds a level).
                protected = self._fitting(protected, target_tokens, base=self.pinned_tokens)
            report = self._compact_phases(txn, target_tokens, protected, trigger)
            limit = self.settings.token_budget
            if self._s.used > limit and protected:
                fitting = self._fitting(protected, target_tokens)
                _merge_reports(report, self._compact_phases(txn, target_tokens, fitting, trigger))
                if self._s.used > limit and fitting:
                    _merge_reports(report, self._compact_phases(txn, target_tokens, frozenset(), trigger))
            return report

    def _fitting(self, protected: frozenset[str], target_tokens: int, base: int | None = None) -> frozenset[str]:
        """The newest protected active items that fit in what the target leaves once `base`
        (by default everything else active: pinned items, the summaries) is counted."""
        s = self._s
        items = sorted(
            (s.items[i] for i in protected if i in s.items and s.items[i].tier == "active" and not s.items[i].pinned),
            key=lambda it: -it.seq,
        )
        if base is None:
            base = s.used - sum(it.view_tokens for it in items)
        room = target_tokens - base - FIT_RESERVE_NODES * NODE_MAX_TOKENS
        keep: list[str] = []
        for it in items:
            if it.view_tokens <= room:
                keep.append(it.id)
                room -= it.view_tokens
        return frozenset(keep)

    def _compact_phases(self, txn: _Txn, target_tokens: int, protected: frozenset[str], trigger: str) -> CompactReport:
        s = self._s
        active = [s.items[s.by_seq[q]] for q in s.order["active"]]
        uncovered = len(s.uncovered)

        def reserve(newly_archived: int) -> int:
            # Room for the d1 nodes that will cover what this compaction archives.
            n = uncovered + newly_archived
            return -(-n // CHUNK_SIZE) * NODE_MAX_TOKENS if n else 0

        inp = compaction.CompactionInput(
            active=active,
            used_tokens=s.used,
            target_tokens=target_tokens,
            now=self._clock(),
            protected=protected,
            dedup_pending=sorted(s.dup_hints, key=lambda i: s.items[i].seq),
            candidates=self._dup_partner,
            similarity=s.dedup.similarity,
            trigger=trigger,
            reserve=reserve,
        )
        ops, report = compaction.plan(inp)
        report.needs_summary = self._needs_summary(active)
        txn.apply(ops)
        # Archiving summaries is the last resort, taken only once nothing of the call is
        # protected any more: before that, the call's own items leave first.
        report.condensed = self._condense(txn, target_tokens, protected, last_resort=not protected)
        report.tokens_after = s.used
        report.needs_text = self._needs_text()
        return report

    def _needs_summary(self, active: list[Item]) -> list[str]:
        """The largest unsummarised items that were active when compaction started: a summary
        lets phase 1 keep them visible next time instead of archiving them."""
        # Keys built inline rather than by a key function per item; seq is unique, so ids
        # never decide the order.
        keyed = [
            (it.content_tokens, it.seq, it.id) for it in active if not it.summary and not it.pinned and not it.depth
        ]
        return [item_id for tokens, _, item_id in heapq.nlargest(C.NEEDS_SUMMARY_LIMIT, keyed) if tokens > 40]
