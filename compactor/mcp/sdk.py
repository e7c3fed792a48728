"""The one module that reaches into the SDK's private parts.

pyproject accepts any mcp<3, and the SDK gives no public way to do three things compactor needs:
read the tools an `MCPServer` registered as objects (their function, argument model and
published schema: `_tool_manager`), run the low-level server on streams of our own
(`_lowlevel_server`), and make the context-carrying stream pair that server expects
(`mcp.shared._context_streams`). Each is one small function here, so an SDK upgrade that moves
one breaks here alone: tests/mcp/test_sdk.py exercises every accessor against the installed SDK,
and fails if any other module of compactor/ uses an SDK private name.
"""

from __future__ import annotations

from typing import Any

from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.shared._context_streams import create_context_streams

__all__ = ["create_context_streams", "get_tool", "lowlevel", "registered_tools"]


def registered_tools(mcp: MCPServer) -> list[Tool]:
    """The tools `mcp` registered, in registration order (the order tools/list shows)."""
    return mcp._tool_manager.list_tools()


def get_tool(mcp: MCPServer, name: str) -> Tool | None:
    """The tool `mcp` registered as `name`, or None."""
    return mcp._tool_manager.get_tool(name)


def lowlevel(mcp: MCPServer) -> Server[Any]:
    """The low-level server under `mcp`: it runs on a read stream, a write stream and its
    initialization options."""
    return mcp._lowlevel_server
