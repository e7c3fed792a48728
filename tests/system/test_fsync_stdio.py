"""An acknowledged write is on the disk, seen from outside the server process: a real `compactor`
over stdio (its own process, and relayed to the shared host it forks) and `compactor import`,
each started with the fsync recorders of tests/support/fsync_log.py installed by a
sitecustomize.py. After every reply: the journal bytes past its last fsync are access times
only, and every state file created or renamed was followed by an fsync of the state dir."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from compactor import constants as C
from compactor.persistence import statedir as statedir_mod
from compactor.persistence.statedir import JOURNAL, SNAPSHOT
from tests.conftest import server_command, server_env
from tests.support.fsync_log import Log, check_dir_synced, check_reply, check_unsynced_writes, subprocess_env
from tests.support.stdio_client import StdioServer


def recorded(tmp_path: Path) -> tuple[Log, dict[str, str]]:
    log = Log(tmp_path / "fsync.log")
    return log, subprocess_env(server_env(), log.path, tmp_path / "site")


def check_all(log: Log, state_dir: Path, what: str) -> None:
    """At a reply, while the server may be snapshotting in the background."""
    check_reply(log, state_dir, what)
    check_unsynced_writes(log)
    check_dir_synced(log, state_dir, running=True)


def drive(servers: list[StdioServer], log: Log, state_dir: Path) -> None:
    """Writes, reads that journal access times, and a forget, each checked at its reply; the
    servers snapshot in the background every 50 ms meanwhile (rotations between the calls)."""
    ids = []
    for i in range(6):
        server = servers[i % len(servers)]
        ids.append(server.ok("store", content=f"acknowledged decision {i}: fsync before the reply")["id"])
        check_all(log, state_dir, f"store {i}")
        assert server.ok("query", query="acknowledged decision")["items"]
        check_all(log, state_dir, f"query {i}")
    servers[0].ok("update", id=ids[0], importance=9)
    check_all(log, state_dir, "update")
    servers[-1].ok("forget", id=ids[1])
    check_all(log, state_dir, "forget")


@pytest.mark.slow
def test_stdio_server_syncs_each_acknowledged_call_before_its_reply(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    log, env = recorded(tmp_path)
    with StdioServer("--state-dir", str(state_dir), "--no-share", "--snapshot-interval", "0.05", env=env) as server:
        drive([server], log, state_dir)
        server.close_stdin()
        assert server.wait() == 0
    assert {e["pid"] for e in log.events()} == {server.pid}  # the server itself synced, unshared
    assert {JOURNAL, SNAPSHOT, statedir_mod.FORGET_LEDGER} <= set(check_dir_synced(log, state_dir))
    assert check_unsynced_writes(log) >= 7  # each store, the update


@pytest.mark.slow
def test_shared_host_syncs_each_acknowledged_call_before_its_reply(tmp_path: Path) -> None:
    """Two relays share one host (sharing/relay.py), a fork of the first: the recorders are
    inherited, and the syncs are the host's."""
    state_dir = tmp_path / "state"
    log, env = recorded(tmp_path)
    a = StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "0.05", env=env)
    b = StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "0.05", env=env)
    try:
        drive([a, b], log, state_dir)
        for server in (a, b):
            server.close_stdin()
            assert server.wait() == 0
    finally:
        a.stop()
        b.stop()
    writers = {e["pid"] for e in log.events() if e["ev"] == "write"}
    assert len(writers) == 1 and not writers & {a.pid, b.pid}, writers  # the host, not a relay
    assert {JOURNAL, SNAPSHOT, statedir_mod.FORGET_LEDGER} <= set(check_dir_synced(log, state_dir))
    assert check_unsynced_writes(log) >= 7


@pytest.mark.slow
def test_import_syncs_each_chunk_before_the_next(tmp_path: Path) -> None:
    """`compactor import` stores chunks of BULK_MAX_ITEMS, each acknowledged (progress, Ctrl-C
    between them keeps it): each chunk's journal line is synced before the next is written."""
    n = 2 * C.BULK_MAX_ITEMS + 500
    src = tmp_path / "export.json"
    items = [{"id": f"imp{i:05d}", "content": f"imported item {i} on topic {i % 31}"} for i in range(n)]
    src.write_text(json.dumps({"format": "compactor-export", "version": 1, "items": items}))
    state_dir = tmp_path / "state"
    log, env = recorded(tmp_path)
    done = subprocess.run(
        server_command("--state-dir", str(state_dir), "import", str(src), "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["imported"]) == n
    chunks = [e for e in log.events() if e["ev"] == "write" and e["data"].count('"op":"put"') >= 500]
    assert len(chunks) == 3, [e["data"].count('"op":"put"') for e in chunks]
    assert check_unsynced_writes(log) >= 3  # raises if a chunk's line was not synced
    assert JOURNAL in check_dir_synced(log, state_dir)
    check_reply(log, state_dir, "import")  # what the process left in the journal at its exit
