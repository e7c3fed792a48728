"""Several stdio clients of one state dir share one store process (the host, `sharing/host.py`).

Each Claude Code session starts its own `compactor`. Loading the whole store into each copy
cost every server after the first ~80 MiB at 10k items and a full start. Instead, a stdio
`compactor` with a state dir is a relay: it connects to the host for that state dir and
settings (`sharing/rundir.py` names it), or starts one (a fork of itself, in its own session,
so a client's signals to its relay do not reach it), then copies bytes between its
stdin/stdout and the connection. The relay imports nothing heavy, so a second server costs an
interpreter; only the forked host imports the store and the MCP server.

The host holds its lock from its start until it stops listening; a relay that cannot connect
and finds the lock free starts the host.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..scope import project_scope
from .hello import say_hello
from .rundir import SharingUnavailable, host_key, runtime_dir, sweep, try_lock

if TYPE_CHECKING:
    from ..store import Store
from .hello import SHARED_READ_BYTES

# How long a relay waits for a host that another relay is starting: a load that rebuilds a
# 100k-item index takes tens of seconds. Past it the relay serves in its own process.
SHARED_START_TIMEOUT_S: Final = 180.0
# How often a relay looks again while another relay's host is starting.
SHARED_POLL_S: Final = 0.02

log = logging.getLogger(__name__)

# The host body: runs in the forked host process with (listener path, lock fd) and returns an
# exit code. Its stderr is a pipe to the starting relay until it points it elsewhere, which
# tells the relay that it listens.
HostMain = Callable[[str, int], int]


def serve_shared(
    state_dir: str,
    *,
    scope: str | None,
    default_scope: str | None = None,
    snapshot_interval: float,
    settings: Mapping[str, Any],
    load_store: Callable[[str], Store | None],
) -> int | None:
    """Serve this stdio client through the shared host for `state_dir` and these settings,
    starting the host when none runs; the exit code, or None when sharing is unavailable here
    and the caller serves the client in its own process.

    `scope` is the one the command line fixed (None: each client's own project), `default_scope`
    the one a client that sends no roots gets (None: the project of this working directory). `settings` is
    the rest of what a host must agree on with its clients; `load_store(scope)` loads the
    store in the forked host, or says on stderr why it cannot and returns None."""
    if not _can_share():
        return None
    where = os.path.abspath(state_dir)
    project = scope or default_scope or project_scope()
    key = host_key(
        {
            **settings,
            "state_dir": os.path.realpath(state_dir),
            "scope": scope,
            "snapshot_interval": snapshot_interval,
        }
    )

    def host_main(path: str, lock_fd: int) -> int:
        from ..runtime import PROCESS

        PROCESS.pause_for_start()  # before the host's imports: no collection until it is built
        from .host import run_host

        return run_host(
            lambda: load_store(project),
            state_dir=where,
            path=path,
            lock_fd=lock_fd,
            snapshot_interval=snapshot_interval,
            scope_fixed=bool(scope),
        )

    try:
        sock = connect_or_start(key, project, host_main)
    except HostFailed:
        return 1
    except SharingUnavailable as exc:
        log.warning("serving this client in its own process: %s", exc)
        return None
    except KeyboardInterrupt:
        return 130
    with sock:
        return relay(sock)


def _can_share() -> bool:
    """Fork and Unix sockets are needed. As PID 1 (a container's entrypoint) there is nothing to
    share with, and a process it forks would be killed with it: serve in this process."""
    return hasattr(os, "fork") and hasattr(socket, "AF_UNIX") and os.getpid() != 1


class HostFailed(SharingUnavailable):
    """The host this relay started exited without listening; it said why on stderr."""


def _connect(path: Path, scope: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        if say_hello(sock, scope, SHARED_START_TIMEOUT_S) is not None:
            return sock
    except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
        pass
    except OSError as exc:
        sock.close()
        raise SharingUnavailable(f"cannot connect to {path}: {exc.strerror or exc}") from exc
    sock.close()
    return None


def _start_host(path: Path, lock_fd: int, host_main: HostMain) -> None:
    """Fork the host (detached in its own session), then copy what it writes while starting
    (warnings, or why it could not start) to our stderr until it listens or exits."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a host killed before it could remove it: we hold its lock now
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked processes
        code = 1
        try:
            os.close(read_end)
            os.setsid()
            if os.fork():
                os._exit(0)  # the host is re-parented to init and never becomes our zombie
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)  # stdout is the client's wire: the host must never write to it
            os.dup2(write_end, 2)
            os.close(null)
            os.close(write_end)
            code = host_main(str(path), lock_fd)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            with contextlib.suppress(BaseException):
                sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    os.close(lock_fd)  # the host holds the lock now
    os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as messages:
        while chunk := messages.read1(65536):
            sys.stderr.buffer.write(chunk)
            sys.stderr.flush()


def connect_or_start(key: str, scope: str, host_main: HostMain) -> socket.socket:
    """A connection to the host for `key`, said hello to, starting the host when none runs.
    Raises SharingUnavailable when none could be reached in time."""
    base = runtime_dir()
    path, lock_path = base / f"{key}.sock", base / f"{key}.lock"
    deadline = time.monotonic() + SHARED_START_TIMEOUT_S
    started = False
    while time.monotonic() < deadline:
        sock = _connect(path, scope)
        if sock is not None:
            return sock
        if started:
            raise HostFailed("the host it started exited")  # its reasons went to stderr
        try:
            lock_fd = try_lock(lock_path, create=True)
        except OSError as exc:
            raise SharingUnavailable(f"cannot lock {lock_path}: {exc.strerror}") from exc
        if lock_fd is None:
            time.sleep(SHARED_POLL_S)  # a host is starting, or stopping
            continue
        sock = _connect(path, scope)  # one may have started between our try and the lock
        if sock is not None:
            os.close(lock_fd)
            return sock
        sweep(base, keep=lock_path)
        _start_host(path, lock_fd, host_main)
        started = True
    raise SharingUnavailable(f"no host answered on {path} within {SHARED_START_TIMEOUT_S:g} s")


def relay(sock: socket.socket) -> int:
    """Copy stdin to the host and the host to stdout until the host closes. 0 when our client
    ended first (the host then saved and let go), 1 when the host went away first.

    SIGTERM and SIGINT end the session as a closed stdin does, and the relay still waits for
    the host: a server asked to stop has saved when it exits, as one serving in-process does."""
    client_done = threading.Event()

    def end_session() -> None:
        client_done.set()
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)

    def upstream() -> None:
        try:
            while chunk := os.read(0, SHARED_READ_BYTES):
                sock.sendall(chunk)
        except OSError:
            pass
        finally:
            end_session()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: end_session())
    threading.Thread(target=upstream, name="stdin-to-host", daemon=True).start()
    try:
        while True:
            try:
                chunk = sock.recv(SHARED_READ_BYTES)
            except OSError:
                chunk = b""
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(1, view) :]
    except BrokenPipeError:
        return 0  # our client stopped reading: it is gone
    if client_done.is_set():
        return 0
    print("compactor: the shared server process stopped; this session has ended.", file=sys.stderr)
    return 1
