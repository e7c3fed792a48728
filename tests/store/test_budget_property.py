"""The Store as one state machine over its whole write API, with every invariant the random walks
of test_compaction, test_dag and test_derived checked (they are folded in here):

- nothing stored and not forgotten is lost: its content comes back unchanged, and the raw items
  are exactly those (test_compaction); after every step each is reachable by expand from the
  active tier, the roots or the uncovered archive, and after a compaction nothing raw is left
  uncovered (test_dag);
- usage ends within budget unless pinned items alone exceed it (issue 13); a compaction meets its
  target unless nothing unpinned is left active (test_compaction, test_dag); usage never goes
  negative and the pinned count of `status` agrees with a scan (test_compaction);
- levels never mix: a node of depth d covers only nodes of depth d-1;
- dissolve is an undo: only the node leaves and its children come back where they were, unless
  the summaries coming back overflow the budget (test_dag);
- every structure kept beside the items (orders, tag sets, token totals, the pinned, uncovered,
  duplicate-hinted and active-node sets, the search and dedup indexes) equals what the items
  alone say after every step, and a reload from disk rebuilds exactly the same (test_derived).

Hypothesis explores short runs; `test_long_walks_*` drive the same machine through long seeded
walks that reach deep nodes, pins and duplicates, which short runs rarely do."""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from compactor.errors import CompactorError
from compactor.store import Store, StoreInput, scope_key
from tests.conftest import FakeClock
from tests.summaries.test_dag import active_set, reachable

_WORDS = ["auth", "token", "retry", "cache", "KeyError", "parse_config", "db/models.py", "deploy", "queue", "lock"]


def text(seed: int, words: int) -> str:
    rng = random.Random(seed)
    return f"topic{seed % 5} " + " ".join(f"w{rng.randrange(100_000)}" for _ in range(words))


def worded(seed: int) -> str:
    """Text from a small vocabulary, so that near-duplicates and shared topics occur."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) + str(rng.randint(0, 6)) for _ in range(rng.randint(3, 60)))


SIZES = st.sampled_from([5, 30, 120, 600, 2_500])  # the last is larger than the smallest budget


def derived(store: Store) -> dict[str, Any]:
    """What the structures kept beside the items should hold, from the items alone."""
    s = store._s
    order: dict[str, list[int]] = {"active": [], "archived": []}
    scope_order: dict[str, dict[str, list[int]]] = {}
    by_tag: dict[str, set[str]] = {}
    counts = {t: {"active": 0, "archived": 0} for t in s.type_counts}
    for it in s.items.values():
        order[it.tier].append(it.seq)
        scope_order.setdefault(scope_key(it.scope), {"active": [], "archived": []})[it.tier].append(it.seq)
        for tag in it.tags:
            by_tag.setdefault(tag, set()).add(it.id)
        counts[it.content_type][it.tier] += 1
    active = [it for it in s.items.values() if it.tier == "active"]
    archived = [it for it in s.items.values() if it.tier == "archived"]
    return {
        "order": {tier: sorted(seqs) for tier, seqs in order.items()},
        "scope_order": {k: {t: sorted(v) for t, v in per.items()} for k, per in scope_order.items()},
        "by_seq": {it.seq: it.id for it in s.items.values()},
        "by_tag": by_tag,
        "type_counts": counts,
        "used": sum(it.view_tokens for it in active),
        "archived_tokens": sum(it.content_tokens for it in archived),
        "pinned": {it.id for it in active if it.pinned},
        "active_nodes": {it.id for it in active if it.depth},
        "dup_hints": {it.id for it in active if it.dup_of},
        "uncovered": {it.id for it in archived if not it.parents},
        "indexed": set(s.items),
        "deduped": {it.id for it in active if not it.depth},
    }


def kept(store: Store) -> dict[str, Any]:
    """What those structures hold, as kept incrementally."""
    s = store._s
    scope_order = {k: per for k, per in s.scope_order.items() if per["active"] or per["archived"]}
    return {
        "order": s.order,
        "scope_order": scope_order,
        "by_seq": s.by_seq,
        "by_tag": s.by_tag,
        "type_counts": s.type_counts,
        "used": s.used,
        "archived_tokens": s.archived_tokens,
        "pinned": s.pinned,
        "active_nodes": s.active_nodes,
        "dup_hints": s.dup_hints,
        "uncovered": s.uncovered,
        "indexed": set(s.index._ids),
        "deduped": s.dedup.ids(),
    }


def covered_by(store: Store, nodes: list[Any]) -> set[str]:
    """Everything reachable by expand from `nodes`."""
    seen: set[str] = set()
    present = set(store.ids())
    stack = [n.id for n in nodes]
    while stack:
        item_id = stack.pop()
        if item_id not in seen and item_id in present:
            seen.add(item_id)
            stack.extend(store.get(item_id).children)
    return seen


def uncovered_raw(store: Store) -> set[str]:
    """Raw items in the archive that no summary covers, from the items alone."""
    items = [store.get(i) for i in store.ids()]
    return {it.id for it in items if it.tier == "archived" and not it.depth and not it.parents}


class Memory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.dir = Path(tempfile.mkdtemp(prefix="memory-machine-"))
        self.store = Store(state_dir=self.dir / "state", clock=self.clock)
        self.store.configure(token_budget=2_000)
        self.expected: dict[str, str] = {}
        self.seed = 0

    # --- the actions, with plain arguments (the rules and the long walks both call them) ---
    def _next_id(self) -> str:
        # Explicit ids: random ones would change grouping and ids between replays.
        self.seed += 1
        return f"item-{self.seed:05d}"

    def _put(self, inputs: list[StoreInput]) -> None:
        for item, inp in zip(self.store.bulk_store(inputs).items, inputs, strict=True):
            self.expected[item.id] = inp.content

    def do_store(
        self,
        content: str,
        *,
        pinned: bool = False,
        importance: int = 5,
        summary: str | None = None,
        tags: list[str] | None = None,
        scope: str | None = None,
    ) -> None:
        item_id = self._next_id()
        inp = StoreInput(content, summary, tags, importance, pinned, item_id=item_id, scope=scope)
        self._put([inp])

    def do_bulk(self, contents: list[str], tags: list[str] | None = None) -> None:
        self._put([StoreInput(c, tags=tags, item_id=self._next_id()) for c in contents])

    def do_update(self, item_id: str, content: str | None, summary: str | None, tags: list[str] | None) -> None:
        self.store.update(item_id, content=content, summary=summary, tags=tags)
        if content is not None:
            self.expected[item_id] = content

    def do_compact(self, usage: float) -> None:
        s = self.store
        s.compact(usage)
        target = int(usage * s.budget)
        unpinned_active = [i for i in s.ids() if s.get(i).tier == "active" and not s.get(i).pinned]
        assert s.tokens_used <= target or not unpinned_active, (s.tokens_used, target)
        # A compaction leaves nothing uncovered: the lineage closure (checked after every step)
        # holds without the uncovered archive. (When every root is active, covered_by(roots) is
        # inside reachable, so this is also the stricter check that only ran then.)
        assert set(self.expected) <= reachable(s) | covered_by(s, s.roots())

    def do_dissolve(self, node_id: str) -> None:
        s = self.store
        node = s.get(node_id)
        before = active_set(s)
        present = set(s.ids())
        # What comes back into the active tier: the summary children not already there.
        back = [s.get(c) for c in node.children if c in present and s.get(c).depth and s.get(c).tier != "active"]
        leaving = node.view_tokens if node.tier == "active" else 0
        fits = s.tokens_used - leaving + sum(k.view_tokens for k in back) <= s.budget
        kids = s.dissolve(node_id)
        # Undo: only the node left and its children came back where they were (unless the
        # summaries coming back overflow the budget: then it compacts). A child the agent had
        # restored goes back with the others; nothing else changes tier.
        if fits:
            kid_ids = {k.id for k in kids}
            assert active_set(s) == (before - {node.id} - kid_ids) | {k.id for k in kids if k.tier == "active"}

    def do_forget(self, item_id: str) -> None:
        self.store.forget(item_id)
        self.expected.pop(item_id, None)

    # --- rules ------------------------------------------------------------------------------
    def _raw(self, data: st.DataObject) -> str:
        # By position, in insertion order: the same draw picks the same item on replay.
        ids = list(self.expected)
        return ids[data.draw(st.integers(0, len(ids) - 1))]

    def _any(self, data: st.DataObject) -> str:
        ids = sorted(self.store.ids())
        return ids[data.draw(st.integers(0, len(ids) - 1))]

    @rule(
        words=SIZES,
        pinned=st.booleans(),
        importance=st.integers(1, 10),
        summary=st.sampled_from([None, "short summary auth"]),
        tags=st.sampled_from([None, ["a"], ["a", "b"]]),
        scope=st.sampled_from([None, None, "global", "/p/other"]),
    )
    def store_one(
        self, words: int, pinned: bool, importance: int, summary: str | None, tags: list[str] | None, scope: str | None
    ) -> None:
        self.do_store(
            text(self.seed, words),
            pinned=pinned and words <= 30,
            importance=importance,
            summary=summary,
            tags=tags,
            scope=scope,
        )

    @rule(n=st.integers(1, 60), words=SIZES, tags=st.sampled_from([None, ["b"]]))
    def bulk_store(self, n: int, words: int, tags: list[str] | None) -> None:
        self.do_bulk([text(self.seed * 100 + k, min(words, 120)) for k in range(n)], tags)

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def store_a_near_duplicate(self, data: st.DataObject) -> None:
        self.do_store(self.store.get(self._raw(data)).content + " again")

    @precondition(lambda self: self.expected)
    @rule(data=st.data(), words=SIZES)
    def update_content(self, data: st.DataObject, words: int) -> None:
        self.do_update(self._raw(data), text(self.seed + 7, words), None, None)

    @precondition(lambda self: self.store.ids())
    @rule(data=st.data(), word=st.sampled_from(_WORDS), tag=st.sampled_from(["a", "c", "d"]))
    def update_summary_and_tags(self, data: st.DataObject, word: str, tag: str) -> None:
        # Any item, a summary node included: its summary is then the agent's text.
        self.do_update(self._any(data), None, "rewritten " + word, [tag])

    @rule(usage=st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.6, 0.7, 1.0]))
    def compact(self, usage: float) -> None:
        self.do_compact(usage)

    @rule(
        budget=st.sampled_from([None, 1_000, 2_000, 6_000, 8_000, 20_000]),
        max_items=st.sampled_from([None, 10, 40, 100_000]),
        max_archive=st.sampled_from([None, 1_000, 50_000_000]),
    )
    def configure(self, budget: int | None, max_items: int | None, max_archive: int | None) -> None:
        self.store.configure(token_budget=budget, max_items=max_items, max_archive_tokens=max_archive)

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        self.store.restore(self._raw(data))

    @precondition(lambda self: self.expected)
    @rule(data=st.data(), on=st.booleans())
    def pin(self, data: st.DataObject, on: bool) -> None:
        item_id = self._raw(data)
        if on:
            self.store.pin(item_id)
        else:
            self.store.unpin(item_id)

    @rule(data=st.data())
    def dissolve(self, data: st.DataObject) -> None:
        roots = self.store.roots()
        if roots:
            self.do_dissolve(roots[data.draw(st.integers(0, len(roots) - 1))].id)

    @precondition(lambda self: self.expected)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        self.do_forget(self._raw(data))

    @rule(seconds=st.sampled_from([1.0, 600.0, 7_200.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # --- invariants -------------------------------------------------------------------------
    @invariant()
    def nothing_is_lost(self) -> None:
        s = self.store
        for item_id, content in self.expected.items():
            assert s.get(item_id).content == content
        assert {i for i in s.ids() if s.get(i).depth == 0} == set(self.expected)

    @invariant()
    def within_budget(self) -> None:
        s = self.store
        assert s.tokens_used <= s.budget or s.pinned_tokens > s.budget, (s.tokens_used, s.budget, s.pinned_tokens)
        assert s.tokens_used >= 0

    @invariant()
    def pinned_count_agrees_with_a_scan(self) -> None:
        s = self.store
        active = [s.get(i) for i in s.ids() if s.get(i).tier == "active"]
        assert s.status().pinned_items == sum(1 for it in active if it.pinned)

    @invariant()
    def levels_never_mix(self) -> None:
        s = self.store
        for item_id in s.ids():
            node = s.get(item_id)
            for child_id in node.children:
                try:
                    child = s.get(child_id)
                except Exception:
                    continue  # forgotten: recorded in gone_children
                assert child.depth == node.depth - 1, (node.id, node.depth, child.id, child.depth)

    @invariant()
    def lineage_is_closed(self) -> None:
        """After every step, whatever the tiers of the roots: everything stored and not forgotten
        is reachable by expand from what a reader starts at: the active tier, the roots tree()
        lists (archived ones too, when the budget was smaller than the summaries), and the
        uncovered archive (raw items no summary covers yet: archived since the last
        condensation, or freed by a dissolve). A parent link to a node that is gone, or a
        covered item whose summaries lead to no root, breaks it."""
        s = self.store
        starts = reachable(s) | covered_by(s, s.roots()) | uncovered_raw(s)
        lost = set(self.expected) - starts
        assert not lost, sorted(lost)[:5]

    @invariant()
    def derived_structures_match_the_items(self) -> None:
        assert kept(self.store) == derived(self.store)

    def teardown(self) -> None:
        try:
            self.store.snapshot()
            reloaded = Store(state_dir=self.dir / "state", clock=self.clock)
            assert kept(reloaded) == derived(reloaded) == derived(self.store)
            reloaded.close()
            self.store.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- long seeded walks ------------------------------------------------------------------
    def random_step(self, rng: random.Random) -> str:
        """One action of the whole write API, as the random walk of test_derived chose them."""
        s = self.store
        ids = sorted(s.ids())
        pick = rng.choice(ids) if ids else None
        nodes = [i for i in ids if s.get(i).depth]
        actions = ["store"] * 3 + ["compact"] * 2 + ["bulk", "dup", "update", "pin", "unpin", "restore", "forget"]
        action = rng.choice([*actions, "dissolve", "budget", "get"])
        self.clock.advance(rng.uniform(1, 3_000))
        if action == "store":
            self.do_store(
                worded(rng.randrange(1 << 30)),
                summary=rng.choice([None, "short summary " + rng.choice(_WORDS)]),
                tags=rng.sample(["a", "b", "c"], rng.randint(0, 2)),
                importance=rng.randint(1, 10),
                pinned=rng.random() < 0.1,
                scope=rng.choice([None, None, "global", "/p/other"]),
            )
        elif action == "bulk":
            self.do_bulk([worded(rng.randrange(1 << 30)) for _ in range(rng.randint(1, 6))], ["b"])
        elif action == "dup" and pick:
            # Of an active item when there is one: only those are checked for near-duplicates.
            leaves = [i for i in ids if s.get(i).tier == "active" and not s.get(i).depth]
            self.do_store(s.get(rng.choice(leaves) if leaves else pick).content + " again")
        elif action == "update" and pick:
            self.do_update(pick, None, "rewritten " + rng.choice(_WORDS), [rng.choice(["a", "c", "d"])])
        elif action in ("pin", "unpin", "restore", "get") and pick:
            getattr(s, action)(pick)
        elif action == "forget" and pick:
            self.do_forget(pick)  # any item: forgetting a summary node dissolves it
        elif action == "dissolve" and nodes:
            self.do_dissolve(rng.choice(nodes))  # a covered node is refused: an error step
        elif action == "compact":
            self.do_compact(rng.choice([0.0, 0.3, 0.7]))
        elif action == "budget":
            s.configure(token_budget=rng.randint(300, 6_000))  # under 1,000 is refused: an error step
        return action

    def check_all(self) -> None:
        self.nothing_is_lost()
        self.within_budget()
        self.pinned_count_agrees_with_a_scan()
        self.levels_never_mix()
        self.lineage_is_closed()
        self.derived_structures_match_the_items()


Memory.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestMemory = pytest.mark.slow(Memory.TestCase)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_long_walks_reach_deep_nodes_pins_and_duplicates(seed: int):
    rng = random.Random(seed)
    machine = Memory()
    machine.store.configure(token_budget=4_000)
    done: list[str] = []
    seen: dict[str, int] = {}
    try:
        for _ in range(220):
            try:
                done.append(machine.random_step(rng))
            except CompactorError:
                done.append("error")
            machine.check_all()
            d = derived(machine.store)
            for key in ("pinned", "active_nodes", "dup_hints", "uncovered"):
                seen[key] = max(seen.get(key, 0), len(d[key]))
            # Any node: a deep one is active only while the budget holds it (levels no longer
            # mix, so deep nodes are rarer in a short walk).
            seen["depth"] = max([seen.get("depth", 0)] + [it.depth for it in machine.store._s.items.values()])
        # The walk reached the states worth checking: pins, duplicates, nodes of depth 2 and more.
        assert min(seen.values()) >= 1 and seen["depth"] >= 2, (seen, sorted(set(done)))
    finally:
        machine.teardown()
