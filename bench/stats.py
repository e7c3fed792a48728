"""Percentiles and latency summaries for the benchmark."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) by linear interpolation between closest ranks.

    This is numpy's default ("linear") and statistics.quantiles(method="inclusive"), so figures
    can be checked against either.
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= p <= 100.0 or math.isnan(p):
        raise ValueError(f"percentile must be within 0..100, got {p}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    fraction = rank - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def summarize(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99, max, mean and count of a latency sample, in the sample's unit."""
    if not latencies_ms:
        return {"n": 0.0}
    return {
        "n": float(len(latencies_ms)),
        "p50": percentile(latencies_ms, 50),
        "p90": percentile(latencies_ms, 90),
        "p99": percentile(latencies_ms, 99),
        "max": max(latencies_ms),
        "mean": sum(latencies_ms) / len(latencies_ms),
    }


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)
