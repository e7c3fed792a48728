"""The tools that change what is remembered: store, bulk_store, update, pin, unpin, restore and
forget. Each is one Store command; its reply ends with the budget line and what auto-compaction
did."""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from pydantic import BaseModel, Field

from .. import bounds
from .. import constants as C
from ..models import CompactReport, Item
from ..render import counted
from ..store import StoreInput
from . import contract
from . import schemas as S
from .kit import DESTRUCTIVE, WRITE, WRITE_IDEMPOTENT, IdArg, TagsArg, ToolKit
from .replies import compaction_text, redaction_text, result


class BulkItem(BaseModel):
    content: str = Field(min_length=1, max_length=C.MAX_CONTENT_BYTES)
    summary: str | None = Field(default=None, max_length=C.MAX_SUMMARY_CHARS)
    tags: list[str] | str | None = None
    importance: int = Field(default=C.IMPORTANCE_DEFAULT, ge=C.IMPORTANCE_MIN, le=C.IMPORTANCE_MAX)
    pinned: bool = False

    model_config = {"extra": "forbid"}


_BULK_PROPERTIES: dict[str, Any] = BulkItem.model_json_schema()["properties"]
_BULK_FIELDS = list(BulkItem.model_fields)


def register(kit: ToolKit) -> None:
    store = kit.store

    @kit.tool(
        name="store",
        annotations=WRITE,
        description=(
            "Remember what you will want again: decisions and why, errors and fixes, key code, "
            "conclusions. Give long content a one-line summary."
        ),
    )
    async def store_tool(
        ctx: Context,
        content: Annotated[str, Field()],
        summary: Annotated[str | None, Field(max_length=C.MAX_SUMMARY_CHARS, description="One line.")] = None,
        tags: TagsArg = None,
        importance: Annotated[
            int,
            Field(
                ge=C.IMPORTANCE_MIN,
                le=C.IMPORTANCE_MAX,
                description="10: critical.",
            ),
        ] = C.IMPORTANCE_DEFAULT,
        pinned: Annotated[bool, Field()] = False,
        scope: Annotated[
            str | None,
            Field(max_length=C.SCOPE_MAX_CHARS, description="'global': user-wide; default: this project."),
        ] = None,
    ) -> Annotated[CallToolResult, S.StoreResult]:
        def go() -> CallToolResult:
            res = store.store(content, summary=summary, tags=tags, importance=importance, pinned=pinned, scope=scope)
            it = res.item
            text = (
                f"Stored {it.id} ({it.content_type}, {counted(it.content_tokens, 'token')}, "
                f"tags: {', '.join(it.tags) or '-'}).{redaction_text(res.redacted)}\n"
                f"{kit.line()}{compaction_text(res.compaction)}"
            )
            model = S.StoreResult(
                id=it.id,
                tokens=it.content_tokens,
                content_type=it.content_type,
                tags=list(it.tags),
                importance=it.importance,
                pinned=it.pinned,
                budget=kit.budget(),
                compaction=S.compaction_summary(res.compaction),
                redacted=S.redactions(res.redacted),
            )
            return result(text, model)

        return await kit.run(ctx, go)

    @kit.tool(
        name="bulk_store",
        annotations=WRITE,
        description="Store many items in one call, all or nothing.",
    )
    async def bulk_store(
        ctx: Context,
        items: Annotated[
            list[dict[str, Any]] | str,
            Field(description="[{content, summary?, tags?, importance?, pinned?}]"),
        ],
    ) -> Annotated[CallToolResult, S.BulkStoreResult]:
        def go() -> CallToolResult:
            raw: Any = items
            if isinstance(raw, str):
                try:
                    raw = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise ToolError(f"items is a string but not valid JSON ({exc.msg} at {exc.pos}).") from exc
                except RecursionError as exc:
                    raise ToolError(
                        "items is nested too deeply to read; send a JSON array of flat objects. Nothing was stored."
                    ) from exc
            if not isinstance(raw, list):
                raise ToolError("items must be a JSON array of objects.")
            if len(raw) > C.BULK_MAX_ITEMS:
                raise ToolError(f"items has {len(raw):,} entries; send at most {C.BULK_MAX_ITEMS:,} per call.")
            for i, entry in enumerate(raw):
                if not isinstance(entry, dict):
                    raise ToolError(
                        f"items[{i}] must be an object with content and optional {', '.join(_BULK_FIELDS[1:])}, "
                        f"got {bounds.describe_value(entry)}. Nothing was stored."
                    )
                problem = contract.arguments_problem(
                    "", BulkItem, _BULK_PROPERTIES, entry, path=f"items[{i}].", noun="field"
                )
                if problem is not None:
                    raise ToolError(f"{problem} Nothing was stored.")
            parsed = [BulkItem.model_validate(entry, strict=True) for entry in raw]
            res = store.bulk_store([StoreInput(p.content, p.summary, p.tags, p.importance, p.pinned) for p in parsed])
            tokens = sum(it.content_tokens for it in res.items)
            text = (
                f"Stored {counted(len(res.items), 'item')} ({counted(tokens, 'token')}): "
                f"{', '.join(it.id for it in res.items[:50])}{' ...' if len(res.items) > 50 else ''}"
                f"{redaction_text(res.redacted)}\n{kit.line()}{compaction_text(res.compaction)}"
            )
            model = S.BulkStoreResult(
                ids=[it.id for it in res.items],
                stored=len(res.items),
                tokens=tokens,
                budget=kit.budget(),
                compaction=S.compaction_summary(res.compaction),
                redacted=S.redactions(res.redacted),
            )
            return result(text, model)

        return await kit.run(ctx, go)

    def item_result(
        it: Item, verb: str, report: CompactReport | None = None, warnings: list[str] | None = None
    ) -> CallToolResult:
        # `it` is what the call returned, not a fresh get(): another process may forget the item
        # between the two, and a call that succeeded must not be reported as an error.
        model = S.ItemResult(
            id=it.id,
            tier=it.tier,
            view=it.view,
            pinned=it.pinned,
            importance=it.importance,
            tags=list(it.tags),
            tokens=it.view_tokens,
            budget=kit.budget(),
            compaction=S.compaction_summary(report),
            warnings=warnings or [],
        )
        warn = "".join(f"\nWarning: {w}" for w in warnings or [])
        return result(f"{verb} {it.id}.{warn}\n{kit.line()}{compaction_text(report)}", model)

    @kit.tool(
        name="update",
        annotations=WRITE_IDEMPOTENT,
        description=(
            "Change an item's summary, content, tags or importance. update(id, summary=...) is how "
            "summary nodes get their text."
        ),
    )
    async def update(
        ctx: Context,
        id: IdArg,
        summary: Annotated[str | None, Field(max_length=C.MAX_SUMMARY_CHARS)] = None,
        content: str | None = None,
        tags: TagsArg = None,
        importance: Annotated[int | None, Field(ge=C.IMPORTANCE_MIN, le=C.IMPORTANCE_MAX)] = None,
    ) -> Annotated[CallToolResult, S.ItemResult]:
        def go() -> CallToolResult:
            res = store.update(id, summary=summary, content=content, tags=tags, importance=importance)
            return item_result(res.item, "Updated", warnings=res.warnings)

        return await kit.run(ctx, go)

    @kit.tool(
        name="pin",
        annotations=WRITE_IDEMPOTENT,
        description="Keep an item in full for good (requirements, preferences).",
    )
    async def pin(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.ItemResult]:
        return await kit.run(ctx, lambda: item_result(store.pin(id), "Pinned"))

    @kit.tool(
        name="unpin",
        annotations=WRITE_IDEMPOTENT,
        description="Let compaction move a pinned item again when it may fade.",
    )
    async def unpin(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.ItemResult]:
        return await kit.run(ctx, lambda: item_result(store.unpin(id), "Unpinned"))

    @kit.tool(
        name="restore",
        annotations=WRITE_IDEMPOTENT,
        description="Bring an archived item back into active memory to keep it in view.",
    )
    async def restore(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.ItemResult]:
        def go() -> CallToolResult:
            it, report = store.restore(id)
            if it.tier == "archived":
                return item_result(it, "Too large for the budget, so still archived (get(id) reads it):", report)
            return item_result(it, "Restored", report)

        return await kit.run(ctx, go)

    @kit.tool(
        name="forget",
        annotations=DESTRUCTIVE,
        description="Delete an item for good (secrets, harmful mistakes); on a summary node, dissolve it.",
    )
    async def forget(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.ForgetResult]:
        def go() -> CallToolResult:
            gone = store.forget(id)
            if gone.depth:
                return result(
                    f"{id} was a summary: it was dissolved and its {len(gone.children)} children kept.\n{kit.line()}",
                    S.ForgetResult(id=id, forgotten=False, dissolved=True, budget=kit.budget()),
                )
            return result(
                f"Forgot {id} permanently.\n{kit.line()}", S.ForgetResult(id=id, forgotten=True, budget=kit.budget())
            )

        return await kit.run(ctx, go)
