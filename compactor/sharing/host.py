"""The shared host: one process that serves every stdio client of a state dir over a Unix socket.

`sharing/relay.py` forks it (`run_host`: load the store, listen, then log to the state dir) and
connects each `compactor` command to it. Each connection opens with a hello each way
(`sharing/hello.py`) and is then one MCP session, served by the same pipeline as stdio
(`run_stdio` with the connection's lines). The host stops listening as soon as its last session
ends, saves its final snapshot, and only then closes that last connection, so a client that
waits for its server to exit still waits for the save.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Final

import anyio
import anyio.abc

from .. import constants as C
from ..mcp.server import CONNECTION_SCOPE, build_server, final_snapshot, snapshots
from ..mcp.stdio_runtime import capped_lines, run_stdio
from ..runtime import PROCESS
from ..store import Store
from .hello import SHARED_READ_BYTES, answer_hello, hear_hello
from .rundir import release_host_lock

# Connections waiting to be accepted: clients start one at a time, a burst of sessions at most.
SHARED_BACKLOG: Final = 64
# A host whose starting relay never connects (it was killed meanwhile) must not live on.
SHARED_FIRST_CLIENT_TIMEOUT_S: Final = 30.0
# The host's log in the state dir (its stderr is no client's once it starts). Past this size
# the next host start moves it to `.1`, replacing the previous one.
SHARED_LOG: Final = "server.log"
SHARED_LOG_MAX_BYTES: Final = 1 << 20

log = logging.getLogger(__name__)


class _ConnectionLines:
    """A connection read as text lines the way stdin is (UTF-8, bad bytes kept visible for
    `invalid_message_reply`), and written as stdout is."""

    def __init__(self, stream: anyio.abc.SocketStream, first: bytes) -> None:
        self._stream = stream
        self._buffer = first

    def __aiter__(self) -> AsyncIterator[str]:
        first, self._buffer = self._buffer, b""
        return capped_lines(self._receive, first)  # a line over its cap is dropped as it arrives

    async def _receive(self) -> bytes:
        try:
            return await self._stream.receive(SHARED_READ_BYTES)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return b""

    async def write(self, text: str) -> None:
        await self._stream.send(text.encode("utf-8"))

    async def flush(self) -> None:
        return None


def state_identity(path: str) -> tuple[int, int] | None:
    """The state dir's (device, inode): a dir removed and made again is another store."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


async def serve_host(
    store: Store,
    listener_socket: socket.socket,
    *,
    state_dir: str,
    stop_listening: Callable[[], None],
    snapshot_interval: float = C.SNAPSHOT_INTERVAL_S,
    scope_fixed: bool = False,
) -> None:
    """Serve connections on `listener_socket` until the last one ends (or SIGTERM/SIGINT), then
    save. `stop_listening` removes the socket's name and lets a new host start; it is called
    before the final snapshot, so a client arriving meanwhile starts a new host at once. The
    last connection is closed only after the snapshot."""
    mcp = build_server(store, scope_fixed=scope_fixed)
    PROCESS.start_done()
    identity = state_identity(state_dir)
    listener = await anyio.abc.SocketListener.from_socket(listener_socket)
    accepting = anyio.CancelScope()
    sessions = 0  # connections accepted and not yet ended
    served = 0  # connections that said hello: a client, not a stray connection
    done = anyio.Event()
    held: list[anyio.abc.SocketStream] = []

    def close_listener() -> None:
        if not accepting.cancel_called:
            accepting.cancel()
            stop_listening()

    async def session(stream: anyio.abc.SocketStream) -> None:
        nonlocal sessions, served
        try:
            hello, rest = await hear_hello(stream)
            if state_identity(state_dir) != identity:
                log.warning("the state dir %s was replaced; this host takes no more clients", state_dir)
                close_listener()
                return  # no hello back: the relay starts a host for the new dir
            served += 1
            await answer_hello(stream)
            scope = hello.get("scope")
            CONNECTION_SCOPE.set(scope if isinstance(scope, str) and scope and not scope_fixed else None)
            log.info("a client connected (relay pid %s, scope %s); %d connected", hello.get("pid"), scope, sessions)
            lines = _ConnectionLines(stream, rest)
            await run_stdio(mcp, lines, lines)
        except Exception as exc:
            log.info("a client connection ended with %r", exc)
        finally:
            sessions -= 1
            log.info("a client left; %d connected", sessions)
            # A stray connection (no hello) before the first client must not stop the host.
            if sessions == 0 and (served or accepting.cancel_called):
                held.append(stream)  # closed after the final snapshot: its relay waits for the save
                log.info("the last client left; saving and stopping")
                done.set()
            else:
                with anyio.CancelScope(shield=True):
                    await stream.aclose()

    async def accept(tg: anyio.abc.TaskGroup) -> None:
        nonlocal sessions
        with accepting:
            async with listener:
                while True:
                    stream = await listener.accept()
                    sessions += 1
                    tg.start_soon(session, stream)

    async def first_client() -> None:
        await anyio.sleep(SHARED_FIRST_CLIENT_TIMEOUT_S)
        if not served:
            log.warning("no client connected within %g s; stopping", SHARED_FIRST_CLIENT_TIMEOUT_S)
            done.set()

    async def on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for sig in signals:
                log.info("received %s, shutting down", signal.Signals(sig).name)
                done.set()
                return

    try:
        async with anyio.create_task_group() as tg:
            if store.persistent:
                tg.start_soon(snapshots, store, snapshot_interval)
            tg.start_soon(on_signal)
            tg.start_soon(first_client)
            tg.start_soon(accept, tg)
            await done.wait()
            close_listener()
            tg.cancel_scope.cancel()
    finally:
        close_listener()
        listener_socket.close()
        final_snapshot(store)
        with anyio.CancelScope(shield=True):
            for stream in held:  # now its relay may exit: the save is done
                await stream.aclose()


def run_host(
    load_store: Callable[[], Store | None],
    *,
    state_dir: str,
    path: str,
    lock_fd: int,
    snapshot_interval: float,
    scope_fixed: bool,
) -> int:
    """The shared host's start-up, in the process the relay forked holding the host's lock: load,
    listen on `path`, then send what it logs to the state dir's log instead of the starting
    client's stderr, and serve until the last client leaves. Returns the exit code."""
    store = load_store()
    if store is None:
        return 1
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        listener.listen(SHARED_BACKLOG)
    except OSError as exc:
        print(f"compactor: cannot start: cannot listen on {path}: {exc.strerror or exc}", file=sys.stderr)
        store.close()
        return 1
    _log_to_state_dir(Path(state_dir), sys.stderr.fileno())
    log.info("serving the stdio clients of %s (pid %d)", state_dir, os.getpid())

    def stop_listening() -> None:
        release_host_lock(path, lock_fd)

    anyio.run(
        lambda: serve_host(
            store,
            listener,
            state_dir=state_dir,
            stop_listening=stop_listening,
            snapshot_interval=snapshot_interval,
            scope_fixed=scope_fixed,
        )
    )
    return 0


def _log_to_state_dir(state_dir: Path, messages_fd: int) -> None:
    """Point `messages_fd` (stderr, read by the client that started the host until now) at the
    state dir's log, which the next start moves aside once it is past its size limit."""
    log_path = state_dir / SHARED_LOG
    with contextlib.suppress(OSError):
        if log_path.stat().st_size > SHARED_LOG_MAX_BYTES:
            os.replace(log_path, log_path.with_name(SHARED_LOG + ".1"))
    sys.stderr.flush()
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, messages_fd)
    os.close(fd)
