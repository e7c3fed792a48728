"""Natural-language questions about earlier notes (ISSUE 40): does a question asked in plain
English, in other words than the note it is after, find that note?

For each trajectory of the half, a Store (in process, as `evals.replay --fast`) holds its events,
stored as evals.replay stores them, and is asked at the end, as an agent asks about what it did
many turns before. Two kinds of question, each in prose only (code spans, paths, dotted names and
identifiers taken out: an agent asking in its own words names the matter, not the symbol):

- "refers back": the agent's own thought right after a command's result is its reading of that
  result ("the test still fails because the alias is reused"). Up to PER_TRAJ such thoughts
  (evenly spaced, at least MIN_WORDS content words in their first sentences) are left out of the
  store and asked; the answer is the result before them (an `observation` or `error`).
- "reworded": a note the agent stored (a thought: a decision or a finding; or an error) asked
  about in other words: a question frame of English function words ("what did we find about"),
  then REWORDED_WORDS of its first sentences' content words (evenly spread), each of five letters or more swapped for
  the corpus's most frequent other word sharing all but its last three letters (at least four):
  "failing" for "failed", "configuration" for "configured". The forms come from what agents
  wrote, not from a stemmer's rules.

An item with the same content as the answer counts as the answer. Scores: recall@5 and MRR over
the first QUERY_LIMIT results, per kind and overall.

    python -m evals.questions [--half tuning|test|all] [--limit-trajs N] [--set NAME=VALUE] [--textbook]
                              [--as-written] [--budget TOKENS]

`--as-written` asks the same questions with their words as the agent wrote them: case kept, and
acronyms, numbers and hyphenated words too ("The CI run failed on the 2nd try"), as people ask.
`--budget` gives the Store a token budget that forces compaction (default: none).

`--textbook` scores a textbook BM25 (Okapi, Snowball stems, stop words) on the same questions:
the lexical baseline compactor is to stay above.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from compactor.search.analyze import QUERY_STOPWORDS
from compactor.store import Store
from compactor.store.tuning import Tuning
from evals.halves import half_of
from evals.replay import GENEROUS_BUDGET, QUERY_LIMIT, RECALL_AT, _store_arguments, tuning_of
from evals.revisits import Event, default_corpus, group_trajectories, load_events

KINDS = ("refers back", "reworded")
PER_TRAJ = 8
MIN_WORDS = 5
# Words of a question at most: the first sentences of a thought, not its whole plan.
MAX_WORDS = 24
# Content words of a reworded question: a question names a few of the note's words, not all.
REWORDED_WORDS = 5
_FRAMES = {
    "thought": ("what did we find about", "what did we decide on", "why did we say that"),
    "error": ("why did we get the error where", "what went wrong when", "what was the failure about"),
}
_FENCED = re.compile(r"```.*?(```|$)", re.S)
_SPAN = re.compile(r"`[^`\n]*`")
_SENTENCE_END = re.compile(r"(?<=[.!?:])\s")
# A word in prose: letters, an apostrophe inside; anything else (paths, calls, snake_case,
# dotted names, numbers, camelCase) is a symbol, left out.
_PROSE_WORD = re.compile(r"[A-Za-z][a-z]*(?:'[a-z]+)?")
# The same `--as-written`: also an acronym, a number (a year, "3rd", "1990s") and a hyphenated
# word, as people ask ("why did CI fail on the 2nd run of the follow-up"); camelCase stays a symbol.
_WRITTEN_WORD = re.compile(
    r"[A-Za-z][a-z]*(?:'[a-z]+)?|[A-Z]{2,}s?|\d+(?:st|nd|rd|th|s)?|[A-Za-z][a-z]*(?:-[A-Za-z][a-z]*)+"
)
_WORD = re.compile(r"[a-z]+")
_ERROR_LINE = re.compile(r"(Error|Exception|FAILED|error)\b:?")
# The agent harness's own complaints, kept as errors in the corpus: not the agent's matter.
_HARNESS = ("Please always provide", "The last command", "Your last command")


@dataclass(frozen=True)
class Question:
    kind: str
    text: str
    asked_seq: int  # the thought left out of the store ("refers back"), else -1
    answer_seq: int


def prose(text: str, as_written: bool = False) -> list[str]:
    """The words of `text`'s prose, lowercase (else `as_written`, acronyms and numbers kept), in
    order: its first sentences, code and symbols taken out, at most MAX_WORDS."""
    text = _SPAN.sub(" ", _FENCED.sub(" ", text))
    out: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        for raw in sentence.split():
            token = raw.strip(",.;:!?()\"'[]")
            if as_written and _WRITTEN_WORD.fullmatch(token):
                out.append(token)
            elif _PROSE_WORD.fullmatch(token):
                out.append(token.lower())
        if len(out) >= MAX_WORDS // 2:
            break
    return out[:MAX_WORDS]


def content_words(words: Sequence[str]) -> list[str]:
    return [w for w in words if w.lower() not in QUERY_STOPWORDS and len(w) > 2]


def other_form(word: str, frequency: Counter[str], avoid: set[str]) -> str:
    """The corpus's most frequent other word sharing `word`'s letters but its last three (at
    least four), within four letters of its length; `word` itself when there is none."""
    prefix = word[: max(4, len(word) - 3)]
    best = max(
        (
            (n, w)
            for w, n in frequency.items()
            if w != word and w.startswith(prefix) and abs(len(w) - len(word)) <= 4 and w not in avoid
        ),
        default=None,
    )
    return best[1] if best is not None else word


def _spread(items: Sequence[Event], n: int) -> list[Event]:
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def _frame(kind: str, seq: int) -> str:
    frames = _FRAMES[kind]
    return frames[hashlib.sha256(str(seq).encode()).digest()[0] % len(frames)]


def make_questions(
    events: Sequence[Event], forms: Callable[[str, set[str]], str], as_written: bool = False
) -> list[Question]:
    """The questions of one trajectory (see the module doc); `forms(word, avoid)` gives a word's
    other form; `as_written` keeps the words' case, acronyms and numbers (`prose`). Which events
    are asked about does not depend on it."""
    out: list[Question] = []
    before: Event | None = None
    back: list[tuple[Event, Event]] = []
    for ev in events:
        if (
            ev.kind == "thought"
            and before is not None
            and before.kind in ("observation", "error")
            and before.step == ev.step - 1 > 0
            and len(content_words(prose(ev.content))) >= MIN_WORDS
        ):
            back.append((ev, before))
        before = ev
    for thought, result in _spread_pairs(back, PER_TRAJ):
        out.append(Question("refers back", " ".join(prose(thought.content, as_written)), thought.seq, result.seq))
    notes = [ev for ev in events if len(content_words(prose(_note_text(ev)))) >= MIN_WORDS]
    asked = {q.asked_seq for q in out}
    for note in _spread([n for n in notes if n.seq not in asked], PER_TRAJ):
        said = content_words(prose(_note_text(note), as_written))
        written = dict(zip(map(str.lower, said), said, strict=True))  # the last way each word was written
        words = _spread_words(list(dict.fromkeys(w.lower() for w in said)), REWORDED_WORDS)
        held = set(_WORD.findall(note.content.lower()))
        # An acronym, a number or a hyphenated word is asked as written, not swapped.
        changed = [forms(w, held) if len(w) >= 5 and _PROSE_WORD.fullmatch(written[w]) else w for w in words]
        changed = [written[w] if c == w else c for w, c in zip(words, changed, strict=True)]
        out.append(Question("reworded", f"{_frame(note.kind, note.seq)} {' '.join(changed)}", -1, note.seq))
    return out


def _spread_words(words: list[str], n: int) -> list[str]:
    if len(words) <= n:
        return words
    return [words[round(i * (len(words) - 1) / (n - 1))] for i in range(n)]


def _note_text(ev: Event) -> str:
    """What a note says: a thought's prose, an error's last error line (a traceback's frames
    are not prose); nothing for other kinds or for the harness's complaints."""
    if ev.kind == "thought":
        return ev.content
    if ev.kind != "error" or ev.content.startswith(_HARNESS):
        return ""
    lines = [line for line in ev.content.splitlines() if _ERROR_LINE.search(line)]
    return lines[-1] if lines else ""


def _spread_pairs(pairs: Sequence[tuple[Event, Event]], n: int) -> list[tuple[Event, Event]]:
    if len(pairs) <= n:
        return list(pairs)
    return [pairs[round(i * (len(pairs) - 1) / (n - 1))] for i in range(n)]


def ask(
    events: Sequence[Event],
    questions: Sequence[Question],
    tuning: Tuning | None = None,
    budget: int = GENEROUS_BUDGET,
) -> list[tuple[str, int | None]]:
    """(kind, rank from 1 or None) of each question, asked of a Store of `budget` tokens holding
    `events` but the thoughts the questions are, tuned with `tuning` (the defaults unless given)."""
    store = Store(budget=budget, tuning=tuning or Tuning())
    left_out = {q.asked_seq for q in questions}
    content_of: dict[str, str] = {}
    answer_text = {ev.seq: ev.content for ev in events}
    for ev in events:
        if ev.seq in left_out:
            continue
        args = _store_arguments(ev)
        stored = store.store(args["content"], summary=args["summary"], tags=args["tags"], importance=args["importance"])
        content_of[stored.item.id] = ev.content
    out: list[tuple[str, int | None]] = []
    for q in questions:
        want = answer_text[q.answer_seq]
        hits = store.query(query=q.text, limit=QUERY_LIMIT)
        rank = next((i + 1 for i, h in enumerate(hits) if content_of.get(h.item.id) == want), None)
        out.append((q.kind, rank))
    return out


_TEXTBOOK_WORD = re.compile(r"[a-z0-9]+")


def textbook_ranker(texts: Sequence[str], stemmed: bool = True) -> Callable[[str], list[int]]:
    """A textbook BM25 over `texts`: Okapi (k1 1.2, b 0.75) over each text's lowercased words and
    numbers, Snowball-stemmed with compactor's query stop words left out of both (`stemmed`), or
    the words alone (a plain BM25). Returns a function from a question to the indexes of its
    QUERY_LIMIT best texts, best first (the lexical baselines of issue 40's table)."""
    import Stemmer
    from rank_bm25 import BM25Okapi

    stem = Stemmer.Stemmer("english").stemWord

    def terms(text: str) -> list[str]:
        words = _TEXTBOOK_WORD.findall(text.lower())
        return [stem(w) for w in words if w not in QUERY_STOPWORDS] if stemmed else words

    bm25 = BM25Okapi([terms(t) or ["-"] for t in texts], k1=1.2, b=0.75)

    def top(question: str) -> list[int]:
        scores = bm25.get_scores(terms(question))
        return sorted(range(len(texts)), key=lambda i: (-scores[i], i))[:QUERY_LIMIT]

    return top


def ask_textbook(events: Sequence[Event], questions: Sequence[Question]) -> list[tuple[str, int | None]]:
    """As `ask`, of the textbook BM25 (`textbook_ranker`) instead of compactor."""
    left_out = {q.asked_seq for q in questions}
    docs = [ev for ev in events if ev.seq not in left_out]
    top = textbook_ranker([ev.content for ev in docs])
    answer_text = {ev.seq: ev.content for ev in events}
    out: list[tuple[str, int | None]] = []
    for q in questions:
        want = answer_text[q.answer_seq]
        out.append((q.kind, next((r + 1 for r, i in enumerate(top(q.text)) if docs[i].content == want), None)))
    return out


def score(ranks: Sequence[int | None]) -> tuple[float, float]:
    """(recall@RECALL_AT, MRR over QUERY_LIMIT)."""
    if not ranks:
        return 0.0, 0.0
    recall = sum(r is not None and r <= RECALL_AT for r in ranks) / len(ranks)
    mrr = sum(1.0 / r for r in ranks if r is not None and r <= QUERY_LIMIT) / len(ranks)
    return recall, mrr


def run(
    events: Sequence[Event],
    half: str,
    limit_trajs: int | None = None,
    tuning: Tuning | None = None,
    textbook: bool = False,
    budget: int = GENEROUS_BUDGET,
    as_written: bool = False,
) -> dict[str, tuple[float, float, int]]:
    """Scores by kind and "overall" for the trajectories of `half` ("all" for every one), of
    compactor or (`textbook`) of the textbook BM25 baseline."""
    frequency = Counter(w for ev in events for w in _WORD.findall(ev.content.lower()) if len(w) >= 4)
    memo: dict[tuple[str, frozenset[str]], str] = {}

    def forms(word: str, avoid: set[str]) -> str:
        key = (word, frozenset(avoid & {w for w in frequency if w.startswith(word[:4])}))
        if key not in memo:
            memo[key] = other_form(word, frequency, avoid)
        return memo[key]

    groups = [(t, e) for t, e in sorted(group_trajectories(events).items()) if half in ("all", half_of(t))]
    ranks: dict[str, list[int | None]] = {k: [] for k in (*KINDS, "overall")}
    for _traj, evs in groups[:limit_trajs]:
        asked = make_questions(evs, forms, as_written)
        for kind, rank in ask_textbook(evs, asked) if textbook else ask(evs, asked, tuning, budget):
            ranks[kind].append(rank)
            ranks["overall"].append(rank)
    return {k: (*score(v), len(v)) for k, v in ranks.items()}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--half", default="tuning", choices=["tuning", "test", "all"])
    p.add_argument("--limit-trajs", type=int, default=None)
    p.add_argument("--corpus", default=None)
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override a knob")
    p.add_argument("--textbook", action="store_true", help="score the textbook BM25 baseline instead")
    p.add_argument("--as-written", action="store_true", help="questions keep case, acronyms and numbers")
    p.add_argument("--budget", type=int, default=GENEROUS_BUDGET, help="the Store's token budget (default: none)")
    a = p.parse_args(argv)
    tuning = tuning_of(p, a.set)
    started = time.perf_counter()
    events = load_events(a.corpus or default_corpus())
    result = run(events, a.half, a.limit_trajs, tuning, textbook=a.textbook, budget=a.budget, as_written=a.as_written)
    cells = "  ".join(f"{k} recall@5 {r:.3f} MRR@10 {m:.3f} ({n})" for k, (r, m, n) in result.items())
    who = " (textbook BM25)" if a.textbook else ""
    print(f"{a.half}{who}: {cells}  ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
