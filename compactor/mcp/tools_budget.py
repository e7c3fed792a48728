"""The tools that keep memory within its budget: status (where it stands), compact (bring
usage down, deleting nothing) and configure (the budget and the limits)."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from .. import constants as C
from ..errors import NotFoundError
from ..render import preview
from ..report import fmt_time
from ..summaries.condense import depth_instruction
from . import schemas as S
from .kit import READ_ONLY, WRITE_IDEMPOTENT, ToolKit
from .replies import compaction_text, result


def register(kit: ToolKit) -> None:
    store = kit.store

    @kit.tool(
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
            # This process's last snapshot, else the one on disk (another process's, or a
            # previous run's): "never" only when there is none.
            snapshot_at = p.get("last_snapshot_at") or p.get("snapshot_at")
            persist = (
                f"{where}, journal {p['journal_bytes']:,} bytes, last snapshot "
                f"{fmt_time(snapshot_at) if snapshot_at else 'never'}"
                if p.get("enabled")
                else "in memory only (no --state-dir)"
            )
            text = "\n".join(
                [
                    kit.line(),
                    f"Per type (active/archived): {types or 'none'}",
                    f"Auto-compact: {'on' if current.settings.auto_compact else 'off'} above "
                    f"{current.settings.auto_compact_threshold:.0%}, down to "
                    f"{current.settings.auto_compact_threshold - C.AUTO_COMPACT_GAP:.0%}",
                    f"Token counter: {current.token_counter}",
                    f"Scope: {store.scope} (reads also cover 'global')",
                    f"Persistence: {persist}",
                    *([f"Warning: {p['durability_warning']}"] if p.get("durability_warning") else []),
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
            return result(text, model)

        return await kit.read(ctx, go)

    @kit.tool(
        name="compact",
        annotations=WRITE_IDEMPOTENT,
        description=(
            "When the budget is high: bring usage to target_usage by summarizing, merging and archiving; "
            "deletes nothing. Lists what needs a summary: write it with update."
        ),
    )
    async def compact(
        ctx: Context,
        target_usage: Annotated[
            float, Field(ge=C.TARGET_USAGE_MIN, le=C.TARGET_USAGE_MAX, allow_inf_nan=False)
        ] = C.MANUAL_COMPACT_TARGET,
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
            lines.append(kit.line())
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
            return result("\n".join(lines), model)

        return await kit.run(ctx, go)

    @kit.tool(
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
                f"(only what `compactor prune` proposes; nothing is deleted).\n{kit.line()}"
                f"{compaction_text(report)}"
            )
            model = S.ConfigureResult(
                token_budget=settings.token_budget,
                auto_compact=settings.auto_compact,
                auto_compact_threshold=settings.auto_compact_threshold,
                recall_tokens=settings.recall_tokens,
                max_items=settings.max_items,
                max_archive_tokens=settings.max_archive_tokens,
                budget=kit.budget(),
                compaction=S.compaction_summary(report),
            )
            return result(text, model)

        return await kit.run(ctx, go)
