"""Retention: how much an item is worth keeping in the active budget right now."""

from __future__ import annotations

import math

from .. import constants as C
from ..models import Item

_LOG_SIZE_CAP = math.log1p(C.SIZE_SATURATION_TOKENS)


def recency(item: Item, now: float) -> float:
    """0.5 ** (age / half-life), age counted from the last access."""
    age = max(0.0, now - item.last_accessed_at)
    return float(0.5 ** (age / C.HALF_LIFE_S[item.content_type]))


def access(count: int) -> float:
    return min(math.log1p(max(count, 0)) / C.ACCESS_LOG_DIVISOR, 1.0)


def size(tokens: int) -> float:
    return min(math.log1p(max(tokens, 0)) / _LOG_SIZE_CAP, 1.0)


# Per content type: (multiplier, -ln 2 / half-life), so retention is one exp() and two log1p().
_PER_TYPE = {t: (C.TYPE_MULTIPLIER[t], -math.log(2.0) / C.HALF_LIFE_S[t]) for t in C.TYPE_MULTIPLIER}
_W_IMP = C.W_IMPORTANCE / 10.0
_W_ACC = C.W_ACCESS / C.ACCESS_LOG_DIVISOR
_W_SIZE = C.W_SIZE / _LOG_SIZE_CAP


def retention(item: Item, now: float) -> float:
    """TYPE_MULTIPLIER * (W_IMPORTANCE * importance/10 + W_RECENCY * recency + W_ACCESS * access
    - W_SIZE * size). Inlined: compaction scores every active item on each call."""
    mult, decay = _PER_TYPE[item.content_type]
    age = now - item.last_accessed_at
    rec = math.exp(decay * age) if age > 0.0 else 1.0
    count = item.access_count
    acc = min(math.log1p(count) * _W_ACC, C.W_ACCESS) if count > 0 else 0.0
    tokens = item.view_tokens
    bulk = min(math.log1p(tokens) * _W_SIZE, C.W_SIZE) if tokens > 0 else 0.0
    return (_W_IMP * item.importance + C.W_RECENCY * rec + acc - bulk) * mult


def retention01(item: Item, now: float) -> float:
    """Retention squeezed into [0, 1], for mixing into search ranking."""
    return min(max(retention(item, now) / C.MAX_RETENTION, 0.0), 1.0)


def recency_prior(newer: int) -> float:
    """1 + RECENCY_PRIOR * 0.5 ** (newer / RECENCY_HALF_LIFE_ITEMS), `newer` counting the items
    stored since: what an agent goes back for is mostly a few turns old."""
    return 1.0 + C.RECENCY_PRIOR * float(0.5 ** (max(newer, 0) / C.RECENCY_HALF_LIFE_ITEMS))


def rank_score(relevance: float, item: Item, now: float, newer: int | None = None) -> float:
    """Relevance first; retention, the recency prior (when `newer`, the items stored since this
    one, is given), pinning and the tier are bounded multipliers on top of it."""
    score = relevance * (1.0 + C.RETENTION_WEIGHT * retention01(item, now))
    if newer is not None:
        score *= recency_prior(newer)
    if item.tier == "archived":
        score *= C.ARCHIVED_RANK_FACTOR
    return score * C.PIN_BOOST if item.pinned else score


# The tier factor only lowers a score (it is at most 1), so it does not raise this bound.
MAX_RANK_FACTOR = (1.0 + C.RETENTION_WEIGHT) * (1.0 + C.RECENCY_PRIOR) * C.PIN_BOOST
