"""Text shown to a model or a person: budget lines, item lines, previews. No I/O."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

from . import constants as C
from .models import Item

PREVIEW_CHARS: Final = 160
# A recall entry's preview: one line of ~25 tokens, so 2,000 tokens show ~70 entries (get(id) has the rest).
RECALL_PREVIEW_CHARS: Final = 90
# Enough example ids to find the damage without flooding a terminal (doctor, derived checks).
REPORT_EXAMPLES: Final = 10

_WS = re.compile(r"\s+")


def preview(text: str | None, chars: int = PREVIEW_CHARS) -> str:
    """First `chars` characters with whitespace folded; cut on characters, never bytes."""
    if not text:
        return ""
    # Fold only the head: a preview of a 1 MiB item must not scan the whole item.
    flat = _WS.sub(" ", text[: chars * 4 + 64]).strip()
    return flat if len(flat) <= chars else flat[: chars - 1].rstrip() + "…"


def item_preview(item: Item) -> str:
    """What stands for an item in one line: its summary, or else its content, previewed."""
    return preview(item.summary or item.content)


def counted(n: int, noun: str) -> str:
    """`1 token`, `2 tokens`: a number with its noun, plural unless it is one."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def page_span(noun: str, offset: int, shown: int, total: int) -> str:
    """Which of `total` a page shows: "items 21-40 of 109"; one past the end says so."""
    if shown:
        return f"{noun} {offset + 1:,}-{offset + shown:,} of {total:,}"
    if offset and offset >= total:
        return f"no {noun} from offset {offset:,}: there are {total:,}"
    return f"no {noun}"


def budget_line(used: int, budget: int, active: int, archived: int) -> str:
    pct = 100.0 * used / budget if budget else 0.0
    return f"Budget: {used:,}/{budget:,} tokens ({pct:.1f}%) · {active:,} active · {archived:,} archived"


def item_line(item: Item, *, score: float | None = None, extra: str = "", body: str | None = None) -> str:
    """One line per item; `body` is its preview when the caller already has it."""
    flags = []
    if item.pinned:
        flags.append("pinned")
    if item.tier == "archived":
        flags.append("archived")
    if item.view == "summary":
        flags.append("summary view")
    if item.depth:
        flags.append(f"summary d{item.depth}")
    flag = f" [{', '.join(flags)}]" if flags else ""
    tags = f" #{' #'.join(item.tags)}" if item.tags else ""
    head = f"- {item.id} ({item.content_type}, imp {item.importance}{flag})"
    if score is not None:
        head += f" score {score:.3f}"
    if body is None:
        body = item_preview(item)
    return f"{head}{tags}: {body}{extra}"


def fence(text: str, info: str = "") -> str:
    """`text` in a backtick fence longer than any backtick run inside it, so nothing in it
    (a `#` line, a ``` block) is read as markdown."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}{info}\n{text}\n{bar}"


def recall_line(item: Item, score: float | None = None) -> str:
    """A recall entry: one short line with the id, so that get(id) fetches the full text."""
    flags = [f for f, on in (("pinned", item.pinned), ("archived", item.tier == "archived")) if on]
    if item.depth:
        flags.append(f"summary d{item.depth}")
    flag = f" [{', '.join(flags)}]" if flags else ""
    tags = f" #{' #'.join(item.tags)}" if item.tags else ""
    sc = f" {score:.2f}" if score is not None else ""
    return f"- {item.id}{flag}{sc}{tags}: {preview(item.summary or item.content, RECALL_PREVIEW_CHARS)}"


def examples(ids: Sequence[str], limit: int = REPORT_EXAMPLES) -> str:
    """The first `limit` ids of a report line, and how many more there are."""
    shown = ", ".join(ids[:limit])
    return shown + (f" (+{len(ids) - limit} more)" if len(ids) > limit else "")


def page_end(content: str, start: int, count: Callable[[str], int]) -> int:
    """Where the page of `content` that `get(id, offset=start)` shows ends: C.GET_PAGE_CHARS on,
    or sooner, cut in proportion, while the page counts more than C.GET_PAGE_TOKENS. The tool and
    the memory page split an item at the same places."""
    end = min(len(content), start + C.GET_PAGE_CHARS)
    while end - start > 1 and (tokens := count(content[start:end])) > C.GET_PAGE_TOKENS:
        end = start + max(1, (end - start) * C.GET_PAGE_TOKENS * 9 // (tokens * 10))
    return end
