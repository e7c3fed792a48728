"""The tools over the summary DAG: expand a summary node, dissolve one, and see the DAG as a
tree."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from .. import constants as C
from ..render import page_span
from ..summaries.condense import gist
from . import schemas as S
from .kit import READ_ONLY, WRITE_IDEMPOTENT, IdArg, ToolKit
from .replies import bounded, result


def register(kit: ToolKit) -> None:
    store = kit.store

    @kit.tool(
        name="expand",
        annotations=READ_ONLY,
        description="Open a summary node to see its children, paged.",
    )
    async def expand(
        ctx: Context,
        id: IdArg,
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=C.LIST_LIMIT_MAX)] = 20,
    ) -> Annotated[CallToolResult, S.ExpandResult]:
        def go() -> CallToolResult:
            node, kids, total = store.expand(id, offset=offset, limit=limit)
            nxt = offset + len(kids)
            lines = [
                f"{node.id} (d{node.depth}, {node.quality or ''}): "
                f"{page_span('children', offset, len(kids), total)}"
                + (f"; {len(node.gone_children)} forgotten" if node.gone_children else "")
            ]
            lines.extend(f"- {k.id} d{k.depth} [{k.tier}] {gist(k, 140)}" for k in kids)
            if nxt < total:
                lines.append(f"(more: expand(id={node.id!r}, offset={nxt}))")
            model = S.ExpandResult(
                id=node.id,
                depth=node.depth,
                total=total,
                offset=offset,
                next_offset=nxt if nxt < total else None,
                gone=list(node.gone_children),
                children=[S.child(k) for k in kids],
            )
            return result(bounded("\n".join(lines)), model)

        return await kit.read(ctx, go)

    @kit.tool(
        name="dissolve",
        annotations=WRITE_IDEMPOTENT,
        description="Undo a summary node whose grouping is wrong; nothing is deleted.",
    )
    async def dissolve(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.DissolveResult]:
        def go() -> CallToolResult:
            kids = store.dissolve(id)
            back = "active memory" if kids and kids[0].tier == "active" else "the archive"
            children = "1 child" if len(kids) == 1 else f"{len(kids):,} children"
            text = f"Dissolved {id}: {children} back in {back}.\n{kit.line()}"
            model = S.DissolveResult(id=id, children=[S.child(k) for k in kids[:200]], budget=kit.budget())
            return result(text, model)

        return await kit.run(ctx, go)

    @kit.tool(
        name="tree",
        annotations=READ_ONLY,
        description="See which summary nodes cover which items: the DAG as text.",
    )
    async def tree(
        ctx: Context,
        root: Annotated[str | None, Field(max_length=C.ID_MAX_CHARS)] = None,
        max_depth: Annotated[int, Field(ge=1, le=C.TREE_DEPTH_MAX)] = 2,
    ) -> Annotated[CallToolResult, S.TreeResult]:
        def go() -> CallToolResult:
            # The read scope's nodes only: a node is of its children's project.
            text = store.tree(root=root, max_depth=max_depth, scope=None)
            shape = store.dag_shape(scope=None)
            model = S.TreeResult(
                text=text,
                roots=[r.id for r in store.roots(scope=None)][:100],
                nodes_per_depth={str(d): c["active"] + c["archived"] for d, c in shape.items()},
            )
            return result(text, model)

        return await kit.read(ctx, go)
