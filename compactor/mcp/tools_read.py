"""The tools that read memory out: recall (the start of a session), query, get, list and
export. None changes an item; a query or a recall counts as an access."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from .. import constants as C
from ..errors import InvalidArgumentError
from ..render import fence, item_line, item_preview, page_end, page_span, preview
from ..search.views import describe as describe_view
from . import schemas as S
from .kit import READ_ONLY, WRITE_IDEMPOTENT, IdArg, ScopeArg, TagsArg, ToolKit
from .replies import bounded, result


def register(kit: ToolKit) -> None:
    store = kit.store

    @kit.tool(
        name="recall",
        annotations=READ_ONLY,
        description=(
            "Call first in every session (with query when you know the task): budget, pinned items and "
            "the most valuable memories."
        ),
    )
    async def recall(
        ctx: Context,
        limit: Annotated[int, Field(ge=1, le=C.LIST_LIMIT_MAX)] = 20,
        query: Annotated[str | None, Field(max_length=C.RECALL_QUERY_MAX_CHARS)] = None,
        scope: ScopeArg = None,
    ) -> Annotated[CallToolResult, S.RecallResult]:
        def go() -> CallToolResult:
            r = store.recall(limit=limit, query=query, scope=scope)
            model = S.RecallResult(
                budget=kit.budget(),
                items=[S.scored(it, 0.0) for it in r.pinned]
                + [S.scored(it, sc, path=store.ancestors(it) if it.tier == "archived" else None) for it, sc in r.items],
                pinned=len(r.pinned),
                more=r.more,
                tokens=r.tokens,
                text=r.text,
                left_out=r.left_out,
                needs_text=r.needs_text,
            )
            return result(r.text, model)

        return await kit.read(ctx, go)

    @kit.tool(
        name="query",
        annotations=WRITE_IDEMPOTENT,
        description=(
            "Search memory (archive too) before re-reading a file, re-running a command or debugging a known error."
        ),
    )
    async def query(
        ctx: Context,
        query: Annotated[str | None, Field(max_length=C.QUERY_MAX_CHARS)] = None,
        tags: TagsArg = None,
        limit: Annotated[int, Field(ge=1, le=C.QUERY_LIMIT_MAX)] = 10,
        include_archived: Annotated[bool, Field()] = True,
        scope: ScopeArg = None,
    ) -> Annotated[CallToolResult, S.QueryResult]:
        def go() -> CallToolResult:
            hits = store.query(query=query, tags=tags, limit=limit, include_archived=include_archived, scope=scope)
            items = []
            lines = []
            for h in hits:
                path = store.ancestors(h.item) if h.item.tier == "archived" else []
                extra = f"  (matched: {', '.join(h.matched)})" if h.matched else ""
                if path:
                    extra += f"  [covered by active summary {path[-1]}]"
                if h.reply_to:
                    extra += f"  [answers {h.reply_to}]"
                body = item_preview(h.item)
                lines.append(item_line(h.item, score=h.score, extra=extra, body=body))
                items.append(
                    S.scored_record(h.item, h.score, h.matched, path=path, preview_text=body, reply_to=h.reply_to)
                )
            none = "No matches. Try other words" + ("." if include_archived else ", or include_archived=true.")
            text = "\n".join(lines) if lines else none
            return result(text, {"items": items, "count": len(hits)})

        return await kit.read(ctx, go)

    @kit.tool(
        name="get",
        annotations=READ_ONLY,
        description="Read an item, whatever compaction did to it; next_offset pages long content.",
    )
    async def get(
        ctx: Context, id: IdArg, offset: Annotated[int | None, Field(ge=0)] = None
    ) -> Annotated[CallToolResult, S.GetResult]:
        def go() -> CallToolResult:
            it = store.get(id)
            if offset is not None and offset > len(it.content):
                raise InvalidArgumentError(
                    f"offset {offset:,} is past the end of {it.id}'s content ({len(it.content):,} characters)."
                )
            # One page at most, from `offset` (0 when left out): a 1 MiB item returned whole was
            # 2.1 million characters with its copy in structuredContent.
            start = offset or 0
            model = S.full(it, (start, page_end(it.content, start, store.counter.count)))
            head = (
                f"{it.id} ({it.content_type}, importance {it.importance}, {it.tier}, view: {it.view}"
                f"{', pinned' if it.pinned else ''}{', merged into ' + it.merged_into if it.merged_into else ''})"
            )
            parts = [head]
            if it.tags:
                parts.append("tags: " + ", ".join(it.tags))
            if it.summary:
                parts.append("summary: " + it.summary)
            if it.file_paths:
                parts.append(describe_view(it.file_command, it.file_paths, it.file_lines))
            if offset is None and model.next_offset is None:
                parts.append(it.content)
            else:
                end = start + len(model.content)
                more = f"more: get({it.id!r}, offset={end})" if model.next_offset is not None else "the end"
                parts += [model.content, f"(characters {start:,}-{end:,} of {len(it.content):,}; {more})"]
            return result("\n".join(parts), model)

        return await kit.read(ctx, go)

    @kit.tool(
        name="list",
        annotations=READ_ONLY,
        description="Browse what is stored, newest first, paged by tier.",
    )
    async def list_tool(
        ctx: Context,
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=C.LIST_LIMIT_MAX)] = 20,
        tier: Literal["active", "archived", "all"] = "active",
        scope: ScopeArg = None,
    ) -> Annotated[CallToolResult, S.ListResult]:
        def go() -> CallToolResult:
            page = store.list_items(offset=offset, limit=limit, tier=tier, scope=scope)
            nxt = offset + len(page.items)
            next_offset = nxt if nxt < page.total else None
            span = page_span("items", offset, len(page.items), page.total)
            lines = [f"{tier}: {span} (newest first)" if page.items else f"{tier}: {span}"]
            lines.extend(item_line(it) for it in page.items)
            if next_offset is not None:
                lines.append(f"(more: list(offset={next_offset}))")
            model = S.ListResult(
                items=[S.brief(it) for it in page.items], total=page.total, offset=offset, next_offset=next_offset
            )
            return result(bounded("\n".join(lines)), model)

        return await kit.read(ctx, go)

    @kit.tool(
        name="export",
        annotations=READ_ONLY,
        description="Save memory as JSON (for `compactor import`) or Markdown, paged by next_cursor.",
    )
    async def export(
        ctx: Context,
        summaries_only: bool = False,
        tier: Literal["active", "archived", "all"] = "all",
        format: Literal["json", "markdown"] = "json",
        cursor: Annotated[str | None, Field(max_length=C.ID_MAX_CHARS)] = None,
        scope: ScopeArg = None,
    ) -> Annotated[CallToolResult, S.ExportResult]:
        def go() -> CallToolResult:
            page = store.export(tier=tier, cursor=cursor, page_chars=C.EXPORT_PAGE_CHARS // 3, scope=scope)
            records: list[dict[str, Any]] = []
            md: list[str] = []
            for it in page.items:
                part = page.part if page.part is not None and page.part[0] == it.id else None
                if summaries_only and part is not None and part[1] > 0:
                    continue  # given whole on the page where it began
                body = (it.summary or preview(it.content, 300)) if summaries_only else it.content
                # Every field but the store-local seq, as `compactor export` writes them: the
                # items of all pages, as a JSON list, are what `compactor import` reads back.
                rec = it.to_record()
                del rec["seq"]
                note = ""
                if summaries_only:
                    del rec["content"]
                    rec["text"] = body
                elif part is not None:
                    # An item larger than a page, in parts: `compactor import` joins the records.
                    body = rec["content"] = it.content[part[1] : part[2]]
                    rec["content_offset"] = part[1]
                    rec["content_chars"] = len(it.content)
                    note = f"(characters {part[1]:,}-{part[2]:,} of {len(it.content):,})\n"
                records.append(rec)
                md.append(
                    f"## {it.id} · {it.content_type} · importance {it.importance} · {it.tier}"
                    + (" · pinned" if it.pinned else "")
                    + (f"\n\nTags: {', '.join(it.tags)}" if it.tags else "")
                    + (f"\n\n**Summary:** {' '.join(it.summary.split())}" if it.summary and not summaries_only else "")
                    + f"\n\n{note}{fence(body)}\n"
                )
            more = f"\n\n(next page: export(cursor={page.next_cursor!r}))" if page.next_cursor else ""
            if format == "markdown":
                text = "\n".join(md) + more
                model = S.ExportResult(
                    format="markdown", text=text, count=len(records), total=page.total, next_cursor=page.next_cursor
                )
            else:
                text = json.dumps(records, ensure_ascii=False) + more
                model = S.ExportResult(
                    format="json", items=records, count=len(records), total=page.total, next_cursor=page.next_cursor
                )
            return result(text, model)

        return await kit.read(ctx, go)
