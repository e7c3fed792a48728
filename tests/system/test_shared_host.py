"""Stdio servers on one state dir share one store process (sharing/relay.py, sharing/host.py).

Each test drives real `python -m compactor` processes over stdio, as a client would: the relays
are what the client starts, and the host is found the way the bench finds it (a detached process
with the relay's command line)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from bench import proc
from compactor import Store
from compactor.sharing import host as host_mod
from compactor.sharing.hello import HELLO_MAX_BYTES
from compactor.sharing.rundir import runtime_dir
from tests.conftest import server_env
from tests.support.stdio_client import StdioServer

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the shared host needs fork and Unix sockets")


def hosts_of(*servers: StdioServer) -> list[int]:
    return proc.shared_hosts([s.pid for s in servers])


def wait_gone(pid: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.status_kib(pid, "VmRSS") is None:
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} still runs")


def alive(pid: int) -> bool:
    return proc.status_kib(pid, "VmRSS") is not None


def host_files() -> set[str]:
    return {p.name for p in runtime_dir().iterdir()}


@pytest.mark.slow
def test_two_clients_share_one_host_that_exits_with_the_last_after_saving(state_dir: Path) -> None:
    before = host_files()
    a = StdioServer("--state-dir", str(state_dir))
    b = StdioServer("--state-dir", str(state_dir))
    try:
        [host] = hosts_of(a, b)
        assert host not in (a.pid, b.pid)
        stored = a.ok("store", content="the relay keeps its stdin and stdout; the host keeps the store")
        found = b.ok("query", query="relay host store")["items"]
        assert [i["id"] for i in found] == [stored["id"]]  # no catching up: one store
        # A relay loads nothing: a fraction of the host's memory.
        relay_kib, host_kib = proc.status_kib(b.pid, "VmRSS"), proc.status_kib(host, "VmRSS")
        assert relay_kib is not None and host_kib is not None
        assert relay_kib * 3 < host_kib, (relay_kib, host_kib)
        a.close_stdin()
        assert a.wait() == 0
        assert alive(host)  # b still uses it
        assert b.ok("get", id=stored["id"])["content"].startswith("the relay keeps")
        b.close_stdin()
        assert b.wait() == 0
    finally:
        a.stop()
        b.stop()
    wait_gone(host)
    assert host_files() <= before  # its socket and lock are gone
    # The host saved before the last relay exited: the next start loads the index, no rebuild.
    loaded = Store(state_dir=state_dir)
    try:
        assert loaded.load_warnings == []
        assert not loaded.needs_final_snapshot  # the snapshot has every change and the index
        assert [h.item.id for h in loaded.query("relay host store", scope="all")] == [stored["id"]]
    finally:
        loaded.close()


@pytest.mark.slow
def test_clients_started_together_get_one_host(state_dir: Path) -> None:
    procs = [
        subprocess.Popen(
            [*StdioServer.command("--state-dir", str(state_dir))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(),
        )
        for _ in range(4)
    ]
    servers = [StdioServer(process=p) for p in procs]
    try:
        hosts = hosts_of(*servers)
        assert len(hosts) == 1, hosts
        ids = [s.ok("store", content=f"note {n} from client {n}")["id"] for n, s in enumerate(servers)]
        assert {r["id"] for r in servers[0].export_records()} == set(ids)
    finally:
        for s in servers:
            s.stop()
    assert all(p.returncode == 0 for p in procs)
    wait_gone(hosts[0])


@pytest.mark.slow
def test_different_settings_get_different_hosts_on_the_same_state_dir(state_dir: Path) -> None:
    with (
        StdioServer("--state-dir", str(state_dir)) as a,
        StdioServer("--state-dir", str(state_dir), "--budget", "50000") as b,
    ):
        assert len(set(hosts_of(a)) | set(hosts_of(b))) == 2
        stored = a.ok("store", content="written by the host with the default budget")
        assert b.ok("status")["token_budget"] == 50_000
        assert [i["id"] for i in b.ok("query", query="default budget host")["items"]] == [stored["id"]]


@pytest.mark.slow
def test_no_share_serves_in_the_clients_own_process(state_dir: Path) -> None:
    with StdioServer("--state-dir", str(state_dir), "--no-share") as a:
        a.ok("store", content="kept by this very process")
        assert hosts_of(a) == []
        assert proc.status_kib(a.pid, "VmRSS") is not None
    env = {**server_env(), "COMPACTOR_NO_SHARE": "1"}
    with StdioServer("--state-dir", str(state_dir), env=env) as b:
        assert hosts_of(b) == []
        assert b.ok("query", query="kept process")["items"]


@pytest.mark.slow
def test_a_killed_client_leaves_the_others_served(state_dir: Path) -> None:
    a = StdioServer("--state-dir", str(state_dir))
    b = StdioServer("--state-dir", str(state_dir))
    try:
        [host] = hosts_of(a, b)
        stored = a.ok("store", content="acknowledged before the kill")
        a.kill()
        assert b.ok("get", id=stored["id"])["content"] == "acknowledged before the kill"
        b.ok("store", content="written after the other client died")
        assert alive(host)
    finally:
        a.stop()
        b.stop()
    wait_gone(host)
    loaded = Store(state_dir=state_dir)
    try:
        assert len(loaded.list_items(tier="all", scope="all").items) == 2
    finally:
        loaded.close()


@pytest.mark.slow
def test_a_killed_host_ends_its_sessions_with_a_message_and_loses_nothing(state_dir: Path) -> None:
    a = StdioServer("--state-dir", str(state_dir))
    try:
        [host] = hosts_of(a)
        stored = a.ok("store", content="fsynced before the host was killed")
        os.kill(host, signal.SIGKILL)
        assert a.wait() == 1
        assert a.proc.stderr is not None
        assert "the shared server process stopped" in a.proc.stderr.read().decode()
    finally:
        a.stop()
    # A new client starts a new host (the old socket's name is stale) and finds the write.
    with StdioServer("--state-dir", str(state_dir)) as b:
        assert b.ok("get", id=stored["id"])["content"] == "fsynced before the host was killed"
        assert hosts_of(b) and hosts_of(b) != [host]


@pytest.mark.slow
def test_a_host_that_cannot_start_says_why_on_the_clients_stderr(state_dir: Path) -> None:
    state_dir.mkdir(mode=0o700)
    (state_dir / "snapshot.json").write_text("{not json\n", encoding="utf-8")
    os.chmod(state_dir / "snapshot.json", 0o600)
    run = subprocess.run(
        StdioServer.command("--state-dir", str(state_dir)),
        input=b"",
        capture_output=True,
        env=server_env(),
        timeout=60,
    )
    assert run.returncode == 1
    err = run.stderr.decode()
    assert err.count("compactor: cannot start:") == 1, err
    assert run.stdout == b""


@pytest.mark.slow
def test_start_warnings_reach_the_starting_client_and_later_logs_the_state_dir(state_dir: Path) -> None:
    with StdioServer("--state-dir", str(state_dir)) as a:
        a.ok("store", content="indexed, then its index file is removed")
    for index_file in state_dir.glob("index.*.bin"):
        index_file.unlink()
    b = StdioServer("--state-dir", str(state_dir), "--log-level", "INFO")
    try:
        assert b.ok("query", query="indexed removed")["items"]
        b.close_stdin()
        assert b.wait() == 0
        assert b.proc.stderr is not None
        err = b.proc.stderr.read().decode()
    finally:
        b.stop()
    assert "index" in err and "rebuil" in err, err  # the load's warning, while the client waited
    # Once it serves, the host logs to the state dir: its stderr is no longer this client's.
    log_text = (state_dir / host_mod.SHARED_LOG).read_text(encoding="utf-8")
    for line in (
        "serving the stdio clients of",
        "a client connected (relay pid",
        "the last client left; saving and stopping",
    ):
        assert line in log_text and line not in err, (log_text, err)
    assert os.stat(state_dir / host_mod.SHARED_LOG).st_mode & 0o077 == 0


@pytest.mark.slow
def test_each_client_keeps_the_project_scope_of_its_own_directory(tmp_path: Path, state_dir: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for project in (one, two):
        (project / ".git").mkdir(parents=True)
    with (
        StdioServer("--state-dir", str(state_dir), cwd=one) as a,
        StdioServer("--state-dir", str(state_dir), cwd=two) as b,
    ):
        assert len(set(hosts_of(a)) | set(hosts_of(b))) == 1
        first = a.ok("store", content="belongs to project one")
        second = b.ok("store", content="belongs to project two")
        assert a.ok("status")["scope"] == str(one.resolve())
        assert b.ok("status")["scope"] == str(two.resolve())
        # Each client's default view is its own project: the other's note is not in it.
        assert [i["id"] for i in a.ok("query", query="belongs project")["items"]] == [first["id"]]
        assert [i["id"] for i in b.ok("query", query="belongs project")["items"]] == [second["id"]]


@pytest.mark.slow
def test_a_replaced_state_dir_gets_a_new_host(state_dir: Path) -> None:
    a = StdioServer("--state-dir", str(state_dir))
    try:
        [old_host] = hosts_of(a)
        a.ok("store", content="in the state dir that is about to be replaced")
        moved = state_dir.with_name("moved-away")
        state_dir.rename(moved)
        state_dir.mkdir(mode=0o700)
        with StdioServer("--state-dir", str(state_dir)) as b:
            assert hosts_of(b) != [old_host]
            assert b.ok("query", query="replaced state dir")["items"] == []
        assert a.ok("query", query="replaced state dir")["items"]  # the old client keeps its host
    finally:
        a.stop()
    wait_gone(old_host)


@pytest.mark.slow
def test_a_stale_socket_and_a_garbage_hello_do_not_stop_the_host(state_dir: Path) -> None:
    import socket

    with StdioServer("--state-dir", str(state_dir)) as a:
        [host] = hosts_of(a)
        [sock_path] = [p for p in runtime_dir().glob("*.sock") if _served_by(p, host)]
        for garbage in (b"not json\n", b"[1, 2]\n", b"x" * (HELLO_MAX_BYTES + 10)):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
                raw.connect(str(sock_path))
                raw.sendall(garbage)
                raw.shutdown(socket.SHUT_WR)
                raw.settimeout(10)
                assert raw.recv(100) == b""  # closed without a hello
        assert a.ok("store", content="still served after the garbage")["id"]
    wait_gone(host)


def _served_by(sock_path: Path, host: int) -> bool:
    """Whether `host` has `sock_path`'s socket open: its inode is among the host's fds."""
    try:
        inode = next(
            line.split()[6]
            for line in Path("/proc/net/unix").read_text().splitlines()[1:]
            if line.split()[-1] == str(sock_path)
        )
    except StopIteration:
        return False
    return any(os.readlink(f"/proc/{host}/fd/{fd}") == f"socket:[{inode}]" for fd in os.listdir(f"/proc/{host}/fd"))


def test_pid_1_and_no_fork_serve_in_their_own_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from compactor.sharing import relay

    assert relay._can_share()
    monkeypatch.setattr(os, "getpid", lambda: 1)  # a container's entrypoint
    assert not relay._can_share()
    monkeypatch.undo()
    monkeypatch.delattr(os, "fork")
    assert not relay._can_share()


def test_the_host_log_is_moved_aside_past_its_limit(tmp_path: Path) -> None:
    from compactor.sharing import host

    log_path = tmp_path / host_mod.SHARED_LOG
    log_path.write_bytes(b"x" * (host_mod.SHARED_LOG_MAX_BYTES + 1))
    scratch = os.open(os.devnull, os.O_WRONLY)
    try:
        host._log_to_state_dir(tmp_path, scratch)
        os.write(scratch, b"after the move\n")
    finally:
        os.close(scratch)
    assert (tmp_path / (host_mod.SHARED_LOG + ".1")).stat().st_size == host_mod.SHARED_LOG_MAX_BYTES + 1
    assert log_path.read_bytes() == b"after the move\n"
    assert log_path.stat().st_mode & 0o777 == 0o600
    scratch = os.open(os.devnull, os.O_WRONLY)
    try:
        host._log_to_state_dir(tmp_path, scratch)  # under the limit: kept
    finally:
        os.close(scratch)
    assert log_path.read_bytes() == b"after the move\n"


@pytest.mark.slow
def test_starting_a_host_sweeps_what_killed_hosts_left(state_dir: Path) -> None:
    import fcntl

    base = runtime_dir()
    stale = [base / "0000deadbeef0000stale000.lock", base / "0000deadbeef0000stale000.sock"]
    held = [base / "0000deadbeef0000held0000.lock", base / "0000deadbeef0000held0000.sock"]
    for path in (*stale, *held):
        path.write_bytes(b"")
    holder = os.open(held[0], os.O_RDWR)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)  # as a running host holds its lock
        with StdioServer("--state-dir", str(state_dir)) as a:
            a.ok("status")
        assert not any(p.exists() for p in stale)
        assert all(p.exists() for p in held)
    finally:
        os.close(holder)
        for path in held:
            path.unlink(missing_ok=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_host_in_process_ignores_a_stray_connection_and_stops_with_its_last_client(tmp_path: Path) -> None:
    """serve_host itself, on a socket of the test's: a connection that never says hello (before
    any client) does not stop it; a client's session works; the host stops when it leaves,
    removing its name before it saves."""
    import json
    import socket

    import anyio

    from compactor.sharing.host import serve_host

    state = tmp_path / "state"
    store = Store(state_dir=state)
    path = tmp_path / "host.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    events: list[str] = []

    async def line(stream: anyio.abc.SocketStream, buf: bytearray) -> dict:
        while b"\n" not in buf:
            buf += await stream.receive()
        head, _, rest = bytes(buf).partition(b"\n")
        buf[:] = rest
        return json.loads(head)

    async def client() -> None:
        stray = await anyio.connect_unix(path)
        await stray.aclose()
        await anyio.sleep(0.2)
        assert events == []  # still serving
        conn = await anyio.connect_unix(path)
        buf = bytearray()
        await conn.send(json.dumps({"scope": "/projects/one"}).encode() + b"\n")
        assert (await line(conn, buf))["pid"] == os.getpid()
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        await conn.send(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}).encode() + b"\n"
        )
        assert "result" in await line(conn, buf)
        await conn.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        call = {"name": "store", "arguments": {"content": "kept by the in-process host"}}
        await conn.send(
            json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}).encode() + b"\n"
        )
        reply = await line(conn, buf)
        assert not reply["result"].get("isError"), reply
        stored = reply["result"]["structuredContent"]["id"]
        assert store.get(stored).scope == "/projects/one"  # the call ran in the scope this client sent
        await conn.send_eof()
        events.append("client left")
        with pytest.raises(anyio.EndOfStream):
            await conn.receive()  # the host closes this connection only once it has saved
        assert not store.needs_final_snapshot
        events.append("closed")
        await conn.aclose()

    from compactor.runtime import PROCESS

    PROCESS.pause_for_start()  # as the host's process does before its imports
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client)
                await serve_host(store, listener, state_dir=str(state), stop_listening=lambda: events.append("stopped"))
        assert gc.isenabled()  # resumed once the host was built
    finally:
        gc.enable()
        gc.unfreeze()
    assert events == ["client left", "stopped", "closed"]
    again = Store(state_dir=state, scope="/projects/one")
    try:
        assert [it.content for it in again.list_items().items] == ["kept by the in-process host"]
    finally:
        again.close()


@pytest.mark.slow
def test_a_changed_install_is_not_served_by_a_host_running_the_old_code(state_dir: Path) -> None:
    import compactor

    module = Path(compactor.__file__).parent / "scope.py"
    before = module.stat()
    with StdioServer("--state-dir", str(state_dir)) as a:
        [old_host] = hosts_of(a)
        try:
            os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # as an upgrade or an edit
            with StdioServer("--state-dir", str(state_dir)) as b:
                hosts = set(hosts_of(b))
                assert old_host in hosts and len(hosts) == 2  # b started a host of its own
                [new_host] = hosts - {old_host}
            wait_gone(new_host)
        finally:
            os.utime(module, ns=(before.st_atime_ns, before.st_mtime_ns))
        with StdioServer("--state-dir", str(state_dir)) as c:
            assert hosts_of(c) == [old_host]  # the same code again: the running host


@pytest.mark.slow
def test_a_relative_state_dir_is_reported_as_given_as_in_process(tmp_path: Path) -> None:
    for sharing in ((), ("--no-share",)):
        with StdioServer("--state-dir", "rel-state", *sharing, cwd=tmp_path) as a:
            assert a.ok("status")["persistence"]["state_dir"] == "rel-state"
            a.ok("store", content="kept under the working directory's rel-state")
    assert (tmp_path / "rel-state" / "journal.jsonl").exists()


@pytest.mark.slow
def test_hosts_live_in_the_runtime_dir_the_environment_names(state_dir: Path, tmp_path: Path) -> None:
    """Concurrent runs (two test sessions, two users' tools under one uid) keep apart by
    naming their own runtime dir: a socket of theirs is never found by ours."""
    own = tmp_path / "rundir"
    own.mkdir(mode=0o700)
    env = {**server_env(), "COMPACTOR_RUNTIME_DIR": str(own)}
    default = Path(tempfile.gettempdir()) / f"compactor-{os.getuid()}"
    elsewhere = set(default.iterdir()) if default.is_dir() else set()
    with StdioServer("--state-dir", str(state_dir), env=env) as a:
        assert hosts_of(a)
        assert any(p.name.endswith(".sock") or "sock" in p.name for p in own.iterdir()), list(own.iterdir())
        assert (set(default.iterdir()) if default.is_dir() else set()) <= elsewhere
