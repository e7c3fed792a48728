"""Shared fixtures: fresh stores with a controllable clock, in-process and stdio MCP clients."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compactor.models import Item
from compactor.store import Store

ROOT = Path(__file__).resolve().parent.parent
# The first 1,500 events of shared/corpus, cut to 400 characters each (tests/data/README.md).
CORPUS_SLICE = ROOT / "tests" / "data" / "corpus_slice.jsonl"


def make_item(**fields: Any) -> Item:
    """An active prose leaf with plausible values, any field overridden by `fields`."""
    base: dict[str, Any] = {
        "id": "x",
        "seq": 1,
        "content": "c",
        "summary": None,
        "tags": (),
        "importance": 5,
        "content_type": "prose",
        "pinned": False,
        "created_at": 1_800_000_000.0,
        "last_accessed_at": 1_800_000_000.0,
        "access_count": 0,
        "content_tokens": 100,
        "summary_tokens": 0,
    }
    base.update(fields)
    return Item(**base)


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> Iterator[Store]:
    s = Store(clock=clock)
    yield s
    s.close()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def server_env() -> dict[str, str]:
    """Environment for a server subprocess that runs this checkout's code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def server_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "compactor", *args]
