"""The summary DAG: condensing archived items and active nodes into summary nodes, marking
forgotten children gone up the lineage, and reading the DAG (expand, ancestors, roots, tree).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .. import bounds
from .. import constants as C
from ..errors import InvalidArgumentError
from ..models import Item, Op, Tier
from ..search import scoring
from ..summaries.condense import TYPE_TAGS, extractive_text, gist, group_coherent, lineage_id
from .journaled import _Journaled, _Txn
from .state import ALL_SCOPES, scope_key

# 20 archived items to a d1 node and 5 nodes to the next depth, up to depth 4: 20 * 5**3 =
# 2,500 raw items under one d4 node, so a 100k-item archive needs ~40 top-level nodes. Past d4 a
# level is added only when the budget cannot hold the d4 nodes (never by mixing levels).
CHUNK_SIZE: Final = 20
FANOUT: Final = 5
MAX_DEPTH: Final = 4
NEEDS_TEXT_LIMIT: Final = 3


def _common_tags(children: list[Item]) -> list[str]:
    counts: dict[str, int] = {}
    for c in children:
        for t in c.tags:
            if t not in TYPE_TAGS:
                counts[t] = counts.get(t, 0) + 1
    return sorted(counts, key=lambda t: (-counts[t], t))[:5]


class _Dag(_Journaled):
    """Condensation and the summary DAG."""

    # What a read in a scope covers (`_Paging._scopes`): listings of nodes honour it.
    _scopes: Callable[[str | None], frozenset[str] | None]

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
                made.extend(self._cover_raw(txn, self._extend_latest_node(txn, scope, pending, made, protected)))
                continue
            full = len(pending) - len(pending) % FANOUT
            for group in (pending[i : i + FANOUT] for i in range(0, full, FANOUT)):
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
                while (len(rest) > FANOUT and depth < MAX_DEPTH) or (s.used > target_tokens and len(rest) >= 2):
                    group, rest = rest[:FANOUT], rest[FANOUT:]
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
            raw: list[Item] = []
            for it in rest_items:
                if s.used <= target_tokens:
                    break
                txn.apply([{"op": "patch", "id": it.id, "set": {"tier": "archived"}}])
                if not it.depth:
                    raw.append(s.items[it.id])
            # A raw item archived here (eviction stopped short, and the summaries made for what
            # it archived outgrew its estimate) is covered like any other, by a d1 node that goes
            # to the archive with it as a root: left uncovered, it was in no summary's lineage.
            by_scope: dict[str, list[Item]] = {}
            for it in raw:
                by_scope.setdefault(scope_key(it.scope), []).append(it)
            for scope_items in by_scope.values():
                for node_id in self._cover_raw(txn, scope_items):
                    txn.apply([{"op": "patch", "id": node_id, "set": {"tier": "archived"}}])
                    made.append(node_id)
        return made

    def _cover_raw(self, txn: _Txn, items: list[Item]) -> list[str]:
        """d1 nodes over archived raw items of one scope, in coherent groups of neighbours in
        time (`group_coherent` reads them in seq order); the ids of the nodes made."""
        made: list[str] = []
        ordered = sorted(items, key=lambda it: it.seq)
        for group in group_coherent(ordered, CHUNK_SIZE, self._s.index.term_ids):
            node_id = self._make_node(txn, 1, group, "archived")
            if node_id:
                made.append(node_id)
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
        if not raw or len(pending) >= CHUNK_SIZE // 2:
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
            or len(latest.children) >= CHUNK_SIZE
        ):
            return pending
        take = raw[: CHUNK_SIZE - len(latest.children)]
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

    def _needs_text(self, scope: str | None = None) -> list[str]:
        """Active nodes with stand-in text in the read scope (`_scopes`), newest first: a node
        is of its children's scope, and another project's previews are not ours to show."""
        scopes = self._scopes(scope)
        out = [
            it.id
            for it in reversed(self._active_nodes())
            if it.quality in ("extractive", "stale") and (scopes is None or scope_key(it.scope) in scopes)
        ]
        return out[:NEEDS_TEXT_LIMIT]

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

    def expand(self, item_id: str, offset: int = 0, limit: int = 20) -> tuple[Item, list[Item], int]:
        """A summary's children, paged: (node, children page, total children)."""
        if offset < 0:
            raise InvalidArgumentError(bounds.must_be("offset", bounds.integer(0), offset))
        if not 1 <= limit <= C.LIST_LIMIT_MAX:
            raise InvalidArgumentError(bounds.must_be("limit", bounds.integer(1, C.LIST_LIMIT_MAX), limit))
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

    def roots(self, scope: str | None = ALL_SCOPES) -> list[Item]:
        """Summary nodes no other summary covers, newest first: the active ones, then those a
        budget smaller than the summaries moved to the archive. Of every scope unless `scope`
        says which (as `_scopes`: None is the store's read scope, which replies use)."""
        s = self._s
        scopes = self._scopes(scope)
        archived = sorted((s.items[i] for i in s.uncovered if s.items[i].depth), key=lambda it: -it.seq)
        found = [it for it in reversed(self._active_nodes()) if not it.parents] + archived
        return found if scopes is None else [it for it in found if scope_key(it.scope) in scopes]

    def tree(
        self,
        root: str | None = None,
        max_depth: int = 2,
        max_chars: int = C.MAX_OUTPUT_CHARS,
        scope: str | None = ALL_SCOPES,
    ) -> str:
        """A bounded text rendering of the DAG (from `root`, or from every root of `scope`, as
        `roots`)."""
        if not 1 <= max_depth <= C.TREE_DEPTH_MAX:
            raise InvalidArgumentError(bounds.must_be("max_depth", bounds.integer(1, C.TREE_DEPTH_MAX), max_depth))
        with self._read():
            starts = [self._get(root)] if root else [it for it in self.roots(scope) if self._reaches(it)]
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

    def dag_shape(self, scope: str | None = ALL_SCOPES) -> dict[int, dict[str, int]]:
        """Nodes per depth and tier (of every scope unless `scope` says which, as `_scopes`)."""
        shape: dict[int, dict[str, int]] = {}
        scopes = self._scopes(scope)
        for it in self._s.items.values():
            if it.depth and (scopes is None or scope_key(it.scope) in scopes):
                shape.setdefault(it.depth, {"active": 0, "archived": 0})[it.tier] += 1
        return dict(sorted(shape.items()))
