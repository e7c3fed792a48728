"""compactor/mcp/sdk.py is the one module that relies on SDK internals (pyproject accepts any
mcp<3). These tests fail when the SDK changes what it relies on, and when any other module
starts relying on SDK internals too."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools import Tool

from compactor.mcp import build_server, sdk
from compactor.mcp.server import TOOL_ORDER
from compactor.store import Store

PKG = Path(__file__).resolve().parents[2] / "compactor"
# The SDK's private attributes sdk.py reads; no other module may name them.
SDK_PRIVATE_ATTRIBUTES = {"_tool_manager", "_lowlevel_server", "_resource_manager", "_prompt_manager"}


def test_the_lowlevel_server_runs_on_a_pair_of_streams():
    lowlevel = sdk.lowlevel(MCPServer("probe"))
    assert inspect.iscoroutinefunction(lowlevel.run)
    params = list(inspect.signature(lowlevel.run).parameters)
    assert len(params) >= 3, params  # read stream, write stream, initialization options
    assert lowlevel.create_initialization_options() is not None


def test_context_streams_are_a_memory_stream_pair():
    async def main() -> None:
        send, receive = sdk.create_context_streams[int](1)
        async with send, receive:
            await send.send(7)
            assert await receive.receive() == 7

    anyio.run(main)


def test_registered_tools_are_the_tool_objects_in_registration_order():
    server = build_server(Store())
    tools = sdk.registered_tools(server)
    assert [tool.name for tool in tools] == list(TOOL_ORDER)
    for tool in tools:
        # What the contract and the factory read from each tool.
        assert isinstance(tool, Tool)
        assert callable(tool.fn)
        assert isinstance(tool.parameters, dict)
        assert tool.fn_metadata.arg_model is not None
        assert callable(tool.fn_metadata.pre_parse_json)
        assert callable(tool.fn_metadata.convert_result)


def test_get_tool_finds_a_registered_tool_by_name_and_none_otherwise():
    server = build_server(Store())
    tool = sdk.get_tool(server, "status")
    assert tool is not None and tool.name == "status"
    assert tool is sdk.registered_tools(server)[TOOL_ORDER.index("status")]
    assert sdk.get_tool(server, "no_such_tool") is None


def _sdk_private_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("mcp", "mcp_types"):
            if any(part.startswith("_") for part in (node.module or "").split(".")):
                found.append(f"line {node.lineno} imports {node.module}")
            found += [f"line {node.lineno} imports {a.name}" for a in node.names if a.name.startswith("_")]
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno} imports {a.name}"
                for a in node.names
                if a.name.split(".")[0] in ("mcp", "mcp_types") and any(p.startswith("_") for p in a.name.split("."))
            ]
        if isinstance(node, ast.Attribute) and node.attr in SDK_PRIVATE_ATTRIBUTES:
            found.append(f"line {node.lineno} reaches the SDK's {node.attr}")
    return found


def test_no_other_module_uses_sdk_internals():
    wrong = {
        str(path.relative_to(PKG.parent)): uses
        for path in sorted(PKG.rglob("*.py"))
        if path != PKG / "mcp" / "sdk.py" and (uses := _sdk_private_uses(path))
    }
    assert not wrong, f"only compactor/mcp/sdk.py may use the SDK's private parts: {wrong}"


@pytest.mark.parametrize(
    "source",
    [
        "from mcp.shared._context_streams import create_context_streams",
        "import mcp.shared._httpx_utils",
        "from mcp.server import _private",
        "def f(server):\n    return server._tool_manager\n",
        "def f(server):\n    return server._lowlevel_server.run\n",
    ],
)
def test_the_guard_sees_each_kind_of_private_use(tmp_path: Path, source: str):
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert _sdk_private_uses(path)


def test_the_guard_passes_the_accessors_users():
    # The modules that used to reach in now go through sdk.py and pass.
    for name in ("contract.py", "server.py", "stdio_runtime.py"):
        assert _sdk_private_uses(PKG / "mcp" / name) == [], name
    assert _sdk_private_uses(PKG / "mcp" / "sdk.py")  # and the guard does see sdk.py's own
