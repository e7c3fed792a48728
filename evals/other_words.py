"""Known-item search in other words: does a query find the note it describes when some of its
words are in other English forms ("failing tests" for "the test fails", "deploy" for
"deployment") or are synonyms ("db" for "database") of the note's?

For each trajectory of the half: a Store (in process, as `evals.replay --fast`) holds all its
events, stored as evals.replay stores them. Each of up to PER_TRAJ of its thoughts (evenly
spaced; a thought is the agent's own prose) gives QUERY_WORDS of its words: the words of four
letters or more it holds on their own (`analyze.query_words`), spread over the thought. Asked:

- "exact": those words; "inflected": each word that has one in another form that
  `wordforms.inflections` gives, that the thought does not hold, and that some event of the
  corpus holds as a word (English an agent writes); at least MIN_CHANGED changed.
- "derived exact" / "derived": the same with each word that has one in a derived noun or verb
  (`wordforms.derivations`: "deployment" for "deploy"), when at least one has.
- "abbreviated exact" / "abbreviated": the same with synonyms (`wordforms.synonyms`), when one of
  the words has one (else the thought's first word with one takes the last place); and "short
  exact" / "short abbreviated": that word and one other, a two-word query.

Score: reciprocal rank of the thought among the first QUERY_LIMIT results (0 if absent), and
the share found first. The other words come from the tables the search expands queries with,
so this measures how much of what those cover the search gets back, not how much they cover.

    python -m evals.other_words [--half tuning|test|all] [--set OTHER_WORD_WEIGHT=0]
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from compactor.search.analyze import query_words
from compactor.search.wordforms import derivations, inflections, synonyms
from compactor.store import Store
from evals.halves import half_of
from evals.replay import GENEROUS_BUDGET, QUERY_LIMIT, _store_arguments, tuning_of
from evals.revisits import default_corpus, group_trajectories, load_events

CONDITIONS = (
    "exact",
    "inflected",
    "derived exact",
    "derived",
    "abbreviated exact",
    "abbreviated",
    "short exact",
    "short abbreviated",
)
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


def _changed(
    chosen: list[str], held: set[str], english: set[str], other_words: Callable[[str], Sequence[str]]
) -> list[str]:
    """Each chosen word, or the first of its other words that is English and not held."""
    out = []
    for word in chosen:
        other = [f for f in other_words(word) if f in english and f not in held]
        out.append(other[0] if other else word)
    return out


def make_queries(thought: str, english: set[str]) -> dict[str, str]:
    """Queries for one thought by condition: "exact" and "inflected" when at least MIN_CHANGED
    of its chosen words have another form that is English; "abbreviated" (its chosen words, one
    of them swapped for the thought's first word with a synonym if none has one, each with a
    synonym in its place) when one has. Empty when the thought has too few words."""
    words = [w for w in query_words(thought) if len(w) >= 4 and w.isalpha()]
    chosen = _spread(words, QUERY_WORDS)
    if len(chosen) < QUERY_WORDS:
        return {}
    held = set(_WORD.findall(thought.lower()))
    out: dict[str, str] = {}
    inflected = _changed(chosen, held, english, inflections)
    if sum(a != b for a, b in zip(chosen, inflected, strict=True)) >= MIN_CHANGED:
        out["exact"], out["inflected"] = " ".join(chosen), " ".join(inflected)
    derived = _changed(chosen, held, english, derivations)
    if derived != chosen:
        out["derived exact"], out["derived"] = " ".join(chosen), " ".join(derived)
    has_synonym = [w for w in query_words(thought) if any(s in english and s not in held for s in synonyms(w))]
    if has_synonym:
        with_one = chosen if set(chosen) & set(has_synonym) else [*chosen[:-1], has_synonym[0]]
        out["abbreviated exact"] = " ".join(with_one)
        out["abbreviated"] = " ".join(_changed(with_one, held, english, synonyms))
        # Two words, one with a synonym: a short query leans on each of its words.
        word = next(w for w in with_one if w in has_synonym)
        pair = [next(w for w in chosen if w != word), word]
        out["short exact"] = " ".join(pair)
        out["short abbreviated"] = " ".join(_changed(pair, held, english, synonyms))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--half", default="tuning", choices=["tuning", "test", "all"])
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a knob")
    a = p.parse_args()
    tuning = tuning_of(p, a.set)
    events = load_events(default_corpus())
    english: set[str] = set()
    for ev in events:
        english.update(_WORD.findall(ev.content.lower()))
    groups = [(t, e) for t, e in sorted(group_trajectories(events).items()) if a.half == "all" or half_of(t) == a.half]
    started = time.perf_counter()
    rr: dict[str, list[float]] = {name: [] for name in CONDITIONS}
    for _traj, evs in groups:
        store = Store(budget=GENEROUS_BUDGET, tuning=tuning)
        id_of: dict[int, str] = {}
        for ev in evs:
            args = _store_arguments(ev)
            stored = store.store(
                args["content"], summary=args["summary"], tags=args["tags"], importance=args["importance"]
            )
            id_of[ev.seq] = stored.item.id
        thoughts = [ev for ev in evs if ev.kind == "thought"]
        for ev in dict.fromkeys(_spread(thoughts, PER_TRAJ)):
            for name, query in make_queries(ev.content, english).items():
                ids = [h.item.id for h in store.query(query=query, limit=QUERY_LIMIT)]
                want = id_of[ev.seq]
                rr[name].append(1.0 / (ids.index(want) + 1) if want in ids else 0.0)
    cells = "  ".join(
        f"{name} MRR {sum(v) / len(v):.3f} first {sum(x == 1.0 for x in v) / len(v):.3f} ({len(v)})"
        for name, v in rr.items()
        if v
    )
    print(f"{a.half}: {cells}  ({len(groups)} trajectories, {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
