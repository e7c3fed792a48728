"""One server subprocess driven over stdio by the official MCP client, with timed tool calls."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult, TextContent

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


def _payload(result: CallToolResult) -> tuple[dict[str, Any], int, int]:
    texts = [c.text for c in result.content if isinstance(c, TextContent)]
    text_bytes = sum(len(t.encode()) for t in texts)
    data = result.structured_content
    if data is None:
        # A server without structured output: its text may still be the JSON object.
        try:
            parsed = json.loads(texts[0]) if texts else None
        except ValueError:
            parsed = None
        data = parsed if isinstance(parsed, dict) else {}
        return data, text_bytes, 0
    return data, text_bytes, len(json.dumps(data, separators=(",", ":")))


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
        self.pids = spawned + [d for p in spawned for d in proc.descendants_of(p)]
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
        data, text_bytes, struct_bytes = _payload(result)
        if result.is_error:
            texts = " ".join(c.text for c in result.content if isinstance(c, TextContent))
            raise ToolCallError(f"{name} returned an error: {texts[:300]}")
        return Reply(ms=ms, data=data, text_bytes=text_bytes, struct_bytes=struct_bytes)
