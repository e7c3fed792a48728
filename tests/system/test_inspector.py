"""A real client we did not write: the official MCP Inspector CLI (npm
@modelcontextprotocol/inspector, what `npx @modelcontextprotocol/inspector --cli` runs) drives
the stdio server: tools/list, then store, query and get across separate server processes
sharing one state dir."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

INSPECTOR = ROOT / "node_modules" / ".bin" / "mcp-inspector"
INSTALL = "npm install --prefix . --no-save --no-audit --no-fund @modelcontextprotocol/inspector@2.12.0"


def inspector(state_dir: Path, *args: str) -> dict[str, Any]:
    assert INSPECTOR.exists(), (
        f"the MCP Inspector CLI is not installed: run `{INSTALL}` in {ROOT} (.ci/run does this before pytest)"
    )
    cmd = [
        str(INSPECTOR),
        "--cli",
        "-e",
        f"PYTHONPATH={ROOT}",
        sys.executable,
        "-m",
        "compactor",
        "--state-dir",
        str(state_dir),
        *args,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert res.returncode == 0, f"inspector failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def call(state_dir: Path, tool: str, **arguments: str) -> dict[str, Any]:
    args = ["--method", "tools/call", "--tool-name", tool]
    for key, value in arguments.items():
        args += ["--tool-arg", f"{key}={value}"]
    result = inspector(state_dir, *args)
    assert result.get("isError") is False, result
    return result["structuredContent"]  # type: ignore[no-any-return]


@pytest.mark.slow
def test_inspector_lists_tools_and_stores_queries_gets(tmp_path):
    state_dir = tmp_path / "state"
    listed = inspector(state_dir, "--method", "tools/list")
    tools = {t["name"]: t for t in listed["tools"]}
    assert {"store", "query", "get", "recall", "status", "forget"} <= set(tools)
    assert "content" in tools["store"]["inputSchema"]["required"]

    content = "The billing service retries a declined card 3 times, then emails the customer."
    stored = call(state_dir, "store", content=content, tags="billing,retries")
    item_id = stored["id"]
    assert stored["tokens"] > 0 and "billing" in stored["tags"]

    found = call(state_dir, "query", query="declined card retries")
    assert found["items"][0]["id"] == item_id

    got = call(state_dir, "get", id=item_id)
    assert got["content"] == content and got["tier"] == "active"
