"""Recall: a context assembled within `recall_tokens` in groups (pinned, related to the task,
recent work, summaries, the most valuable of the rest), rendered one line per entry, with the
nodes that need the agent's text.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Collection
from operator import itemgetter

from .. import bounds, scoring
from .. import constants as C
from ..condense import depth_instruction, gist
from ..errors import InvalidArgumentError
from ..models import Item
from ..render import budget_line, recall_line
from .dag import _Dag
from .paging import _Paging
from .records import Recall
from .search import _Search
from .state import scope_key

# The groups of a recall, in the order shown; each header states its ordering and its score.
_GROUPS = ("pinned", "task", "recent", "summaries", "valuable")
_HEADERS = {
    "pinned": "Pinned ({n}, newest first):",
    "task": "Related to the task ({n}, best match first; score = search relevance):",
    "recent": "Recent work ({n}, newest first; one entry per file or command, its newest view):",
    "summaries": "Summaries of older work ({n}, newest first; expand(id) for their items):",
    "valuable": "Most valuable of the rest ({n}, highest first; score = retention):",
}
_FOLD = re.compile(r"\s+")
_FILEISH = re.compile(r"/|\b[\w-]+\.[A-Za-z]\w{0,5}\b")  # a path or a file name: the line is a view of it


def _view_key(it: Item) -> str:
    """What an item is a view of: its first line (a command, or a command's echo "$ cmd"),
    so that only the newest view of a file or a command's output is shown."""
    first = (it.content or "").lstrip()[: C.RECALL_VIEW_KEY_CHARS].split("\n", 1)[0]
    if not first.startswith("$ ") and not _FILEISH.search(first):
        return ""  # prose: two notes that open alike are still two notes
    return _FOLD.sub(" ", first.removeprefix("$ ").strip()).lower()


class _Recall(_Paging, _Search, _Dag):
    """Recall assembly and rendering."""

    def recall(
        self, limit: int = 20, query: str | None = None, scope: str | None = None, exclude: Collection[str] = ()
    ) -> Recall:
        """A context assembled within `recall_tokens`, in groups an agent can scan: pinned items,
        items related to the task (`query`), recent work (one entry per file or command, its
        newest view), summaries of older work, then the most valuable of the rest. Each group has
        one ordering and at most one kind of score, stated in its header; no item appears twice;
        `limit` bounds each group's entries but the last, which fills what is left of the token
        cap (so a small limit cannot leave the cap half used); the cap bounds the whole. Ids in `exclude` are
        left out (the caller shows them otherwise)."""
        if not 1 <= limit <= C.LIST_LIMIT_MAX:
            raise InvalidArgumentError(bounds.must_be("limit", bounds.integer(1, C.LIST_LIMIT_MAX), limit))
        with self._read():
            s = self._s
            now = self._clock()
            cap = self.settings.recall_tokens
            count = self.counter.count
            scopes = self._scopes(scope)
            seqs = self._visible_seqs("active", scopes)
            active_count = len(seqs)
            text = (query or "").strip()
            head = budget_line(s.used, self.settings.token_budget, len(s.order["active"]), len(s.order["archived"]))
            groups: dict[str, list[tuple[Item, float | None, str]]] = {g: [] for g in _GROUPS}
            shown: set[str] = set(exclude)
            views: set[str] = set()
            left_out: list[str] = []
            # Header and footer are part of the output the cap bounds.
            tokens = count(head) + C.RECALL_FOOTER_TOKENS

            def take(group: str, it: Item, score: float | None, until: float) -> bool:
                """Add `it` to `group` if it is new and fits under `until` tokens; False when the
                group or the share is full (the caller stops feeding it)."""
                nonlocal tokens
                if it.id in shown:
                    return True
                key = _view_key(it)
                if key and key in views:
                    return True  # an older view of a file or command already shown
                entries = groups[group]
                if len(entries) >= limit and group != "valuable":
                    return False
                line = recall_line(it, score)
                cost = count(line) + (0 if entries else C.RECALL_HEADER_TOKENS)
                if tokens + cost > until:
                    left_out.append(it.id)
                    return False
                entries.append((it, score, line))
                shown.add(it.id)
                if key:
                    views.add(key)
                tokens += cost
                return True

            pinned = sorted(
                (it for it in map(s.items.__getitem__, s.pinned) if scopes is None or scope_key(it.scope) in scopes),
                key=lambda it: -it.seq,
            )
            for it in pinned:
                if not take("pinned", it, None, cap):
                    break
            if text:
                share = tokens + cap * C.RECALL_TASK_SHARE
                for h in self._search(text, [], C.QUERY_LIMIT_MAX, True, scopes):
                    if not h.item.pinned and not take("task", h.item, h.score, share):
                        break
            newest = (s.items[s.by_seq[q]] for q in reversed(seqs))
            summaries: list[Item] = []
            share = tokens + (cap - tokens) * C.RECALL_RECENT_SHARE
            filled = False
            scanned = 0
            for it in newest:
                if it.pinned:
                    continue
                if it.depth:
                    summaries.append(it)
                    continue
                if not filled and not take("recent", it, None, share):
                    filled = True
                scanned += 1
                if filled and (len(summaries) >= limit or scanned >= C.RECALL_SCAN_MAX):
                    break
            for it in summaries:
                if not take("summaries", it, None, cap):
                    break
            if tokens < cap and len(groups["recent"]) < limit:  # the rest of the cap: more recent work
                for q in reversed(seqs[-C.RECALL_SCAN_MAX :]):
                    it = s.items[s.by_seq[q]]
                    if not it.pinned and not it.depth and not take("recent", it, None, cap):
                        break
            if tokens < cap - C.RECALL_HEADER_TOKENS:
                # Retention is dominated by importance: score only the most important of the newest
                # RECALL_SCAN_MAX (older work is what the summaries group stands for).
                retention = scoring.retention
                items_of = s.items
                candidates = heapq.nlargest(
                    limit * C.RECALL_VALUABLE_CANDIDATES,
                    (
                        (it.importance, it.seq, it)
                        for it in map(items_of.__getitem__, map(s.by_seq.__getitem__, seqs[-C.RECALL_SCAN_MAX :]))
                        if it.id not in shown and not it.pinned
                    ),
                    key=itemgetter(0, 1),
                )
                scored = ((retention(it, now), it.seq, it) for _, _, it in candidates)
                for r, _, it in sorted(scored, key=itemgetter(0, 1), reverse=True):
                    if not take("valuable", it, r, cap):
                        break

            while True:
                rendered, needs = self._render_recall(head, groups, left_out, active_count, cap)
                tokens = count(rendered)
                last = next((g for g in reversed(_GROUPS) if groups[g]), None)
                if tokens <= cap or last is None:
                    break
                # Headers and the footer cost more than reserved: drop the lowest-priority entry.
                left_out.insert(0, groups[last].pop()[0].id)
            ordered = [e for g in _GROUPS for e in groups[g]]
            shown_pinned = [e[0] for e in groups["pinned"]]
            items = [(e[0], e[1] or 0.0) for g in _GROUPS[1:] for e in groups[g]]
            # A query's archived hits are shown too; `more` counts the active items left out.
            more = max(active_count - sum(e[0].tier == "active" for e in ordered), 0)
            return Recall(
                pinned=shown_pinned,
                items=items,
                lines=[e[2] for e in ordered],
                more=more,
                tokens=tokens,
                left_out=[i for i in dict.fromkeys(left_out) if i not in shown][:20],
                needs_text=needs,
                text=rendered,
            )

    def _render_recall(
        self,
        head: str,
        groups: dict[str, list[tuple[Item, float | None, str]]],
        left_out: list[str],
        active_count: int,
        cap: int,
    ) -> tuple[str, list[str]]:
        body = [head]
        for g in _GROUPS:
            entries = groups[g]
            if entries:
                body.append(_HEADERS[g].format(n=len(entries)))
                body.extend(e[2] for e in entries)
        n_shown = sum(len(v) for v in groups.values())
        if not n_shown:
            if not self._s.items:
                body.append("Memory is empty.")
            elif not active_count:
                body.append(f"No active items in scope {self.scope!r} (other projects' items exist; scope='all').")
            else:
                body.append("No active items fit within recall_tokens.")
        more = active_count - sum(e[0].tier == "active" for v in groups.values() for e in v)
        if more > 0:
            shown = {e[0].id for v in groups.values() for e in v}
            sample = ", ".join([i for i in dict.fromkeys(left_out) if i not in shown][:8])
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
