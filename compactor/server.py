"""The MCP adapter: tool definitions over the Store. No domain logic lives here.

Each tool validates its arguments (pydantic, via the SDK), calls one Store method, and returns
concise text plus structured content matching its outputSchema. Domain errors become tool
errors (isError) with the Store's message, and the Store guarantees nothing changed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    CallToolResult,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

from . import constants as C
from . import contract, resources
from . import schemas as S
from .condense import depth_instruction, gist
from .errors import CompactorError, NotFoundError
from .models import CompactReport, Item
from .render import budget_line, fence, item_line, item_preview, preview
from .runtime import settle_heap
from .scope import scope_from_root_uri
from .stdio_runtime import run_stdio as _run_stdio
from .store import Store, StoreInput

log = logging.getLogger(__name__)

INSTRUCTIONS = """\
compactor is your working memory across sessions, kept within a token budget. Compaction never
loses anything: `get(id)` always returns the original.
1. Call `recall` first in every session (with `query` when you know the task).
2. `store` what you will want again: decisions and why, errors and fixes, key code, conclusions.
   Give long content a one-line `summary`.
3. `query` before re-reading a file, re-running a command or debugging a familiar error.
4. When a reply says the budget is high, call `compact`, then `update(id, summary=...)` for the
   items it lists.
5. `pin` what must never fade; `forget` only what must go for good.
"""

T = TypeVar("T", bound=BaseModel)

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
WRITE_IDEMPOTENT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)

TagsArg = Annotated[
    list[str] | str | None,
    Field(),
]
ScopeArg = Annotated[
    str | None,
    Field(
        max_length=4096,
        description="'all': every project.",
    ),
]
IdArg = Annotated[str, Field(min_length=1, max_length=64)]


class BulkItem(BaseModel):
    content: str = Field(min_length=1, max_length=C.MAX_CONTENT_BYTES)
    summary: str | None = Field(default=None, max_length=C.MAX_SUMMARY_CHARS)
    tags: list[str] | str | None = None
    importance: int = Field(default=C.IMPORTANCE_DEFAULT, ge=C.IMPORTANCE_MIN, le=C.IMPORTANCE_MAX)
    pinned: bool = False

    model_config = {"extra": "forbid"}


_BULK_PROPERTIES: dict[str, Any] = BulkItem.model_json_schema()["properties"]
_BULK_FIELDS = list(BulkItem.model_fields)


def _result(text: str, structured: BaseModel | dict[str, Any]) -> CallToolResult:
    """A tool's reply: text for the model, and the structured content its outputSchema
    describes (a model, or a record already in its JSON form)."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured.model_dump(mode="json") if isinstance(structured, BaseModel) else structured,
    )


def _compaction_text(report: CompactReport | None) -> str:
    if report is None or not report.changed:
        return ""
    parts = []
    if report.promoted:
        parts.append(f"{len(report.promoted)} switched to their summary")
    if report.deduplicated:
        parts.append(f"{len(report.deduplicated)} near-duplicates merged")
    if report.archived:
        parts.append(f"{len(report.archived)} archived")
    if report.condensed:
        parts.append(f"{len(report.condensed)} summary nodes made")
    text = (
        f"\nAuto-compaction ran ({report.tokens_before:,} -> {report.tokens_after:,} tokens): "
        + ", ".join(parts)
        + ". Nothing was deleted: `get(id)` returns any original, `restore(id)` brings one back."
    )
    if report.needs_summary:
        text += f" {len(report.needs_summary)} large items have no summary; `compact` lists them."
    return text


def _redaction_text(redacted: dict[str, int]) -> str:
    if not redacted:
        return ""
    parts = ", ".join(f"{n} {kind}" for kind, n in sorted(redacted.items()))
    return f" Redacted before saving: {parts} (replaced with [REDACTED:<kind>])."


def _tool_error(exc: CompactorError) -> ToolError:
    return ToolError(str(exc))


def build_server(
    store: Store, *, name: str = "compactor", scope_fixed: bool = False, **server_options: Any
) -> MCPServer:
    """`scope_fixed`: the project scope was given explicitly, so the client's roots don't move it.
    `server_options` go to MCPServer (the HTTP transport's token verifier and auth settings)."""
    mcp: MCPServer = MCPServer(name, instructions=INSTRUCTIONS, version=_version(), **server_options)

    # Weak: over HTTP sessions come and go, and a new one must not inherit a dead one's id().
    seen_sessions: weakref.WeakSet[Any] = weakref.WeakSet()
    # Over HTTP many clients share this Store: each session's project scope (from its roots)
    # is set on the Store before each of its calls, which run one at a time on the event loop.
    base_scope = store.scope
    session_scopes: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

    def session_of(ctx: Context | None) -> Any:
        try:
            return ctx.session if ctx is not None else None
        except (AttributeError, RuntimeError, ValueError):
            return None

    async def prepare(ctx: Context | None) -> None:
        """Once per client session: the client's budget default and its project root."""
        if ctx is None:
            return
        try:
            session = ctx.session
            params = session.client_params
        except (AttributeError, RuntimeError, ValueError):
            return
        if session in seen_sessions:
            return
        seen_sessions.add(session)
        store.adopt_client_budget(params.client_info.name if params is not None else None)
        if scope_fixed or params is None or params.capabilities.roots is None:
            return
        try:
            with anyio.fail_after(C.ROOTS_TIMEOUT_S), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                roots = await session.list_roots()
        except Exception as exc:  # a client that advertises roots but cannot answer keeps the default
            log.info("could not list the client's roots: %r", exc)
            return
        for root in roots.roots:
            scope = scope_from_root_uri(str(root.uri))
            if scope:
                store.scope = session_scopes[session] = scope
                return

    async def run(ctx: Context | None, fn: Callable[[], CallToolResult]) -> CallToolResult:
        await prepare(ctx)
        session = session_of(ctx)
        if len(seen_sessions) > 1 and session is not None:  # several clients (HTTP): this one's scope
            store.scope = session_scopes.get(session, base_scope)
        try:
            return fn()
        except CompactorError as exc:
            raise _tool_error(exc) from exc

    def current_budget() -> S.Budget:
        return S.budget(store.tokens_used, store.budget, store.pinned_tokens)

    def line() -> str:
        text = budget_line(store.tokens_used, store.budget, store.count("active"), store.count("archived"))
        pinned = store.pinned_tokens
        if pinned > store.budget:
            text += (
                f"\nOVER BUDGET: pinned items alone take {pinned:,} of the {store.budget:,}-token budget and "
                "compaction never moves them. Unpin some or raise token_budget with configure."
            )
        if store.degraded:
            text += (
                f"\nWARNING: memory is read-only: the last write could not be saved ({store.degraded}). "
                "Writes are refused until the disk recovers; each one tries again."
            )
        return text

    # --- tools -----------------------------------------------------------------------------
    @mcp.tool(
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
        query: Annotated[str | None, Field(max_length=2_000)] = None,
        scope: ScopeArg = None,
    ) -> Annotated[CallToolResult, S.RecallResult]:
        def go() -> CallToolResult:
            r = store.recall(limit=limit, query=query, scope=scope)
            model = S.RecallResult(
                budget=current_budget(),
                items=[S.scored(it, 0.0) for it in r.pinned]
                + [S.scored(it, sc, path=store.ancestors(it) if it.tier == "archived" else None) for it, sc in r.items],
                pinned=len(r.pinned),
                more=r.more,
                tokens=r.tokens,
                text=r.text,
                left_out=r.left_out,
                needs_text=r.needs_text,
            )
            return _result(r.text, model)

        return await run(ctx, go)

    @mcp.tool(
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
            Field(max_length=4096, description="'global': user-wide; default: this project."),
        ] = None,
    ) -> Annotated[CallToolResult, S.StoreResult]:
        def go() -> CallToolResult:
            res = store.store(content, summary=summary, tags=tags, importance=importance, pinned=pinned, scope=scope)
            it = res.item
            text = (
                f"Stored {it.id} ({it.content_type}, {it.content_tokens:,} tokens, "
                f"tags: {', '.join(it.tags) or '-'}).{_redaction_text(res.redacted)}\n"
                f"{line()}{_compaction_text(res.compaction)}"
            )
            model = S.StoreResult(
                id=it.id,
                tokens=it.content_tokens,
                content_type=it.content_type,
                tags=list(it.tags),
                importance=it.importance,
                pinned=it.pinned,
                budget=current_budget(),
                compaction=S.compaction_summary(res.compaction),
                redacted=S.redactions(res.redacted),
            )
            return _result(text, model)

        return await run(ctx, go)

    @mcp.tool(
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
                        f"got {contract.describe_value(entry)}. Nothing was stored."
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
                f"Stored {len(res.items)} items ({tokens:,} tokens): "
                f"{', '.join(it.id for it in res.items[:50])}{' ...' if len(res.items) > 50 else ''}"
                f"{_redaction_text(res.redacted)}\n{line()}{_compaction_text(res.compaction)}"
            )
            model = S.BulkStoreResult(
                ids=[it.id for it in res.items],
                stored=len(res.items),
                tokens=tokens,
                budget=current_budget(),
                compaction=S.compaction_summary(res.compaction),
                redacted=S.redactions(res.redacted),
            )
            return _result(text, model)

        return await run(ctx, go)

    @mcp.tool(
        name="query",
        annotations=WRITE_IDEMPOTENT,
        description=(
            "Search memory (archive too) before re-reading a file, re-running a command or debugging a known error."
        ),
    )
    async def query(
        ctx: Context,
        query: Annotated[str | None, Field(max_length=10_000)] = None,
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
                body = item_preview(h.item)
                lines.append(item_line(h.item, score=h.score, extra=extra, body=body))
                items.append(S.scored_record(h.item, h.score, h.matched, path=path, preview_text=body))
            none = "No matches. Try other words" + ("." if include_archived else ", or include_archived=true.")
            text = "\n".join(lines) if lines else none
            return _result(text, {"items": items, "count": len(hits)})

        return await run(ctx, go)

    @mcp.tool(
        name="get",
        annotations=READ_ONLY,
        description="Read an item in full, whatever compaction did to it.",
    )
    async def get(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.GetResult]:
        def go() -> CallToolResult:
            it = store.get(id)
            head = (
                f"{it.id} ({it.content_type}, importance {it.importance}, {it.tier}, view: {it.view}"
                f"{', pinned' if it.pinned else ''}{', merged into ' + it.merged_into if it.merged_into else ''})"
            )
            parts = [head]
            if it.tags:
                parts.append("tags: " + ", ".join(it.tags))
            if it.summary:
                parts.append("summary: " + it.summary)
            parts.append(it.content)
            return _result("\n".join(parts), S.full(it))

        return await run(ctx, go)

    @mcp.tool(
        name="status",
        annotations=READ_ONLY,
        description="Check the budget, usage, item counts, settings and persistence.",
    )
    async def status(ctx: Context) -> Annotated[CallToolResult, S.StatusResult]:
        def go() -> CallToolResult:
            current = store.status()
            pct = 100.0 * current.tokens_used / current.token_budget if current.token_budget else 0.0
            types = ", ".join(
                f"{t} {c['active']}/{c['archived']}"
                for t, c in current.per_type.items()
                if c["active"] or c["archived"]
            )
            p = current.persistence
            where = f"state dir {p['state_dir']}" if "state_dir" in p else f"database {p.get('database')}"
            persist = (
                f"{where}, journal {p['journal_bytes']:,} bytes, last snapshot "
                f"{'never' if not p.get('last_snapshot_at') else p['last_snapshot_at']}"
                if p.get("enabled")
                else "in memory only (no --state-dir)"
            )
            text = "\n".join(
                [
                    line(),
                    f"Per type (active/archived): {types or 'none'}",
                    f"Auto-compact: {'on' if current.settings.auto_compact else 'off'} above "
                    f"{current.settings.auto_compact_threshold:.0%}, down to "
                    f"{current.settings.auto_compact_threshold - C.AUTO_COMPACT_GAP:.0%}",
                    f"Token counter: {current.token_counter}",
                    f"Scope: {store.scope} (reads also cover 'global')",
                    f"Persistence: {persist}",
                ]
            )
            model = S.StatusResult(
                token_budget=current.token_budget,
                tokens_used=current.tokens_used,
                usage_percent=round(pct, 2),
                active_items=current.active_items,
                archived_items=current.archived_items,
                pinned_items=current.pinned_items,
                per_type=current.per_type,
                auto_compact=current.settings.auto_compact,
                auto_compact_threshold=current.settings.auto_compact_threshold,
                auto_compact_target=round(current.settings.auto_compact_threshold - C.AUTO_COMPACT_GAP, 4),
                recall_tokens=current.settings.recall_tokens,
                budget_source=current.settings.budget_source,
                token_counter=current.token_counter,
                persistence=current.persistence,
                scope=store.scope,
            )
            return _result(text, model)

        return await run(ctx, go)

    @mcp.tool(
        name="compact",
        annotations=WRITE_IDEMPOTENT,
        description=(
            "When the budget is high: bring usage to target_usage in four phases (summary view, merge "
            "near-duplicates, archive, condense into summary nodes). Deletes nothing. Lists what needs "
            "a summary: write it with update."
        ),
    )
    async def compact(
        ctx: Context,
        target_usage: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] = C.MANUAL_COMPACT_TARGET,
    ) -> Annotated[CallToolResult, S.CompactResult]:
        def go() -> CallToolResult:
            r = store.compact(target_usage)
            needs = []
            for item_id in r.needs_summary[: C.NEEDS_SUMMARY_LIMIT]:
                try:
                    it = store.get(item_id)
                except NotFoundError:
                    continue  # another process forgot it since: the compaction itself succeeded
                needs.append(S.NeedsSummary(id=it.id, tokens=it.content_tokens, preview=preview(it.content, 120)))
            lines = [
                f"Compacted {r.tokens_before:,} -> {r.tokens_after:,} tokens (target {r.target_tokens:,}).",
                f"1. summary view: {len(r.promoted)}; 2. near-duplicates merged: {len(r.deduplicated)}; "
                f"3. archived: {len(r.archived)}. Nothing was deleted.",
            ]
            if needs:
                lines.append("Write a summary for these (update(id, summary=...)):")
                lines.extend(f"- {n.id} ({n.tokens:,} tokens): {n.preview}" for n in needs)
            blocks = store.needs_text_blocks()
            if blocks:
                lines.append("Summary nodes with stand-in text (write theirs with update(id, summary=...)):")
                lines.extend(block for _, block in blocks)
            shape = store.dag_shape()
            if shape:
                lines.append(
                    "Summary DAG: "
                    + ", ".join(f"d{d}: {c['active']} active/{c['archived']} covered" for d, c in shape.items())
                )
            lines.append(line())
            model = S.CompactResult(
                condensed=len(r.condensed),
                condensed_ids=r.condensed[:100],
                needs_text=[
                    S.NeedsText(id=n.id, depth=n.depth, instruction=depth_instruction(n.depth), text=b)
                    for n, b in blocks
                ],
                promoted=len(r.promoted),
                deduplicated=len(r.deduplicated),
                archived=len(r.archived),
                tokens_before=r.tokens_before,
                tokens_after=r.tokens_after,
                target_tokens=r.target_tokens,
                needs_summary=needs,
                promoted_ids=r.promoted[:100],
                archived_ids=r.archived[:100],
                merged=[{"id": a, "merged_into": b} for a, b in r.deduplicated[:100]],
            )
            return _result("\n".join(lines), model)

        return await run(ctx, go)

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
            budget=current_budget(),
            compaction=S.compaction_summary(report),
            warnings=warnings or [],
        )
        warn = "".join(f"\nWarning: {w}" for w in warnings or [])
        return _result(f"{verb} {it.id}.{warn}\n{line()}{_compaction_text(report)}", model)

    @mcp.tool(
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

        return await run(ctx, go)

    @mcp.tool(
        name="pin",
        annotations=WRITE_IDEMPOTENT,
        description="Keep an item in full for good (requirements, preferences).",
    )
    async def pin(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.ItemResult]:
        return await run(ctx, lambda: item_result(store.pin(id), "Pinned"))

    @mcp.tool(
        name="unpin",
        annotations=WRITE_IDEMPOTENT,
        description="Let compaction move a pinned item again when it may fade.",
    )
    async def unpin(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.ItemResult]:
        return await run(ctx, lambda: item_result(store.unpin(id), "Unpinned"))

    @mcp.tool(
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

        return await run(ctx, go)

    @mcp.tool(
        name="forget",
        annotations=DESTRUCTIVE,
        description="Delete an item for good (secrets, harmful mistakes); on a summary node, dissolve it.",
    )
    async def forget(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.ForgetResult]:
        def go() -> CallToolResult:
            gone = store.forget(id)
            if gone.depth:
                return _result(
                    f"{id} was a summary: it was dissolved and its {len(gone.children)} children kept.\n{line()}",
                    S.ForgetResult(id=id, forgotten=False, dissolved=True, budget=current_budget()),
                )
            return _result(
                f"Forgot {id} permanently.\n{line()}", S.ForgetResult(id=id, forgotten=True, budget=current_budget())
            )

        return await run(ctx, go)

    @mcp.tool(
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
                f"children {offset + 1 if kids else 0}-{nxt} of {total}"
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
            return _result(_bounded("\n".join(lines)), model)

        return await run(ctx, go)

    @mcp.tool(
        name="dissolve",
        annotations=WRITE_IDEMPOTENT,
        description="Undo a summary node whose grouping is wrong; nothing is deleted.",
    )
    async def dissolve(ctx: Context, id: IdArg) -> Annotated[CallToolResult, S.DissolveResult]:
        def go() -> CallToolResult:
            kids = store.dissolve(id)
            text = f"Dissolved {id}: {len(kids)} children back in the {kids[0].tier if kids else 'archive'}.\n{line()}"
            model = S.DissolveResult(id=id, children=[S.child(k) for k in kids[:200]], budget=current_budget())
            return _result(text, model)

        return await run(ctx, go)

    @mcp.tool(
        name="tree",
        annotations=READ_ONLY,
        description="See which summary nodes cover which items: the DAG as text.",
    )
    async def tree(
        ctx: Context,
        root: Annotated[str | None, Field(max_length=64)] = None,
        max_depth: Annotated[int, Field(ge=1, le=C.TREE_DEPTH_MAX)] = 2,
    ) -> Annotated[CallToolResult, S.TreeResult]:
        def go() -> CallToolResult:
            text = store.tree(root=root, max_depth=max_depth)
            shape = store.dag_shape()
            model = S.TreeResult(
                text=text,
                roots=[r.id for r in store.roots()][:100],
                nodes_per_depth={str(d): c["active"] + c["archived"] for d, c in shape.items()},
            )
            return _result(text, model)

        return await run(ctx, go)

    @mcp.tool(
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
            lines = [f"{tier}: items {offset + 1 if page.items else 0}-{nxt} of {page.total:,} (newest first)"]
            lines.extend(item_line(it) for it in page.items)
            if next_offset is not None:
                lines.append(f"(more: list(offset={next_offset}))")
            model = S.ListResult(
                items=[S.brief(it) for it in page.items], total=page.total, offset=offset, next_offset=next_offset
            )
            return _result(_bounded("\n".join(lines)), model)

        return await run(ctx, go)

    @mcp.tool(
        name="export",
        annotations=READ_ONLY,
        description="Save memory as JSON (for `compactor import`) or Markdown, paged by next_cursor.",
    )
    async def export(
        ctx: Context,
        summaries_only: bool = False,
        tier: Literal["active", "archived", "all"] = "all",
        format: Literal["json", "markdown"] = "json",
        cursor: Annotated[str | None, Field(max_length=64)] = None,
        scope: ScopeArg = None,
    ) -> Annotated[CallToolResult, S.ExportResult]:
        def go() -> CallToolResult:
            page = store.export(tier=tier, cursor=cursor, page_chars=C.EXPORT_PAGE_CHARS // 3, scope=scope)
            records: list[dict[str, Any]] = []
            md: list[str] = []
            for it in page.items:
                body = (it.summary or preview(it.content, 300)) if summaries_only else it.content
                # Every field but the store-local seq, as `compactor export` writes them: the
                # items of all pages, as a JSON list, are what `compactor import` reads back.
                rec = it.to_record()
                del rec["seq"]
                if summaries_only:
                    del rec["content"]
                    rec["text"] = body
                records.append(rec)
                md.append(
                    f"## {it.id} · {it.content_type} · importance {it.importance} · {it.tier}"
                    + (" · pinned" if it.pinned else "")
                    + (f"\n\nTags: {', '.join(it.tags)}" if it.tags else "")
                    + (f"\n\n**Summary:** {' '.join(it.summary.split())}" if it.summary and not summaries_only else "")
                    + f"\n\n{fence(body)}\n"
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
            return _result(text, model)

        return await run(ctx, go)

    @mcp.tool(
        name="configure",
        annotations=WRITE_IDEMPOTENT,
        description="Change settings: budget, auto-compaction, recall size, item and archive limits. Deletes nothing.",
    )
    async def configure(
        ctx: Context,
        token_budget: Annotated[int | None, Field(ge=C.BUDGET_MIN, le=C.BUDGET_MAX)] = None,
        auto_compact: bool | None = None,
        auto_compact_threshold: Annotated[
            float | None, Field(ge=C.THRESHOLD_MIN, le=C.THRESHOLD_MAX, allow_inf_nan=False)
        ] = None,
        recall_tokens: Annotated[int | None, Field(ge=C.RECALL_TOKENS_MIN, le=C.RECALL_TOKENS_MAX)] = None,
        max_items: Annotated[int | None, Field(ge=C.MAX_ITEMS_MIN, le=C.MAX_ITEMS_MAX)] = None,
        max_archive_tokens: Annotated[int | None, Field(ge=C.ARCHIVE_TOKENS_MIN, le=C.ARCHIVE_TOKENS_MAX)] = None,
    ) -> Annotated[CallToolResult, S.ConfigureResult]:
        def go() -> CallToolResult:
            settings, report = store.configure(
                token_budget=token_budget,
                auto_compact=auto_compact,
                auto_compact_threshold=auto_compact_threshold,
                recall_tokens=recall_tokens,
                max_items=max_items,
                max_archive_tokens=max_archive_tokens,
            )
            text = (
                f"Settings: budget {settings.token_budget:,}, auto-compact {'on' if settings.auto_compact else 'off'} "
                f"above {settings.auto_compact_threshold:.0%}, recall_tokens {settings.recall_tokens:,}, "
                f"max_items {settings.max_items:,} active, max_archive_tokens {settings.max_archive_tokens:,} "
                f"(only what `compactor prune` proposes; nothing is deleted).\n{line()}"
                f"{_compaction_text(report)}"
            )
            model = S.ConfigureResult(
                token_budget=settings.token_budget,
                auto_compact=settings.auto_compact,
                auto_compact_threshold=settings.auto_compact_threshold,
                recall_tokens=settings.recall_tokens,
                max_items=settings.max_items,
                max_archive_tokens=settings.max_archive_tokens,
                budget=current_budget(),
                compaction=S.compaction_summary(report),
            )
            return _result(text, model)

        return await run(ctx, go)

    resources.register(mcp, store)
    contract.install(mcp)
    return mcp


def _bounded(text: str) -> str:
    if len(text) <= C.MAX_OUTPUT_CHARS:
        return text
    return text[: C.MAX_OUTPUT_CHARS - 40] + "\n… (output cut; page with offset/limit)"


def _version() -> str:
    from . import __version__

    return __version__


async def snapshots(store: Store, interval: float) -> None:
    """Snapshot in the background every `interval` seconds while there is something new."""
    while True:
        await anyio.sleep(interval)
        if store.dirty:
            try:
                await store.snapshot_async()
            except Exception:
                log.exception("background snapshot failed; the journal still holds every change")
            settle_heap(collect=True)


async def serve(store: Store, *, snapshot_interval: float = C.SNAPSHOT_INTERVAL_S, scope_fixed: bool = False) -> None:
    """Run the stdio server until stdin closes or SIGTERM/SIGINT, snapshotting in the background
    and once more on the way out."""
    mcp = build_server(store, scope_fixed=scope_fixed)
    settle_heap(collect=False)

    async def snapshot_loop() -> None:
        await snapshots(store, snapshot_interval)

    async def on_signal() -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for sig in signals:
                log.info("received %s, shutting down", signal.Signals(sig).name)
                final_snapshot()
                # The stdin reader is a worker thread blocked in read(2) that no cancellation
                # can interrupt; every acknowledged call is already fsynced, so leave now.
                sys.stdout.flush()
                os._exit(0)

    def final_snapshot() -> None:
        if store.persistent and store.dirty:
            # A client that closed our stdin sends SIGTERM after a grace period (2 s in the
            # SDK); dying mid-write would lose nothing (the journal has it all) but would throw
            # away the saved index and make the next start rebuild it. Finish first.
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_IGN)
            try:
                store.snapshot()
            except Exception:
                log.exception("final snapshot failed; the journal still holds every change")
        store.close()

    try:
        async with anyio.create_task_group() as tg:
            if store.persistent:
                tg.start_soon(snapshot_loop)
            tg.start_soon(on_signal)
            await _run_stdio(mcp)
            tg.cancel_scope.cancel()
    finally:
        final_snapshot()
