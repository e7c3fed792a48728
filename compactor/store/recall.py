"""Recall: a context assembled within `recall_tokens` (pinned items, a fresh tail, then by
relevance or retention) and rendered as text, with the nodes that need the agent's text.
"""

from __future__ import annotations

import heapq
from operator import itemgetter

from .. import constants as C
from .. import scoring
from ..condense import depth_instruction, gist
from ..errors import InvalidArgumentError
from ..models import Item
from ..render import budget_line, item_line
from .dag import _Dag
from .paging import _Paging
from .records import Recall
from .search import _Search
from .state import scope_key


class _Recall(_Paging, _Search, _Dag):
    """Recall assembly and rendering."""

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
