"""Shared fixtures: fresh stores with a controllable clock, in-process and stdio MCP clients."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compactor.models import Item
from compactor.store import Store

# Rewritten test modules are cached as bytecode even where PYTHONDONTWRITEBYTECODE is set (as on
# this project's machines): without the cache every run rewrote and compiled every test module
# again, 7 of the quick loop's seconds. __pycache__ is ignored by git.
sys.dont_write_bytecode = False

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


# Shared hosts' sockets and locks in a directory of this run's own: another run (or another
# user's compactor on this machine under the same uid) never answers this run's servers.
os.environ["COMPACTOR_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="compactor-test-run-")
atexit.register(shutil.rmtree, os.environ["COMPACTOR_RUNTIME_DIR"], True)


def server_env() -> dict[str, str]:
    """Environment for a server subprocess that runs this checkout's code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def server_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "compactor", *args]


def cli_text(*args: str) -> str:
    """What `compactor ARGS` prints; the command must succeed."""
    return subprocess.run(
        server_command(*args), env=server_env(), capture_output=True, text=True, timeout=60, check=True
    ).stdout


def cli_json(*args: str) -> Any:
    """What `compactor ARGS --json` prints, parsed; the command must succeed."""
    return json.loads(cli_text(*args, "--json"))


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """One real PostgreSQL cluster for the whole session (tests/support/pg_cluster.py); fails, never
    skips, when PostgreSQL cannot start."""
    from tests.support.pg_cluster import Cluster

    cluster = Cluster()
    try:
        cluster.start()
    except Exception as exc:
        cluster.stop()
        pytest.fail(f"PostgreSQL did not start: {exc}", pytrace=False)
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: Any) -> str:
    """A fresh, empty database on the session's cluster."""
    return str(pg_cluster.new_database())


@pytest.fixture(params=["state-dir", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Where a Store keeps memory, for tests that must hold for both: Store(**backend)."""
    if request.param == "state-dir":
        return {"state_dir": str(tmp_path / "state")}
    return {"database": str(request.getfixturevalue("pg_cluster").new_database())}


# The quick loop (`pytest -m "not slow"`) stays under a minute: a test that starts a compactor
# process (about 1 s of CPU to import the SDK) or a client that starts one is marked slow
# (pyproject's marker), and this says which test forgot.
_STARTED: list[str] = []
_real_popen_init = subprocess.Popen.__init__


def _popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
    argv = [str(a) for a in args] if isinstance(args, list | tuple) else [str(args)]
    if any(a == "compactor" or os.path.basename(a) in {"compactor", "npx", "claude", "uvx"} for a in argv[:6]):
        _STARTED.append(" ".join(argv[:4]))
    _real_popen_init(self, args, *rest, **kwargs)


subprocess.Popen.__init__ = _popen_init  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _processes_are_slow(request: pytest.FixtureRequest) -> Iterator[None]:
    _STARTED.clear()
    yield
    if _STARTED and request.node.get_closest_marker("slow") is None:
        pytest.fail(f"started {_STARTED[0]!r} but is not marked slow (pyproject: the slow marker)", pytrace=False)
