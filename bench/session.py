"""One server subprocess driven over stdio, with timed tool calls.

Two clients, same interface:

- ``RawConnection`` (the default): newline-delimited JSON-RPC written to the server's stdin and
  read from its stdout, nothing else. Its latency is the server's: what any client pays on top
  is the client's own cost, and Claude Code's client is not Python.
- ``Connection``: the official Python client (``mcp.Client``), which also validates every
  result against the tool's outputSchema with ``jsonschema`` (about 1 ms a call more).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, TextIO

import anyio
import anyio.abc
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import TextContent

from bench import proc

# A compaction or bulk load of 100k items must not be cut off; a smoke run sets it lower so a
# lost reply fails fast instead of hanging.
CALL_TIMEOUT_S = float(os.environ.get("COMPACTOR_BENCH_CALL_TIMEOUT", "600"))


class ToolCallError(RuntimeError):
    """The server answered a call with isError, or an answer lacked a field the harness needs."""


@dataclass(frozen=True)
class Reply:
    ms: float
    data: dict[str, Any]
    text_bytes: int
    struct_bytes: int


def _payload(texts: list[str], structured: dict[str, Any] | None) -> tuple[dict[str, Any], int, int]:
    """(data, text bytes, structured bytes) of a reply, from its text blocks and structured content."""
    text_bytes = sum(len(t.encode()) for t in texts)
    if structured is None:
        # A server without structured output: its text may still be the JSON object.
        try:
            parsed = json.loads(texts[0]) if texts else None
        except ValueError:
            parsed = None
        return (parsed if isinstance(parsed, dict) else {}), text_bytes, 0
    return structured, text_bytes, len(json.dumps(structured, separators=(",", ":")))


class Connection:
    """``async with Connection(cmd, env, errlog) as conn``: spawn, initialize, and on exit shut down.

    ``opened_ms`` is spawn-to-initialized; ``closed_ms`` is the time the server took to exit after
    its stdin closed (it writes its shutdown snapshot then); ``pids`` are the server's processes.
    """

    def __init__(self, command: list[str], env: dict[str, str], errlog: TextIO) -> None:
        params = StdioServerParameters(command=command[0], args=command[1:], env=env)
        self._client = Client(stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=CALL_TIMEOUT_S)
        self.pids: list[int] = []
        self.started_at = 0.0
        self.opened_ms = 0.0
        self.closed_ms = 0.0

    async def __aenter__(self) -> Connection:
        before = proc.my_children()
        self.started_at = time.perf_counter()
        await self._client.__aenter__()
        self.opened_ms = (time.perf_counter() - self.started_at) * 1000
        spawned = sorted(proc.my_children() - before)
        tree = spawned + [d for p in spawned for d in proc.descendants_of(p)]
        self.pids = tree + proc.shared_hosts(tree)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        started = time.perf_counter()
        await self._client.__aexit__(exc_type, exc, tb)
        self.closed_ms = (time.perf_counter() - started) * 1000

    def peak_rss_mib(self) -> float | None:
        return proc.peak_rss_mib(self.pids)

    async def list_tools(self) -> list[str]:
        return [t.name for t in (await self._client.list_tools()).tools]

    async def call(self, name: str, args: dict[str, Any]) -> Reply:
        started = time.perf_counter_ns()
        result = await self._client.call_tool(name, args)
        ms = (time.perf_counter_ns() - started) / 1e6
        texts = [c.text for c in result.content if isinstance(c, TextContent)]
        if result.is_error:
            raise ToolCallError(f"{name} returned an error: {' '.join(texts)[:300]}")
        data, text_bytes, struct_bytes = _payload(texts, result.structured_content)
        return Reply(ms=ms, data=data, text_bytes=text_bytes, struct_bytes=struct_bytes)


class Conn(Protocol):
    """What the measurements need of a connection; both clients provide it."""

    started_at: float
    opened_ms: float
    closed_ms: float
    pids: list[int]

    async def __aenter__(self) -> Conn: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def peak_rss_mib(self) -> float | None: ...

    async def list_tools(self) -> list[str]: ...

    async def call(self, name: str, args: dict[str, Any]) -> Reply: ...


PROTOCOL_VERSION = "2025-06-18"


class RawConnection:
    """``async with RawConnection(cmd, env, errlog) as conn``: the same as `Connection` with a
    minimal JSON-RPC client: one line out per request, lines in until the reply with its id."""

    def __init__(self, command: list[str], env: dict[str, str], errlog: TextIO) -> None:
        self._command = command
        self._env = env
        self._errlog = errlog
        self._proc: anyio.abc.Process | None = None
        self._buf = b""
        self._next_id = 0
        self.pids: list[int] = []
        self.started_at = 0.0
        self.opened_ms = 0.0
        self.closed_ms = 0.0

    async def __aenter__(self) -> RawConnection:
        self.started_at = time.perf_counter()
        self._proc = await anyio.open_process(
            self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog, env=self._env
        )
        tree = [self._proc.pid, *proc.descendants_of(self._proc.pid)]
        await self._request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "compactor-bench", "version": "1"},
            },
        )
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.pids = tree + proc.shared_hosts(tree)  # a shared host exists once the server answered
        self.opened_ms = (time.perf_counter() - self.started_at) * 1000
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        started = time.perf_counter()
        process = self._proc
        if process is None:
            return
        try:
            assert process.stdin is not None
            await process.stdin.aclose()
            with anyio.fail_after(CALL_TIMEOUT_S):
                await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        self.closed_ms = (time.perf_counter() - started) * 1000

    def peak_rss_mib(self) -> float | None:
        return proc.peak_rss_mib(self.pids)

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._proc is not None
        assert self._proc.stdin is not None
        await self._proc.stdin.send(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        wanted = self._next_id
        await self._send({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params})
        with anyio.fail_after(CALL_TIMEOUT_S):
            while True:
                message = json.loads(await self._line())
                if message.get("id") != wanted or "method" in message:
                    continue  # notifications, and requests we do not serve (we declare no capabilities)
                if "error" in message:
                    raise ToolCallError(f"{method}: JSON-RPC error {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    async def _line(self) -> bytes:
        assert self._proc is not None
        assert self._proc.stdout is not None
        while b"\n" not in self._buf:
            chunk = await self._proc.stdout.receive(1 << 16)
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    async def list_tools(self) -> list[str]:
        result = await self._request("tools/list", {})
        return [t["name"] for t in result["tools"]]

    async def call(self, name: str, args: dict[str, Any]) -> Reply:
        started = time.perf_counter_ns()
        result = await self._request("tools/call", {"name": name, "arguments": args})
        ms = (time.perf_counter_ns() - started) / 1e6
        texts = [c["text"] for c in result.get("content", []) if c.get("type") == "text"]
        if result.get("isError"):
            raise ToolCallError(f"{name} returned an error: {' '.join(texts)[:300]}")
        data, text_bytes, struct_bytes = _payload(texts, result.get("structuredContent"))
        return Reply(ms=ms, data=data, text_bytes=text_bytes, struct_bytes=struct_bytes)


CLIENTS: dict[str, type[Connection] | type[RawConnection]] = {"raw": RawConnection, "sdk": Connection}
