"""Known-item search in other word forms: does a query find the note it describes when its
words are in other English forms than the note's ("failing tests" for "the test fails")?

For each trajectory of the half: a Store (in process, as bench.replay_fast) holds all its
events, stored as bench.replay stores them. Each of up to PER_TRAJ of its thoughts (evenly
spaced; a thought is the agent's own prose) gives a query of QUERY_WORDS of its words: the
words it holds on their own (`analyze.query_words`) of four letters or more, spread over the
thought. The query is asked twice: in the thought's words ("exact"), and with every word
that has one in another form ("inflected"): a form that `analyze.inflections` gives, that the
thought does not hold, and that some event of the corpus holds as a word, so it is English an
agent writes. A query with fewer than two words changed is left out. Score: reciprocal rank of
the thought among the first QUERY_LIMIT results (0 if absent), and the share found first.

The forms come from the rules the search expands queries with, so the inflected queries
measure how much of what those rules cover the search gets back, not how complete they are.

    python -m bench.inflections [--half tuning|test|all] [--set INFLECTION_WEIGHT=0]
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from typing import TypeVar

from bench.halves import half_of
from bench.replay import GENEROUS_BUDGET, QUERY_LIMIT, _store_arguments
from bench.revisits import default_corpus, group_trajectories, load_events
from compactor import constants as C
from compactor.analyze import inflections, query_words
from compactor.store import Store

PER_TRAJ = 10
QUERY_WORDS = 4
MIN_CHANGED = 2
_WORD = re.compile(r"[a-z]+")
T = TypeVar("T")


def _spread(items: Sequence[T], n: int) -> list[T]:
    """`n` of `items` evenly spaced, first and last included when n > 1."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def make_queries(thought: str, english: set[str]) -> tuple[str, str] | None:
    """(exact, inflected) queries for one thought, or None when fewer than MIN_CHANGED of its
    words have another form that is English."""
    words = [w for w in query_words(thought) if len(w) >= 4]
    chosen = _spread(words, QUERY_WORDS)
    if len(chosen) < QUERY_WORDS:
        return None
    held = set(_WORD.findall(thought.lower()))
    changed = []
    for word in chosen:
        other = [f for f in inflections(word) if f in english and f not in held]
        changed.append(other[0] if other else word)
    if sum(a != b for a, b in zip(chosen, changed, strict=True)) < MIN_CHANGED:
        return None
    return " ".join(chosen), " ".join(changed)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--half", default="tuning", choices=["tuning", "test", "all"])
    p.add_argument("--set", action="append", default=[], help="NAME=VALUE: override a constant")
    a = p.parse_args()
    for assignment in a.set:
        name, _, value = assignment.partition("=")
        setattr(C, name, type(getattr(C, name))(float(value)))
    events = load_events(default_corpus())
    english: set[str] = set()
    for ev in events:
        english.update(_WORD.findall(ev.content.lower()))
    groups = [(t, e) for t, e in sorted(group_trajectories(events).items()) if a.half == "all" or half_of(t) == a.half]
    started = time.perf_counter()
    rr: dict[str, list[float]] = {"exact": [], "inflected": []}
    for _traj, evs in groups:
        store = Store(budget=GENEROUS_BUDGET)
        id_of: dict[int, str] = {}
        for ev in evs:
            args = _store_arguments(ev)
            stored = store.store(
                args["content"], summary=args["summary"], tags=args["tags"], importance=args["importance"]
            )
            id_of[ev.seq] = stored.item.id
        thoughts = [ev for ev in evs if ev.kind == "thought"]
        for ev in dict.fromkeys(_spread(thoughts, PER_TRAJ)):
            pair = make_queries(ev.content, english)
            if pair is None:
                continue
            for name, query in zip(("exact", "inflected"), pair, strict=True):
                ids = [h.item.id for h in store.query(query=query, limit=QUERY_LIMIT)]
                want = id_of[ev.seq]
                rr[name].append(1.0 / (ids.index(want) + 1) if want in ids else 0.0)
    cells = "  ".join(
        f"{name} MRR {sum(v) / len(v):.3f} first {sum(x == 1.0 for x in v) / len(v):.3f}" for name, v in rr.items() if v
    )
    n = len(rr["exact"])
    print(f"{a.half}: {cells}  ({n} queries, {len(groups)} trajectories, {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
