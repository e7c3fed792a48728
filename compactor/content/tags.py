"""Tag normalisation: a tag is stripped and lowercased, and two tags that differ only in case are
the same tag. The canonical form is lowercase, so a tag filter only needs `normalize_tag` on the
query side to match. Parsing what a caller sends (a list, or a comma-separated string) and
merging it with the automatic tags (classify.py) happen here too."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence

from .. import constants as C


def _check_tag(tag: str) -> str:
    if any(unicodedata.category(ch) == "Cc" for ch in tag):
        raise ValueError(f"tag {tag[:40]!r} contains a newline or another control character")
    cleaned = tag.strip()
    if len(cleaned) > C.MAX_TAG_CHARS:
        raise ValueError(f"tag {cleaned[:40]!r}... is {len(cleaned)} characters long; the limit is {C.MAX_TAG_CHARS}")
    return cleaned


def normalize_tag(tag: str) -> str:
    """Canonical form of a tag: stripped and lowercased."""
    return tag.strip().lower()


def _dedupe(tags: Iterable[str]) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for tag in tags:
        norm = normalize_tag(tag)
        if norm and norm not in seen:
            seen.add(norm)
            out.append(norm)
    return out


def parse_tags(value: str | Sequence[str] | None) -> list[str]:
    """Tags from a list or a comma-separated string: normalised, empties dropped, duplicates removed.

    Raises ValueError for a tag longer than C.MAX_TAG_CHARS or holding a newline/control character,
    and TypeError for a list element that is not a string.
    """
    if value is None:
        return []
    if isinstance(value, str):
        items: Iterable[str] = value.strip().split(",")  # a trailing newline (a read line) is fine
    else:
        for item in value:
            if not isinstance(item, str):
                raise TypeError(f"tags must be strings, got a {type(item).__name__}.")
        items = value
    return _dedupe(_check_tag(item) for item in items)


def merge_tags(user_tags: Sequence[str], auto: Sequence[str]) -> list[str]:
    """The caller's tags first, then the automatic ones; normalised, each tag once."""
    return _dedupe([*user_tags, *auto])
