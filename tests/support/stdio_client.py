"""A minimal line-delimited JSON-RPC driver for a real `compactor` subprocess.

Tests use it where they need the process itself: to SIGKILL it, close its stdin, or send
bytes no well-behaved client would.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.conftest import server_command, server_env


class StdioServer:
    def __init__(
        self,
        *args: str,
        cwd: Path | None = None,
        client_name: str = "pytest",
        env: dict[str, str] | None = None,
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        """Start `compactor ARGS`, or (`process`) speak to one already started with pipes."""
        self.proc = process or subprocess.Popen(
            server_command(*args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env if env is not None else server_env(),
            cwd=cwd,
        )
        self._id = 0
        self._buf = b""
        self.initialize(client_name)

    @staticmethod
    def command(*args: str) -> list[str]:
        return server_command(*args)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _stderr_tail(self) -> str:
        """The last lines the server wrote to stderr, once it has exited (for a failure message)."""
        if self.proc.stderr is None:
            return ""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        if self.proc.returncode is None:
            return "(still running)"
        return "\n".join(self.proc.stderr.read().decode(errors="replace").splitlines()[-15:])

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def read_message(self, timeout: float = 30.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from the server")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise EOFError(f"server closed stdout; its stderr ends:\n{self._stderr_tail()}")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)  # type: ignore[no-any-return]

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self._id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        while True:
            reply = self.read_message(timeout)
            if reply.get("id") == self._id:
                return reply

    def initialize(self, client_name: str) -> None:
        reply = self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": client_name, "version": "1"},
            },
        )
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        reply = self.request("tools/call", {"name": tool, "arguments": arguments})
        assert "result" in reply, reply
        return reply["result"]  # type: ignore[no-any-return]

    def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        result = self.call(tool, **arguments)
        assert not result.get("isError"), result
        return result["structuredContent"]  # type: ignore[no-any-return]

    def export_records(self) -> list[dict[str, Any]]:
        """Every item as `export` pages them (all tiers), cursor after cursor, in page order."""
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            args: dict[str, Any] = {"tier": "all"}
            if cursor:
                args["cursor"] = cursor
            page = self.ok("export", **args)
            out.extend(page["items"])
            cursor = page["next_cursor"]
            if not cursor:
                return out

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        if not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()

    def wait(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.close_stdin()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()

    def __enter__(self) -> StdioServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
