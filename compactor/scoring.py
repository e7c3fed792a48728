"""Retention: how much an item is worth keeping in the active budget right now."""

from __future__ import annotations

import math

from . import constants as C
from .models import Item

_LOG_SIZE_CAP = math.log1p(C.SIZE_SATURATION_TOKENS)


def recency(item: Item, now: float) -> float:
    """0.5 ** (age / half-life), age counted from the last access."""
    age = max(0.0, now - item.last_accessed_at)
    return float(0.5 ** (age / C.HALF_LIFE_S[item.content_type]))


def access(count: int) -> float:
    return min(math.log1p(max(count, 0)) / C.ACCESS_LOG_DIVISOR, 1.0)


def size(tokens: int) -> float:
    return min(math.log1p(max(tokens, 0)) / _LOG_SIZE_CAP, 1.0)


def retention(item: Item, now: float) -> float:
    base = (
        C.W_IMPORTANCE * (item.importance / 10.0)
        + C.W_RECENCY * recency(item, now)
        + C.W_ACCESS * access(item.access_count)
        - C.W_SIZE * size(item.view_tokens)
    )
    return base * C.TYPE_MULTIPLIER[item.content_type]


def retention01(item: Item, now: float) -> float:
    """Retention squeezed into [0, 1], for mixing into search ranking."""
    return min(max(retention(item, now) / C.MAX_RETENTION, 0.0), 1.0)


def recency_prior(newer: int) -> float:
    """1 + RECENCY_PRIOR * 0.5 ** (newer / RECENCY_HALF_LIFE_ITEMS), `newer` counting the items
    stored since: what an agent goes back for is mostly a few turns old."""
    return 1.0 + C.RECENCY_PRIOR * float(0.5 ** (max(newer, 0) / C.RECENCY_HALF_LIFE_ITEMS))


def rank_score(relevance: float, item: Item, now: float, newer: int | None = None) -> float:
    """Relevance first; retention, the recency prior (when `newer`, the items stored since this
    one, is given) and pinning are bounded multipliers on top of it."""
    score = relevance * (1.0 + C.RETENTION_WEIGHT * retention01(item, now))
    if newer is not None:
        score *= recency_prior(newer)
    return score * C.PIN_BOOST if item.pinned else score


MAX_RANK_FACTOR = (1.0 + C.RETENTION_WEIGHT) * (1.0 + C.RECENCY_PRIOR) * C.PIN_BOOST
