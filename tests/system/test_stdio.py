"""The real thing: `python -m compactor` as a subprocess over stdio."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from bench import proc
from tests.conftest import server_command, server_env
from tests.support.stdio_client import StdioServer


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["own process", "shared host"])
def test_kill9_loses_no_acknowledged_store(state_dir: Path, victim: str):
    """SIGKILL of the process holding the store: the client's own (--no-share), or the shared
    host its relay talks to."""
    sharing = ("--no-share",) if victim == "own process" else ()
    srv = StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "3600", *sharing)
    ids = {}
    for i in range(30):
        ids[srv.ok("store", content=f"fact number {i} about kangaroo{i}", tags=["t"])["id"]] = i
    bulk = srv.ok("bulk_store", items=[{"content": f"bulk {j} wombat"} for j in range(20)])["ids"]
    srv.ok("configure", token_budget=12_345)
    if victim == "shared host":
        [host] = proc.shared_hosts([srv.pid])
        os.kill(host, signal.SIGKILL)
        assert srv.wait() == 1
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(10)
    srv.stop()
    with StdioServer("--state-dir", str(state_dir)) as again:
        for item_id, i in ids.items():
            got = again.ok("get", id=item_id)
            assert got["content"] == f"fact number {i} about kangaroo{i}"
        for item_id in bulk:
            assert again.ok("get", id=item_id)["content"].startswith("bulk ")
        st = again.ok("status")
        assert st["active_items"] == 50 and st["token_budget"] == 12_345
        q = again.ok("query", query="kangaroo7")
        assert q["items"][0]["id"] in ids and ids[q["items"][0]["id"]] == 7


@pytest.mark.slow
def test_exits_cleanly_on_stdin_eof_and_snapshots(state_dir: Path):
    srv = StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "3600")
    srv.ok("store", content="saved at exit")
    srv.close_stdin()
    assert srv.wait() == 0
    srv.stop()
    assert (state_dir / "snapshot.json").exists()
    assert b"saved at exit" in (state_dir / "snapshot.json").read_bytes()
    assert (state_dir / "journal.jsonl").stat().st_size < 40


@pytest.mark.slow
def test_sigterm_snapshots_and_exits(state_dir: Path):
    srv = StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "3600")
    srv.ok("store", content="saved on sigterm")
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.wait() == 0
    srv.stop()
    assert b"saved on sigterm" in (state_dir / "snapshot.json").read_bytes()


@pytest.mark.slow
def test_background_snapshot_runs_on_interval(state_dir: Path):
    import time

    with StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "0.2") as srv:
        srv.ok("store", content="periodic")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            p = srv.ok("status")["persistence"]
            if p["last_snapshot_at"]:
                break
            time.sleep(0.1)
        assert p["last_snapshot_at"] and p["journal_bytes"] < 40


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["stdin closed", "SIGTERM"])
def test_a_server_ending_after_a_background_snapshot_saves_the_index_for_the_next_start(state_dir: Path, ending: str):
    """Background snapshots leave the search index out; the server's end writes it, so the
    next start maps it instead of re-indexing every item."""
    import time

    with StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "0.2") as srv:
        for i in range(20):
            srv.ok("store", content=f"note {i} about the ledger_{i} service")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not srv.ok("status")["persistence"]["last_snapshot_at"]:
            time.sleep(0.1)
        # The next intervals find nothing new to save, and calls keep coming (a quiet interval
        # would save the index: see test_a_quiet_server_saves_its_index...).
        busy_until = time.monotonic() + 0.5
        while time.monotonic() < busy_until:
            srv.ok("status")
            time.sleep(0.05)
        assert not list(state_dir.glob("index.*.bin"))
        if ending == "SIGTERM":
            os.kill(srv.pid, signal.SIGTERM)
        else:
            srv.close_stdin()
        assert srv.wait() == 0
    assert len(list(state_dir.glob("index.*.bin"))) == 1


@pytest.mark.slow
def test_in_memory_without_state_dir():
    with StdioServer() as srv:
        srv.ok("store", content="ephemeral")
        assert srv.ok("status")["persistence"]["enabled"] is False


@pytest.mark.slow
def test_corrupt_state_stops_startup_with_a_message(state_dir: Path):
    state_dir.mkdir(mode=0o700)
    (state_dir / "snapshot.json").write_bytes(b"garbage")
    proc = subprocess.run(
        server_command("--state-dir", str(state_dir)),
        input=b"",
        capture_output=True,
        env=server_env(),
        timeout=30,
    )
    assert proc.returncode == 1
    assert b"snapshot.json" in proc.stderr and b"doctor" in proc.stderr
    assert proc.stdout == b""
    assert (state_dir / "snapshot.json").read_bytes() == b"garbage"


@pytest.mark.slow
def test_bad_cli_arguments_exit_2():
    proc = subprocess.run(server_command("--budget", "abc"), capture_output=True, env=server_env(), timeout=30)
    assert proc.returncode == 2 and b"--budget" in proc.stderr


@pytest.mark.slow
def test_a_quiet_server_saves_its_index_so_a_kill_does_not_cost_a_rebuild(
    state_dir: Path, caplog: pytest.LogCaptureFixture
):
    """Background snapshots leave the index out. A server left quiet for a snapshot interval
    saves it, so a SIGKILL after that leaves a state dir whose next start loads the index."""
    import logging
    import time

    import orjson

    from compactor.store import Store

    srv = StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "0.3", "--no-share")
    ids = [srv.ok("store", content=f"note {i} about the quokka{i} migration")["id"] for i in range(20)]
    header: dict[str, object] = {}
    deadline = time.monotonic() + 15
    while "index_file" not in header and time.monotonic() < deadline:
        time.sleep(0.2)
        first = (state_dir / "snapshot.json").read_bytes().split(b"\n", 1)[0]
        header = orjson.loads(first[: -len(b',"items":[')] + b"}") if first.endswith(b',"items":[') else {}
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(10)
    srv.stop()
    assert "index_file" in header, "the quiet server never saved its index"
    with caplog.at_level(logging.WARNING):
        again = Store(state_dir=state_dir)
    assert not [r for r in caplog.records if "index" in r.getMessage()]
    assert sorted(again.ids()) == sorted(ids) and again.check_derived() == []
    assert [h.item.id for h in again.query("quokka7", scope="all")] == [ids[7]]


@pytest.mark.slow
def test_a_server_killed_while_busy_leaves_an_index_its_next_start_brings_up_to_date(
    state_dir: Path, caplog: pytest.LogCaptureFixture
):
    """Calls keep coming, so no quiet spell saves the index; the background snapshots name the
    index file the state dir started with, and the ids changed since. After a SIGKILL the next
    start re-indexes only those instead of every item."""
    import logging
    import time

    import orjson

    from compactor.store import Store

    first = Store(state_dir=state_dir)
    old = [first.store(f"older note {i} about the wallaby{i} rollout").item.id for i in range(30)]
    first.snapshot()
    first.close()
    srv = StdioServer("--state-dir", str(state_dir), "--snapshot-interval", "0.2", "--no-share")
    new: list[str] = []
    header: dict[str, object] = {}
    deadline = time.monotonic() + 15
    while not header.get("index_stale") and time.monotonic() < deadline:
        new.append(srv.ok("store", content=f"busy note {len(new)} about the numbat{len(new)} outage")["id"])
        raw = (state_dir / "snapshot.json").read_bytes().split(b"\n", 1)[0]
        header = orjson.loads(raw[: -len(b',"items":[')] + b"}")
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(10)
    srv.stop()
    assert header.get("index_stale"), "no background snapshot named the index file"
    with caplog.at_level(logging.WARNING):
        again = Store(state_dir=state_dir)
    assert not [r for r in caplog.records if "index" in r.getMessage()]
    assert sorted(again.ids()) == sorted(old + new) and again.check_derived() == []
    assert [h.item.id for h in again.query("numbat0", scope="all")] == [new[0]]
    assert [h.item.id for h in again.query("wallaby7", scope="all")] == [old[7]]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["own process", "shared host", "memory only"])
def test_requests_piped_before_stdin_closes_all_get_replies(tmp_path: Path, mode: str):
    """`printf '...' | compactor`: every request written before stdin closed is answered, and
    every store it answered is kept. The SDK cancels requests still running when its input
    ends, so the last replies were lost (their stores done, never confirmed)."""
    state = tmp_path / "state"
    args = {"own process": ["--state-dir", str(state), "--no-share"], "shared host": ["--state-dir", str(state)]}
    messages: list[dict[str, object]] = [
        {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "pipe", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    for i in range(1, 25):
        call = (
            {"name": "store", "arguments": {"content": f"piped fact {i} about the quokka{i} colony"}}
            if i % 3
            else {"name": "query", "arguments": {"query": f"quokka{i - 1}"}}
        )
        messages.append({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": call})
    done = subprocess.run(
        server_command(*args.get(mode, [])),
        input=b"".join(json.dumps(m).encode() + b"\n" for m in messages),
        capture_output=True,
        env=server_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert sorted(replies) == list(range(25))
    stored = {r["result"]["structuredContent"]["id"] for i, r in replies.items() if i and i % 3}
    assert len(stored) == 16 and not any(r["result"].get("isError") for i, r in replies.items() if i)
    assert replies[24]["result"]["structuredContent"]["items"][0]["id"] in stored
    if mode != "memory only":
        with StdioServer("--state-dir", str(state), "--no-share") as again:
            assert again.ok("status")["active_items"] == 16


@pytest.mark.slow
def test_a_resource_read_of_a_long_id_over_stdio_says_its_length_not_the_id(tmp_path: Path) -> None:
    with StdioServer("--state-dir", str(tmp_path / "state")) as server:
        reply = server.request("resources/read", {"uri": "memory://items/" + "q" * 5_000})
        assert "result" not in reply
        message = reply["error"]["message"]
        assert "q" * 100 not in message and "of 5,000 characters" in message
        assert server.ok("status")["active_items"] == 0  # the server goes on


@pytest.mark.slow
def test_status_over_stdio_names_the_snapshot_an_earlier_run_wrote(state_dir: Path) -> None:
    """Issue 38 point 11, through a real process: the CLI saw the snapshot, the tool said "never"."""
    with StdioServer("--state-dir", str(state_dir)) as srv:
        srv.ok("store", content="kept across runs")
    assert (state_dir / "snapshot.json").exists()
    with StdioServer("--state-dir", str(state_dir)) as srv:
        result = srv.call("status")
    text = result["content"][0]["text"]
    assert "last snapshot never" not in text and "last snapshot 20" in text, text
    assert result["structuredContent"]["persistence"]["snapshot_at"]
