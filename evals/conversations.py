"""Questions in plain English about long conversations (ISSUE 40): does a question about what one
of two friends said, asked months of chats later, find the turn that answers it?

The conversations (evals/data/conversations/*.json) were written for this evaluation: two people
chatting over ten sessions, ~220 turns, and 50 questions each, every question labelled with the
turns that hold its answer ("single": one turn; "multi": two or three; "temporal": when something
happened; "inference": what the turns imply). Each conversation's turns are stored in order, one
item each, in a Store of its own (in process, as `evals.replay --fast`), as "Speaker: text"
(`--shape dated` puts the session's date first, `bare` stores the text alone); then every question
is asked. A question's rank is that of its best-placed evidence turn. Scores: recall@5 and MRR over
the first QUERY_LIMIT results, per kind and overall.

The halves: a conversation whose file number is odd is tuning, even is test.

    python -m evals.conversations [--half tuning|test|all] [--set NAME=VALUE] [--shape said|dated|bare]
                                  [--baseline compactor|textbook|plain] [--budget TOKENS] [--misses N]

`--baseline textbook` scores a textbook BM25 (Okapi, Snowball stems, stop words) on the same turns,
`plain` a BM25 over lowercased words alone: the lexical baselines of issue 40's table.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compactor.store import Store
from compactor.store.tuning import Tuning
from evals.questions import score, textbook_ranker
from evals.replay import GENEROUS_BUDGET, QUERY_LIMIT, tuning_of

DATA = Path(__file__).parent / "data" / "conversations"
KINDS = ("single", "multi", "temporal", "inference")
SHAPES = ("said", "dated", "bare")
BASELINES = ("compactor", "textbook", "plain")
_NUMBER = re.compile(r"(\d+)")


@dataclass(frozen=True)
class Turn:
    id: str
    speaker: str
    date: str
    text: str


@dataclass(frozen=True)
class Asked:
    text: str
    evidence: frozenset[str]
    kind: str


@dataclass(frozen=True)
class Conversation:
    name: str
    turns: tuple[Turn, ...]
    questions: tuple[Asked, ...]


def load(path: Path) -> Conversation:
    """One conversation file; a question whose evidence names no turn is a broken file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    turns = tuple(
        Turn(t["id"], t["speaker"], session["date"], t["text"])
        for session in data["sessions"]
        for t in session["turns"]
    )
    ids = {t.id for t in turns}
    questions = tuple(Asked(q["q"], frozenset(q["evidence"]), q["kind"]) for q in data["questions"])
    for q in questions:
        if not q.evidence or not q.evidence <= ids:
            raise ValueError(f"{path.name}: {q.text!r} names evidence {sorted(q.evidence - ids)} that no turn has")
    return Conversation(path.stem, turns, questions)


def half_of(name: str) -> str:
    """'tuning' for an odd file number, 'test' for an even one."""
    match = _NUMBER.search(name)
    return "tuning" if match is None or int(match.group(1)) % 2 == 1 else "test"


def load_half(half: str, folder: Path = DATA) -> list[Conversation]:
    return [load(p) for p in sorted(folder.glob("*.json")) if half in ("all", half_of(p.stem))]


def shaped(turn: Turn, shape: str) -> str:
    """What is stored of a turn."""
    if shape == "bare":
        return turn.text
    said = f"{turn.speaker}: {turn.text}"
    return f"[{turn.date}] {said}" if shape == "dated" else said


def _rank(found: Sequence[str], evidence: frozenset[str]) -> int | None:
    return next((i + 1 for i, turn_id in enumerate(found) if turn_id in evidence), None)


def ask(
    conv: Conversation, shape: str = "said", tuning: Tuning | None = None, budget: int = GENEROUS_BUDGET
) -> list[tuple[Asked, list[str]]]:
    """Each question of `conv` with the turn ids compactor returns for it, best first."""
    store = Store(budget=budget, tuning=tuning or Tuning())
    turn_of: dict[str, str] = {}
    for turn in conv.turns:
        turn_of[store.store(shaped(turn, shape)).item.id] = turn.id
    return [
        (q, [turn_of.get(h.item.id, "") for h in store.query(query=q.text, limit=QUERY_LIMIT)]) for q in conv.questions
    ]


def ask_baseline(conv: Conversation, shape: str = "said", stemmed: bool = True) -> list[tuple[Asked, list[str]]]:
    """As `ask`, of the textbook BM25 (`stemmed`) or the plain one."""
    top = textbook_ranker([shaped(t, shape) for t in conv.turns], stemmed=stemmed)
    return [(q, [conv.turns[i].id for i in top(q.text)]) for q in conv.questions]


def run(
    convs: Sequence[Conversation],
    shape: str = "said",
    baseline: str = "compactor",
    tuning: Tuning | None = None,
    budget: int = GENEROUS_BUDGET,
) -> tuple[dict[str, tuple[float, float, int]], list[tuple[str, Asked, list[str]]]]:
    """Scores by kind and "overall", and every (conversation, question, turns found)."""
    answered: list[tuple[str, Asked, list[str]]] = []
    for conv in convs:
        if baseline == "compactor":
            got = ask(conv, shape, tuning, budget)
        else:
            got = ask_baseline(conv, shape, stemmed=baseline == "textbook")
        answered += [(conv.name, q, found) for q, found in got]
    ranks: dict[str, list[int | None]] = {k: [] for k in (*KINDS, "overall")}
    for _name, q, found in answered:
        rank = _rank(found, q.evidence)
        ranks.setdefault(q.kind, []).append(rank)
        ranks["overall"].append(rank)
    return {k: (*score(v), len(v)) for k, v in ranks.items() if v}, answered


def _print_misses(convs: Sequence[Conversation], answered: Sequence[tuple[str, Asked, list[str]]], n: int) -> None:
    text = {(c.name, t.id): t for c in convs for t in c.turns}
    misses = [(name, q, found) for name, q, found in answered if (_rank(found, q.evidence) or 99) > 1]
    for name, q, found in misses[:n]:
        print(f"\n{name} [{q.kind}] {q.text}  rank {_rank(found, q.evidence)}")
        for turn_id in sorted(q.evidence):
            print(f"   want {turn_id}: {text[name, turn_id].text[:150]}")
        for turn_id in found[:2]:
            if turn_id:
                print(f"   got  {turn_id}: {text[name, turn_id].text[:150]}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--half", default="tuning", choices=["tuning", "test", "all"])
    p.add_argument("--data", type=Path, default=DATA, help="a folder of conversation files")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a knob")
    p.add_argument("--shape", default="said", choices=SHAPES, help="what is stored of a turn")
    p.add_argument("--baseline", default="compactor", choices=BASELINES)
    p.add_argument("--budget", type=int, default=GENEROUS_BUDGET, help="the Store's token budget (default: none)")
    p.add_argument("--misses", type=int, default=0, metavar="N", help="print the first N questions not answered first")
    a = p.parse_args(argv)
    tuning = tuning_of(p, a.set)
    started = time.perf_counter()
    convs = load_half(a.half, a.data)
    if not convs:
        p.error(f"no conversation of the {a.half} half in {a.data}")
    result, answered = run(convs, a.shape, a.baseline, tuning, a.budget)
    cells = "  ".join(f"{k} recall@5 {r:.3f} MRR@10 {m:.3f} ({n})" for k, (r, m, n) in result.items())
    print(f"{a.half} ({a.baseline}, {len(convs)} conversations): {cells}  ({time.perf_counter() - started:.0f} s)")
    if a.misses:
        _print_misses(convs, answered, a.misses)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
