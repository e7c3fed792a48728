"""The Store: compactor's domain core. The MCP server, the CLI and the tests all drive it.

Every change follows one path: plan ops (under the state-dir lock, after catching up with
other processes) -> append them to the journal (fsynced) -> apply them to memory. `_apply`
is the only code that mutates state, and startup replays the journal through it, so what
was acknowledged is exactly what comes back.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import gc
import heapq
import logging
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import anyio.to_thread

from . import compaction, scoring
from . import constants as C
from .classify import auto_tags, detect_type, merge_tags, parse_tags
from .condense import (
    depth_instruction,
    extractive_text,
    gist,
    group_coherent,
    lineage_id,
    unfamiliar_terms,
    with_footer,
)
from .dedup import DedupIndex
from .errors import InvalidArgumentError, NotFoundError, PersistenceError
from .index import BM25Index
from .models import CONTENT_TYPES, TUPLE_FIELDS, CompactReport, ContentType, Item, Settings, Tier, pairs
from .persist import ItemRecords, Op, StateDir, snapshot_chunks
from .redact import redact
from .render import budget_line, item_line
from .tokens import TokenCounter, default_counter

log = logging.getLogger(__name__)

TierFilter = Literal["active", "archived", "all"]
GLOBAL_SCOPE = "global"
ALL_SCOPES = "all"


def scope_key(scope: str) -> str:
    """Items saved before scopes existed (scope "") belong to every project."""
    return scope or GLOBAL_SCOPE


_VALID_ID = re.compile(r"[a-z0-9][a-z0-9_-]{2,63}")
_ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"  # no 0/o/1/l: ids get read aloud and retyped


def _new_id() -> str:
    # 10 characters of a 32-letter alphabet: 50 random bits from one urandom call.
    n = int.from_bytes(secrets.token_bytes(7), "big")
    return "".join(_ID_ALPHABET[(n >> (5 * i)) & 31] for i in range(10))


@dataclass(slots=True)
class StoreInput:
    """One item to store, already validated for types by the caller's schema."""

    content: str
    summary: str | None = None
    tags: str | Sequence[str] | None = None
    importance: int = C.IMPORTANCE_DEFAULT
    pinned: bool = False
    # Importers pass a content-derived id so that importing twice stores nothing new.
    item_id: str | None = None
    scope: str | None = None  # None: the store's current scope; "global": every project


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


def _item_bytes(item: Item) -> int:
    return len(item.content.encode("utf-8", "replace")) + len((item.summary or "").encode("utf-8", "replace"))


@dataclass(slots=True)
class Updated:
    item: Item
    warnings: list[str]


@dataclass(slots=True)
class Hit:
    item: Item
    score: float
    matched: tuple[str, ...]


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


@dataclass(slots=True)
class _State:
    items: dict[str, Item] = field(default_factory=dict)
    order: dict[str, list[int]] = field(default_factory=lambda: {"active": [], "archived": []})
    by_seq: dict[int, str] = field(default_factory=dict)
    # The same order split by scope, so a scoped list or export never scans other projects.
    scope_order: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    by_tag: dict[str, set[str]] = field(default_factory=dict)
    index: BM25Index = field(default_factory=BM25Index)
    dedup: DedupIndex = field(default_factory=DedupIndex)
    dup_hints: set[str] = field(default_factory=set)  # active items with a near-duplicate noted
    uncovered: set[str] = field(default_factory=set)  # archived, no summary covers them
    pinned: set[str] = field(default_factory=set)  # active and pinned: status and recall read it per call
    active_nodes: set[str] = field(default_factory=set)  # active summary nodes: condensing scans them, not every item
    archived_tokens: int = 0
    used: int = 0
    next_seq: int = 1
    type_counts: dict[str, dict[str, int]] = field(
        default_factory=lambda: {t: {"active": 0, "archived": 0} for t in CONTENT_TYPES}
    )


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
    if len(line) <= C.HEADLINE_CHARS:
        return line or None
    # Cut after the last whole word that fits: a word cut short would be indexed as a term the
    # item does not contain ("helioproject" of "Helioprojective"). No space at all: no headline.
    whole = _WHOLE_WORDS.match(line, 0, C.HEADLINE_CHARS + 1)
    return whole.group() if whole else None


def _utf8_size(text: str, field: str) -> int:
    """Bytes of `text` as UTF-8; a lone surrogate (which no file or wire can carry) is the
    caller's mistake, reported as such rather than failing later in the journal write."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"{field} contains invalid Unicode (a lone surrogate at character {exc.start}); send valid text."
        ) from exc


def index_fields(item: Item) -> tuple[str, str | None, Sequence[str]]:
    """What the search index holds of an item: (body, boosted headline, tags). The doctor
    rebuilds terms through this, so its check and the store cannot drift apart."""
    return item.content, _headline(item), item.tags


def _check_importance(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10:
        raise InvalidArgumentError(f"importance must be an integer from 1 to 10, got {value!r}.")
    return value


class Store:
    def __init__(
        self,
        *,
        budget: int | None = None,
        state_dir: Path | str | None = None,
        counter: TokenCounter | None = None,
        clock: Callable[[], float] = time.time,
        scope: str = GLOBAL_SCOPE,
        redact_secrets: bool = True,
    ) -> None:
        self._clock = clock
        self.redact_secrets = redact_secrets
        self._redacted: dict[str, int] = {}
        # Items are stored in this scope unless told otherwise; reads cover it plus "global",
        # or every scope when `default_read_scope` is "all" (the CLI's --scope all).
        self.scope = scope
        self.default_read_scope: str | None = None
        self.counter = counter or default_counter()
        self.settings = Settings(token_budget=C.BUDGET_DEFAULT)
        self._s = _State()
        self._dir: StateDir | None = None
        self._dirty = False
        # Why the last journal write failed; while set, memory is read-only (writes are refused,
        # never acknowledged unsaved) and every write first tries the disk again.
        self._degraded: str | None = None
        self._ledger_mem: list[dict[str, Any]] = []
        self.load_warnings: list[str] = []
        if state_dir is not None:
            self._dir = StateDir(Path(state_dir))
            self._dir.open()
            with self._dir.locked():
                self._reload()
                self._init_budget(budget)
        else:
            self._init_budget(budget)

    def _init_budget(self, budget: int | None) -> None:
        """Under the lock that loaded the state: an append outside it would land after other
        processes' appends while our offset still points before them."""
        # An explicit --budget is the person's choice: it wins over a client default but not
        # over a budget the agent or person set with `configure` and that was saved.
        if budget is not None and self.settings.budget_source in ("default", "client", "cli"):
            self._commit([{"op": "config", "set": {"token_budget": budget, "budget_source": "cli"}}])

    # --- state plumbing -------------------------------------------------------------------
    def _reload(self) -> None:
        """(Re)build memory from the state dir. Call under the lock."""
        with _gc_paused():  # hundreds of thousands of new objects, none of them cyclic garbage
            self._load_state()

    def _load_state(self) -> None:
        assert self._dir is not None
        loaded = self._dir.load()
        snap = loaded.snapshot
        state, settings, _ = self._state_from_snapshot(snap)
        old_state, old_settings = self._s, self.settings
        self._s, self.settings = state, settings
        try:
            for batch in loaded.batches:
                for op in batch:
                    self._apply(op)
        except Exception:
            self._s, self.settings = old_state, old_settings
            raise
        for warning in loaded.warnings:
            log.warning("%s", warning)
        self.load_warnings = loaded.warnings

    def _state_from_snapshot(self, snap: dict[str, Any] | None) -> tuple[_State, Settings, bool]:
        """Memory as a snapshot describes it: (state, settings, whether the index saved with
        it was used). Its items are read one at a time, each freed once its Item is made."""
        state = _State()
        settings = Settings(token_budget=C.BUDGET_DEFAULT)
        if not snap:
            return state, settings, False
        records: ItemRecords = snap.pop("items")
        try:
            for key, value in (snap.get("settings") or {}).items():
                if hasattr(settings, key):
                    setattr(settings, key, value)
            derived = self._restore_derived(state, snap)
            read_ids: list[str] = []
            for record in records:
                item = Item.from_record(record)
                read_ids.append(item.id)
                self._put(state, item, derived=not derived)
        finally:
            records.close()
        # Checked once all are read, as they arrive one at a time.
        if derived and not self._index_holds(state.index, read_ids):
            log.warning("saved index does not match the items; rebuilding it")
            self._rebuild_derived(state)
            derived = False
        return state, settings, derived

    @classmethod
    def replay(
        cls, snapshot: dict[str, Any] | None, batches: Sequence[tuple[int, list[Op]]]
    ) -> tuple[Store, bool, list[str]]:
        """An in-memory Store built from a parsed snapshot and journal lines exactly as a start
        builds one, for checking a state dir without opening it (the doctor). Returns the
        store, whether the snapshot's saved index was used, and one message per op that could
        not be applied ("line N op K ('kind'): error"); those ops are skipped."""
        store = cls()
        snap = dict(snapshot) if snapshot else None
        if snap is not None:
            snap["items"] = (record for record in list(snap["items"]))
        store._s, store.settings, derived = store._state_from_snapshot(snap)
        failures: list[str] = []
        for lineno, ops in batches:
            for k, op in enumerate(ops):
                try:
                    store._apply(op)
                except Exception as exc:
                    failures.append(f"line {lineno} op {k} ({op.get('op')!r}): {exc!r:.120}")
        return store, derived, failures

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
                f"the search index is internally inconsistent for {len(broken)} item(s) ({_examples(broken)}): "
                "searches touching them would fail"
            )
        if missing:
            problems.append(f"{len(missing)} item(s) are not in the search index: {_examples(missing)}")
        if extra:
            problems.append(f"the search index holds {len(extra)} id(s) with no item: {_examples(extra)}")
        if stale:
            problems.append(f"{len(stale)} item(s) are indexed with other terms than their text: {_examples(stale)}")
        if not (missing or extra or stale) and s.index.avg_doc_len != fresh.avg_doc_len:
            problems.append(
                f"the index's document lengths disagree with the items ({s.index.avg_doc_len:.3f} vs "
                f"{fresh.avg_doc_len:.3f} average): scores would be off"
            )
        used = sum(it.view_tokens for it in s.items.values() if it.tier == "active")
        if s.used != used:
            problems.append(f"tokens used is {s.used:,} but the active items add up to {used:,}")
        for tier in ("active", "archived"):
            n = sum(1 for it in s.items.values() if it.tier == tier)
            if len(s.order[tier]) != n:
                problems.append(f"the {tier} order lists {len(s.order[tier])} items but {n} are {tier}")
        want_dedup = {it.id for it in s.items.values() if it.tier == "active" and not it.depth}
        wrong = sorted(want_dedup ^ {i for i in s.items if i in s.dedup})
        if wrong:
            problems.append(
                f"{len(wrong)} item(s) are wrongly in or out of the near-duplicate buckets: {_examples(wrong)}"
            )
        return problems

    def _sync(self) -> None:
        """Apply what other processes appended since our last call. Call under the lock."""
        if self._dir is None or not self._dir.journal_changed():
            return
        batches = self._dir.read_new()
        if batches is None:
            self._reload()
            return
        for batch in batches:
            for op in batch:
                self._apply(op)

    def _commit(self, ops: list[Op], *, sync: bool = True) -> None:
        if not ops:
            return
        with self._txn(sync=sync) as txn:
            txn.apply(ops)

    @contextlib.contextmanager
    def _txn(self, sync: bool = True) -> Iterator[_Txn]:
        """Ops applied inside the block are journaled together when it ends, or all undone if
        it raises (the journal write included), leaving memory exactly as it was."""
        txn = _Txn(self)
        try:
            yield txn
            txn.commit(sync=sync)
        except BaseException:
            txn.rollback()
            raise

    def _persist_ops(self, ops: list[Op], sync: bool) -> None:
        """Journal applied ops, or raise so the caller's transaction is undone: a write that
        is not on disk is never acknowledged. A failure makes memory read-only (reads go on);
        each later write tries the disk again, and the first that succeeds ends it."""
        sd = self._dir
        if sd is None or not ops:
            return
        try:
            sd.append(ops, sync=sync)
        except PersistenceError as exc:
            if self._degraded is None:
                log.error("persistence failed; memory is read-only until the disk recovers: %s", exc)
            self._degraded = str(exc)
            raise PersistenceError(
                f"Memory is read-only until compactor can save again ({exc}). Nothing from this call "
                "was stored; free disk space or fix permissions and retry: it resumes by itself."
            ) from exc
        if self._degraded is not None:
            log.warning("persistence recovered: saving again")
            self._degraded = None
        self._dirty = True

    @property
    def degraded(self) -> str | None:
        """Why the state dir is not being written, or None when all is saved."""
        return self._degraded

    def _locked(self) -> Any:
        if self._dir is None:
            return _NullLock()
        return self._dir.locked()

    def _read(self) -> Any:
        """Context for a read: catch up with other processes first."""
        return _ReadGuard(self)

    # --- applying ops (the only mutation path) --------------------------------------------
    def _apply(self, op: Op) -> None:
        kind = op["op"]
        if kind == "put":
            item = Item.from_record(op["item"])
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
                self._drop(self._s, old)
        elif kind == "config":
            for key, value in op["set"].items():
                setattr(self.settings, key, value)
        else:
            raise ValueError(f"unknown journal op {kind!r}")

    def _swap_light(self, old: Item, new: Item) -> None:
        """`_swap` for a change of view or access time only, which no derived structure but
        the token total depends on: compaction promotes thousands of items to their summary."""
        s = self._s
        if old.tier == "active":
            s.used += new.view_tokens - old.view_tokens
        s.items[new.id] = new

    def _swap(self, old: Item, new: Item) -> None:
        s = self._s
        text_changed = (old.content, old.summary, old.tags) != (new.content, new.summary, new.tags)
        if old.tier != new.tier or old.seq != new.seq or old.scope != new.scope:
            self._unorder(s, old)
            self._order(s, new)
        if old.tier == "active":
            s.used -= old.view_tokens
        else:
            s.archived_tokens -= old.content_tokens
        if new.tier == "active":
            s.used += new.view_tokens
        else:
            s.archived_tokens += new.content_tokens
        if old.content_type != new.content_type or old.tier != new.tier:
            s.type_counts[old.content_type][old.tier] -= 1
            s.type_counts[new.content_type][new.tier] += 1
        if old.tags != new.tags:
            for tag in old.tags:
                self._untag(s, tag, old.id)
            for tag in new.tags:
                s.by_tag.setdefault(tag, set()).add(new.id)
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
        bisect.insort(s.order[item.tier], item.seq)
        per = s.scope_order.setdefault(scope_key(item.scope), {"active": [], "archived": []})
        bisect.insort(per[item.tier], item.seq)
        s.by_seq[item.seq] = item.id

    @staticmethod
    def _unorder(s: _State, item: Item) -> None:
        for seqs in (s.order[item.tier], s.scope_order.get(scope_key(item.scope), {}).get(item.tier, [])):
            i = bisect.bisect_left(seqs, item.seq)
            if i < len(seqs) and seqs[i] == item.seq:
                del seqs[i]
        s.by_seq.pop(item.seq, None)

    @staticmethod
    def _untag(s: _State, tag: str, item_id: str) -> None:
        ids = s.by_tag.get(tag)
        if ids is not None:
            ids.discard(item_id)
            if not ids:
                del s.by_tag[tag]

    def _restore_derived(self, state: _State, snap: dict[str, Any]) -> bool:
        """Load the search index and dedup buckets saved with a snapshot, so a cold start does
        not re-tokenise every item. False (rebuild) when absent or unreadable."""
        # Popped, so the parsed state (hundreds of MB at 100k items) is freed as soon as the
        # index is built, before the items are: that is the peak of a cold start's memory.
        index_state, dedup_state = snap.pop("index", None), snap.pop("dedup", None)
        if not index_state or dedup_state is None:
            return False
        try:
            state.index = BM25Index.from_state(index_state)
            state.dedup = DedupIndex.from_state(dedup_state)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("saved index unusable (%s); rebuilding it from the items", exc)
            state.index, state.dedup = BM25Index(), DedupIndex()
            return False
        return True

    @staticmethod
    def _index_holds(index: BM25Index, ids: Sequence[str]) -> bool:
        """Whether a saved index holds exactly the snapshot's items (as ids in file order)."""
        return len(index) == len(ids) and all(item_id in index for item_id in ids)

    def _rebuild_derived(self, state: _State) -> None:
        state.index, state.dedup = BM25Index(), DedupIndex()
        for item in state.items.values():
            self._derive(state, item)

    def _put(self, s: _State, item: Item, *, derived: bool = True) -> None:
        """Add an item to every structure; `derived=False` when the index and dedup buckets
        were restored from a snapshot and already hold it."""
        s.items[item.id] = item
        self._order(s, item)
        s.next_seq = max(s.next_seq, item.seq + 1)
        for tag in item.tags:
            s.by_tag.setdefault(tag, set()).add(item.id)
        if derived:
            self._derive(s, item)
        if item.tier == "archived":
            s.archived_tokens += item.content_tokens
        if item.tier == "active":
            s.used += item.view_tokens
            if item.dup_of:
                s.dup_hints.add(item.id)
            if item.pinned:
                s.pinned.add(item.id)
            if item.depth:
                s.active_nodes.add(item.id)
        s.type_counts[item.content_type][item.tier] += 1
        if item.tier == "archived" and not item.parents:
            s.uncovered.add(item.id)

    @staticmethod
    def _derive(s: _State, item: Item) -> None:
        """Index the item for search and, if an active leaf, for near-duplicates."""
        s.index.add(item.id, *index_fields(item))
        if item.tier == "active" and not item.depth:
            s.dedup.add(item.id, s.index.terms(item.id))

    def _drop(self, s: _State, item: Item) -> None:
        del s.items[item.id]
        self._unorder(s, item)
        for tag in item.tags:
            self._untag(s, tag, item.id)
        s.index.remove(item.id)
        s.dedup.remove(item.id)
        s.dup_hints.discard(item.id)
        s.uncovered.discard(item.id)
        s.pinned.discard(item.id)
        s.active_nodes.discard(item.id)
        if item.tier == "archived":
            s.archived_tokens -= item.content_tokens
        if item.tier == "active":
            s.used -= item.view_tokens
        s.type_counts[item.content_type][item.tier] -= 1

    # --- reading --------------------------------------------------------------------------
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
        s = self._s
        return sum(s.items[i].view_tokens for i in s.pinned)

    def __len__(self) -> int:
        return len(self._s.items)

    def ids(self) -> list[str]:
        with self._read():  # another process may have stored or forgotten since our last call
            return list(self._s.items)

    def count(self, tier: Tier) -> int:
        return len(self._s.order[tier])

    def _get(self, item_id: str) -> Item:
        item = self._s.items.get(item_id)
        if item is None:
            raise NotFoundError(item_id)
        return item

    def get(self, item_id: str) -> Item:
        """The full item whatever its tier or view: the way back to every original."""
        with self._read():
            return self._get(item_id)

    # --- building items -------------------------------------------------------------------
    def _build(self, inp: StoreInput, seq: int, now: float) -> Item:
        content = inp.content
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgumentError("content must be a non-empty string (not only whitespace).")
        size = _utf8_size(content, "content")
        if size > C.MAX_CONTENT_BYTES:
            raise InvalidArgumentError(
                f"content is {size:,} bytes; the limit is {C.MAX_CONTENT_BYTES:,} (1 MiB). "
                "Store a summary or split it into parts."
            )
        summary = self._check_summary(inp.summary)
        content, summary = self._redact(content, summary)
        importance = _check_importance(inp.importance)
        try:
            user_tags = parse_tags(self._redact_tags(inp.tags))
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(str(exc)) from exc
        for tag in user_tags:
            _utf8_size(tag, "tags")
        ctype = cast(ContentType, str(detect_type(content)))
        tags = merge_tags(user_tags, auto_tags(content, ctype))[: C.MAX_TAGS]
        if inp.item_id is not None:
            if not _VALID_ID.fullmatch(inp.item_id):
                raise InvalidArgumentError("an explicit id must be 3-64 characters of a-z, 0-9, '-' or '_'.")
            item_id = inp.item_id
        else:
            item_id = _new_id()
            while item_id in self._s.items:
                item_id = _new_id()
        return Item(
            id=item_id,
            seq=seq,
            content=content,
            summary=summary,
            tags=tuple(tags),
            importance=importance,
            content_type=ctype,
            pinned=bool(inp.pinned),
            created_at=now,
            last_accessed_at=now,
            access_count=0,
            content_tokens=self.counter.count(content),
            summary_tokens=self.counter.count(summary),
            scope=self._check_stored_scope(inp.scope) if inp.scope is not None else self.scope,
        )

    def _redact(self, content: str, summary: str | None) -> tuple[str, str | None]:
        """Credentials become [REDACTED:<kind>] before anything is indexed or written."""
        if not self.redact_secrets:
            return content, summary
        content, found = redact(content)
        for r in found:
            self._redacted[r.kind] = self._redacted.get(r.kind, 0) + r.count
        if summary is not None:
            summary, found = redact(summary)
            for r in found:
                self._redacted[r.kind] = self._redacted.get(r.kind, 0) + r.count
        return content, summary

    def _redact_tags(self, tags: str | Sequence[str] | None) -> str | Sequence[str] | None:
        """Tags without the ones holding a credential: such a tag is dropped, not rewritten, as
        `[redacted:github_token]` would tag nothing. Checked before parse_tags lowercases them
        (`AKIA...` is only a key in upper case)."""
        if not self.redact_secrets or tags is None:
            return tags
        raw: list[Any] = tags.strip().split(",") if isinstance(tags, str) else list(tags)
        kept: list[Any] = []
        for tag in raw:
            found = redact(tag)[1] if isinstance(tag, str) else []  # parse_tags reports a non-string
            for r in found:
                self._redacted[r.kind] = self._redacted.get(r.kind, 0) + r.count
            if not found:
                kept.append(tag)
        return kept

    def _check_stored_scope(self, scope: str) -> str:
        """A scope names a project; one that holds a credential is refused rather than stored
        (rewriting it would file the item under a different project)."""
        scope = self._check_scope(scope)
        found = redact(scope)[1] if self.redact_secrets else []
        if found:
            kinds = ", ".join(r.kind for r in found)
            raise InvalidArgumentError(f"scope holds what looks like a credential ({kinds}); name the project instead.")
        return scope

    def take_redactions(self) -> dict[str, int]:
        """What the last call redacted (kind -> count), and reset."""
        out, self._redacted = self._redacted, {}
        return out

    @staticmethod
    def _check_summary(summary: str | None) -> str | None:
        if summary is None:
            return None
        if not isinstance(summary, str):
            raise InvalidArgumentError("summary must be a string.")
        summary = summary.strip()
        if not summary:
            return None
        _utf8_size(summary, "summary")
        if len(summary) > C.MAX_SUMMARY_CHARS:
            raise InvalidArgumentError(
                f"summary is {len(summary):,} characters; keep it under {C.MAX_SUMMARY_CHARS:,}."
            )
        return summary

    # --- writing --------------------------------------------------------------------------
    def store(
        self,
        content: str,
        summary: str | None = None,
        tags: str | Sequence[str] | None = None,
        importance: int = C.IMPORTANCE_DEFAULT,
        pinned: bool = False,
        scope: str | None = None,
    ) -> Stored:
        result = self.bulk_store([StoreInput(content, summary, tags, importance, pinned, scope=scope)])
        return Stored(item=result.items[0], compaction=result.compaction, redacted=result.redacted)

    def import_items(self, inputs: Sequence[StoreInput]) -> BulkStored:
        """Store items with explicit (content-derived) ids, skipping ids already present, in
        chunks of BULK_MAX_ITEMS; each chunk is all or nothing."""
        items: list[Item] = []
        skipped: list[str] = []
        report: CompactReport | None = None
        for start in range(0, len(inputs), C.BULK_MAX_ITEMS):
            res = self.bulk_store(list(inputs[start : start + C.BULK_MAX_ITEMS]))
            items.extend(res.items)
            skipped.extend(res.skipped)
            report = res.compaction or report
        return BulkStored(items=items, compaction=report, skipped=skipped)

    def import_records(self, records: Sequence[dict[str, Any]]) -> ImportedRecords:
        """Bring back items as a JSON export recorded them: every field kept (tier, view,
        scope, lineage, timestamps, access counts), only `seq` and token counts assigned here.
        Ids already present are skipped, so importing twice stores nothing new. A summary node
        comes only with children that list it as their parent (imported with it, or already
        here); otherwise it is left out and its children are left uncovered, for compaction to
        cover again. Written in chunks of BULK_MAX_ITEMS through the one mutation path."""
        with self._locked():
            self._sync()
            self._redacted = {}
            now = self._clock()
            built: dict[str, Item] = {}
            skipped: list[str] = []
            for i, rec in enumerate(records):
                try:
                    item = self._build_record(rec, now)
                except InvalidArgumentError as exc:
                    raise InvalidArgumentError(f"items[{i}]: {exc} Nothing was imported.") from exc
                if item.id in self._s.items or item.id in built:
                    skipped.append(item.id)
                    continue
                built[item.id] = item
            dropped = self._settle_lineage(built)
            order = list(built.values())
            report: CompactReport | None = None
            for start in range(0, len(order), C.BULK_MAX_ITEMS):
                # Seqs per chunk: the previous chunk's compaction may have made nodes.
                seq = self._s.next_seq
                chunk = order[start : start + C.BULK_MAX_ITEMS]
                ops: list[Op] = [
                    {"op": "put", "item": it.evolve({"seq": seq + n}).to_record()} for n, it in enumerate(chunk)
                ]
                report = self._transact(ops, protected=frozenset()) or report
            if dropped and self._s.uncovered:
                # The children of a node left out are covered again now, as compaction would.
                st = self.settings
                with self._txn() as txn:
                    self._condense(
                        txn, int(st.auto_compact_threshold * st.token_budget), frozenset(), last_resort=False
                    )
            return ImportedRecords(
                items=[self._s.items[it.id] for it in order if it.id in self._s.items],
                compaction=report,
                skipped=skipped,
                redacted=self.take_redactions(),
                dropped_nodes=dropped,
            )

    def _build_record(self, rec: dict[str, Any], now: float) -> Item:
        """An Item from an exported record, every field checked as `_build` checks a new one."""
        if not isinstance(rec, dict):
            raise InvalidArgumentError("an item must be a JSON object.")
        content = rec.get("content")
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgumentError("content must be a non-empty string.")
        size = _utf8_size(content, "content")
        if size > C.MAX_CONTENT_BYTES:
            raise InvalidArgumentError(f"content is {size:,} bytes; the limit is {C.MAX_CONTENT_BYTES:,}.")
        item_id = rec.get("id")
        if not isinstance(item_id, str) or not _VALID_ID.fullmatch(item_id):
            raise InvalidArgumentError("id must be 3-64 characters of a-z, 0-9, '-' or '_'.")
        summary = self._check_summary(rec.get("summary"))
        content, summary = self._redact(content, summary)
        ctype = rec.get("content_type")
        if ctype not in CONTENT_TYPES:
            ctype = str(detect_type(content))
        try:
            tags = parse_tags(rec["tags"]) if "tags" in rec else merge_tags([], auto_tags(content, ctype))
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(str(exc)) from exc
        if len(tags) > C.MAX_TAGS:
            raise InvalidArgumentError(f"{len(tags)} tags; at most {C.MAX_TAGS}.")

        def pick(key: str, ok: Callable[[Any], bool], default: Any) -> Any:
            value = rec.get(key, default)
            if not ok(value):
                raise InvalidArgumentError(f"{key} has an invalid value: {value!r}.")
            return value

        def is_time(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e11

        def is_count(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0

        def is_ids(v: Any) -> bool:
            return isinstance(v, list | tuple) and all(isinstance(x, str) and _VALID_ID.fullmatch(x) for x in v)

        def is_ref(v: Any) -> bool:
            return v is None or (isinstance(v, str) and bool(_VALID_ID.fullmatch(v)))

        scope = rec.get("scope", self.scope)
        if not isinstance(scope, str):
            raise InvalidArgumentError("scope must be a string.")
        created = float(pick("created_at", is_time, now))
        depth = pick("depth", is_count, 0)
        children = tuple(pick("children", is_ids, ()))
        if bool(depth) != bool(children or rec.get("gone_children")):
            raise InvalidArgumentError("a summary node (depth >= 1) needs children, and only a node has them.")
        return Item(
            id=item_id,
            seq=0,
            content=content,
            summary=summary,
            tags=tuple(tags),
            importance=_check_importance(rec.get("importance", C.IMPORTANCE_DEFAULT)),
            content_type=cast(ContentType, ctype),
            pinned=pick("pinned", lambda v: isinstance(v, bool), False),
            created_at=created,
            last_accessed_at=float(pick("last_accessed_at", is_time, created)),
            access_count=pick("access_count", is_count, 0),
            content_tokens=self.counter.count(content),
            summary_tokens=self.counter.count(summary),
            tier=pick("tier", lambda v: v in ("active", "archived"), "active"),
            view=pick("view", lambda v: v in ("content", "summary"), "content"),
            merged_into=pick("merged_into", is_ref, None),
            dup_of=pick("dup_of", is_ref, None),
            depth=depth,
            children=children,
            parents=tuple(pick("parents", is_ids, ())),
            quality=pick("quality", lambda v: v is None or isinstance(v, str), None),
            gone_children=tuple(pick("gone_children", is_ids, ())),
            children_tier=pick("children_tier", lambda v: v in ("active", "archived"), "archived"),
            scope=scope if scope == "" else self._check_scope(scope),
        )

    def _settle_lineage(self, built: dict[str, Item]) -> list[str]:
        """Make the imported items' links two-way with what will exist: drop (and return) the
        nodes whose children do not list them, then every link to an item that is not there."""
        have = self._s.items

        def find(item_id: str) -> Item | None:
            return built.get(item_id) or have.get(item_id)

        dropped: list[str] = []
        changed = True
        while changed:  # a dropped d1 node is a missing child of its d2 parent
            changed = False
            for node in [it for it in built.values() if it.depth]:
                gone = set(node.gone_children)
                kids = [(c, find(c)) for c in node.children]
                if any(c not in gone and (k is None or node.id not in k.parents) for c, k in kids):
                    del built[node.id]
                    dropped.append(node.id)
                    changed = True
        for item in list(built.values()):
            parents = tuple(p for p in item.parents if (par := find(p)) is not None and item.id in par.children)
            changes: dict[str, Any] = {}
            if parents != item.parents:
                changes["parents"] = parents
            for key in ("merged_into", "dup_of"):
                ref = getattr(item, key)
                if ref is not None and (ref == item.id or find(ref) is None):
                    changes[key] = None
            if changes:
                built[item.id] = item.evolve(changes)
        return dropped

    def bulk_store(self, inputs: Sequence[StoreInput]) -> BulkStored:
        """All or nothing: every input is validated before anything is written."""
        if not inputs:
            raise InvalidArgumentError("items is empty; pass at least one item to store.")
        if len(inputs) > C.BULK_MAX_ITEMS:
            raise InvalidArgumentError(
                f"items has {len(inputs):,} entries; send at most {C.BULK_MAX_ITEMS:,} per call."
            )
        with self._locked():
            self._sync()
            self._redacted = {}
            now = self._clock()
            built: list[Item] = []
            skipped: list[str] = []
            seq = self._s.next_seq
            for i, inp in enumerate(inputs):
                if inp.item_id is not None and (
                    inp.item_id in self._s.items or any(b.id == inp.item_id for b in built)
                ):
                    skipped.append(inp.item_id)
                    continue
                try:
                    built.append(self._build(inp, seq + len(built), now))
                except InvalidArgumentError as exc:
                    if len(inputs) == 1:
                        raise
                    raise InvalidArgumentError(f"items[{i}]: {exc} Nothing was stored.") from exc
            ops: list[Op] = [{"op": "put", "item": item.to_record()} for item in built]
            new_ids = [it.id for it in built]
            report = self._transact(ops, protected=frozenset(new_ids), hint_ids=new_ids) if ops else None
            return BulkStored(
                items=[self._s.items[it.id] for it in built],
                compaction=report,
                skipped=skipped,
                redacted=self.take_redactions(),
            )

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
        s, st = self._s, self.settings
        over_items = len(s.order["active"]) - st.max_items
        if over_items <= 0:
            return report
        if report is None:
            report = CompactReport(tokens_before=s.used, tokens_after=s.used, target_tokens=s.used, trigger="auto")
        now = self._clock()
        # The oldest low-value items go to the archive (and are condensed like any other),
        # down to 90% of the limit so the O(active) pass is paid once per many stores.
        over_items += st.max_items // 10
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

    # --- prune: the one way besides forget that frees disk, and only when told -------------
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

    def prune(self, *, apply: bool = False, max_archive_tokens: int | None = None) -> Pruned:
        """What `prune_candidates` names, with its size; removed only with `apply`: from memory
        and disk (snapshot rewritten, journal rotated), each id in the forget ledger."""
        limit = self.settings.max_archive_tokens if max_archive_tokens is None else max_archive_tokens
        with self._locked():
            self._sync()
            before = self._s.archived_tokens
            victims = self._prune_candidates(limit)
            size = sum(_item_bytes(it) for it in victims)
            tokens = sum(it.content_tokens for it in victims)
            result = Pruned(victims, size, tokens, before, limit, applied=False)
            if not apply or not victims:
                return result
            gone = {it.id for it in victims}
            ops: list[Op] = [{"op": "del", "id": it.id} for it in victims]
            ops.extend(
                {"op": "patch", "id": other.id, "set": {"merged_into": None}}
                for other in self._s.items.values()
                if other.merged_into in gone and other.id not in gone
            )
            # Ledger first (write-ahead): a crash before the purge leaves an entry for an item
            # still present (the doctor says so), never a removal without an entry.
            now = self._clock()
            self._ledger_append([{"id": it.id, "reason": "prune", "at": now} for it in victims])
            txn = _Txn(self)
            try:
                txn.apply(ops)
                self._mark_gone_many(txn, victims)
                if self._dir is not None:
                    self._write_snapshot_locked(dict(self._s.items))
            except (PersistenceError, OSError) as exc:
                txn.rollback()
                raise PersistenceError(f"Could not prune: {exc}. Nothing was deleted.") from exc
            except BaseException:
                txn.rollback()
                raise
            result.applied = True
            return result

    def _ledger_append(self, entries: list[dict[str, Any]]) -> None:
        self._ledger_mem.extend(entries)
        del self._ledger_mem[: -C.LEDGER_MEMORY_MAX]
        if self._dir is not None:
            try:
                self._dir.append_ledger(entries)
            except PersistenceError as exc:
                log.error("forget ledger not written (entries kept in memory): %s", exc)

    def _ledger_count(self) -> int:
        return self._dir.ledger_count() if self._dir is not None else len(self._ledger_mem)

    def forget_ledger(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest entries of the append-only forget ledger."""
        if self._dir is not None:
            return self._dir.read_ledger()[-limit:]
        return self._ledger_mem[-limit:]

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
                if sim > C.DEDUP_JACCARD and (best is None or (sim, cand) > best):
                    best = (sim, cand)
            partner = best[1] if best else None
            if partner != item.dup_of:
                ops.append({"op": "patch", "id": item_id, "set": {"dup_of": partner}})
        return ops

    def _auto_compact(self, txn: _Txn, protected: frozenset[str]) -> CompactReport | None:
        st, s = self.settings, self._s
        if not st.auto_compact:
            return None  # the agent compacts itself; replies show usage over budget
        if s.used <= st.auto_compact_threshold * st.token_budget:
            if len(s.uncovered) > C.CHUNK_SIZE:
                # The archive grew by more than a chunk that no summary covers (a dissolve,
                # a restore-and-evict): condense it without a full compaction.
                self._condense(txn, int(st.auto_compact_threshold * st.token_budget), protected, last_resort=False)
            if s.used <= st.token_budget:
                return None
        target = int((st.auto_compact_threshold - C.AUTO_COMPACT_GAP) * st.token_budget)
        return self._compact_in(txn, target, protected, "auto")

    def _compact_in(self, txn: _Txn, target_tokens: int, protected: frozenset[str], trigger: str) -> CompactReport:
        """Phases 1-3 (promote, dedup, evict), then 4: condense the archive into summary nodes,
        all applied inside `txn`. The call's own items are protected only as far as they fit:
        if the budget is still exceeded, a second pass protects the newest that fit, and a
        third none, so the call ends within budget unless pinned items alone exceed it."""
        with _gc_paused():
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
        room = target_tokens - base - C.FIT_RESERVE_NODES * C.NODE_MAX_TOKENS
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
            return -(-n // C.CHUNK_SIZE) * C.NODE_MAX_TOKENS if n else 0

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

    def _make_node(self, txn: _Txn, depth: int, children: list[Item], children_tier: Tier) -> str | None:
        if any(c.depth != depth - 1 for c in children):
            # A d3 over raw tool output would ask the agent for "durable context" about it.
            raise AssertionError(f"a d{depth} node over children of depths {sorted({c.depth for c in children})}")
        node_id = lineage_id(c.id for c in children)
        if node_id in self._s.items:
            return None
        text = extractive_text(depth, children, self.counter.count)
        node = Item(
            id=node_id,
            seq=self._s.next_seq,
            content=text,
            summary=None,
            tags=tuple(_common_tags(children)),
            importance=max(c.importance for c in children),
            content_type="prose",
            pinned=False,
            created_at=min(c.created_at for c in children),
            last_accessed_at=max(c.last_accessed_at for c in children),
            access_count=0,
            content_tokens=self.counter.count(text),
            summary_tokens=0,
            depth=depth,
            children=tuple(c.id for c in children),
            quality="extractive",
            children_tier=children_tier,
            scope=children[0].scope,
        )
        ops: list[Op] = [{"op": "put", "item": node.to_record()}]
        for c in children:
            change: dict[str, Any] = {"parents": [*c.parents, node_id]}
            # Overflow condensation moves active nodes under the new one; condensing the
            # archive leaves a restored child where the agent put it.
            if children_tier == "active" and c.tier != "archived":
                change["tier"] = "archived"
            ops.append({"op": "patch", "id": c.id, "set": change})
        txn.apply(ops)
        return node_id

    def _condense(self, txn: _Txn, target_tokens: int, protected: frozenset[str], *, last_resort: bool) -> list[str]:
        """Phase 4. A node of depth d only ever covers nodes of depth d-1 (raw items: d0)."""
        s = self._s
        made: list[str] = []
        # 4a. Every archived item no summary covers is covered at its own level, in coherent
        # groups of neighbours in time: raw items by d1 nodes, an evicted dN node with other
        # dN nodes by a d(N+1) node, FANOUT at a time (fewer wait in the archive as roots, so
        # repeated evictions deepen the DAG by one level per FANOUT nodes, not per call).
        # A summary never mixes scopes: it would show one project's memories to another.
        by_level: dict[tuple[str, int], list[Item]] = {}
        for item_id in s.uncovered:
            it = s.items[item_id]
            by_level.setdefault((scope_key(it.scope), it.depth), []).append(it)
        for (scope, depth), level_items in sorted(by_level.items()):
            pending = sorted(level_items, key=lambda it: it.seq)
            if depth == 0:
                pending = self._extend_latest_node(txn, scope, pending, made, protected)
                groups = group_coherent(pending, C.CHUNK_SIZE, s.index.terms)
            else:
                full = len(pending) - len(pending) % C.FANOUT
                groups = [pending[i : i + C.FANOUT] for i in range(0, full, C.FANOUT)]
            for group in groups:
                node_id = self._make_node(txn, depth + 1, group, "archived")
                if node_id:
                    made.append(node_id)

        # 4b. More than FANOUT active nodes at one depth condense into the next depth, up to
        # MAX_DEPTH; under budget pressure any two of one depth do, at every depth, so a level
        # past MAX_DEPTH is made only when the budget needs it (depth stays log_FANOUT(n)).
        depth = 1
        while True:
            nodes = [it for it in self._active_nodes() if not it.pinned and it.id not in protected]
            if not any(it.depth >= depth for it in nodes):
                break
            per_scope: dict[str, list[Item]] = {}
            for it in nodes:
                if it.depth == depth:
                    per_scope.setdefault(scope_key(it.scope), []).append(it)
            for scope_nodes in per_scope.values():
                rest = scope_nodes
                while (len(rest) > C.FANOUT and depth < C.MAX_DEPTH) or (s.used > target_tokens and len(rest) >= 2):
                    group, rest = rest[: C.FANOUT], rest[C.FANOUT :]
                    if len(group) < 2:
                        break
                    node_id = self._make_node(txn, depth + 1, group, "active")
                    if node_id:
                        made.append(node_id)
            depth += 1

        # 4c. Last resort for budgets smaller than the summaries themselves: archive the
        # lowest-value nodes. They stay reachable by query and are listed as roots.
        if last_resort and s.used > target_tokens:
            now = self._clock()
            rest_items = sorted(
                (
                    s.items[s.by_seq[q]]
                    for q in s.order["active"]
                    if not s.items[s.by_seq[q]].pinned and s.items[s.by_seq[q]].id not in protected
                ),
                key=lambda it: (scoring.retention(it, now), it.seq),
            )
            for it in rest_items:
                if s.used <= target_tokens:
                    break
                txn.apply([{"op": "patch", "id": it.id, "set": {"tier": "archived"}}])
        return made

    def _extend_latest_node(
        self, txn: _Txn, scope: str, pending: list[Item], made: list[str], protected: frozenset[str]
    ) -> list[Item]:
        """A few newly archived raw items join the newest d1 node that has room rather than
        making a node of their own: small auto-compactions would otherwise leave a trail of
        one-item summaries. The node is re-made (its id follows its children), so only a
        stand-in (extractive) node is extended, never one whose text the agent wrote."""
        s = self._s
        raw = [it for it in pending if not it.depth]
        if not raw or len(pending) >= C.CHUNK_SIZE // 2:
            return pending
        latest: Item | None = None
        for it in reversed(self._active_nodes()):
            if it.depth == 1 and scope_key(it.scope) == scope:
                latest = it
                break
        if (
            latest is None
            or latest.quality != "extractive"
            or latest.pinned
            or latest.id in protected
            or latest.parents
            or latest.children_tier != "archived"
            or len(latest.children) >= C.CHUNK_SIZE
        ):
            return pending
        take = raw[: C.CHUNK_SIZE - len(latest.children)]
        kids = [s.items[c] for c in latest.children if c in s.items]
        ops: list[Op] = [{"op": "del", "id": latest.id}]
        ops.extend(
            {"op": "patch", "id": k.id, "set": {"parents": [p for p in k.parents if p != latest.id]}} for k in kids
        )
        txn.apply(ops)
        node_id = self._make_node(txn, 1, [s.items[k.id] for k in kids] + take, "archived")
        if node_id:
            if latest.id in made:
                made.remove(latest.id)
            made.append(node_id)
        taken = {t.id for t in take}
        return [it for it in pending if it.id not in taken]

    def _active_nodes(self) -> list[Item]:
        """Active summary nodes, oldest first."""
        items = self._s.items
        return sorted((items[i] for i in self._s.active_nodes), key=lambda it: it.seq)

    def _needs_text(self) -> list[str]:
        out = [it.id for it in reversed(self._active_nodes()) if it.quality in ("extractive", "stale")]
        return out[: C.NEEDS_TEXT_LIMIT]

    def _needs_summary(self, active: list[Item]) -> list[str]:
        """The largest unsummarised items that were active when compaction started: a summary
        lets phase 1 keep them visible next time instead of archiving them."""
        cands = [it for it in active if not it.summary and not it.pinned and not it.depth]
        biggest = heapq.nlargest(C.NEEDS_SUMMARY_LIMIT, cands, key=lambda it: (it.content_tokens, it.seq))
        return [it.id for it in biggest if it.content_tokens > 40]

    def compact(self, target_usage: float = C.MANUAL_COMPACT_TARGET) -> CompactReport:
        if not isinstance(target_usage, (int, float)) or not 0.0 <= float(target_usage) <= 1.0:
            raise InvalidArgumentError(f"target_usage must be between 0.0 and 1.0, got {target_usage!r}.")
        with self._locked():
            self._sync()
            target = int(float(target_usage) * self.settings.token_budget)
            with self._txn() as txn:
                report = self._compact_in(txn, target, frozenset(), "manual")
                self._enforce_limits(txn, frozenset(), report)
            return report

    def update(
        self,
        item_id: str,
        summary: str | None = None,
        content: str | None = None,
        tags: str | Sequence[str] | None = None,
        importance: int | None = None,
    ) -> Updated:
        if summary is None and content is None and tags is None and importance is None:
            raise InvalidArgumentError("Nothing to update: give at least one of summary, content, tags, importance.")
        with self._locked():
            self._sync()
            old = self._get(item_id)
            changes: dict[str, Any] = {}
            warnings: list[str] = []
            self._redacted = {}
            if content is not None or summary is not None:
                red_content, red_summary = self._redact(content or "", summary)
                content = red_content if content is not None else None
                summary = red_summary
            if old.depth and content is not None:
                raise InvalidArgumentError(
                    f"{item_id} is a summary node: write its text with summary=..., not content."
                )
            if content is not None:
                if not content.strip():
                    raise InvalidArgumentError("content must be a non-empty string (not only whitespace).")
                size = _utf8_size(content, "content")
                if size > C.MAX_CONTENT_BYTES:
                    raise InvalidArgumentError(f"content is {size:,} bytes; the limit is 1 MiB.")
                changes["content"] = content
                changes["content_tokens"] = self.counter.count(content)
                changes["content_type"] = str(detect_type(content))
            if summary is not None:
                new_summary = self._check_summary(summary)
                if new_summary is not None and old.depth:
                    kids = [self._s.items[c] for c in old.children if c in self._s.items]
                    new_summary = with_footer(new_summary, kids)
                    changes["view"] = "summary"
                    changes["quality"] = "agent"
                    sources = self._lineage_text(old)
                else:
                    sources = [changes.get("content", old.content)]
                if new_summary is not None:
                    odd = unfamiliar_terms(new_summary, sources)
                    if odd:
                        warnings.append(
                            "These appear in the summary but in none of what it summarises; check them: "
                            + ", ".join(odd)
                        )
                changes["summary"] = new_summary
                changes["summary_tokens"] = self.counter.count(new_summary)
                if new_summary is None:
                    changes["view"] = "content"
                    if old.depth:
                        changes["quality"] = "extractive"
            if importance is not None:
                changes["importance"] = _check_importance(importance)
            if tags is not None or content is not None:
                try:
                    user = parse_tags(self._redact_tags(tags)) if tags is not None else self._user_tags(old)
                except ValueError as exc:
                    raise InvalidArgumentError(str(exc)) from exc
                ctype = changes.get("content_type", old.content_type)
                text = changes.get("content", old.content)
                changes["tags"] = merge_tags(user, auto_tags(text, ctype))[: C.MAX_TAGS]
                if old.tags_from:
                    # Tags the caller names are theirs now; merged ones kept stay attributed.
                    own = set(parse_tags(self._redact_tags(tags))) if tags is not None else set()
                    changes["tags_from"] = [p for p in old.tags_from if p[0] in changes["tags"] and p[0] not in own]
            self._transact(
                [{"op": "patch", "id": item_id, "set": changes}],
                protected=frozenset({item_id}),
                hint_ids=[item_id] if "content" in changes or "summary" in changes else None,
            )
            redacted = self.take_redactions()
            if redacted:
                warnings.append(
                    "Redacted before saving: " + ", ".join(f"{n} {kind}" for kind, n in sorted(redacted.items()))
                )
            return Updated(self._s.items[item_id], warnings)

    def _lineage_text(self, node: Item, chars: int = 400_000) -> list[str]:
        """Text of a node's descendants (breadth-first, bounded): what its summary may cite."""
        out: list[str] = []
        used = 0
        queue = list(node.children)
        while queue and used < chars:
            child = self._s.items.get(queue.pop(0))
            if child is None:
                continue
            out.append(child.content)
            if child.summary:
                out.append(child.summary)
            used += len(child.content)
            queue.extend(child.children)
        return out

    @staticmethod
    def _user_tags(item: Item) -> list[str]:
        auto = set(auto_tags(item.content, item.content_type))
        return [t for t in item.tags if t not in auto]

    def _set_flag(self, item_id: str, **changes: Any) -> Item:
        with self._locked():
            self._sync()
            self._get(item_id)
            # Through compaction: unpinning may leave usage over a budget the pins alone exceeded.
            self._transact([{"op": "patch", "id": item_id, "set": changes}], protected=frozenset({item_id}))
            return self._s.items[item_id]

    def pin(self, item_id: str) -> Item:
        return self._set_flag(item_id, pinned=True)

    def unpin(self, item_id: str) -> Item:
        return self._set_flag(item_id, pinned=False)

    def restore(self, item_id: str) -> tuple[Item, CompactReport | None]:
        """Bring an archived item back; compaction may follow but never of this item."""
        with self._locked():
            self._sync()
            item = self._get(item_id)
            if item.tier == "active":
                return item, None
            op: Op = {"op": "patch", "id": item_id, "set": {"tier": "active", "merged_into": None}}
            report = self._transact([op], protected=frozenset({item_id}))
            return self._s.items[item_id], report

    def forget(self, item_id: str) -> Item:
        """Delete a raw item permanently, from memory and from disk (snapshot rewritten,
        journal rotated); the summaries covering it record it as gone. On a summary node it
        dissolves the node instead: forgetting never deletes what a summary covers."""
        with self._locked():
            self._sync()
            item = self._get(item_id)
            if item.depth:
                self._dissolve_locked(item)
                return item
            ops: list[Op] = [{"op": "del", "id": item_id}]
            # Items merged into it point at nothing now: clear the dangling link.
            ops.extend(
                {"op": "patch", "id": other.id, "set": {"merged_into": None}}
                for other in self._s.items.values()
                if other.merged_into == item_id
            )
            # Tags it gave to items it was merged with: those only it gave go too.
            ops.extend(
                {"op": "patch", "id": other.id, "set": _without_source(other, item_id)}
                for other in self._s.items.values()
                if any(source == item_id for _, source in other.tags_from)
            )
            txn = _Txn(self)
            try:
                txn.apply(ops)
                self._mark_gone(txn, item)
                if self._dir is not None:
                    # Purge: a fresh snapshot without the item and an empty journal of the
                    # next generation, so its bytes are in no file under the state dir.
                    self._write_snapshot_locked(dict(self._s.items))
            except (PersistenceError, OSError) as exc:
                txn.rollback()
                raise PersistenceError(f"Could not purge {item_id} from disk: {exc}. Nothing was deleted.") from exc
            except BaseException:
                txn.rollback()
                raise
            self._ledger_append([{"id": item_id, "reason": "forget", "at": self._clock()}])
            return item

    def _mark_gone_many(self, txn: _Txn, items: list[Item]) -> None:
        """`_mark_gone` for many items at once: each ancestor's text is rebuilt once."""
        s = self._s
        gone: dict[str, list[str]] = {}
        for item in items:
            for p in item.parents:
                if p in s.items:
                    gone.setdefault(p, []).append(item.id)
        level = sorted(gone)
        seen: set[str] = set()
        while level:
            nxt: list[str] = []
            for pid in level:
                if pid in seen:
                    continue
                seen.add(pid)
                parent = s.items[pid]
                change: dict[str, Any] = {}
                if pid in gone:
                    change["gone_children"] = [*parent.gone_children, *gone[pid]]
                    change["quality"] = "stale"
                kids = [s.items[c] for c in parent.children if c in s.items]
                if kids:
                    text = extractive_text(parent.depth, kids, self.counter.count)
                    change["content"] = text
                    change["content_tokens"] = self.counter.count(text)
                if change:
                    txn.apply([{"op": "patch", "id": pid, "set": change}])
                nxt.extend(p for p in parent.parents if p in s.items)
            level = nxt

    def _mark_gone(self, txn: _Txn, item: Item) -> None:
        """Summaries that covered a forgotten item keep their id but record the child as gone
        and are flagged stale; extractive text is rebuilt up the lineage so no ancestor still
        quotes the forgotten content."""
        level = [p for p in item.parents if p in self._s.items]
        first = True
        while level:
            nxt: list[str] = []
            for pid in level:
                parent = self._s.items[pid]
                change: dict[str, Any] = {}
                if first:
                    change["gone_children"] = [*parent.gone_children, item.id]
                    change["quality"] = "stale"
                kids = [self._s.items[c] for c in parent.children if c in self._s.items]
                # Rebuilt even with no child left: the old text quotes the forgotten one.
                text = extractive_text(parent.depth, kids, self.counter.count)
                if text != parent.content:
                    change["content"] = text
                    change["content_tokens"] = self.counter.count(text)
                # A node's tags come from its children: drop the forgotten item's unless a
                # remaining child has them too.
                left = {t for kid in kids for t in kid.tags}
                tags = [t for t in parent.tags if t not in item.tags or t in left]
                if len(tags) != len(parent.tags):
                    change["tags"] = tags
                if change:
                    txn.apply([{"op": "patch", "id": pid, "set": change}])
                nxt.extend(p for p in parent.parents if p in self._s.items)
            level = nxt
            first = False

    # --- the summary DAG --------------------------------------------------------------------
    def dissolve(self, item_id: str) -> list[Item]:
        """Reverse one condensation: the node goes, its children return to where they were."""
        with self._locked():
            self._sync()
            node = self._get(item_id)
            return self._dissolve_locked(node)

    def _dissolve_locked(self, node: Item) -> list[Item]:
        if not node.depth:
            raise InvalidArgumentError(f"{node.id} is not a summary node; only summaries can be dissolved.")
        live_parents = [p for p in node.parents if p in self._s.items]
        if live_parents:
            raise InvalidArgumentError(f"{node.id} is covered by summary {live_parents[0]}; dissolve that one first.")
        ops: list[Op] = [{"op": "del", "id": node.id}]
        kids = [self._s.items[c] for c in node.children if c in self._s.items]
        for child in kids:
            change: dict[str, Any] = {"parents": [p for p in child.parents if p != node.id]}
            # Summary children come back active (an archived one nothing covers would only
            # be re-covered at its level); raw children go back to where they were.
            tier = "active" if child.depth else node.children_tier
            if child.tier != tier:
                change["tier"] = tier
            ops.append({"op": "patch", "id": child.id, "set": change})
        st = self.settings
        with self._txn() as txn:
            txn.apply(ops)
            # A pure undo unless the summaries that came back overflow the budget: then they
            # are protected only as far as they fit, and the call still ends within budget.
            if st.auto_compact and self._s.used > st.token_budget:
                target = int((st.auto_compact_threshold - C.AUTO_COMPACT_GAP) * st.token_budget)
                self._compact_in(txn, target, frozenset(c.id for c in kids), "auto")
        # A child that did not fit may have been condensed again (a d1 even re-made).
        return [self._s.items[c.id] for c in kids if c.id in self._s.items]

    def expand(self, item_id: str, offset: int = 0, limit: int = 20) -> tuple[Item, list[Item], int]:
        """A summary's children, paged: (node, children page, total children)."""
        if offset < 0 or not 1 <= limit <= C.LIST_LIMIT_MAX:
            raise InvalidArgumentError(f"offset must be >= 0 and limit from 1 to {C.LIST_LIMIT_MAX}.")
        with self._read():
            node = self._get(item_id)
            if not node.depth:
                raise InvalidArgumentError(f"{item_id} is not a summary node; use get({item_id!r}) to read it.")
            kids = [self._s.items[c] for c in node.children if c in self._s.items]
            return node, kids[offset : offset + limit], len(kids)

    def ancestors(self, item: Item) -> list[str]:
        """Path from an item up to its first active ancestor (inclusive), following the newest
        parent at each step; [] if the item is active or nothing covers it."""
        path: list[str] = []
        current = item
        seen = {item.id}
        while current.tier != "active":
            parents = [self._s.items[p] for p in current.parents if p in self._s.items]
            if not parents:
                return path if path and self._s.items[path[-1]].tier == "active" else []
            current = max(parents, key=lambda p: p.seq)
            if current.id in seen:
                return []
            seen.add(current.id)
            path.append(current.id)
        return path

    def roots(self) -> list[Item]:
        """Summary nodes no other summary covers, newest first: the active ones, then those a
        budget smaller than the summaries moved to the archive."""
        s = self._s
        archived = sorted((s.items[i] for i in s.uncovered if s.items[i].depth), key=lambda it: -it.seq)
        return [it for it in reversed(self._active_nodes()) if not it.parents] + archived

    def tree(self, root: str | None = None, max_depth: int = 2, max_chars: int = C.MAX_OUTPUT_CHARS) -> str:
        """A bounded text rendering of the DAG (from `root`, or from every active root)."""
        if not 1 <= max_depth <= 10:
            raise InvalidArgumentError("max_depth must be from 1 to 10.")
        with self._read():
            starts = [self._get(root)] if root else self.roots()
            lines: list[str] = []
            if not starts:
                return "No summary nodes yet: compaction creates them when items are archived."
            budget = [max_chars]

            def emit(text: str) -> bool:
                if budget[0] - len(text) - 1 < 60:
                    return False
                lines.append(text)
                budget[0] -= len(text) + 1
                return True

            def walk(node: Item, level: int, indent: str) -> bool:
                label = node.quality or ("raw" if not node.depth else "")
                flags: list[str] = [node.tier]
                if node.gone_children:
                    flags.append(f"{len(node.gone_children)} gone")
                line = (
                    f"{indent}{node.id} d{node.depth} {node.view_tokens:,} tok"
                    f"{' ' + label if node.depth else ''} [{', '.join(flags)}]: {gist(node, 90)}"
                )
                if not emit(line):
                    return False
                if node.depth and level < max_depth:
                    kids = [self._s.items[c] for c in node.children if c in self._s.items]
                    for shown, child in enumerate(kids):
                        if child.depth == 0 and shown >= 8:
                            if not emit(f"{indent}  … {len(kids) - shown} more (expand({node.id!r}))"):
                                return False
                            break
                        if not walk(child, level + 1, indent + "  "):
                            return False
                return True

            total = len(starts)
            for i, node in enumerate(starts):
                if not walk(node, 1, ""):
                    lines.append(f"… output cut: {total - i} root(s) not fully shown; pass root=ID.")
                    break
            return "\n".join(lines)

    def dag_shape(self) -> dict[int, dict[str, int]]:
        """Nodes per depth and tier."""
        shape: dict[int, dict[str, int]] = {}
        for it in self._s.items.values():
            if it.depth:
                shape.setdefault(it.depth, {"active": 0, "archived": 0})[it.tier] += 1
        return dict(sorted(shape.items()))

    def configure(
        self,
        token_budget: int | None = None,
        auto_compact: bool | None = None,
        auto_compact_threshold: float | None = None,
        recall_tokens: int | None = None,
        max_items: int | None = None,
        max_archive_tokens: int | None = None,
    ) -> tuple[Settings, CompactReport | None]:
        changes: dict[str, Any] = {}
        if token_budget is not None:
            if isinstance(token_budget, bool) or not C.BUDGET_MIN <= token_budget <= C.BUDGET_MAX:
                raise InvalidArgumentError(
                    f"token_budget must be an integer from {C.BUDGET_MIN:,} to {C.BUDGET_MAX:,}."
                )
            changes["token_budget"] = int(token_budget)
            changes["budget_source"] = "configure"
        if auto_compact is not None:
            changes["auto_compact"] = bool(auto_compact)
        if auto_compact_threshold is not None:
            t = float(auto_compact_threshold)
            if not 0.2 <= t <= 1.0:
                raise InvalidArgumentError("auto_compact_threshold must be between 0.2 and 1.0.")
            changes["auto_compact_threshold"] = t
        if recall_tokens is not None:
            if isinstance(recall_tokens, bool) or not 100 <= recall_tokens <= C.RECALL_TOKENS_MAX:
                raise InvalidArgumentError(f"recall_tokens must be from 100 to {C.RECALL_TOKENS_MAX:,}.")
            changes["recall_tokens"] = int(recall_tokens)
        if max_items is not None:
            if isinstance(max_items, bool) or not 10 <= max_items <= 10_000_000:
                raise InvalidArgumentError("max_items must be from 10 to 10,000,000.")
            changes["max_items"] = int(max_items)
        if max_archive_tokens is not None:
            if isinstance(max_archive_tokens, bool) or not 1_000 <= max_archive_tokens <= 10_000_000_000:
                raise InvalidArgumentError("max_archive_tokens must be from 1,000 to 10,000,000,000.")
            changes["max_archive_tokens"] = int(max_archive_tokens)
        with self._locked():
            self._sync()
            report = None
            if changes:
                report = self._transact([{"op": "config", "set": changes}], protected=frozenset())
            return self.settings, report

    def adopt_client_budget(self, client_name: str | None) -> bool:
        """Pick the budget from the client's name, unless someone chose one explicitly."""
        if not client_name or self.settings.budget_source not in ("default",):
            return False
        name = client_name.lower()
        budget = C.BUDGET_CLAUDE if "claude" in name else C.BUDGET_CURSOR if "cursor" in name else None
        if budget is None:
            return False
        with self._locked():
            self._sync()
            if self.settings.budget_source != "default":
                return False
            self._transact(
                [{"op": "config", "set": {"token_budget": budget, "budget_source": "client"}}], protected=frozenset()
            )
        return True

    # --- searching ------------------------------------------------------------------------
    def query(
        self,
        query: str | None = None,
        tags: str | Sequence[str] | None = None,
        limit: int = 10,
        include_archived: bool = True,
        scope: str | None = None,
    ) -> list[Hit]:
        """Search active and archived items (`include_archived=False`: the active tier only);
        archived hits rank under equally relevant active ones by at most 1/ARCHIVED_RANK_FACTOR."""
        if not 1 <= limit <= C.QUERY_LIMIT_MAX:
            raise InvalidArgumentError(f"limit must be from 1 to {C.QUERY_LIMIT_MAX}.")
        try:
            tag_list = parse_tags(tags)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from exc
        text = (query or "").strip()
        if not text and not tag_list:
            raise InvalidArgumentError("Give a query, tags, or both.")
        with self._locked():
            self._sync()
            hits = self._search(text, tag_list, limit, include_archived, self._scopes(scope))
            self._touch([h.item.id for h in hits])
            return [Hit(self._s.items[h.item.id], h.score, h.matched) for h in hits]

    def _search(
        self, text: str, tag_list: list[str], limit: int, include_archived: bool, scopes: frozenset[str] | None
    ) -> list[Hit]:
        s = self._s
        now = self._clock()
        allowed: set[str] | None = None
        if tag_list:
            allowed = set()
            for tag in tag_list:
                allowed |= s.by_tag.get(tag.lower(), set()) | s.by_tag.get(tag, set())

        def accept(item_id: str) -> bool:
            if allowed is not None and item_id not in allowed:
                return False
            item = s.items[item_id]
            if scopes is not None and scope_key(item.scope) not in scopes:
                return False
            return include_archived or item.tier == "active"

        if not text:
            pool = [s.items[i] for i in (allowed or ()) if accept(i)]
            best = heapq.nlargest(limit, pool, key=lambda it: (scoring.rank_score(1.0, it, now), it.seq))
            return [Hit(it, scoring.rank_score(1.0, it, now), ()) for it in best]

        # Retention and the recency prior lift a BM25 score by at most MAX_RANK_FACTOR (2.2),
        # so the final top `limit` is drawn from the BM25 top few times `limit`: a hit below
        # that would need a relevance far under the leaders' to overtake them, which the bound
        # rules out in practice, and the index can prune everything deeper.
        fetch = max(limit * C.RERANK_DEPTH, C.RERANK_MIN)
        # Asking the filter about every candidate costs more than the ranking itself; skip it
        # when it would accept everything (one scope, nothing archived or archived wanted).
        accepts_all = (
            allowed is None
            and (include_archived or not s.order["archived"])
            and (scopes is None or s.scope_order.keys() <= scopes)
        )
        raw = s.index.search(text, limit=fetch, accept=None if accepts_all else accept, with_matched=False)
        newest = s.next_seq - 1
        scored: list[tuple[float, Item]] = []
        leaders: list[float] = []  # min-heap of the `limit` best final scores so far; leaders[0] is the cut
        for h in raw:  # BM25 best first: once even the largest lift cannot reach the cut, stop
            if len(leaders) == limit and h.score * scoring.MAX_RANK_FACTOR * (1.0 + 1e-12) < leaders[0]:
                break
            it = s.items[h.doc_id]
            final = scoring.rank_score(h.score, it, now, newer=newest - it.seq)
            scored.append((final, it))
            if len(leaders) < limit:
                heapq.heappush(leaders, final)
            elif final > leaders[0]:
                heapq.heapreplace(leaders, final)
        scored.sort(key=lambda pair: (-pair[0], -pair[1].seq))
        top = scored[:limit]
        if any(it.depth and it.id in self._covering(top) for _, it in top):
            # A summary node found with an item it covers only repeats extracts of that item, whose
            # hit names it (covered_by): leave the node out. That lowers the cut, so the hits past
            # the early stop are scored too.
            for h in raw[len(scored) :]:
                it = s.items[h.doc_id]
                scored.append((scoring.rank_score(h.score, it, now, newer=newest - it.seq), it))
            scored.sort(key=lambda pair: (-pair[0], -pair[1].seq))
            dropped: set[str] = set()
            while True:
                top = [pair for pair in scored if pair[1].id not in dropped][:limit]
                covering = self._covering(top)
                newly = {it.id for _, it in top if it.depth and it.id in covering} - dropped
                if not newly:
                    break
                dropped |= newly
        matched = s.index.matched_terms([it.id for _, it in top], text)
        return [Hit(it, final, terms) for (final, it), terms in zip(top, matched, strict=True)]

    def _covering(self, hits: list[tuple[float, Item]]) -> set[str]:
        """Every summary node above the hits in the DAG: O(hits * depth), never the store."""
        items = self._s.items
        seen: set[str] = set()
        stack = [p for _, it in hits for p in it.parents]
        while stack:
            node_id = stack.pop()
            if node_id not in seen and node_id in items:
                seen.add(node_id)
                stack.extend(items[node_id].parents)
        return seen

    def _touch(self, ids: list[str]) -> None:
        """A query is an access. Journaled without fsync: losing one on power loss is harmless."""
        if not ids:
            return
        now = self._clock()
        ops: list[Op] = []
        for item_id in ids:
            item = self._s.items[item_id]
            ops.append(
                {
                    "op": "patch",
                    "id": item_id,
                    "set": {"last_accessed_at": now, "access_count": item.access_count + 1},
                }
            )
        try:
            self._commit(ops, sync=False)
        except PersistenceError as exc:
            log.warning("access times not saved: %s", exc)
            for op in ops:
                self._apply(op)

    def recall(self, limit: int = 20, query: str | None = None, scope: str | None = None) -> Recall:
        """A context assembled within `recall_tokens`: pinned items, a fresh tail of the most
        recent items, then items and summary nodes by relevance (or retention), where a summary
        stands in for its archived children. Shown oldest first; reports what it left out."""
        if not 1 <= limit <= C.LIST_LIMIT_MAX:
            raise InvalidArgumentError(f"limit must be from 1 to {C.LIST_LIMIT_MAX}.")
        with self._read():
            s = self._s
            now = self._clock()
            cap = self.settings.recall_tokens
            scopes = self._scopes(scope)
            seqs = self._visible_seqs("active", scopes)
            active_count = len(seqs)
            pinned = sorted(
                (it for it in map(s.items.__getitem__, s.pinned) if scopes is None or scope_key(it.scope) in scopes),
                key=lambda it: -it.seq,
            )
            tail: list[Item] = []
            for q in reversed(seqs):  # newest first, stopping as soon as the tail is full
                it = s.items[s.by_seq[q]]
                if not it.pinned and not it.depth:
                    tail.append(it)
                    if len(tail) == C.FRESH_TAIL:
                        break
            text = (query or "").strip()
            ranked: list[tuple[Item, float]]
            if text:
                hits = self._search(text, [], C.QUERY_LIMIT_MAX, True, scopes)
                ranked = [(h.item, h.score) for h in hits]
            else:
                retention = scoring.retention
                scored = (
                    (retention(it, now), it.seq, it)
                    for it in map(s.items.__getitem__, map(s.by_seq.__getitem__, seqs))
                    if not it.pinned
                )
                best = heapq.nlargest(limit * 3 + C.FRESH_TAIL, scored, key=itemgetter(0, 1))
                ranked = [(it, r) for r, _, it in best]

            chosen: dict[str, tuple[Item, float | None, str]] = {}
            head = budget_line(s.used, self.settings.token_budget, len(s.order["active"]), len(s.order["archived"]))
            # Header and footer are part of the output the cap bounds.
            tokens = self.counter.count(head) + C.RECALL_FOOTER_TOKENS
            left_out: list[str] = []

            def take(it: Item, score: float | None, role: str) -> None:
                nonlocal tokens
                if it.id in chosen:
                    return
                if len(chosen) >= limit:
                    left_out.append(it.id)
                    return
                line = item_line(it, score=score)
                cost = self.counter.count(line)
                if tokens + cost > cap:
                    left_out.append(it.id)
                    return
                chosen[it.id] = (it, score, line)
                tokens += cost

            for it in pinned:
                take(it, None, "pinned")
            for it in tail:
                take(it, scoring.retention(it, now), "recent")
            for it, score in ranked:
                take(it, score, "relevant")

            taken = list(chosen)  # in priority order: pinned, recent, then by score
            while True:
                ordered = sorted((chosen[i] for i in taken), key=lambda c: (c[0].created_at, c[0].seq))
                rendered, needs = self._render_recall(head, ordered, text, left_out, active_count, cap)
                tokens = self.counter.count(rendered)
                if tokens <= cap or not taken:
                    break
                # Headers and the footer cost more than reserved: drop the lowest-priority item.
                left_out.insert(0, taken.pop())
            shown_pinned = [c[0] for c in ordered if c[0].pinned]
            shown = [(c[0], c[1] or 0.0) for c in ordered if not c[0].pinned]
            lines = [c[2] for c in ordered if c[0].pinned] + [c[2] for c in ordered if not c[0].pinned]
            # A query's archived hits are shown too; `more` counts the active items left out.
            more = max(active_count - sum(c[0].tier == "active" for c in ordered), 0)
            return Recall(
                pinned=shown_pinned,
                items=shown,
                lines=lines,
                more=more,
                tokens=tokens,
                left_out=list(dict.fromkeys(left_out))[:20],
                needs_text=needs,
                text=rendered,
            )

    def _render_recall(
        self,
        head: str,
        ordered: list[tuple[Item, float | None, str]],
        query_text: str,
        left_out: list[str],
        active_count: int,
        cap: int,
    ) -> tuple[str, list[str]]:
        body = [head]
        pinned_lines = [c[2] for c in ordered if c[0].pinned]
        other_lines = [c[2] for c in ordered if not c[0].pinned]
        if pinned_lines:
            body.append(f"Pinned ({len(pinned_lines)}):")
            body.extend(pinned_lines)
        if other_lines:
            kind = "relevant" if query_text else "most valuable"
            body.append(f"Memory, oldest first (recent, then {kind}):")
            body.extend(other_lines)
        if not ordered:
            if not self._s.items:
                body.append("Memory is empty.")
            elif not active_count:
                body.append(f"No active items in scope {self.scope!r} (other projects' items exist; scope='all').")
            else:
                body.append("No active items fit within recall_tokens.")
        more = active_count - sum(c[0].tier == "active" for c in ordered)
        if more > 0:
            sample = ", ".join(list(dict.fromkeys(left_out))[:8])
            body.append(
                f"Left out: {more:,} active items{' (e.g. ' + sample + ')' if sample else ''}. "
                "Reach them with query(...), get(id), or expand(<summary id>)."
            )
        needs: list[str] = []
        used = self.counter.count("\n".join(body))
        for node_id in self._needs_text():
            block = self._needs_text_block(self._s.items[node_id], children=5)
            cost = self.counter.count(block) + 1
            if used + cost > cap:
                break
            body.append(block)
            needs.append(node_id)
            used += cost
        return "\n".join(body), needs

    def _needs_text_block(self, node: Item, children: int = 8) -> str:
        """What an agent needs to write a node's text: the depth's instruction and previews."""
        kids = [self._s.items[c] for c in node.children if c in self._s.items]
        lines = [
            f"Summary {node.id} (d{node.depth}, {len(kids)} children) needs text. {depth_instruction(node.depth)} "
            f"Write it with update(id={node.id!r}, summary=...)."
        ]
        lines.extend(f"  - {c.id}: {gist(c, 100)}" for c in kids[:children])
        if len(kids) > children:
            lines.append(f"  - … {len(kids) - children} more: expand({node.id!r})")
        return "\n".join(lines)

    def needs_text_blocks(self, limit: int = C.NEEDS_TEXT_LIMIT) -> list[tuple[Item, str]]:
        with self._read():
            return [(self._s.items[n], self._needs_text_block(self._s.items[n])) for n in self._needs_text()[:limit]]

    def list_items(
        self, offset: int = 0, limit: int = 20, tier: TierFilter = "active", scope: str | None = None
    ) -> Page:
        if offset < 0:
            raise InvalidArgumentError("offset must be 0 or more.")
        if not 1 <= limit <= C.LIST_LIMIT_MAX:
            raise InvalidArgumentError(f"limit must be from 1 to {C.LIST_LIMIT_MAX}.")
        with self._read():
            seqs = self._seqs(tier, self._scopes(scope))
            total = len(seqs)
            # Newest first: walk from the end.
            hi = total - offset
            lo = max(0, hi - limit)
            picked = [self._s.items[self._s.by_seq[q]] for q in reversed(seqs[lo:hi])] if hi > 0 else []
            return Page(items=picked, total=total, offset=offset)

    def _seqs(self, tier: TierFilter, scopes: frozenset[str] | None = None) -> list[int]:
        if tier == "all":
            return list(heapq.merge(self._visible_seqs("active", scopes), self._visible_seqs("archived", scopes)))
        if tier not in ("active", "archived"):
            raise InvalidArgumentError("tier must be one of: active, archived, all.")
        return self._visible_seqs(tier, scopes)

    def _visible_seqs(self, tier: str, scopes: frozenset[str] | None) -> list[int]:
        """Seqs of one tier in the given scopes (all scopes if None), ascending."""
        if scopes is None:
            return self._s.order[tier]
        lists = [self._s.scope_order.get(sc, {}).get(tier, []) for sc in scopes]
        lists = [seqs for seqs in lists if seqs]
        if len(lists) == 1:
            return lists[0]
        return list(heapq.merge(*lists))

    def _scopes(self, scope: str | None) -> frozenset[str] | None:
        """What a read covers: None = every scope ("all"); else the scope plus global."""
        if scope is None:
            scope = self.default_read_scope or self.scope
        if scope == ALL_SCOPES:
            return None
        return frozenset({scope_key(self._check_scope(scope)), GLOBAL_SCOPE})

    def hidden_by_scope(self, tier: TierFilter = "all", scope: str | None = None) -> int:
        """How many items of `tier` a read in `scope` (default: the store's) leaves out."""
        with self._read():
            scopes = self._scopes(scope)
            if scopes is None:
                return 0
            tiers = ("active", "archived") if tier == "all" else (tier,)
            if any(t not in ("active", "archived") for t in tiers):
                raise InvalidArgumentError("tier must be one of: active, archived, all.")
            seen = sum(len(self._s.scope_order.get(sc, {}).get(t, [])) for sc in scopes for t in tiers)
            return sum(len(self._s.order[t]) for t in tiers) - seen

    @staticmethod
    def _check_scope(scope: str) -> str:
        scope = scope.strip()
        if not scope or len(scope) > 4096 or any(ch in scope for ch in "\n\r\x00"):
            raise InvalidArgumentError("scope must be a non-empty single-line name (or 'global', or 'all' to read).")
        if scope == ALL_SCOPES:
            raise InvalidArgumentError("'all' is for reading; store into a project scope or 'global'.")
        return scope

    def export(
        self,
        tier: TierFilter = "all",
        cursor: str | None = None,
        page_chars: int = C.EXPORT_PAGE_CHARS,
        scope: str | None = None,
    ) -> ExportPage:
        """Oldest first, paged by a cursor that survives concurrent stores (it is a seq)."""
        after = 0
        if cursor:
            try:
                after = int(base64.urlsafe_b64decode(cursor.encode() + b"==").decode())
            except (ValueError, UnicodeDecodeError) as exc:
                raise InvalidArgumentError("cursor is not one this server issued; omit it to start over.") from exc
        with self._read():
            seqs = self._seqs(tier, self._scopes(scope))
            start = bisect.bisect_right(seqs, after)
            out: list[Item] = []
            used = 0
            i = start
            while i < len(seqs):
                item = self._s.items[self._s.by_seq[seqs[i]]]
                cost = len(item.content) + len(item.summary or "") + 200
                if out and used + cost > page_chars:
                    break
                out.append(item)
                used += cost
                i += 1
            next_cursor = None
            if i < len(seqs):
                next_cursor = base64.urlsafe_b64encode(str(out[-1].seq).encode()).decode().rstrip("=")
            return ExportPage(items=out, next_cursor=next_cursor, total=len(seqs))

    def status(self) -> Status:
        with self._read():
            s = self._s
            per_type = {t: dict(v) for t, v in s.type_counts.items()}
            persistence: dict[str, Any] = {"enabled": self._dir is not None}
            if self._dir is not None:
                persistence.update(
                    state_dir=str(self._dir.path),
                    last_snapshot_at=self._dir.last_snapshot_at,
                    last_snapshot_seconds=self._dir.last_snapshot_seconds,
                    journal_bytes=self._dir.journal_size(),
                    generation=self._dir.gen,
                    dirty=self._dirty,
                    state="read-only" if self._degraded is not None else "saving",
                    degraded=self._degraded is not None,
                    degraded_reason=self._degraded,
                    unsaved_calls=0,
                    forget_ledger_entries=self._ledger_count(),
                )
            pinned = len(s.pinned)
            return Status(
                token_budget=self.settings.token_budget,
                tokens_used=s.used,
                active_items=len(s.order["active"]),
                archived_items=len(s.order["archived"]),
                per_type=per_type,
                settings=self.settings,
                token_counter=self.counter.name,
                persistence=persistence,
                pinned_items=pinned,
            )

    # --- snapshots ------------------------------------------------------------------------
    @property
    def persistent(self) -> bool:
        return self._dir is not None

    @property
    def dirty(self) -> bool:
        return self._dirty

    def _snapshot_header(self, gen: int, prev_gen: int, prev_offset: int) -> dict[str, Any]:
        return {
            "schema": C.SCHEMA_VERSION,
            "gen": gen,
            "prev_gen": prev_gen,
            "prev_offset": prev_offset,
            "written_at": self._clock(),
            "settings": self.settings.to_record(),
        }

    def _write_snapshot_locked(self, items: dict[str, Item]) -> None:
        assert self._dir is not None
        gen, offset = self._dir.gen, self._dir.offset
        header = self._snapshot_header(gen + 1, gen, offset)
        # Synchronous snapshots (shutdown, forget, recovery) hold the lock anyway, so they also
        # save the index: the next start then loads it instead of re-tokenising everything.
        header["index"] = self._s.index.to_state()
        header["dedup"] = self._s.dedup.to_state()
        self._dir.write_snapshot(snapshot_chunks(header, list(items.values())))
        self._dir.rotate(gen + 1, offset)
        self._dir.remove_temp_files()
        self._dirty = False

    def rebuild_and_snapshot(self) -> None:
        """Rebuild the derived structures (search index, near-duplicate buckets) from the items
        and save them with a full snapshot: `compactor doctor --repair` after index drift."""
        if self._dir is None:
            return
        with self._locked():
            self._sync()
            self._rebuild_derived(self._s)
            self._write_snapshot_locked(dict(self._s.items))

    def snapshot(self) -> None:
        """Write a snapshot and truncate the journal, synchronously (used at shutdown)."""
        if self._dir is None:
            return
        with self._locked():
            self._sync()
            self._write_snapshot_locked(dict(self._s.items))

    async def snapshot_async(self) -> None:
        """Snapshot without blocking the event loop: items are frozen, so a shallow copy of the
        dict taken under the lock is a consistent picture; it is serialised and written in a
        worker thread, and only the rename + journal rotation take the lock again."""
        if self._dir is None:
            return
        sd = self._dir
        with self._locked():
            self._sync()
            items = list(self._s.items.values())
            gen, offset = sd.gen, sd.offset
            header = self._snapshot_header(gen + 1, gen, offset)
            self._dirty = False
        # The writer thread holds the GIL between its I/O calls, and the event loop waits up to
        # the switch interval (5 ms by default) each time it wants it back, several times a
        # call: a shorter interval while the snapshot is written bounds that wait.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(C.SNAPSHOT_SWITCH_INTERVAL_S)
        try:
            tmp_ok = await anyio.to_thread.run_sync(self._write_snapshot_tmp, header, items)
        finally:
            sys.setswitchinterval(interval)
        if not tmp_ok:
            self._dirty = True
            return
        with self._locked():
            # Catch up first: only that reveals a rotation by another process (it reloads and
            # moves sd.gen). Checking before it let a stale snapshot replace a newer one and
            # cut the new journal at our old offset, mid-line.
            self._sync()
            if sd.gen != gen:
                # Someone else rotated meanwhile (forget, another process): ours is stale.
                self._discard_tmp()
                return
            old_snapshot = None
            try:
                old_snapshot = sd.install_snapshot_tmp()
                sd.rotate(gen + 1, offset)
                sd.remove_dead_temp_files()
            except (PersistenceError, OSError) as exc:
                log.warning("snapshot not installed: %s", exc)
                self._dirty = True
        if old_snapshot is not None:
            await anyio.to_thread.run_sync(sd.drop_old_snapshot, old_snapshot)

    def _write_snapshot_tmp(self, header: dict[str, Any], items: list[Item]) -> bool:
        assert self._dir is not None
        try:
            self._dir.write_snapshot_tmp(snapshot_chunks(header, items))
            return True
        except (PersistenceError, OSError) as exc:
            log.warning("snapshot failed: %s", exc)
            return False

    def _discard_tmp(self) -> None:
        assert self._dir is not None
        self._dir.discard_snapshot_tmp()

    def close(self) -> None:
        if self._dir is not None:
            self._dir.close()

    def iter_items(self) -> Iterator[Item]:
        return iter(list(self._s.items.values()))


class _Txn:
    """Ops applied to memory with their undo, journaled together on commit."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.ops: list[Op] = []
        self._undo: list[tuple[str, Any]] = []

    def apply(self, ops: list[Op]) -> None:
        st = self._store
        for op in ops:
            if op["op"] == "config":
                self._undo.append(("\x00config", st.settings.to_record()))
            else:
                item_id = op["id"] if "id" in op else op["item"]["id"]
                self._undo.append((item_id, st._s.items.get(item_id)))
            st._apply(op)
            self.ops.append(op)

    def commit(self, sync: bool = True) -> None:
        self._store._persist_ops(self.ops, sync)

    def rollback(self) -> None:
        st = self._store
        for key, prev in reversed(self._undo):
            if key == "\x00config":
                st._apply({"op": "config", "set": prev})
                continue
            current = st._s.items.get(key)
            if current is not None:
                st._drop(st._s, current)
            if prev is not None:
                st._put(st._s, prev)
        self._undo.clear()
        self.ops.clear()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: a compaction or a load makes thousands of new
    items and ops, long-lived and acyclic, and the collector's passes over them were ~5-10% of
    a 10k compaction and ~0.4 s of a 100k load. Collection resumes (and catches up) when it ends."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _without_source(item: Item, source: str) -> dict[str, Any]:
    """The tag change that takes back what `source` gave `item` in merges."""
    kept = [pair for pair in item.tags_from if pair[1] != source]
    still = {tag for tag, _ in kept}
    gone = {tag for tag, src in item.tags_from if src == source} - still
    return {"tags": [t for t in item.tags if t not in gone], "tags_from": kept}


def _merge_reports(into: CompactReport, more: CompactReport) -> None:
    """Fold a further compaction pass of the same call into its report."""
    into.promoted.extend(more.promoted)
    into.deduplicated.extend(more.deduplicated)
    into.archived.extend(more.archived)
    into.condensed.extend(more.condensed)
    into.needs_text = more.needs_text
    into.tokens_after = more.tokens_after


def _common_tags(children: list[Item]) -> list[str]:
    counts: dict[str, int] = {}
    for c in children:
        for t in c.tags:
            if t not in C.TYPE_TAGS:
                counts[t] = counts.get(t, 0) + 1
    return sorted(counts, key=lambda t: (-counts[t], t))[:5]


def _examples(ids: Sequence[str], limit: int = C.REPORT_EXAMPLES) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" (+{len(ids) - limit} more)" if len(ids) > limit else "")


class _NullLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _ReadGuard:
    """Shared lock + catch-up for read-only calls."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._cm: Any = None

    def __enter__(self) -> None:
        sd = self._store._dir
        if sd is None or not sd.is_open:  # closed: memory as it was last seen
            return
        # Exclusive, not shared: catching up mutates memory and a reload re-reads the journal.
        self._cm = sd.locked(exclusive=True)
        self._cm.__enter__()
        self._store._sync()

    def __exit__(self, *exc: object) -> None:
        if self._cm is not None:
            self._cm.__exit__(*exc)
