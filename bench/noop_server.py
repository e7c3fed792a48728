"""The floor: an MCP stdio server on the same SDK whose one tool does nothing.

``noop`` receives the same request payload the measured call carried (``payload`` for a string
argument, ``items`` for a bulk batch) and answers with a reply of the requested size
(``text_bytes`` of text content, ``struct_bytes`` of padding in the structured content), so a
figure divided by the floor shows what the server adds over the SDK's own per-call cost:
JSON-RPC framing, pydantic validation of arguments and output, the client's schema check.

It accepts and ignores the compactor's command-line flags, so the harness starts it the same way.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel

logger = logging.getLogger("bench.noop_server")


class NoopResult(BaseModel):
    ok: bool
    received: int
    pad: str


def build_server() -> MCPServer:
    server = MCPServer(name="bench-noop", instructions="Benchmark floor: one tool that does nothing.")

    @server.tool(
        description="Do nothing; reply with the requested sizes. Benchmark floor.",
        annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True),
    )
    async def noop(
        payload: str = "",
        items: list[dict[str, Any]] | None = None,
        text_bytes: int = 0,
        struct_bytes: int = 0,
    ) -> Annotated[CallToolResult, NoopResult]:
        received = len(payload) + (len(items) if items else 0)
        structured = NoopResult(ok=True, received=received, pad="x" * max(0, struct_bytes - 40))
        return CallToolResult(
            content=[TextContent(type="text", text="ok" + "." * max(0, text_bytes - 2))],
            structured_content=structured.model_dump(),
        )

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=int)
    parser.add_argument("--state-dir")
    parser.add_argument("--snapshot-interval", type=float)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper())
    if args.transport == "streamable-http":  # the HTTP floor (bench/team.py), served as compactor serves
        import uvicorn

        app = build_server().streamable_http_app(host="127.0.0.1", json_response=True)
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)
        return
    build_server().run("stdio")


if __name__ == "__main__":
    main()
