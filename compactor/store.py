"""The Store: compactor's domain core. The MCP server, the CLI and the tests all drive it.

Every change follows one path: plan ops (under the state-dir lock, after catching up with
other processes) -> append them to the journal (fsynced) -> apply them to memory. `_apply`
is the only code that mutates state, and startup replays the journal through it, so what
was acknowledged is exactly what comes back.
"""

from __future__ import annotations

import base64
import bisect
import heapq
import logging
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import anyio.to_thread

from . import compaction, scoring
from . import constants as C
from .classify import auto_tags, detect_type, merge_tags, parse_tags
from .dedup import DedupIndex
from .errors import InvalidArgumentError, NotFoundError, PersistenceError
from .index import BM25Index
from .models import CONTENT_TYPES, CompactReport, ContentType, Item, Settings, Tier
from .persist import Op, StateDir, snapshot_chunks
from .render import item_line
from .tokens import TokenCounter, default_counter

log = logging.getLogger(__name__)

TierFilter = Literal["active", "archived", "all"]
_ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"  # no 0/o/1/l: ids get read aloud and retyped


def _new_id() -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


@dataclass(slots=True)
class StoreInput:
    """One item to store, already validated for types by the caller's schema."""

    content: str
    summary: str | None = None
    tags: str | Sequence[str] | None = None
    importance: int = C.IMPORTANCE_DEFAULT
    pinned: bool = False


@dataclass(slots=True)
class Stored:
    item: Item
    compaction: CompactReport | None


@dataclass(slots=True)
class BulkStored:
    items: list[Item]
    compaction: CompactReport | None


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
    by_tag: dict[str, set[str]] = field(default_factory=dict)
    index: BM25Index = field(default_factory=BM25Index)
    dedup: DedupIndex = field(default_factory=DedupIndex)
    dedup_pending: dict[str, None] = field(default_factory=dict)
    used: int = 0
    next_seq: int = 1
    type_counts: dict[str, dict[str, int]] = field(
        default_factory=lambda: {t: {"active": 0, "archived": 0} for t in CONTENT_TYPES}
    )


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
    ) -> None:
        self._clock = clock
        self.counter = counter or default_counter()
        self.settings = Settings(token_budget=C.BUDGET_DEFAULT)
        self._s = _State()
        self._dir: StateDir | None = None
        self._dirty = False
        self.load_warnings: list[str] = []
        if state_dir is not None:
            self._dir = StateDir(Path(state_dir))
            self._dir.open()
            with self._dir.locked():
                self._reload()
        # An explicit --budget is the person's choice: it wins over a client default but not
        # over a budget the agent or person set with `configure` and that was saved.
        if budget is not None and self.settings.budget_source in ("default", "client", "cli"):
            self._commit([{"op": "config", "set": {"token_budget": budget, "budget_source": "cli"}}])

    # --- state plumbing -------------------------------------------------------------------
    def _reload(self) -> None:
        """(Re)build memory from the state dir. Call under the lock."""
        assert self._dir is not None
        loaded = self._dir.load()
        state = _State()
        settings = Settings(token_budget=C.BUDGET_DEFAULT)
        snap = loaded.snapshot
        if snap:
            for key, value in (snap.get("settings") or {}).items():
                if hasattr(settings, key):
                    setattr(settings, key, value)
            for record in snap["items"]:
                self._put(state, Item.from_record(record))
        old_state, old_settings = self._s, self.settings
        self._s, self.settings = state, settings
        try:
            for batch in loaded.batches:
                for op in batch:
                    self._apply(op)
        except Exception:
            self._s, self.settings = old_state, old_settings
            raise
        # After a restart every active item is checked for near-duplicates once more.
        state.dedup_pending = dict.fromkeys(
            state.by_seq[s] for s in state.order["active"] if state.items[state.by_seq[s]].depth == 0
        )
        for warning in loaded.warnings:
            log.warning("%s", warning)
        self.load_warnings = loaded.warnings

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
        if self._dir is not None:
            self._dir.append(ops, sync=sync)
            self._dirty = True
        for op in ops:
            self._apply(op)

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
            self._s.dedup_pending[item.id] = None
        elif kind == "patch":
            old = self._s.items.get(op["id"])
            if old is None:
                return  # forgotten by another process in the meantime
            changes = dict(op["set"])
            if "tags" in changes:
                changes["tags"] = tuple(changes["tags"])
            new = replace(old, **changes)
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

    def _swap(self, old: Item, new: Item) -> None:
        s = self._s
        text_changed = (old.content, old.summary, old.tags) != (new.content, new.summary, new.tags)
        if old.tier != new.tier or old.seq != new.seq:
            self._unorder(s, old)
            self._order(s, new)
        if old.tier == "active":
            s.used -= old.view_tokens
        if new.tier == "active":
            s.used += new.view_tokens
        if old.content_type != new.content_type or old.tier != new.tier:
            s.type_counts[old.content_type][old.tier] -= 1
            s.type_counts[new.content_type][new.tier] += 1
        if old.tags != new.tags:
            for tag in old.tags:
                self._untag(s, tag, old.id)
            for tag in new.tags:
                s.by_tag.setdefault(tag, set()).add(new.id)
        if text_changed:
            s.index.update(new.id, new.content, new.summary, new.tags)
        if new.tier != "active" or new.depth:
            s.dedup.remove(new.id)
            s.dedup_pending.pop(new.id, None)
        elif text_changed or old.tier != "active":
            s.dedup.add(new.id, s.index.terms(new.id))
            s.dedup_pending[new.id] = None
        s.items[new.id] = new

    @staticmethod
    def _order(s: _State, item: Item) -> None:
        bisect.insort(s.order[item.tier], item.seq)
        s.by_seq[item.seq] = item.id

    @staticmethod
    def _unorder(s: _State, item: Item) -> None:
        seqs = s.order[item.tier]
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

    def _put(self, s: _State, item: Item) -> None:
        s.items[item.id] = item
        self._order(s, item)
        s.next_seq = max(s.next_seq, item.seq + 1)
        for tag in item.tags:
            s.by_tag.setdefault(tag, set()).add(item.id)
        s.index.add(item.id, item.content, item.summary, item.tags)
        if item.tier == "active":
            s.used += item.view_tokens
            if not item.depth:
                s.dedup.add(item.id, s.index.terms(item.id))
        s.type_counts[item.content_type][item.tier] += 1

    def _drop(self, s: _State, item: Item) -> None:
        del s.items[item.id]
        self._unorder(s, item)
        for tag in item.tags:
            self._untag(s, tag, item.id)
        s.index.remove(item.id)
        s.dedup.remove(item.id)
        s.dedup_pending.pop(item.id, None)
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

    def __len__(self) -> int:
        return len(self._s.items)

    def ids(self) -> list[str]:
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
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > C.MAX_CONTENT_BYTES:
            raise InvalidArgumentError(
                f"content is {size:,} bytes; the limit is {C.MAX_CONTENT_BYTES:,} (1 MiB). "
                "Store a summary or split it into parts."
            )
        summary = self._check_summary(inp.summary)
        importance = _check_importance(inp.importance)
        try:
            user_tags = parse_tags(inp.tags)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from exc
        ctype = cast(ContentType, str(detect_type(content)))
        tags = merge_tags(user_tags, auto_tags(content, ctype))[: C.MAX_TAGS]
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
        )

    @staticmethod
    def _check_summary(summary: str | None) -> str | None:
        if summary is None:
            return None
        if not isinstance(summary, str):
            raise InvalidArgumentError("summary must be a string.")
        summary = summary.strip()
        if not summary:
            return None
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
    ) -> Stored:
        result = self.bulk_store([StoreInput(content, summary, tags, importance, pinned)])
        return Stored(item=result.items[0], compaction=result.compaction)

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
            now = self._clock()
            built: list[Item] = []
            seq = self._s.next_seq
            for i, inp in enumerate(inputs):
                try:
                    built.append(self._build(inp, seq + i, now))
                except InvalidArgumentError as exc:
                    if len(inputs) == 1:
                        raise
                    raise InvalidArgumentError(f"items[{i}]: {exc} Nothing was stored.") from exc
            ops: list[Op] = [{"op": "put", "item": item.to_record()} for item in built]
            report = self._transact(ops, protected=frozenset(it.id for it in built))
            return BulkStored(items=[self._s.items[it.id] for it in built], compaction=report)

    def _transact(self, ops: list[Op], *, protected: frozenset[str]) -> CompactReport | None:
        """Apply `ops`, plan the auto-compaction they trigger, journal both as one line.

        The ops are applied first so the planner sees them; if the journal write fails they
        are undone, leaving memory exactly as it was.
        """
        undo: list[tuple[str, Any]] = []
        for op in ops:
            if op["op"] == "config":
                undo.append(("config", self.settings.to_record()))
            else:
                item_id = op["id"] if "id" in op else op["item"]["id"]
                undo.append((item_id, self._s.items.get(item_id)))
            self._apply(op)
        try:
            ops_c, report = self._plan_auto(protected=protected)
            if self._dir is not None:
                self._dir.append(ops + ops_c)
                self._dirty = True
        except BaseException:
            for key, prev in reversed(undo):
                if key == "config":
                    self._apply({"op": "config", "set": prev})
                    continue
                current = self._s.items.get(key)
                if current is not None:
                    self._drop(self._s, current)
                if prev is not None:
                    self._put(self._s, prev)
            raise
        for op in ops_c:
            self._apply(op)
        if report is not None:
            report.tokens_after = self._s.used
        return report

    def _plan_auto(self, *, protected: frozenset[str] = frozenset()) -> tuple[list[Op], CompactReport | None]:
        st = self.settings
        if not st.auto_compact or self._s.used <= st.auto_compact_threshold * st.token_budget:
            return [], None
        target = int((st.auto_compact_threshold - C.AUTO_COMPACT_GAP) * st.token_budget)
        return self._plan_compaction(target, protected, "auto")

    def _plan_compaction(
        self, target_tokens: int, protected: frozenset[str], trigger: str
    ) -> tuple[list[Op], CompactReport]:
        s = self._s
        active = [s.items[s.by_seq[q]] for q in s.order["active"]]
        inp = compaction.CompactionInput(
            active=active,
            used_tokens=s.used,
            target_tokens=target_tokens,
            now=self._clock(),
            protected=protected,
            dedup_pending=list(s.dedup_pending),
            candidates=s.dedup.candidates,
            terms=s.index.terms,
            trigger=trigger,
        )
        ops, report = compaction.plan(inp)
        report.needs_summary = self._needs_summary(active)
        # The dedup pass covered everything pending; the journal need not remember that.
        s.dedup_pending.clear()
        return ops, report

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
            ops, report = self._plan_compaction(target, frozenset(), "manual")
            self._commit(ops)
            report.tokens_after = self._s.used
            return report

    def update(
        self,
        item_id: str,
        summary: str | None = None,
        content: str | None = None,
        tags: str | Sequence[str] | None = None,
        importance: int | None = None,
    ) -> Item:
        if summary is None and content is None and tags is None and importance is None:
            raise InvalidArgumentError("Nothing to update: give at least one of summary, content, tags, importance.")
        with self._locked():
            self._sync()
            old = self._get(item_id)
            changes: dict[str, Any] = {}
            if content is not None:
                if not content.strip():
                    raise InvalidArgumentError("content must be a non-empty string (not only whitespace).")
                size = len(content.encode("utf-8", "surrogatepass"))
                if size > C.MAX_CONTENT_BYTES:
                    raise InvalidArgumentError(f"content is {size:,} bytes; the limit is 1 MiB.")
                changes["content"] = content
                changes["content_tokens"] = self.counter.count(content)
                changes["content_type"] = str(detect_type(content))
            if summary is not None:
                new_summary = self._check_summary(summary)
                changes["summary"] = new_summary
                changes["summary_tokens"] = self.counter.count(new_summary)
                if new_summary is None:
                    changes["view"] = "content"
            if importance is not None:
                changes["importance"] = _check_importance(importance)
            if tags is not None or content is not None:
                try:
                    user = parse_tags(tags) if tags is not None else self._user_tags(old)
                except ValueError as exc:
                    raise InvalidArgumentError(str(exc)) from exc
                ctype = changes.get("content_type", old.content_type)
                text = changes.get("content", old.content)
                changes["tags"] = merge_tags(user, auto_tags(text, ctype))[: C.MAX_TAGS]
            self._commit([{"op": "patch", "id": item_id, "set": changes}])
            return self._s.items[item_id]

    @staticmethod
    def _user_tags(item: Item) -> list[str]:
        auto = set(auto_tags(item.content, item.content_type))
        return [t for t in item.tags if t not in auto]

    def _set_flag(self, item_id: str, **changes: Any) -> Item:
        with self._locked():
            self._sync()
            self._get(item_id)
            self._commit([{"op": "patch", "id": item_id, "set": changes}])
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
        """Delete permanently, from memory and from disk (snapshot rewritten, journal rotated)."""
        with self._locked():
            self._sync()
            item = self._get(item_id)
            ops: list[Op] = [{"op": "del", "id": item_id}]
            # Items merged into it point at nothing now: clear the dangling link.
            for other in self._s.items.values():
                if other.merged_into == item_id:
                    ops.append({"op": "patch", "id": other.id, "set": {"merged_into": None}})
            if self._dir is None:
                for op in ops:
                    self._apply(op)
                return item
            # Apply in memory, then purge: a fresh snapshot without the item and an empty
            # journal of the next generation. If the purge fails, undo and report.
            for op in ops:
                self._apply(op)
            try:
                self._write_snapshot_locked(dict(self._s.items))
            except (PersistenceError, OSError) as exc:
                self._apply({"op": "put", "item": item.to_record()})
                raise PersistenceError(f"Could not purge {item_id} from disk: {exc}. Nothing was deleted.") from exc
            return item

    def configure(
        self,
        token_budget: int | None = None,
        auto_compact: bool | None = None,
        auto_compact_threshold: float | None = None,
        recall_tokens: int | None = None,
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
        include_archived: bool = False,
    ) -> list[Hit]:
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
            hits = self._search(text, tag_list, limit, include_archived)
            self._touch([h.item.id for h in hits])
            return [Hit(self._s.items[h.item.id], h.score, h.matched) for h in hits]

    def _search(self, text: str, tag_list: list[str], limit: int, include_archived: bool) -> list[Hit]:
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
            return include_archived or s.items[item_id].tier == "active"

        if not text:
            pool = [s.items[i] for i in (allowed or ()) if accept(i)]
            best = heapq.nlargest(limit, pool, key=lambda it: (scoring.rank_score(1.0, it, now), it.seq))
            return [Hit(it, scoring.rank_score(1.0, it, now), ()) for it in best]

        # Retention can lift a BM25 score by at most MAX_RANK_FACTOR, so once the weakest of
        # the top `limit` final scores beats the next BM25 score times that factor, no deeper
        # hit can enter: fetch more only when that bound is not yet met.
        fetch = max(limit * 4, 20)
        while True:
            raw = s.index.search(text, limit=fetch, accept=accept)
            ranked = sorted(
                (
                    Hit(s.items[h.doc_id], scoring.rank_score(h.score, s.items[h.doc_id], now), tuple(h.matched))
                    for h in raw
                ),
                key=lambda h: (-h.score, -h.item.seq),
            )
            if len(raw) < fetch:
                return ranked[:limit]
            floor = ranked[limit - 1].score if len(ranked) >= limit else 0.0
            if raw[-1].score * scoring.MAX_RANK_FACTOR <= floor:
                return ranked[:limit]
            fetch *= 4

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

    def recall(self, limit: int = 20, query: str | None = None) -> Recall:
        if not 1 <= limit <= C.LIST_LIMIT_MAX:
            raise InvalidArgumentError(f"limit must be from 1 to {C.LIST_LIMIT_MAX}.")
        with self._read():
            s = self._s
            now = self._clock()
            cap = self.settings.recall_tokens
            pinned = [s.items[s.by_seq[q]] for q in reversed(s.order["active"]) if s.items[s.by_seq[q]].pinned]
            text = (query or "").strip()
            ranked: list[tuple[Item, float]]
            if text:
                hits = self._search(text, [], min(C.QUERY_LIMIT_MAX, limit * 2), False)
                ranked = [(h.item, h.score) for h in hits if not h.item.pinned]
            else:
                pool = (s.items[s.by_seq[q]] for q in s.order["active"])
                best = heapq.nlargest(
                    limit * 2 + len(pinned),
                    (it for it in pool if not it.pinned),
                    key=lambda it: (scoring.retention(it, now), it.seq),
                )
                ranked = [(it, scoring.retention(it, now)) for it in best]
            lines: list[str] = []
            tokens = 0
            shown_pinned: list[Item] = []
            shown: list[tuple[Item, float]] = []
            for it in pinned:
                line = item_line(it)
                cost = self.counter.count(line)
                if tokens + cost > cap:
                    break
                lines.append(line)
                tokens += cost
                shown_pinned.append(it)
            for it, score in ranked:
                if len(shown) + len(shown_pinned) >= limit:
                    break
                line = item_line(it, score=score)
                cost = self.counter.count(line)
                if tokens + cost > cap:
                    break
                lines.append(line)
                tokens += cost
                shown.append((it, score))
            more = self.count("active") - len(shown) - len(shown_pinned)
            return Recall(pinned=shown_pinned, items=shown, lines=lines, more=max(more, 0), tokens=tokens)

    def list_items(self, offset: int = 0, limit: int = 20, tier: TierFilter = "active") -> Page:
        if offset < 0:
            raise InvalidArgumentError("offset must be 0 or more.")
        if not 1 <= limit <= C.LIST_LIMIT_MAX:
            raise InvalidArgumentError(f"limit must be from 1 to {C.LIST_LIMIT_MAX}.")
        with self._read():
            seqs = self._seqs(tier)
            total = len(seqs)
            # Newest first: walk from the end.
            hi = total - offset
            lo = max(0, hi - limit)
            picked = [self._s.items[self._s.by_seq[q]] for q in reversed(seqs[lo:hi])] if hi > 0 else []
            return Page(items=picked, total=total, offset=offset)

    def _seqs(self, tier: TierFilter) -> list[int]:
        if tier == "all":
            return list(heapq.merge(self._s.order["active"], self._s.order["archived"]))
        if tier not in ("active", "archived"):
            raise InvalidArgumentError("tier must be one of: active, archived, all.")
        return self._s.order[tier]

    def export(
        self, tier: TierFilter = "all", cursor: str | None = None, page_chars: int = C.EXPORT_PAGE_CHARS
    ) -> ExportPage:
        """Oldest first, paged by a cursor that survives concurrent stores (it is a seq)."""
        after = 0
        if cursor:
            try:
                after = int(base64.urlsafe_b64decode(cursor.encode() + b"==").decode())
            except (ValueError, UnicodeDecodeError) as exc:
                raise InvalidArgumentError("cursor is not one this server issued; omit it to start over.") from exc
        with self._read():
            seqs = self._seqs(tier)
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
                )
            pinned = sum(1 for q in s.order["active"] if s.items[s.by_seq[q]].pinned)
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
        self._dir.write_snapshot(snapshot_chunks(header, list(items.values())))
        self._dir.rotate(gen + 1, offset)
        self._dir.remove_temp_files()
        self._dirty = False

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
        tmp_ok = await anyio.to_thread.run_sync(self._write_snapshot_tmp, header, items)
        if not tmp_ok:
            self._dirty = True
            return
        with self._locked():
            if sd.gen != gen:
                # Someone else rotated meanwhile (forget, another process): ours is stale.
                self._discard_tmp()
                return
            self._sync()
            try:
                sd.install_snapshot_tmp()
                sd.rotate(gen + 1, offset)
            except (PersistenceError, OSError) as exc:
                log.warning("snapshot not installed: %s", exc)
                self._dirty = True

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
        if sd is None:
            return
        # Exclusive, not shared: catching up mutates memory and a reload re-reads the journal.
        self._cm = sd.locked(exclusive=True)
        self._cm.__enter__()
        self._store._sync()

    def __exit__(self, *exc: object) -> None:
        if self._cm is not None:
            self._cm.__exit__(*exc)
