"""HTML for people, escaped by default: `fill` escapes every value it puts into a template
unless the value is `Safe` (markup this package made), so an item's text is always text."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable


class Safe(str):
    """Markup that is already escaped (made by `fill`, `join` or `esc`)."""

    __slots__ = ()


def esc(value: object) -> Safe:
    """`value` as text inside HTML (markup made here passes through unchanged)."""
    if isinstance(value, Safe):
        return value
    return Safe(html.escape(str(value), quote=True))


def fill(template: str, **values: object) -> Safe:
    """`template` (markup written here, never data) with each `{name}` replaced by its value
    escaped."""
    return Safe(template.format(**{k: esc(v) for k, v in values.items()}))


def join(parts: Iterable[object], sep: str = "") -> Safe:
    return Safe(sep.join(esc(p) for p in parts))


def highlight(text: str, terms: Iterable[str]) -> Safe:
    """`text` escaped, with each case-insensitive occurrence of a term marked."""
    words = sorted({t for t in terms if t.strip()}, key=len, reverse=True)
    if not words:
        return esc(text)
    pattern = re.compile("(" + "|".join(re.escape(w) for w in words) + ")", re.IGNORECASE)
    parts = pattern.split(text)
    # split with one group: matches are at the odd positions.
    return Safe("".join(f"<mark>{html.escape(p)}</mark>" if i % 2 else html.escape(p) for i, p in enumerate(parts)))
