"""Retention: how much an item is worth keeping in the active budget right now."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from ..models import Item

W_IMPORTANCE: Final = 0.4
W_RECENCY: Final = 0.3
W_ACCESS: Final = 0.2
W_SIZE: Final = 0.1
# Errors are what an agent most often trips over twice; tool output is the easiest to re-run.
TYPE_MULTIPLIER: Final = {"error": 1.5, "decision": 1.3, "code": 1.2, "prose": 1.0, "tool_output": 0.7}
# Real half-lives (recency = 0.5 ** (age / half_life)), in seconds. An error is hot while the
# agent is fixing it (30 min); decisions and code stay relevant for a working day (6 h).
HALF_LIFE_S: Final = {
    "error": 30 * 60,
    "decision": 6 * 3600,
    "code": 6 * 3600,
    "prose": 2 * 3600,
    "tool_output": 15 * 60,
}
# access = min(ln(1 + n) / 5, 1): saturates at ~147 accesses, so a hot item cannot buy itself
# immortality.
ACCESS_LOG_DIVISOR: Final = 5.0
# size = ln(1 + tokens) / ln(1 + SIZE_SATURATION_TOKENS), capped at 1. On a log scale a
# 20-token note scores ~0.33 and a 4,000-token dump ~0.92, so the 0.1 weight is worth about one
# importance point between them: it matters without drowning importance.
SIZE_SATURATION_TOKENS: Final = 8_000
# Highest possible retention (importance 10, fresh, saturated access, tiny, error type), used to
# normalise retention into [0, 1] when it is mixed into search ranking.
MAX_RETENTION: Final = (W_IMPORTANCE + W_RECENCY + W_ACCESS) * max(TYPE_MULTIPLIER.values())
# Final score = bm25 * (1 + RETENTION_WEIGHT * retention01) * (PIN_BOOST if pinned). Relevance
# leads: retention can lift a result by at most 25% (and a pin by 15% more), enough to break
# near-ties toward fresher, more important items but never to bury the best text match.
RETENTION_WEIGHT: Final = 0.25
PIN_BOOST: Final = 1.15
# A plain query searches the archive too: an archived hit's score is multiplied by
# this, so of two equally relevant items the active one (the agent's current working set) ranks
# first, while an archived item that matches clearly better still outranks it. Bounded at
# 1 / 0.9 = 1.11x: a stronger preference (0.8) cost archived hits recall (evals/KNOBS.md).
ARCHIVED_RANK_FACTOR: Final = 0.9
# Bounded recency prior by position, not by clock (an agent stores a turn every few seconds; idle
# time would wrongly age): at most 1.5x, halving every 20 items, ~7 turns (evals/KNOBS.md).
RECENCY_PRIOR: Final = 0.5
RECENCY_HALF_LIFE_ITEMS: Final = 20

_LOG_SIZE_CAP = math.log1p(SIZE_SATURATION_TOKENS)


def recency(item: Item, now: float) -> float:
    """0.5 ** (age / half-life), age counted from the last access."""
    age = max(0.0, now - item.last_accessed_at)
    return float(0.5 ** (age / HALF_LIFE_S[item.content_type]))


def access(count: int) -> float:
    return min(math.log1p(max(count, 0)) / ACCESS_LOG_DIVISOR, 1.0)


def size(tokens: int) -> float:
    return min(math.log1p(max(tokens, 0)) / _LOG_SIZE_CAP, 1.0)


# Per content type: (multiplier, -ln 2 / half-life), so retention is one exp() and two log1p().
_PER_TYPE = {t: (TYPE_MULTIPLIER[t], -math.log(2.0) / HALF_LIFE_S[t]) for t in TYPE_MULTIPLIER}
_W_IMP = W_IMPORTANCE / 10.0
_W_ACC = W_ACCESS / ACCESS_LOG_DIVISOR
_W_SIZE = W_SIZE / _LOG_SIZE_CAP


def retention(item: Item, now: float) -> float:
    """TYPE_MULTIPLIER * (W_IMPORTANCE * importance/10 + W_RECENCY * recency + W_ACCESS * access
    - W_SIZE * size). Inlined: compaction scores every active item on each call."""
    mult, decay = _PER_TYPE[item.content_type]
    age = now - item.last_accessed_at
    rec = math.exp(decay * age) if age > 0.0 else 1.0
    count = item.access_count
    acc = min(math.log1p(count) * _W_ACC, W_ACCESS) if count > 0 else 0.0
    tokens = item.view_tokens
    bulk = min(math.log1p(tokens) * _W_SIZE, W_SIZE) if tokens > 0 else 0.0
    return (_W_IMP * item.importance + W_RECENCY * rec + acc - bulk) * mult


def retention01(item: Item, now: float) -> float:
    """Retention squeezed into [0, 1], for mixing into search ranking."""
    return min(max(retention(item, now) / MAX_RETENTION, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class Rank:
    """How retention, recency, pinning and the tier lift a relevance score: the numbers above,
    unless an evaluation overrides them (`compactor.store.tuning.Tuning`)."""

    retention_weight: float = RETENTION_WEIGHT
    pin_boost: float = PIN_BOOST
    archived_factor: float = ARCHIVED_RANK_FACTOR
    recency_prior: float = RECENCY_PRIOR
    recency_half_life_items: float = RECENCY_HALF_LIFE_ITEMS

    @property
    def max_factor(self) -> float:
        """The most these multipliers lift a score (the tier factor only lowers it)."""
        return (1.0 + self.retention_weight) * (1.0 + self.recency_prior) * self.pin_boost


RANK: Final = Rank()


def recency_prior(newer: int, rank: Rank = RANK) -> float:
    """1 + recency_prior * 0.5 ** (newer / recency_half_life_items), `newer` counting the items
    stored since: what an agent goes back for is mostly a few turns old."""
    return 1.0 + rank.recency_prior * float(0.5 ** (max(newer, 0) / rank.recency_half_life_items))


def rank_score(relevance: float, item: Item, now: float, newer: int | None = None, rank: Rank = RANK) -> float:
    """Relevance first; retention, the recency prior (when `newer`, the items stored since this
    one, is given), pinning and the tier are bounded multipliers on top of it."""
    score = relevance * (1.0 + rank.retention_weight * retention01(item, now))
    if newer is not None:
        score *= recency_prior(newer, rank)
    if item.tier == "archived":
        score *= rank.archived_factor
    return score * rank.pin_boost if item.pinned else score


MAX_RANK_FACTOR: Final = RANK.max_factor
