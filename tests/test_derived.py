"""Every structure the Store keeps beside its items (orders, tag sets, token totals, the sets of
pinned, uncovered, duplicate-hinted and active-node ids, the search and dedup indexes) is
maintained incrementally. After each step of a random walk over the whole write API they must
equal what the items alone say, and a reload from disk must rebuild exactly the same."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from compactor.errors import CompactorError
from compactor.store import Store, StoreInput, scope_key
from tests.conftest import FakeClock

_WORDS = ["auth", "token", "retry", "cache", "KeyError", "parse_config", "db/models.py", "deploy", "queue", "lock"]


_ACTIONS = ["store"] * 3 + ["compact"] * 2 + ["bulk", "dup", "update", "pin", "unpin", "restore", "forget"]
_ACTIONS += ["dissolve", "budget", "get"]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(_WORDS) + str(rng.randint(0, 6)) for _ in range(rng.randint(3, 60)))


def _derived(store: Store) -> dict[str, Any]:
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


def _kept(store: Store) -> dict[str, Any]:
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
        "deduped": set(s.dedup._keys),
    }


def _step(store: Store, rng: random.Random, clock: FakeClock) -> str:
    ids = store.ids()
    pick = rng.choice(ids) if ids else None
    nodes = [i for i in ids if store.get(i).depth]
    action = rng.choice(_ACTIONS)
    clock.advance(rng.uniform(1, 3_000))
    if action == "store":
        store.store(
            _text(rng),
            summary=rng.choice([None, "short summary " + rng.choice(_WORDS)]),
            tags=rng.sample(["a", "b", "c"], rng.randint(0, 2)),
            importance=rng.randint(1, 10),
            pinned=rng.random() < 0.1,
            scope=rng.choice([None, None, "global", "/p/other"]),
        )
    elif action == "bulk":
        store.bulk_store([StoreInput(_text(rng), tags=["b"]) for _ in range(rng.randint(1, 6))])
    elif action == "dup" and pick:
        store.store(store.get(pick).content + " again")
    elif action == "update" and pick:
        store.update(pick, summary="rewritten " + rng.choice(_WORDS), tags=[rng.choice(["a", "c", "d"])])
    elif action in ("pin", "unpin", "restore", "forget", "get") and pick:
        getattr(store, action)(pick)
    elif action == "dissolve" and nodes:
        store.dissolve(rng.choice(nodes))
    elif action == "compact":
        store.compact(rng.choice([0.0, 0.3, 0.7]))
    elif action == "budget":
        store.configure(token_budget=rng.randint(300, 6_000))
    return action


@pytest.mark.parametrize("seed", range(6))
def test_derived_structures_match_the_items_through_a_random_walk(seed: int, tmp_path: Path):
    rng = random.Random(seed)
    clock = FakeClock()
    store = Store(state_dir=tmp_path / "state", clock=clock)
    store.configure(token_budget=4_000)
    done: list[str] = []
    seen: dict[str, int] = {}
    for _ in range(220):
        try:
            done.append(_step(store, rng, clock))
        except CompactorError:
            done.append("error")
        derived = _derived(store)
        assert _kept(store) == derived, done[-5:]
        for key in ("pinned", "active_nodes", "dup_hints", "uncovered"):
            seen[key] = max(seen.get(key, 0), len(derived[key]))
        # Any node: a deep one is active only while the budget holds it (levels no longer mix,
        # so deep nodes are rarer in a short walk).
        seen["depth"] = max([seen.get("depth", 0)] + [it.depth for it in store._s.items.values()])
    # The walk reached the states worth checking: pins, duplicates, nodes of depth 2 and more.
    assert min(seen.values()) >= 1 and seen["depth"] >= 2, (seen, sorted(set(done)))
    store.snapshot()
    reloaded = Store(state_dir=tmp_path / "state", clock=clock)
    assert _kept(reloaded) == _derived(reloaded) == _derived(store)
