"""The Store: compactor's domain core. The MCP server, the CLI and the tests all drive it.

Every change follows one path: plan ops (under the state-dir lock, after catching up with
other processes) -> append them to the journal (fsynced) -> apply them to memory. `_apply`
is the only code that mutates state, and startup replays the journal through it, so what
was acknowledged is exactly what comes back. Each public command here is: lock -> sync ->
validate -> plan -> transaction -> result; the concerns it draws on are the mixins it is
made of, one module each.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson

from .. import bounds
from .. import constants as C
from ..content.tags import merge_tags, parse_tags
from ..content.tokens import TokenCounter, default_counter
from ..errors import InvalidArgumentError, PersistenceError, WriteConflictError, WriteLockTimeoutError
from ..models import CompactReport, Item, Op, Settings
from ..persistence.base import Persistence
from ..persistence.statedir import StateDir
from ..runtime import PROCESS, Runtime
from ..summaries.condense import unfamiliar_terms, with_footer
from .access import Caller
from .compact import _Compaction, _item_bytes
from .inputs import StoreInput, _check_importance, _utf8_size, file_view_fields
from .journaled import CallLock, SavedIndex, _Txn
from .ledger import _Ledger
from .recall import _Recall
from .records import BulkStored, Hit, ImportedRecords, Pruned, Status, Stored, Updated
from .state import GLOBAL_SCOPE, _State
from .tuning import Tuning

log = logging.getLogger(__name__)

# A deleted item's text is looked for in the files a repair kept aside only from this length:
# shorter text ("ok", "done") would take out unrelated lines; its id finds those lines anyway.
PURGE_TEXT_MIN_BYTES = 16


def _without_source(item: Item, source: str) -> dict[str, Any]:
    """The tag change that takes back what `source` gave `item` in merges."""
    kept = [pair for pair in item.tags_from if pair[1] != source]
    still = {tag for tag, _ in kept}
    gone = {tag for tag, src in item.tags_from if src == source} - still
    return {"tags": [t for t in item.tags if t not in gone], "tags_from": kept}


log = logging.getLogger(__name__)

# A store of the same content, scope and tags within this many seconds returns the first id: a
# client retries within seconds of a failed answer, and a minute apart is a deliberate repeat.
RETRY_WINDOW_S = 60.0
# How many of the newest items that check looks at: a store answers in bounded time.
RETRY_SCAN_ITEMS = 256

# What brings an archived item back to the active tier (restore, and pin): a merged duplicate
# stands alone again.
_RESTORED: Mapping[str, Any] = MappingProxyType({"tier": "active", "merged_into": None})


def _out_of_bounds(name: str, allowed: str, value: object) -> InvalidArgumentError:
    """A configure setting past its bounds; null (None) leaves a setting as it is."""
    return InvalidArgumentError(bounds.must_be(name, bounds.or_null(allowed), value))


class Store(_Recall, _Compaction, _Ledger):
    """Working memory: items in an active tier within a token budget and an archive, kept by
    compaction, condensed into a summary DAG, optionally saved to a state dir."""

    def __init__(
        self,
        *,
        budget: int | None = None,
        state_dir: Path | str | None = None,
        database: str | None = None,
        backend: Persistence | None = None,
        counter: TokenCounter | None = None,
        clock: Callable[[], float] = time.time,
        scope: str = GLOBAL_SCOPE,
        redact_secrets: bool = True,
        runtime: Runtime | None = None,
        tuning: Tuning | None = None,
        load_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.runtime = runtime or PROCESS
        self.load_progress = load_progress  # (done, total) items while the load indexes them again
        self._tuning = tuning or Tuning()
        self._clock = clock
        self.redact_secrets = redact_secrets
        self._redacted: dict[str, int] = {}
        self._known_secrets: frozenset[bytes] = frozenset()
        # Items are stored in this scope unless told otherwise; reads cover it plus "global",
        # or every scope when `default_read_scope` is "all" (the CLI's --scope all).
        self._scope = scope
        self._call_scope = threading.local()  # a call's own scope, set by `serving`
        self._calls = CallLock()
        self._access_pending = Counter()
        self._access_guard = threading.Lock()
        self.default_read_scope: str | None = None
        self.counter = counter or default_counter()
        self.settings = Settings(token_budget=C.BUDGET_DEFAULT)
        self._s = _State()
        self._backend: Persistence | None = None
        self._dirty = False
        self._index_stale: set[str] | None = set()
        self._on_disk: SavedIndex | None = None
        # Why the last journal write failed; while set, memory is read-only (writes are refused,
        # never acknowledged unsaved) and every write first tries the disk again.
        self._degraded: str | None = None
        self._ledger_mem: list[dict[str, Any]] = []
        self.load_warnings: list[str] = []
        # When a server last handled a call on this store (time.monotonic): background work
        # that would hold up a call waits for a quiet spell. Set by `touch`.
        self.last_used = time.monotonic()
        if state_dir is not None and database is not None:
            raise InvalidArgumentError("Give a state dir or a database, not both.")
        if database is not None:
            from ..persistence.postgres import PgBackend  # psycopg is an optional extra: imported when asked for

            backend = PgBackend.connect(database)
        elif state_dir is not None:
            dir_backend = StateDir(Path(state_dir))
            dir_backend.open()
            backend = dir_backend
        if backend is not None:
            self._backend = backend
            with self._backend.locked():
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

    @property
    def scope(self) -> str:
        """The project scope items are stored in: the calling session's (`serving`), else the
        store's."""
        scope: str | None = getattr(self._call_scope, "scope", None)
        return scope or self._scope

    @scope.setter
    def scope(self, value: str) -> None:
        self._scope = value

    @contextlib.contextmanager
    def serving(self, scope: str | None = None, caller: Caller | None = None) -> Iterator[None]:
        """Hold memory for one call of a session whose project scope is `scope` (None: the
        store's), made by `caller` (None: anyone; else it sees only its projects and
        "global", and changes memory only with write access): calls of several sessions run
        on worker threads, one at a time in memory, except while a write waits for the
        writers' lock (see `_locked`)."""
        previous = getattr(self._call_scope, "scope", None), getattr(self._call_scope, "caller", None)
        self._call_scope.scope = scope
        self._call_scope.caller = caller
        try:
            with self._calls:
                yield
        finally:
            self._call_scope.scope, self._call_scope.caller = previous

    def _may_change(self) -> None:
        """Refuse, before anything is read or planned, a command that changes memory when the
        running call's caller may only read (`_Txn` checks each op again)."""
        caller = self._caller
        if caller is not None:
            caller.check_write()

    def touch(self) -> None:
        """A server is handling a call now (see `last_used`)."""
        self.last_used = time.monotonic()

    def rebuild_and_list_ids(self) -> set[str]:
        """`rebuild_and_snapshot`, then the ids of the items kept: what a repair (`compactor
        doctor --repair`, of a state dir or a database) counts the items its cut lost against."""
        self.rebuild_and_snapshot()
        return set(self.ids())

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

    def import_items(
        self, inputs: Sequence[StoreInput], progress: Callable[[int, int], None] | None = None
    ) -> BulkStored:
        """Store items with explicit (content-derived) ids, skipping ids already present, in
        chunks of BULK_MAX_ITEMS; each chunk is all or nothing. `progress(done, total)` is
        called after each chunk is journaled (done counts skipped inputs too)."""
        items: list[Item] = []
        skipped: list[str] = []
        report: CompactReport | None = None
        for start in range(0, len(inputs), C.BULK_MAX_ITEMS):
            res = self.bulk_store(list(inputs[start : start + C.BULK_MAX_ITEMS]))
            items.extend(res.items)
            skipped.extend(res.skipped)
            report = res.compaction or report
            if progress is not None:
                progress(min(start + C.BULK_MAX_ITEMS, len(inputs)), len(inputs))
        return BulkStored(items=items, compaction=report, skipped=skipped)

    def import_records(
        self, records: Sequence[dict[str, Any]], progress: Callable[[int, int], None] | None = None
    ) -> ImportedRecords:
        """Bring back items as a JSON export recorded them: every field kept (tier, view,
        scope, lineage, timestamps, access counts), only `seq` and token counts assigned here.
        Ids already present are skipped, so importing twice stores nothing new. A summary node
        comes only with children that list it as their parent (imported with it, or already
        here); otherwise it is left out and its children are left uncovered, for compaction to
        cover again. Written in chunks of BULK_MAX_ITEMS through the one mutation path, each
        chunk one journaled transaction; `progress(done, total)` is called after each one, with
        the count of new items stored so far and of new items to store (an exception it raises
        stops the import between chunks, leaving every chunk before it stored whole)."""
        self._may_change()
        with self._locked(), self.runtime.bulk_work():
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
            self._count_tokens(list(built.values()))
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
                if progress is not None:
                    progress(start + len(chunk), len(order))
            if dropped and self._s.uncovered:
                # The children of a node left out are covered again now, as compaction would.
                settings = self.settings
                with self._txn() as txn:
                    self._condense(
                        txn,
                        int(settings.auto_compact_threshold * settings.token_budget),
                        frozenset(),
                        last_resort=False,
                    )
            return ImportedRecords(
                items=[self._s.items[it.id] for it in order if it.id in self._s.items],
                compaction=report,
                skipped=skipped,
                redacted=self.take_redactions(),
                dropped_nodes=dropped,
            )

    def bulk_store(self, inputs: Sequence[StoreInput]) -> BulkStored:
        """All or nothing: every input is validated before anything is written."""
        if not inputs:
            raise InvalidArgumentError("items is empty; pass at least one item to store.")
        if len(inputs) > C.BULK_MAX_ITEMS:
            raise InvalidArgumentError(
                f"items has {len(inputs):,} entries; send at most {C.BULK_MAX_ITEMS:,} per call."
            )
        self._may_change()
        with self._locked(), self.runtime.bulk_work():
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
                    item = self._build(inp, seq + len(built), now)
                except InvalidArgumentError as exc:
                    if len(inputs) == 1:
                        raise
                    raise InvalidArgumentError(f"items[{i}]: {exc} Nothing was stored.") from exc
                twin = self._recent_twin(item, now) if len(inputs) == 1 and inp.item_id is None else None
                if twin is not None:  # a retried store (its first try's answer was lost): the first id
                    return BulkStored(items=[twin], compaction=None, skipped=[], redacted=self.take_redactions())
                built.append(item)
            self._count_tokens(built)
            ops: list[Op] = [{"op": "put", "item": item.to_record()} for item in built]
            new_ids = [it.id for it in built]
            report = self._transact(ops, protected=frozenset(new_ids), hint_ids=new_ids) if ops else None
            return BulkStored(
                items=[self._s.items[it.id] for it in built],
                compaction=report,
                skipped=skipped,
                redacted=self.take_redactions(),
            )

    def _recent_twin(self, item: Item, now: float) -> Item | None:
        """An item stored within `RETRY_WINDOW_S` with `item`'s content, scope and tags: what
        a client retrying a store whose answer it never got (an ambiguous commit) meant."""
        s = self._s
        for seq in reversed(s.order["active"][-RETRY_SCAN_ITEMS:]):
            other = s.items[s.by_seq[seq]]
            if other.created_at < now - RETRY_WINDOW_S:
                break
            if other.content == item.content and other.scope == item.scope and other.tags == item.tags:
                return other
        return None

    def prune(self, *, apply: bool = False, max_archive_tokens: int | None = None) -> Pruned:
        """What `prune_candidates` names, with its size; removed only with `apply`: from memory
        and disk (snapshot rewritten, journal rotated), each id in the forget ledger."""
        limit = self.settings.max_archive_tokens if max_archive_tokens is None else max_archive_tokens
        self._may_change()
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
            self._ledger_append([self._ledger_entry(it.id, "prune", now) for it in victims])
            self._purge(ops, lambda txn: self._mark_gone_many(txn, victims), "prune")
            self._purge_kept_aside(victims)
            result.applied = True
            return result

    def compact(self, target_usage: float = C.MANUAL_COMPACT_TARGET) -> CompactReport:
        if (
            not isinstance(target_usage, (int, float))
            or not C.TARGET_USAGE_MIN <= float(target_usage) <= C.TARGET_USAGE_MAX
        ):
            allowed = bounds.finite(C.TARGET_USAGE_MIN, C.TARGET_USAGE_MAX)
            raise InvalidArgumentError(bounds.must_be("target_usage", allowed, target_usage))
        self._may_change()
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
        from ..content.classify import auto_tags, detect_type  # on the first write, as in inputs.py

        self._may_change()
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
                changes["importance"] = _check_importance(importance, optional=True)
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
            if not old.depth and ("content" in changes or "summary" in changes):
                new_text = changes.get("content", old.content), changes.get("summary", old.summary)
                changes.update(file_view_fields(*new_text))
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

    def _set_flag(self, item_id: str, **changes: Any) -> Item:
        self._may_change()
        with self._locked():
            self._sync()
            self._get(item_id)
            # Through compaction: unpinning may leave usage over a budget the pins alone exceeded.
            self._transact([{"op": "patch", "id": item_id, "set": changes}], protected=frozenset({item_id}))
            return self._s.items[item_id]

    def pin(self, item_id: str) -> Item:
        """Keep an item in full for good: an archived one comes back to the active tier (as
        `restore` brings it) and one shown by its summary goes back to its content. Pinning
        left an archived item in the archive, out of recall and of the budget it was pinned
        to stay in."""
        self._may_change()
        with self._locked():
            self._sync()
            item = self._get(item_id)
            changes: dict[str, Any] = {"pinned": True}
            if item.tier == "archived":
                changes.update(_RESTORED)
            if item.view == "summary":
                changes["view"] = "content"
            self._transact([{"op": "patch", "id": item_id, "set": changes}], protected=frozenset({item_id}))
            return self._s.items[item_id]

    def unpin(self, item_id: str) -> Item:
        return self._set_flag(item_id, pinned=False)

    def restore(self, item_id: str) -> tuple[Item, CompactReport | None]:
        """Bring an archived item back; compaction may follow but never of this item."""
        self._may_change()
        with self._locked():
            self._sync()
            item = self._get(item_id)
            if item.tier == "active":
                return item, None
            op: Op = {"op": "patch", "id": item_id, "set": dict(_RESTORED)}
            report = self._transact([op], protected=frozenset({item_id}))
            return self._s.items[item_id], report

    def forget(self, item_id: str) -> Item:
        """Delete a raw item permanently, from memory and from disk (snapshot rewritten,
        journal rotated); the summaries covering it record it as gone. On a summary node it
        dissolves the node instead: forgetting never deletes what a summary covers."""
        self._may_change()
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
            self._purge(ops, lambda txn: self._mark_gone(txn, item), f"forget {item_id}")
            self._purge_kept_aside([item])
            self._ledger_append([self._ledger_entry(item_id, "forget", self._clock())])
            return item

    def _purge(self, ops: list[Op], mark_gone: Callable[[_Txn], None], what: str) -> None:
        """Delete for good, all or nothing: apply `ops`, record the deleted items in the
        summaries that covered them, then write a fresh snapshot and an empty journal of the
        next generation, so the deleted bytes are in no file under the state dir."""
        txn = _Txn(self)
        try:
            txn.apply(ops)
            mark_gone(txn)
            if self._backend is not None:
                self._write_snapshot_locked(dict(self._s.items))
        except (WriteConflictError, WriteLockTimeoutError) as exc:
            # Another server moved memory on (a restore, say) or held the lock: nothing is wrong
            # with saving here, and the error says to retry, which the server does for a conflict.
            self._undo_purge(txn, exc)
            raise
        except (PersistenceError, OSError) as exc:
            self._undo_purge(txn, exc)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if self._degraded is None:
                log.error("persistence failed; memory is read-only until the disk recovers: %s", reason)
            self._degraded = reason
            raise PersistenceError(
                f"Could not {what}, so nothing was deleted and memory is read-only until compactor can "
                f"save again ({reason.rstrip('.')}): free disk space or fix permissions and retry."
            ) from exc
        except BaseException as exc:
            self._undo_purge(txn, exc)
            raise
        if self._degraded is not None:
            log.warning("persistence recovered: saving again")
            self._degraded = None

    def _purge_kept_aside(self, gone: Sequence[Item]) -> None:
        """Deleted items leave the files a repair kept aside too: their lines name their ids
        (a summary's, its children's) or hold their text. A failure is logged: the deletion
        itself is done, and the next forget tries again."""
        if self._backend is None:
            return
        needles: list[bytes] = []
        for it in gone:
            needles.append(orjson.dumps(it.id))
            text = orjson.dumps(it.content)[1:-1]
            if len(text) >= PURGE_TEXT_MIN_BYTES:
                needles.append(text)
        try:
            changed = self._backend.purge_kept_aside(needles)
        except PersistenceError as exc:
            log.error("a file kept aside by doctor --repair may still hold what was deleted: %s", exc)
            return
        if changed:
            log.info("deleted items taken out of %s", ", ".join(changed))

    def _undo_purge(self, txn: _Txn, exc: BaseException) -> None:
        """Undo a purge whose snapshot failed. The failed snapshot's frames still hold views of
        the index's arrays (which an array being exported cannot be resized under): they are
        cleared first. Should the undo fail all the same, memory is read again from the
        persistence, which the failed purge left as it was."""
        seen: set[int] = set()
        cause: BaseException | None = exc
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            traceback.clear_frames(cause.__traceback__)
            cause = cause.__cause__ or cause.__context__
        try:
            txn.rollback()
        except Exception:
            log.exception("undo of a failed purge failed; reading memory again from disk")
            if self._backend is None:
                raise
            self._reload()

    def dissolve(self, item_id: str) -> list[Item]:
        """Reverse one condensation: the node goes, its children return to where they were."""
        self._may_change()
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
        settings = self.settings
        with self._txn() as txn:
            txn.apply(ops)
            # A pure undo unless the summaries that came back overflow the budget: then they
            # are protected only as far as they fit, and the call still ends within budget.
            if settings.auto_compact and self._s.used > settings.token_budget:
                target = int((settings.auto_compact_threshold - C.AUTO_COMPACT_GAP) * settings.token_budget)
                self._compact_in(txn, target, frozenset(c.id for c in kids), "auto")
        # A child that did not fit may have been condensed again (a d1 even re-made).
        return [self._s.items[c.id] for c in kids if c.id in self._s.items]

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
                raise _out_of_bounds("token_budget", bounds.integer(C.BUDGET_MIN, C.BUDGET_MAX), token_budget)
            changes["token_budget"] = int(token_budget)
            changes["budget_source"] = "configure"
        if auto_compact is not None:
            changes["auto_compact"] = bool(auto_compact)
        if auto_compact_threshold is not None:
            t = float(auto_compact_threshold)
            if not C.THRESHOLD_MIN <= t <= C.THRESHOLD_MAX:
                allowed = bounds.finite(C.THRESHOLD_MIN, C.THRESHOLD_MAX)
                raise _out_of_bounds("auto_compact_threshold", allowed, auto_compact_threshold)
            changes["auto_compact_threshold"] = t
        if recall_tokens is not None:
            if isinstance(recall_tokens, bool) or not C.RECALL_TOKENS_MIN <= recall_tokens <= C.RECALL_TOKENS_MAX:
                allowed = bounds.integer(C.RECALL_TOKENS_MIN, C.RECALL_TOKENS_MAX)
                raise _out_of_bounds("recall_tokens", allowed, recall_tokens)
            changes["recall_tokens"] = int(recall_tokens)
        if max_items is not None:
            if isinstance(max_items, bool) or not C.MAX_ITEMS_MIN <= max_items <= C.MAX_ITEMS_MAX:
                raise _out_of_bounds("max_items", bounds.integer(C.MAX_ITEMS_MIN, C.MAX_ITEMS_MAX), max_items)
            changes["max_items"] = int(max_items)
        if max_archive_tokens is not None:
            if (
                isinstance(max_archive_tokens, bool)
                or not C.ARCHIVE_TOKENS_MIN <= max_archive_tokens <= C.ARCHIVE_TOKENS_MAX
            ):
                allowed = bounds.integer(C.ARCHIVE_TOKENS_MIN, C.ARCHIVE_TOKENS_MAX)
                raise _out_of_bounds("max_archive_tokens", allowed, max_archive_tokens)
            changes["max_archive_tokens"] = int(max_archive_tokens)
        self._may_change()
        with self._locked():
            self._sync()
            report = None
            if changes:
                report = self._transact([{"op": "config", "set": changes}], protected=frozenset())
            return self.settings, report

    def warm_up(self) -> None:
        """Load now what the first store would (the token encoding, the redaction and
        classification rules: ~0.2-0.4 s), for a server that expects writes: every call queued
        behind that first store waited for it too. Changes nothing in memory."""
        import compactor.content.classify
        import compactor.content.redact  # noqa: F401  (imported for its compiled rules)

        self.counter.warm()

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
            raise InvalidArgumentError(bounds.must_be("limit", bounds.integer(1, C.QUERY_LIMIT_MAX), limit))
        try:
            tag_list = parse_tags(tags)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from exc
        text = (query or "").strip()
        if not text and not tag_list:
            raise InvalidArgumentError("Give a query, tags, or both.")
        with self._read():
            hits = self._search(text, tag_list, limit, include_archived, self._scopes(scope))
            # The access is recorded in the read's own hold when it has one, never waiting for
            # writers (`_touch`).
            self._touch([h.item.id for h in hits])
        items = self._s.items
        return [dataclasses.replace(h, item=items.get(h.item.id, h.item)) for h in hits]

    def status(self) -> Status:
        with self._read():
            s = self._s
            per_type = {t: dict(v) for t, v in s.type_counts.items()}
            persistence: dict[str, Any] = {"enabled": self._backend is not None}
            if self._backend is not None:
                persistence.update(
                    **self._backend.describe(),
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
