"""Reading by position: scopes, tier orders, list and export pages."""

from __future__ import annotations

import base64
import bisect
import heapq
from collections.abc import Iterator, Sequence
from typing import get_args

from .. import bounds
from .. import constants as C
from ..content.tags import normalize_tag
from ..errors import InvalidArgumentError
from ..models import Item
from .inputs import _Inputs
from .journaled import _Journaled
from .records import ExportPage, Page
from .state import ALL_SCOPES, GLOBAL_SCOPE, TierFilter, scope_key

TIERS = get_args(TierFilter)  # what a tier filter may be, in the order sentences name them


class _Paging(_Inputs, _Journaled):
    """Scopes, lists and export pages."""

    default_read_scope: str | None

    def ids(self) -> list[str]:
        with self._read():  # another process may have stored or forgotten since our last call
            return list(self._s.items)

    def get(self, item_id: str) -> Item:
        """The full item whatever its tier or view: the way back to every original."""
        with self._read():
            return self._get(item_id)

    def latest(self, tags: Sequence[str], scope: str | None = None) -> Item | None:
        """The newest item, in either tier, that carries every one of `tags` (normalised), in
        the read scope; None when there is none. A lookup: it touches nothing."""
        with self._read():
            s = self._s
            wanted = [normalize_tag(t) for t in tags]
            if not wanted:
                return None
            ids = set(s.by_tag.get(wanted[0], ()))
            for tag in wanted[1:]:
                ids &= s.by_tag.get(tag, set())
            scopes = self._scopes(scope)
            found = (s.items[i] for i in ids if scopes is None or scope_key(s.items[i].scope) in scopes)
            return max(found, key=lambda it: it.seq, default=None)

    def list_items(
        self, offset: int = 0, limit: int = 20, tier: TierFilter = "active", scope: str | None = None
    ) -> Page:
        if offset < 0:
            raise InvalidArgumentError(bounds.must_be("offset", bounds.integer(0), offset))
        if not 1 <= limit <= C.LIST_LIMIT_MAX:
            raise InvalidArgumentError(bounds.must_be("limit", bounds.integer(1, C.LIST_LIMIT_MAX), limit))
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
            raise InvalidArgumentError(bounds.must_be("tier", bounds.one_of(TIERS), tier))
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
        caller = self._caller
        if scope == ALL_SCOPES:
            # A caller's "all" is all of its own projects.
            return None if caller is None or caller.projects is None else caller.projects | {GLOBAL_SCOPE}
        key = scope_key(self._check_scope(scope))
        if caller is not None and key != GLOBAL_SCOPE:
            caller.check_project(key)
        return frozenset({key, GLOBAL_SCOPE})

    def hidden_by_scope(self, tier: TierFilter = "all", scope: str | None = None) -> int:
        """How many items of `tier` a read in `scope` (default: the store's) leaves out."""
        with self._read():
            scopes = self._scopes(scope)
            if scopes is None:
                return 0
            tiers = ("active", "archived") if tier == "all" else (tier,)
            if any(t not in ("active", "archived") for t in tiers):
                raise InvalidArgumentError(bounds.must_be("tier", bounds.one_of(TIERS), tier))
            seen = sum(len(self._s.scope_order.get(sc, {}).get(t, [])) for sc in scopes for t in tiers)
            caller = self._caller
            if caller is not None and caller.projects is not None:  # never a count of another's projects
                reach = caller.projects | {GLOBAL_SCOPE}
                return sum(len(self._s.scope_order.get(sc, {}).get(t, [])) for sc in reach for t in tiers) - seen
            return sum(len(self._s.order[t]) for t in tiers) - seen

    def export(
        self,
        tier: TierFilter = "all",
        cursor: str | None = None,
        page_chars: int = C.EXPORT_PAGE_CHARS,
        scope: str | None = None,
    ) -> ExportPage:
        """Oldest first, paged by a cursor that survives concurrent stores (it is a seq, and a
        character offset when the page ended inside an item too large for one page)."""
        after, resume = 0, 0
        if cursor:
            try:
                seq_text, _, offset_text = base64.urlsafe_b64decode(cursor.encode() + b"==").decode().partition("+")
                after, resume = int(seq_text), int(offset_text or 0)
            except (ValueError, UnicodeDecodeError) as exc:
                raise InvalidArgumentError("cursor is not one this server issued; omit it to start over.") from exc
        with self._read():
            seqs = self._seqs(tier, self._scopes(scope))
            # Resuming inside an item: that item again, from `resume` (if it is still there).
            i = bisect.bisect_left(seqs, after) if resume else bisect.bisect_right(seqs, after)
            if resume and (i == len(seqs) or seqs[i] != after):
                resume = 0
            elif resume and resume >= len(self._s.items[self._s.by_seq[after]].content):
                i, resume = i + 1, 0  # changed since (an update): what is left of it, nothing
            out: list[Item] = []
            part: tuple[str, int, int] | None = None
            used = 0
            while i < len(seqs):
                item = self._s.items[self._s.by_seq[seqs[i]]]
                start = resume if not out else 0
                extra = len(item.summary or "") + 200
                cost = len(item.content) - start + extra
                if out and used + cost > page_chars:
                    break
                if start or cost > page_chars:
                    # Alone on its page, and only as much of its content as the page holds.
                    end = min(len(item.content), start + max(page_chars // 4, page_chars - extra))
                    out.append(item)
                    part = (item.id, start, end)
                    if end < len(item.content):
                        more = f"{item.seq}+{end}".encode()
                        return ExportPage(out, base64.urlsafe_b64encode(more).decode().rstrip("="), len(seqs), part)
                    i += 1
                    break
                out.append(item)
                used += cost
                i += 1
            next_cursor = None
            if i < len(seqs):
                next_cursor = base64.urlsafe_b64encode(str(out[-1].seq).encode()).decode().rstrip("=")
            return ExportPage(items=out, next_cursor=next_cursor, total=len(seqs), part=part)

    def iter_items(self) -> Iterator[Item]:
        return iter(list(self._s.items.values()))
