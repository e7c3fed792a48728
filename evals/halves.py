"""The held-out split of the corpus (ISSUE 15.1): a tuning half and a test half.

A trajectory belongs to the *tuning* half when the first byte of sha256(trajectory id, UTF-8) is
even, to the *test* half when it is odd. The rule depends on nothing but the id, so it never moves
when trajectories are added, removed or reordered. Levers are tuned on the tuning half only and
kept only if they also help the test half.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Literal

Half = Literal["tuning", "test"]
HALVES: tuple[Half, ...] = ("tuning", "test")


def half_of(traj: str) -> Half:
    """'tuning' when the first byte of sha256(traj) is even, else 'test'."""
    return "tuning" if hashlib.sha256(traj.encode("utf-8")).digest()[0] % 2 == 0 else "test"


def split(trajs: Iterable[str]) -> dict[Half, list[str]]:
    """The given trajectory ids by half, each sorted."""
    out: dict[Half, list[str]] = {h: [] for h in HALVES}
    for t in sorted(set(trajs)):
        out[half_of(t)].append(t)
    return out
