"""A real PostgreSQL cluster for the tests: initdb in a temp dir, pg_ctl on a free port, stopped
at the end. PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres`
user (Debian's package creates it) and every server command runs through `runuser`. Nothing is
skipped: if PostgreSQL cannot start, the fixture fails with what to install or fix.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

# Debian installs the server binaries here, and only the client wrappers on PATH.
PG_BIN_DIRS = [Path(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)]
HINT = "Install PostgreSQL (`apt-get install -y postgresql`; scripts/test does this when it is absent)."


def _tool(name: str) -> str:
    for d in PG_BIN_DIRS:
        if (d / name).exists():
            return str(d / name)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"PostgreSQL's `{name}` is not installed, so the PostgreSQL tests cannot run. {HINT}")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One initdb'd cluster, trust auth on 127.0.0.1 only (a throwaway test cluster)."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="compactor-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user: str | None = None
        self._ids = itertools.count(1)
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError(f"Running as root, and no `postgres` user to run PostgreSQL as. {HINT}") from None
            self.user = "postgres"
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        os.chmod(self.root, 0o755)

    def _run(self, *argv: str, timeout: float = 120) -> None:
        cmd = list(argv) if self.user is None else ["runuser", "-u", self.user, "--", *argv]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if done.returncode:
            raise RuntimeError(
                f"`{' '.join(argv)}` failed ({done.returncode}):\n{done.stdout}\n{done.stderr}\n"
                f"The PostgreSQL tests need a working PostgreSQL server. {HINT}"
            )

    def start(self) -> None:
        self._run(_tool("initdb"), "-D", str(self.data), "-U", "compactor", "-A", "trust", "-E", "UTF8", "--no-sync")
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200 "
            "-c shared_buffers=32MB -c max_locks_per_transaction=128"
        )
        self._run(_tool("pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"), "-w", "start")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(_tool("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://compactor@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        """A fresh empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._ids)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")  # a name we made: digits and letters only
        return self.url(name)
