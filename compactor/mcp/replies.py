"""The words of the tools' replies that more than one tool says: the budget line and its
warnings, what auto-compaction and redaction did, and a reply's two halves (text for the model,
structured content for its outputSchema)."""

from __future__ import annotations

from typing import Any

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

from .. import constants as C
from ..models import CompactReport
from ..render import budget_line
from ..store import Store
from . import schemas as S


def result(text: str, structured: BaseModel | dict[str, Any]) -> CallToolResult:
    """A tool's reply: text for the model, and the structured content its outputSchema
    describes (a model, or a record already in its JSON form)."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured.model_dump(mode="json") if isinstance(structured, BaseModel) else structured,
    )


def budget(store: Store) -> S.Budget:
    """The budget as structured content."""
    return S.budget(store.tokens_used, store.budget, store.pinned_tokens)


def budget_text(store: Store) -> str:
    """The budget line, and what the model must know when it is over budget or read-only."""
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


def compaction_text(report: CompactReport | None) -> str:
    """What an automatic compaction did, appended to the reply of the call that set it off."""
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


def redaction_text(redacted: dict[str, int]) -> str:
    """Which kinds of secret were replaced before saving."""
    if not redacted:
        return ""
    parts = ", ".join(f"{n} {kind}" for kind, n in sorted(redacted.items()))
    return f" Redacted before saving: {parts} (replaced with [REDACTED:<kind>])."


def bounded(text: str) -> str:
    """A paged reply's text, cut to the most a reply may hold."""
    if len(text) <= C.MAX_OUTPUT_CHARS:
        return text
    return text[: C.MAX_OUTPUT_CHARS - 40] + "\n… (output cut; page with offset/limit)"
