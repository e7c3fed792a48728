"""The knobs an evaluation may turn, as one value the Store is given (`Store(tuning=...)`).

A knob is a number next to the code it tunes (search/topk.py's BM25F weights, search/scoring.py's
rank multipliers, the view lifts and recall shares below). Code reads it from this value, never
from a module global copied at import, so an override reaches every use or is refused by name:
`Tuning().overridden({"SUMMARY_WEIGHT": "3"})` gives the value an evaluation passes to its Store,
and a name that tunes nothing is an error, not a silent no-op. The measurements behind each
default are in evals/KNOBS.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..search.scoring import RANK, Rank
from ..search.topk import WEIGHTS, Weights


@dataclass(frozen=True, slots=True)
class Tuning:
    """Every knob a `--set NAME=VALUE` may change, with its default."""

    bm25: Weights = field(default=WEIGHTS)
    rank: Rank = field(default=RANK)
    # A view of a file the query names ranks ahead of items that only mention it, further ahead
    # when it shows the lines asked for; bounded, so a far better text match wins (evals/KNOBS.md).
    view_path_lift: float = 3.0
    view_range_lift: float = 2.0
    # A view of the file that holds a symbol the query names (a grep's pattern, a `name`) ranks
    # ahead of the file's views that do not: they show what it asks for (evals/KNOBS.md).
    view_symbol_lift: float = 2.0
    # An older view whose lines a newer view also shows: ahead of mentions, behind the newer one.
    view_superseded_lift: float = 1.5
    # An edit in place (sed -i) says which lines changed, not what they hold: no lift.
    view_edit_lift: float = 1.0
    # A one-line item (a command stored alone) that another candidate opens with (its output,
    # stored with the `$ cmd` line) ranks behind it: the output answers a re-run (evals/KNOBS.md).
    echo_factor: float = 0.6
    # The earlier output of a command the query names as a line of its own (an output stored
    # with its `$ cmd` line): what a re-run goes back for, ahead of notes that talk about it.
    rerun_lift: float = 3.0
    # The same for a command a sentence of the query names as written ("Running python repro.py
    # again"), when a stored output opens with it: 1 on, 0 off (evals/KNOBS.md).
    rerun_in_prose: float = 1.0
    # A question in words (no path, identifier or code: `analyze.is_prose`) asks about a matter,
    # not about the last steps: the recency prior for it (evals/KNOBS.md; code lookups keep
    # RECENCY_PRIOR).
    prose_recency_prior: float = 0.0
    # For a question in words, a reply (words right after words that end in a question, same
    # project) is found by the question it answers: it gains that question's score times this
    # (evals/KNOBS.md; 1: the question's words count as the reply's own).
    reply_weight: float = 1.0
    # The questions among the query's best this many matches that lend their reply their score.
    reply_sources: float = 20.0
    # Shares of recall's cap: the task group, then open errors, then recent work of what is left,
    # then decisions of what is left after it (tuned on the resume evaluation's tuning half).
    recall_task_share: float = 0.5
    recall_errors_share: float = 0.15
    recall_recent_share: float = 0.8
    recall_decisions_share: float = 0.5

    def overridden(self, values: Mapping[str, str | float]) -> Tuning:
        """This tuning with knobs changed by name: a field (`view_path_lift`, `bm25.summary`) or
        the constant that sets its default (`VIEW_PATH_LIFT`, `SUMMARY_WEIGHT`). Raises ValueError
        naming the knobs there are for a name that is none of them, or a value that is no number."""
        out = self
        for name, value in values.items():
            path = _ALIASES.get(name.upper(), name.lower())
            group, _, leaf = path.rpartition(".")
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"{name}={value!r}: a knob takes a number") from None
            if group:
                sub = getattr(out, group, None)
                if sub is None or leaf not in {f.name for f in dataclasses.fields(sub)}:
                    raise ValueError(f"no knob named {name!r}; knobs: {', '.join(knob_names())}")
                out = dataclasses.replace(out, **{group: dataclasses.replace(sub, **{leaf: number})})
            elif leaf in _SCALARS:
                out = _replace(out, **{leaf: number})
            else:
                raise ValueError(f"no knob named {name!r}; knobs: {', '.join(knob_names())}")
        return out


# dataclasses.replace with a knob named at run time: its fields are all floats.
_replace: Callable[..., Tuning] = dataclasses.replace
_SCALARS = frozenset(f.name for f in dataclasses.fields(Tuning) if f.name not in ("bm25", "rank"))
# The module constants that set a default, by the name evaluations have always used.
_ALIASES = {
    "BM25_K1": "bm25.k1",
    "BM25_B": "bm25.b",
    "SUMMARY_WEIGHT": "bm25.summary",
    "TAG_WEIGHT": "bm25.tags",
    "SUMMARY_B": "bm25.summary_b",
    "TAG_B": "bm25.tags_b",
    "OTHER_WORD_WEIGHT": "bm25.other_word",
    "STEM_WEIGHT": "bm25.stem",
    "EXACT_WEIGHT": "bm25.exact",
    "RETENTION_WEIGHT": "rank.retention_weight",
    "PIN_BOOST": "rank.pin_boost",
    "ARCHIVED_RANK_FACTOR": "rank.archived_factor",
    "RECENCY_PRIOR": "rank.recency_prior",
    "RECENCY_HALF_LIFE_ITEMS": "rank.recency_half_life_items",
    **{name.upper(): name for name in _SCALARS},
}


def knob_names() -> list[str]:
    """Every name `overridden` takes, as the constants are written."""
    return sorted(_ALIASES)


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """`NAME=VALUE` strings (a command line's `--set`) as a mapping; ValueError for one without `=`."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"{pair!r}: expected NAME=VALUE")
        out[name.strip()] = value.strip()
    return out
