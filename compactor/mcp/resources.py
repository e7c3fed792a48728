"""MCP beyond tools: resources `memory://status` and `memory://items/{id}`, and a prompt
`recall` that clients offering prompts show as a slash command. Each only reads; every one of
them has a tool that does the same (status, get, recall) for clients without these features."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from pydantic import Field

from ..errors import CompactorError, NotFoundError
from ..render import page_end
from ..report import item_report, status_report
from ..store import Store

RECALL_PROMPT = """\
Here is my working memory from compactor: pinned items, then the most valuable memories. Use
it for what follows; call compactor's `query` or `get` for anything it only previews.
"""


def register(mcp: MCPServer, store: Store) -> None:
    @mcp.resource(
        "memory://status",
        name="status",
        title="Memory status",
        description="Budget, usage, and item counts per tier, type and summary depth.",
        mime_type="text/plain",
    )
    def status() -> str:
        try:
            with store.serving():
                status = store.status()
                shape = store.dag_shape()
        except CompactorError as exc:
            raise ResourceError(str(exc)) from exc
        return "\n".join(status_report(status, shape, None))

    @mcp.resource(
        "memory://items/{id}",
        name="item",
        title="One memory item",
        description=(
            "One item, whatever its tier or view: summary, lineage, history and the first page of its "
            "content (the get tool reads on)."
        ),
        mime_type="text/plain",
    )
    def item(id: str) -> str:
        try:
            with store.serving():
                it = store.get(id)
                # One page of content, as `get` gives: a reply has a bound, whatever the item.
                end = page_end(it.content, 0, store.counter.count)
                return "\n".join(item_report(store, it, content_end=end))
        except NotFoundError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        except CompactorError as exc:
            raise ResourceError(str(exc)) from exc

    @mcp.prompt(
        name="recall",
        title="Recall memory",
        description="Put compactor's budgeted recall (pinned items, recent and most valuable memories) into the chat.",
    )
    def recall(
        query: Annotated[str | None, Field(description="What you are about to work on (ranks by relevance).")] = None,
    ) -> str:
        with store.serving():
            text = store.recall(limit=20, query=query or None).text
        head = RECALL_PROMPT + (f"\nThe task: {query}\n" if query else "")
        return f"{head}\n{text}"
