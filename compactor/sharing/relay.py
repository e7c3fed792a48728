"""Several stdio clients of one state dir share one store process (the host, `sharing/host.py`).

Each Claude Code session starts its own `compactor`. Loading the whole store into each copy
cost every server after the first ~80 MiB at 10k items and a full start. Instead, a stdio
`compactor` with a state dir is a relay: it connects to the host for that state dir and
settings, or starts one (a fork of itself, in its own session, so a client's signals to its
relay do not reach it), then copies bytes between its stdin/stdout and the connection. The
relay imports nothing heavy, so a second server costs an interpreter.

The host is named by a key of everything that shapes how it serves (state dir, settings,
this code), so different settings get different hosts, which share the state dir as separate
processes always could. Its Unix socket and lock live in a private directory under the
temp dir (socket paths are limited to ~100 bytes). The lock is held by the host from its
start until it stops listening; a relay that cannot connect and finds the lock free starts
the host.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import constants as C

# The host body: runs in the forked host process with (listener path, lock fd) and returns an
# exit code. Its stderr is a pipe to the starting relay until it points it elsewhere, which
# tells the relay that it listens.
HostMain = Callable[[str, int], int]


class SharingUnavailable(Exception):
    """The relay cannot reach or start a host here: the caller serves in its own process."""


class HostFailed(SharingUnavailable):
    """The host this relay started exited without listening; it said why on stderr."""


def host_key(settings: dict[str, Any]) -> str:
    """The name of the host that serves these settings with this code. The code's files (each
    one's time and size) are part of it: an edited or upgraded install must not be served by a
    host that still runs the old code (under 1 ms: a stat per module)."""
    from .. import __file__ as package_file
    from .. import __version__

    code = os.path.dirname(package_file)
    stamp: list[tuple[str, int, int]] = []
    for root, dirs, files in os.walk(code):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            st = os.stat(os.path.join(root, name))
            stamp.append((os.path.join(root, name), st.st_mtime_ns, st.st_size))
    named = {**settings, "version": __version__, "code": code, "stamp": stamp, "python": sys.executable}
    return hashlib.sha256(json.dumps(named, sort_keys=True, default=str).encode()).hexdigest()[:24]


def runtime_dir() -> Path:
    """A directory only this user can use, for host sockets and locks. Raises SharingUnavailable
    when another user owns it or can write it: a socket there could be someone else's host."""
    path = Path(tempfile.gettempdir()) / f"compactor-{os.getuid()}"
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SharingUnavailable(f"cannot make {path}: {exc.strerror}") from exc
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise SharingUnavailable(f"{path} is not a private directory of uid {os.getuid()}")
    return path


def _hello(sock: socket.socket, scope: str, timeout: float) -> dict[str, Any] | None:
    """Say hello and read the host's; None when the host closed first (it was stopping)."""
    sock.sendall(json.dumps({"scope": scope, "pid": os.getpid()}).encode() + b"\n")
    sock.settimeout(timeout)
    data = b""
    while b"\n" not in data:
        try:
            chunk = sock.recv(4096)
        except (ConnectionError, TimeoutError):
            return None
        if not chunk:
            return None
        data += chunk
    sock.settimeout(None)
    line, _, rest = data.partition(b"\n")
    if rest:  # the host speaks only after the client's first message: nothing can follow the hello
        return None
    try:
        reply = json.loads(line)
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


def _connect(path: Path, scope: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        if _hello(sock, scope, C.SHARED_START_TIMEOUT_S) is not None:
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
    deadline = time.monotonic() + C.SHARED_START_TIMEOUT_S
    started = False
    while time.monotonic() < deadline:
        sock = _connect(path, scope)
        if sock is not None:
            return sock
        if started:
            raise HostFailed("the host it started exited")  # its reasons went to stderr
        try:
            lock_fd = _try_lock(lock_path, create=True)
        except OSError as exc:
            raise SharingUnavailable(f"cannot lock {lock_path}: {exc.strerror}") from exc
        if lock_fd is None:
            time.sleep(C.SHARED_POLL_S)  # a host is starting, or stopping
            continue
        sock = _connect(path, scope)  # one may have started between our try and the lock
        if sock is not None:
            os.close(lock_fd)
            return sock
        _sweep(base, keep=lock_path)
        _start_host(path, lock_fd, host_main)
        started = True
    raise SharingUnavailable(f"no host answered on {path} within {C.SHARED_START_TIMEOUT_S:g} s")


def _sweep(base: Path, keep: Path) -> None:
    """Remove what killed hosts left: a lock nobody holds, and its socket. Rare (a relay does it
    only when it starts a host) and safe: a relay that locked a removed file tries again."""
    for lock_path in base.glob("*.lock"):
        if lock_path == keep:
            continue
        try:
            fd = _try_lock(lock_path, create=False)
        except OSError:
            continue  # gone meanwhile
        if fd is not None:  # nobody holds it: no host runs or starts
            release_host_lock(str(lock_path.with_suffix(".sock")), fd)


def _try_lock(path: Path, *, create: bool) -> int | None:
    """The lock file at `path` open and exclusively locked, or None when someone holds it or a
    stopping host has removed it (the file we locked is no longer the one named `path`: the
    caller tries again). OSError for anything else."""
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        named, mine = os.stat(path), os.fstat(fd)
        if (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
    except FileNotFoundError:
        pass
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    os.close(fd)
    return None


def release_host_lock(sock_path: str, lock_fd: int) -> None:
    """How a host stops listening: its socket's name goes, then its lock file (a relay that
    locked the removed file sees it is no longer named and tries again), then the lock."""
    for path in (sock_path, sock_path.removesuffix(".sock") + ".lock"):
        with contextlib.suppress(OSError):
            os.unlink(path)
    with contextlib.suppress(OSError):
        os.close(lock_fd)


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
            while chunk := os.read(0, C.SHARED_READ_BYTES):
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
                chunk = sock.recv(C.SHARED_READ_BYTES)
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
