"""The in-memory state and the one mutation path: `_apply` (put, patch, del, config) and the
structures it keeps in step (tier orders, tags, search index, near-duplicate buckets, token
totals). The only place that says how an item is indexed (`index_fields`), and the check that
the incrementally kept structures agree with a rebuild (`check_derived`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import re
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from ..content.tokens import TokenCounter
from ..errors import NotFoundError
from ..models import CONTENT_TYPES, TUPLE_FIELDS, Item, Op, Settings, Tier, pairs
from ..render import examples
from ..search import mapped as memory_map
from ..search import scoring
from ..search.dedup import BUFFER_KEYS, DedupIndex, json_state
from ..search.index import BM25Index
from ..search.views import ViewIndex
from .access import Caller
from .tuning import Tuning

if TYPE_CHECKING:
    import mmap

# Items indexed per `add_many` call when the index is rebuilt (a start without a usable saved index,
# `doctor --repair`): batches share the vocabulary lookups; 1,000 items hold a few MiB of terms.
REBUILD_BATCH: Final = 1_000
# An item without a summary is indexed with its first line (this long at most, cut after a
# whole word) as its summary field: the line a command output or an error starts with is what
# an agent searches for.
HEADLINE_CHARS: Final = 200

log = logging.getLogger(__name__)


TierFilter = Literal["active", "archived", "all"]


GLOBAL_SCOPE = "global"


ALL_SCOPES = "all"


# Changes to the tag ranks between two queries by tags before the ranks are dropped instead (a
# compaction re-files thousands of items): making them again costs ~0.2 s at 100k items.
TAG_RANK_CHANGES_MAX = 4_000
# Fresh and stale keys (items re-filed since the last merge: an item re-filed again counts
# once) past which a query by tags merges them into the ranks (~50 ms at 100k items).
TAG_RANK_FRESH_MAX = 4_000

TagKey = tuple[float, int, str]


def tag_rank_key(item: Item) -> tuple[float, int, str]:
    """An item's place in `_State.tag_ranks`: its rank score with no time since its last
    access (the most it can score), then the newest first."""
    return (-scoring.rank_score(1.0, item, item.last_accessed_at), -item.seq, item.id)


def scope_key(scope: str) -> str:
    """Items saved before scopes existed (scope "") belong to every project."""
    return scope or GLOBAL_SCOPE


@dataclass(slots=True)
class _State:
    items: dict[str, Item] = field(default_factory=dict)
    order: dict[str, list[int]] = field(default_factory=lambda: {"active": [], "archived": []})
    by_seq: dict[int, str] = field(default_factory=dict)
    # The same order split by scope, so a scoped list or export never scans other projects.
    scope_order: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    # Made from the items at the first tag filter, then kept: a start does not file every
    # item's tags (~0.14 s at 100k items) for a filter it may never be given.
    _by_tag: dict[str, set[str]] | None = None
    # Per tag, its items ranked for a query by tags alone: made at the first such query, then
    # kept (`tag_ranks`). A change does not move these lists (at 100k items a list move took
    # ~20 us, and a query's access re-files each hit): it files the new key in `_tag_fresh` and
    # marks the old one in `_tag_stale`; `tag_keys` reads the three together.
    _tag_ranks: dict[str, list[TagKey]] | None = None
    _tag_fresh: dict[str, list[TagKey]] = field(default_factory=dict)
    _tag_stale: dict[str, set[TagKey]] = field(default_factory=dict)
    _tag_rank_changes: int = 0  # items re-filed in `_tag_ranks` since the last query by tags
    index: BM25Index = field(default_factory=BM25Index)
    # Built from the saved state at the first use, not at start: only writes and compaction
    # need near-duplicate buckets, so a start that answers queries does without them.
    _dedup: DedupIndex | None = field(default_factory=DedupIndex)
    _dedup_saved: dict[str, Any] | None = None
    # The memory map of the index file the index and buckets were read from, if any. Weak: once
    # settles have copied what they read, the map (and a file deleted since) goes with them.
    index_file: weakref.ref[mmap.mmap] | None = None
    views: ViewIndex = field(default_factory=ViewIndex)  # file views by the paths they show
    dup_hints: set[str] = field(default_factory=set)  # active items with a near-duplicate noted
    uncovered: set[str] = field(default_factory=set)  # archived, no summary covers them
    pinned: set[str] = field(default_factory=set)  # active and pinned: status and recall read it per call
    active_nodes: set[str] = field(default_factory=set)  # active summary nodes: condensing scans them, not every item
    archived_tokens: int = 0
    used: int = 0
    pinned_used: int = 0  # the active tokens of `pinned`: every write's reply states it
    next_seq: int = 1
    type_counts: dict[str, dict[str, int]] = field(
        default_factory=lambda: {t: {"active": 0, "archived": 0} for t in CONTENT_TYPES}
    )

    @property
    def by_tag(self) -> dict[str, set[str]]:
        """Item ids by tag."""
        if self._by_tag is None:
            self._by_tag = {}
            for item in self.items.values():
                self.tag(item)
        return self._by_tag

    def tag(self, item: Item) -> None:
        """File `item` under each of its tags, once `by_tag` is made (until then, nothing)."""
        by_tag = self._by_tag
        if by_tag is not None:
            for tag in item.tags:
                by_tag.setdefault(tag, set()).add(item.id)

    def untag(self, item: Item) -> None:
        """`tag` undone: `item` leaves its tags, and a tag left with no item goes."""
        by_tag = self._by_tag
        if by_tag is None:
            return
        for tag in item.tags:
            ids = by_tag.get(tag)
            if ids is not None:
                ids.discard(item.id)
                if not ids:
                    del by_tag[tag]

    def tag_keys(self, tags: Iterable[str]) -> Iterator[TagKey]:
        """The items of `tags` as (-bound, -seq, id), best first, each once. The bound is the
        item's rank score were it accessed just now (`tag_rank_key`): its real score is never
        higher, so a query by tags alone scores items in this order and stops once a bound falls
        under its `limit`-th best score, instead of scoring every item the tag has (84 ms p50 for
        a tag on all 100k items, against 8 ms for a text query)."""
        self._tag_rank_changes = 0
        ranks, fresh, stale = self._ranks(), self._tag_fresh, self._tag_stale
        streams: list[Iterable[TagKey]] = []
        for tag in dict.fromkeys(tags):
            gone = stale.get(tag)
            if keys := ranks.get(tag):
                streams.append(keys if not gone else itertools.filterfalse(gone.__contains__, keys))
            if keys := fresh.get(tag):
                streams.append(keys)
        seen: set[str] = set()  # an item under two of the tags
        for key in heapq.merge(*streams):
            if key[2] not in seen:
                seen.add(key[2])
                yield key

    def _ranks(self) -> dict[str, list[TagKey]]:
        """The tag ranks, made if they are not, with the fresh and stale keys merged in when
        they are many."""
        ranks = self._tag_ranks
        if ranks is None:
            ranks = {}
            for item in self.items.values():
                key = tag_rank_key(item)
                for tag in item.tags:
                    ranks.setdefault(tag, []).append(key)
            for keys in ranks.values():
                keys.sort()
            self._tag_ranks, self._tag_fresh, self._tag_stale = ranks, {}, {}
        elif sum(map(len, self._tag_fresh.values())) + sum(map(len, self._tag_stale.values())) > TAG_RANK_FRESH_MAX:
            fresh, stale = self._tag_fresh, self._tag_stale
            for tag in set(fresh).union(stale):
                gone = stale.get(tag, ())
                # Two sorted runs: sorting merges them in one pass.
                merged = sorted([k for k in ranks.get(tag, ()) if k not in gone] + fresh.get(tag, []))
                if merged:
                    ranks[tag] = merged
                else:
                    ranks.pop(tag, None)
            self._tag_fresh, self._tag_stale = {}, {}
        return ranks

    def rank(self, item: Item) -> None:
        """File `item` in the tag ranks, once made. Past TAG_RANK_CHANGES_MAX items filed since
        the last query by tags (a compaction re-files thousands), they are dropped instead,
        and the next such query makes them again."""
        if self._tag_ranks is not None and item.tags and self._tag_changed():
            key = tag_rank_key(item)
            for tag in item.tags:
                bisect.insort(self._tag_fresh.setdefault(tag, []), key)

    def unrank(self, item: Item) -> None:
        """`rank` undone: a key filed since the last merge is taken out (a short list), one in
        the ranks marked stale."""
        if self._tag_ranks is not None and item.tags and self._tag_changed():
            key = tag_rank_key(item)
            for tag in item.tags:
                keys = self._tag_fresh.get(tag)
                i = bisect.bisect_left(keys, key) if keys else 0
                if keys and i < len(keys) and keys[i] == key:
                    del keys[i]
                else:
                    self._tag_stale.setdefault(tag, set()).add(key)

    def _tag_changed(self) -> bool:
        """Count a change to the tag ranks; False once there were too many since the last query
        by tags, and the ranks are dropped."""
        self._tag_rank_changes += 1
        if self._tag_rank_changes <= TAG_RANK_CHANGES_MAX:
            return True
        self._tag_ranks, self._tag_fresh, self._tag_stale = None, {}, {}
        return False

    def release_index_pages(self) -> None:
        """Unmap the index file's pages this process has read (`search.mapped.release`)."""
        mapped = self.index_file() if self.index_file is not None else None
        if mapped is not None:
            memory_map.release(mapped)

    @property
    def dedup(self) -> DedupIndex:
        if self._dedup is None:
            saved, self._dedup_saved = self._dedup_saved, None
            try:
                self._dedup = DedupIndex.from_state(saved or {})
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("saved near-duplicate buckets unusable (%s); rebuilding them from the index", exc)
                self._dedup = DedupIndex()
                for item in self.items.values():
                    if item.tier == "active" and not item.depth:
                        self._dedup.add(item.id, self.index.terms(item.id))
        return self._dedup

    @dedup.setter
    def dedup(self, value: DedupIndex) -> None:
        self._dedup, self._dedup_saved = value, None


def dedup_state(s: _State) -> dict[str, Any]:
    """The buckets as a snapshot saves them in JSON (format 1): the saved state as read while
    it is unchanged."""
    if s._dedup is None and s._dedup_saved is not None:
        return json_state(s._dedup_saved)
    return s.dedup.to_state()


# The near-duplicate buckets' arrays in the index file are named with this prefix.
_DEDUP_IN_FILE = "dedup_"


def dedup_arrays(s: _State) -> dict[str, memoryview] | None:
    """The buckets as flat native arrays for the binary file beside a snapshot, by their names
    there: the buffers read from the last one while they are unchanged (not even parsed), else
    made from them. None when they cannot go there (`DedupIndex.to_arrays`)."""
    saved = s._dedup_saved
    if s._dedup is None and saved is not None and saved.get("format") == 2 and saved["byteorder"] == sys.byteorder:
        arrays: dict[str, memoryview] | None = {key: memoryview(saved[key]) for key in BUFFER_KEYS}
    else:
        arrays = s.dedup.to_arrays()
    return {_DEDUP_IN_FILE + key: value for key, value in arrays.items()} if arrays is not None else None


# Patch fields that change nothing derived but the active token total (see Store._swap_light).
_LIGHT_FIELDS: frozenset[str] = frozenset({"view", "last_accessed_at", "access_count"})


# The longest prefix that ends a word right before a space (greedy, so the last such word).
_WHOLE_WORDS = re.compile(r".*\S(?=\s)", re.DOTALL)


def _headline(item: Item) -> str | None:
    """What the index's boosted summary field holds: the summary, or else the first line of the
    content (the command of a tool output, the error line, the head of a note). An agent that
    stores without a summary still gets its headline weighted like one (replay without
    summaries: recall@5 0.770 with only the body, ~0.93 with the first line)."""
    if item.summary:
        return item.summary
    first, newline, rest = item.content.strip().partition("\n")
    # A one-line item has no headline apart from itself: counting it twice would only favour
    # one-liners over everything else.
    if not newline or not rest.strip():
        return None
    line = first.strip()
    if len(line) <= HEADLINE_CHARS:
        return line or None
    # Cut after the last whole word that fits: a word cut short would be indexed as a term the
    # item does not contain ("helioproject" of "Helioprojective"). No space at all: no headline.
    whole = _WHOLE_WORDS.match(line, 0, HEADLINE_CHARS + 1)
    return whole.group() if whole else None


def stale_limit(n_items: int) -> int:
    """The most changed ids a load re-indexes on top of an older index file; past it a
    rebuild of all `n_items` is as cheap."""
    return max(REBUILD_BATCH, n_items // 2)


def index_fields(item: Item) -> tuple[str, str | None, Sequence[str]]:
    """What the search index holds of an item: (body, boosted headline, tags). The doctor
    rebuilds terms through this, so its check and the store cannot drift apart."""
    return item.content, _headline(item), item.tags


class _StateOps:
    """The in-memory state and its single mutation path."""

    # Set by Store.__init__; every part of the Store reads them.
    _s: _State
    _tuning: Tuning
    settings: Settings
    counter: TokenCounter
    _clock: Callable[[], float]
    # Ids whose item was put, changed (other than its view or access data) or deleted since the
    # index file on disk was written: what a load re-indexes on top of that file. None once
    # more changed than re-indexing would beat a rebuild (until the next full snapshot).
    _index_stale: set[str] | None
    # Per thread, what `Store.serving` set for the call running on it: `scope`, `caller`.
    _call_scope: threading.local

    @property
    def _caller(self) -> Caller | None:
        """Who makes the running call (a person of a team server's tokens file); None: anyone."""
        caller: Caller | None = getattr(self._call_scope, "caller", None)
        return caller

    def _reaches(self, item: Item) -> bool:
        """Whether the running call's caller may see `item`: its projects and "global"."""
        caller = self._caller
        if caller is None:
            return True
        key = scope_key(item.scope)
        return key == GLOBAL_SCOPE or caller.opens(key)

    def check_derived(self) -> list[str]:
        """What the incrementally kept structures (search index, token total, tier orders,
        near-duplicate buckets) get wrong against a rebuild from the items; [] when right."""
        s = self._s
        problems: list[str] = []
        fresh = BM25Index()
        for it in s.items.values():
            fresh.add(it.id, *index_fields(it))
        indexed = {e for e in s.index.to_state()["ext"] if e is not None}
        missing = sorted(set(s.items) - indexed)
        extra = sorted(indexed - set(s.items))
        stale: list[str] = []
        broken: list[str] = []
        for i in sorted(set(s.items) & indexed):
            try:
                if s.index.terms(i) != fresh.terms(i):
                    stale.append(i)
            except (IndexError, KeyError, AssertionError, TypeError):
                broken.append(i)  # term ids pointing nowhere: a damaged saved index
        if broken:
            problems.append(
                f"the search index is internally inconsistent for {len(broken)} item(s) ({examples(broken)}): "
                "searches touching them would fail"
            )
        if missing:
            problems.append(f"{len(missing)} item(s) are not in the search index: {examples(missing)}")
        if extra:
            problems.append(f"the search index holds {len(extra)} id(s) with no item: {examples(extra)}")
        if stale:
            problems.append(f"{len(stale)} item(s) are indexed with other terms than their text: {examples(stale)}")
        if not (missing or extra or stale) and s.index.avg_doc_len != fresh.avg_doc_len:
            problems.append(
                f"the index's document lengths disagree with the items ({s.index.avg_doc_len:.3f} vs "
                f"{fresh.avg_doc_len:.3f} average): scores would be off"
            )
        views = ViewIndex()
        for it in s.items.values():
            views.add(it.id, it.file_paths)
        if views != s.views:
            problems.append(
                "the file-view index disagrees with the items' file_paths: searches would lift the wrong items"
            )
        used = sum(it.view_tokens for it in s.items.values() if it.tier == "active")
        if s.used != used:
            problems.append(f"tokens used is {s.used:,} but the active items add up to {used:,}")
        pinned = sum(it.view_tokens for it in s.items.values() if it.tier == "active" and it.pinned)
        if s.pinned_used != pinned:
            problems.append(f"pinned tokens are {s.pinned_used:,} but the pinned active items add up to {pinned:,}")
        for tier in ("active", "archived"):
            n = sum(1 for it in s.items.values() if it.tier == tier)
            if len(s.order[tier]) != n:
                problems.append(f"the {tier} order lists {len(s.order[tier])} items but {n} are {tier}")
        want_dedup = {it.id for it in s.items.values() if it.tier == "active" and not it.depth}
        wrong = sorted(want_dedup ^ {i for i in s.items if i in s.dedup})
        if wrong:
            problems.append(
                f"{len(wrong)} item(s) are wrongly in or out of the near-duplicate buckets: {examples(wrong)}"
            )
        return problems

    def _mark_changed(self, ids: Sequence[str]) -> None:
        stale = self._index_stale
        if stale is None:
            return
        stale.update(ids)
        if len(stale) > stale_limit(len(self._s.items)):
            self._index_stale = None  # sticky: the store may grow, but these changes stay

    def _apply(self, op: Op) -> None:
        kind = op["op"]
        if kind == "put":
            item = Item.from_record(op["item"])
            self._mark_changed((item.id,))
            old = self._s.items.get(item.id)
            if old is not None:
                self._drop(self._s, old)
            self._put(self._s, item)
        elif kind == "patch":
            old = self._s.items.get(op["id"])
            if old is None:
                return  # forgotten by another process in the meantime
            changes = dict(op["set"])
            if changes.keys() <= _LIGHT_FIELDS:
                self._swap_light(old, old.evolve(changes))
                return
            self._mark_changed((old.id,))
            for key in TUPLE_FIELDS:
                if key in changes:
                    changes[key] = tuple(changes[key])
            if "tags_from" in changes:
                changes["tags_from"] = pairs(changes["tags_from"])
            new = old.evolve(changes)
            self._swap(old, new)
        elif kind == "del":
            old = self._s.items.get(op["id"])
            if old is not None:
                self._mark_changed((old.id,))
                self._drop(self._s, old)
        elif kind == "config":
            for key, value in op["set"].items():
                setattr(self.settings, key, value)
        else:
            raise ValueError(f"unknown journal op {kind!r}")

    def _put_new(self, ops: Sequence[Op]) -> None:
        """`_apply` of puts of new items (distinct ids, none stored), with the same result, but
        a run of them is indexed in one batch (`BM25Index.add_many`), at a fraction of the cost."""
        items = [Item.from_record(op["item"]) for op in ops]
        self._mark_changed([item.id for item in items])
        s = self._s
        if len(items) < 2:
            for item in items:
                self._put(s, item)
            return
        # Indexed first: add_many checks every id before it changes anything. What a batch
        # indexed before a later one failed is taken out again: the rollback only sees items.
        try:
            self._index_new(s, items)
        except BaseException:
            for item in items:
                if item.id in s.index:
                    s.index.remove(item.id)
                s.dedup.remove(item.id)
            raise
        for item in items:
            self._put(s, item, derived=False)

    def _swap_light(self, old: Item, new: Item) -> None:
        """`_swap` for a change of view or access time only, which no derived structure but
        the token total depends on: compaction promotes thousands of items to their summary."""
        s = self._s
        if old.tier == "active":
            s.used += new.view_tokens - old.view_tokens
            if old.pinned:
                s.pinned_used += new.view_tokens - old.view_tokens
        if s._tag_ranks is not None and new.tags:
            s.unrank(old)
            s.rank(new)
        s.items[new.id] = new

    def _swap(self, old: Item, new: Item) -> None:
        s = self._s
        text_changed = (old.content, old.summary, old.tags) != (new.content, new.summary, new.tags)
        if old.tier != new.tier or old.seq != new.seq or old.scope != new.scope:
            self._unorder(s, old)
            self._order(s, new)
        if old.tier == "active":
            s.used -= old.view_tokens
            if old.pinned:
                s.pinned_used -= old.view_tokens
        else:
            s.archived_tokens -= old.content_tokens
        if new.tier == "active":
            s.used += new.view_tokens
            if new.pinned:
                s.pinned_used += new.view_tokens
        else:
            s.archived_tokens += new.content_tokens
        if old.content_type != new.content_type or old.tier != new.tier:
            s.type_counts[old.content_type][old.tier] -= 1
            s.type_counts[new.content_type][new.tier] += 1
        if old.tags != new.tags:
            s.untag(old)
            s.tag(new)
        if s._tag_ranks is not None and (old.tags or new.tags):
            s.unrank(old)
            s.rank(new)
        if old.file_paths != new.file_paths:
            s.views.remove(old.id, old.file_paths)
            s.views.add(new.id, new.file_paths)
        if old.content != new.content or old.summary != new.summary:
            s.index.update(new.id, *index_fields(new))
        elif old.tags != new.tags:
            s.index.retag(new.id, old.tags, new.tags)
        if new.tier != "active" or new.depth:
            s.dedup.remove(new.id)
        elif text_changed or old.tier != "active":
            s.dedup.add(new.id, s.index.terms(new.id))
        if new.dup_of and new.tier == "active":
            s.dup_hints.add(new.id)
        else:
            s.dup_hints.discard(new.id)
        s.items[new.id] = new
        if new.tier == "archived" and not new.parents:
            s.uncovered.add(new.id)
        else:
            s.uncovered.discard(new.id)
        if new.pinned and new.tier == "active":
            s.pinned.add(new.id)
        else:
            s.pinned.discard(new.id)
        if new.depth and new.tier == "active":
            s.active_nodes.add(new.id)
        else:
            s.active_nodes.discard(new.id)

    @staticmethod
    def _order(s: _State, item: Item) -> None:
        seq = item.seq
        key = scope_key(item.scope)
        per = s.scope_order.get(key)
        if per is None:  # not setdefault: its default would be made for every item
            per = s.scope_order[key] = {"active": [], "archived": []}
        for seqs in (s.order[item.tier], per[item.tier]):
            # A snapshot lists items in seq order and new items take the next seq: most land last.
            if not seqs or seqs[-1] < seq:
                seqs.append(seq)
            else:
                bisect.insort(seqs, seq)
        s.by_seq[seq] = item.id

    @staticmethod
    def _unorder(s: _State, item: Item) -> None:
        for seqs in (s.order[item.tier], s.scope_order.get(scope_key(item.scope), {}).get(item.tier, [])):
            i = bisect.bisect_left(seqs, item.seq)
            if i < len(seqs) and seqs[i] == item.seq:
                del seqs[i]
        s.by_seq.pop(item.seq, None)

    def _restore_derived(
        self, state: _State, snap: dict[str, Any], *, instead: str = "rebuilding it from the items"
    ) -> bool:
        """Load the search index and dedup buckets saved with a snapshot, so a cold start does
        not re-tokenise every item. False (rebuild) when absent or unreadable; `instead` says
        in the warning what the caller does then."""
        # Popped, so the parsed state (hundreds of MB at 100k items) is freed as soon as the
        # index is built, before the items are: that is the peak of a cold start's memory.
        index_state, saved = snap.pop("index", None), snap.pop("dedup", None)
        if not index_state or saved is None:
            return False
        mapped = memory_map.mapping(index_state)
        try:
            if not isinstance(saved, dict):
                raise ValueError("unknown dedup state format")
            if saved.get("format") == 2:  # its arrays are in the index file, read in place
                names = {_DEDUP_IN_FILE + key: key for key in BUFFER_KEYS}
                if not names.keys() <= index_state.keys():
                    raise ValueError("the near-duplicate buckets are not in the index file")
                saved = {**saved, **{key: index_state.pop(name) for name, key in names.items()}}
            state.index = BM25Index.from_state(index_state)
            if not ((saved.get("format") == 1 and isinstance(saved.get("ids"), list)) or saved.get("format") == 2):
                raise ValueError("unknown dedup state format")
            state._dedup, state._dedup_saved = None, saved
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("saved index unusable (%s); %s", exc, instead)
            state.index, state.dedup = BM25Index(), DedupIndex()
            state.index_file = None
            return False
        state.index_file = weakref.ref(mapped) if mapped is not None else None
        return True

    @staticmethod
    def _index_holds(index: BM25Index, ids: Sequence[str]) -> bool:
        """Whether a saved index holds exactly the snapshot's items (as ids in file order)."""
        return len(index) == len(ids) and index.holds_all(ids)

    def _rebuild_derived(self, state: _State, progress: Callable[[int, int], None] | None = None) -> None:
        """The search index and near-duplicate buckets made anew from every item, indexed a
        batch at a time (`BM25Index.add_many`: the same index as one `add` after another)."""
        state.index, state.dedup = BM25Index(), DedupIndex()
        state.index_file = None
        self._index_new(state, list(state.items.values()), progress)

    @staticmethod
    def _index_new(s: _State, items: Sequence[Item], progress: Callable[[int, int], None] | None = None) -> None:
        """Index items the index does not hold, and file the active leaves among them for
        near-duplicates: REBUILD_BATCH at a time through `BM25Index.add_many`, which makes the
        index one `add` after another makes, sharing the vocabulary lookups of a batch.
        `progress(done, total)` is told after each batch."""
        for start in range(0, len(items), REBUILD_BATCH):
            batch = items[start : start + REBUILD_BATCH]
            terms = s.index.add_many([(item.id, *index_fields(item)) for item in batch])
            for item, words in zip(batch, terms, strict=True):
                if item.tier == "active" and not item.depth:
                    s.dedup.add(item.id, words)
            if progress is not None:
                progress(start + len(batch), len(items))

    def _put(self, s: _State, item: Item, *, derived: bool = True) -> None:
        """Add an item to every structure; `derived=False` when the index and dedup buckets
        were restored from a snapshot and already hold it."""
        if derived:
            # First: it is what an input can make fail, and a failure must leave nothing half
            # filed for the transaction's rollback (`_drop` expects every structure to hold it).
            self._derive(s, item)
        s.items[item.id] = item
        self._order(s, item)
        if item.seq >= s.next_seq:
            s.next_seq = item.seq + 1
        if s._by_tag is not None:  # checked here too: a start files every item through here
            s.tag(item)
        if s._tag_ranks is not None:
            s.rank(item)
        if item.file_paths:
            s.views.add(item.id, item.file_paths)
        tier = item.tier
        if tier == "archived":
            s.archived_tokens += item.content_tokens
            if not item.parents:
                s.uncovered.add(item.id)
        elif tier == "active":
            s.used += item.view_tokens
            if item.dup_of:
                s.dup_hints.add(item.id)
            if item.pinned:
                s.pinned.add(item.id)
                s.pinned_used += item.view_tokens
            if item.depth:
                s.active_nodes.add(item.id)
        s.type_counts[item.content_type][tier] += 1

    @staticmethod
    def _derive(s: _State, item: Item) -> None:
        """Index the item for search and, if an active leaf, for near-duplicates."""
        s.index.add(item.id, *index_fields(item))
        if item.tier == "active" and not item.depth:
            try:
                s.dedup.add(item.id, s.index.terms(item.id))
            except BaseException:
                s.index.remove(item.id)
                raise

    def _drop(self, s: _State, item: Item) -> None:
        del s.items[item.id]
        self._unorder(s, item)
        s.untag(item)
        s.unrank(item)
        s.index.remove(item.id)
        if item.file_paths:
            s.views.remove(item.id, item.file_paths)
        s.dedup.remove(item.id)
        s.dup_hints.discard(item.id)
        s.uncovered.discard(item.id)
        s.pinned.discard(item.id)
        s.active_nodes.discard(item.id)
        if item.tier == "archived":
            s.archived_tokens -= item.content_tokens
        if item.tier == "active":
            s.used -= item.view_tokens
            if item.pinned:
                s.pinned_used -= item.view_tokens
        s.type_counts[item.content_type][item.tier] -= 1

    @property
    def tokens_used(self) -> int:
        return self._s.used

    @property
    def budget(self) -> int:
        return self.settings.token_budget

    @property
    def pinned_tokens(self) -> int:
        """Active tokens of pinned items: compaction never moves them, so past the budget
        only unpinning (or a larger budget) brings usage back within it."""
        return self._s.pinned_used

    def __len__(self) -> int:
        return len(self._s.items)

    def count(self, tier: Tier) -> int:
        return len(self._s.order[tier])

    def _get(self, item_id: str) -> Item:
        item = self._s.items.get(item_id)
        if item is None or not self._reaches(item):
            raise NotFoundError(item_id)  # another project's item: as if it did not exist
        return item
