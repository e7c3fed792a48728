"""The summary DAG's pure parts: lineage ids, coherent grouping, extractive text, topics, and
the faithfulness check of a summary an agent wrote. No state, no I/O."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from typing import Final

from ..models import Item
from ..render import preview
from ..search.analyze import composed
from ..search.dedup import jaccard

# A node's text (extractive or written) is capped so that condensing always saves tokens:
# 5 children of up to 300 tokens become one node of at most 300.
NODE_MAX_TOKENS: Final = 300
# Neighbours sharing this share of words (or any non-type tag) belong in one group.
CONDENSE_COHERENCE_JACCARD: Final = 0.08
# ...or at least half of its non-type tags in common with the previous item (one shared
# language tag such as "python" is not a thread of work).
CONDENSE_TAG_JACCARD: Final = 0.5
FOOTER_TOPICS: Final = 8
TOPIC_SCAN_CHARS: Final = 4_000
TYPE_TAGS: Final = frozenset({"error", "code", "decision", "tool_output", "prose"})
DEPTH_INSTRUCTIONS: Final = {
    1: "d1: list the decisions and changes made, each with its reason.",
    2: "d2: goal -> outcome -> what carries forward.",
    3: "d3+: durable context only: architecture, preferences, recurring patterns.",
}

FOOTER_PREFIX = "[Expand for details about:"

# Possessive runs (++, Python 3.11+) where what follows a run can never be one of its own
# characters, so giving some back could not help: the same matches, without backtracking
# through every word (these scan up to 4,000 characters of each child a summary covers).
_FILE = r"\b[\w-]++\.(?:py|go|ts|tsx|js|rs|java|rb|c|h|cpp|sh|md|json|ya?ml|toml|sql|cfg|ini|txt)\b"
_PATH = re.compile(rf"(?<![\w/.-])(?:[\w.-]++/)+[\w.-]++|{_FILE}")
_PATH_NO_SLASH = re.compile(_FILE)  # what _PATH finds in a text without "/"
_ERROR = re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning)\b")
_IDENT_WORDS = r"[a-z]++_[a-z0-9_]++|[a-z]++[A-Z]\w++|[A-Z][a-z]++[A-Z]\w++"
_IDENT = re.compile(rf"\b(?:{_IDENT_WORDS}|\w++(?:\.\w++){{1,3}}\(\))")
# The call alternative is half of _IDENT's cost and cannot match without "()": texts lacking
# it are scanned with the rest alone, which finds exactly the same matches.
_IDENT_NO_CALL = re.compile(rf"\b(?:{_IDENT_WORDS})")
_ERROR_WORDS = ("Error", "Exception", "Warning")
_NUMBER = re.compile(r"(?<![\w.])\d[\d_,.]*\d(?![\w.])|(?<![\w.])\d{2,}(?![\w.])")


def lineage_id(children: Iterable[str]) -> str:
    """Derived from the children alone: the same children always make the same id, across
    restarts and after a dissolve and re-condense."""
    digest = hashlib.blake2b("\n".join(sorted(children)).encode(), digest_size=6).hexdigest()
    return f"s{digest}"


def _jaccard(a: AbstractSet[Hashable], b: AbstractSet[Hashable]) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def group_coherent(
    items: Sequence[Item], chunk_size: int, terms: Callable[[str], AbstractSet[Hashable]]
) -> list[list[Item]]:
    """Split time-ordered items into groups of at most `chunk_size` neighbours, cutting early
    where a neighbour shares neither a tag nor enough words with the one before it. `terms`
    gives an item's words, or any stand-ins for them one to one (the index's term ids)."""
    groups: list[list[Item]] = []
    current: list[Item] = []
    prev_tags: frozenset[str] = frozenset()
    prev_terms: AbstractSet[Hashable] = frozenset()
    min_size = max(2, chunk_size // 2)
    for item in items:
        item_terms = terms(item.id)
        tags = frozenset(item.tags) - TYPE_TAGS
        # Mostly the same tags as the previous item, or enough shared words: same thread of work.
        coherent = (jaccard(tags, prev_tags) >= CONDENSE_TAG_JACCARD if tags or prev_tags else False) or _jaccard(
            item_terms, prev_terms
        ) >= CONDENSE_COHERENCE_JACCARD
        if current and (len(current) >= chunk_size or (not coherent and len(current) >= min_size)):
            groups.append(current)
            current = []
        current.append(item)
        prev_tags = tags
        prev_terms = item_terms
    if current:
        # A short tail joins the previous group rather than making a tiny node.
        if groups and len(current) < min_size and len(groups[-1]) + len(current) <= chunk_size + min_size:
            groups[-1].extend(current)
        else:
            groups.append(current)
    return groups


def gist(item: Item, chars: int = 110) -> str:
    """One line standing for an item inside its parent's text."""
    if item.summary:
        return preview(item.summary.split(FOOTER_PREFIX)[0], chars)
    if item.depth:
        bullets = [ln[2:] for ln in item.content.splitlines() if ln.startswith("- ")][:2]
        return preview("; ".join(bullets), chars)
    for ln in item.content.splitlines():
        if ln.strip():
            return preview(ln, chars)
    return preview(item.content, chars)


def topics(children: Sequence[Item], limit: int = FOOTER_TOPICS) -> list[str]:
    """Real topics from the children, most frequent first: paths, error names, identifiers, tags."""
    # In the order first seen: the sort below is stable, so ties in count go to the topic
    # seen first (a set's order would follow the per-process string hash seed).
    counts: dict[str, int] = {}
    for child in children:
        text = child.content if not child.depth else child.content.split(FOOTER_PREFIX)[-1]
        text = text[:TOPIC_SCAN_CHARS] + " " + (child.summary or "")
        words = text.split()
        # No match spans whitespace, and what each pattern looks at around a match is one
        # character, whitespace or a space alike: scanning only the words that can hold a
        # match, joined by spaces, finds the same matches in the same order (half the cost).
        # A path needs "/" or "."; an identifier "_" or a capital; a call "()".
        pathish = " ".join([w for w in words if "/" in w or "." in w])
        matches = (_PATH if "/" in pathish else _PATH_NO_SLASH).findall(pathish)
        if any(word in text for word in _ERROR_WORDS):  # _ERROR cannot match otherwise
            matches += _ERROR.findall(text)
        identish = " ".join([w for w in words if "_" in w or not w.islower() or "()" in w])
        matches += (_IDENT if "()" in identish else _IDENT_NO_CALL).findall(identish)
        found = dict.fromkeys([m.strip(".,:;()'\"`") for m in matches])
        found.update(dict.fromkeys([f"#{t}" for t in child.tags if t not in TYPE_TAGS]))
        for topic in found:
            if 3 <= len(topic) <= 80:
                counts[topic] = counts.get(topic, 0) + 1
    return sorted(counts, key=lambda t: -counts[t])[:limit]


def footer(children: Sequence[Item]) -> str:
    names = topics(children) or [c.id for c in children[:5]]
    return f"{FOOTER_PREFIX} {', '.join(names)}]"


def extractive_text(depth: int, children: Sequence[Item], count_tokens: Callable[[str], int]) -> str:
    """Deterministic stand-in text until the agent writes one: a header, one gist line per
    child while the token cap allows, and the footer naming real topics."""
    live = list(children)
    header = f"[d{depth} summary of {len(live)} item{'s' if len(live) != 1 else ''}; quality: extractive]"
    tail = footer(live)
    budget = NODE_MAX_TOKENS - count_tokens(header) - count_tokens(tail) - 8
    lines: list[str] = []
    for i, child in enumerate(live):
        line = f"- ({child.content_type if not child.depth else f'd{child.depth}'}) {gist(child)}"
        cost = count_tokens(line)
        if cost > budget:
            lines.append(f"- … {len(live) - i} more: expand to see them")
            break
        lines.append(line)
        budget -= cost
    return "\n".join([header, *lines, tail])


def with_footer(text: str, children: Sequence[Item]) -> str:
    """An agent-written summary must also end with the expand footer."""
    text = text.rstrip()
    if FOOTER_PREFIX in text.splitlines()[-1]:
        return text
    return f"{text}\n{footer(children)}"


_TERM_EDGES = ".,:;()'\"`"
_UNFAMILIAR_MAX = 20
# Up to this long, scanning the sources per term is cheaper than splitting them into words.
_SCAN_CHARS = 100_000


def unfamiliar_terms(summary: str, sources: Iterable[str]) -> list[str]:
    """Identifiers, numbers and paths in `summary` that appear in none of `sources`."""
    # Both composed (NFC): a name whose accents were typed apart is the same name composed.
    body = composed(summary.split(FOOTER_PREFIX, maxsplit=1)[0])
    haystack = composed("\n".join(sources))
    # In a long text, most terms are found as a whole word of it: a set lookup instead of a
    # scan of the whole text per term, which a long summary of a large item names by the
    # thousand.
    words: set[str] = set()
    if len(haystack) > _SCAN_CHARS:
        words = set(haystack.split())
        words.update([w.strip(_TERM_EDGES) for w in words])
    checked: set[str] = set()
    odd: list[str] = []
    for rx in (_PATH, _ERROR, _IDENT, _NUMBER):
        for m in rx.finditer(body):
            term = m.group(0).strip(_TERM_EDGES)
            if not term or term in checked:
                continue
            checked.add(term)
            if term not in words and term not in haystack:
                odd.append(term)
                if len(odd) == _UNFAMILIAR_MAX:
                    return odd
    return odd


def depth_instruction(depth: int) -> str:
    if depth <= 1:
        return DEPTH_INSTRUCTIONS[1]
    if depth == 2:
        return DEPTH_INSTRUCTIONS[2]
    return DEPTH_INSTRUCTIONS[3]
