"""compactor/stdio_runtime.py is the one module that relies on SDK internals (pyproject accepts
any mcp<3). These tests fail when the SDK changes what it relies on, and when any other module
starts relying on SDK internals too."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import anyio
from mcp.server.mcpserver import MCPServer

from compactor.mcp import stdio_runtime

PKG = Path(__file__).resolve().parents[2] / "compactor"


def test_the_lowlevel_server_runs_on_a_pair_of_streams():
    lowlevel = stdio_runtime.lowlevel_server(MCPServer("probe"))
    assert inspect.iscoroutinefunction(lowlevel.run)
    params = list(inspect.signature(lowlevel.run).parameters)
    assert len(params) >= 3, params  # read stream, write stream, initialization options
    assert lowlevel.create_initialization_options() is not None


def test_context_streams_are_a_memory_stream_pair():
    async def main() -> None:
        send, receive = stdio_runtime.create_context_streams[int](1)
        async with send, receive:
            await send.send(7)
            assert await receive.receive() == 7

    anyio.run(main)


def test_no_other_module_uses_sdk_internals():
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "stdio_runtime.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("mcp", "mcp_types"):
                assert not any(part.startswith("_") for part in (node.module or "").split(".")), (path, node.module)
                assert not any(a.name.startswith("_") for a in node.names), (path, node.module)
            if isinstance(node, ast.Attribute) and node.attr == "_lowlevel_server":
                raise AssertionError(f"{path.name} line {node.lineno} reaches the SDK's _lowlevel_server")
