"""The layout of recall's text that tests pin (ISSUE 19, ISSUE 17 point 5): groups in a fixed
order, each header stating its ordering and its one kind of score, one line per entry with its
id, no item twice."""

from __future__ import annotations

import re

HEADERS = {
    "Pinned": "newest first",
    "Related to the task": "best match first; score = search relevance",
    "Open errors": "newest first; no later success on the same command or file",
    "Recent work": "newest first",
    "Decisions": "newest first",
    "Summaries of older work": "newest first",
    "Most valuable of the rest": "highest first; score = retention",
}
_HEADER = re.compile(r"^(?P<name>[A-Z][\w ]+) \((?P<n>\d+), (?P<how>[^)]*)\):$")
_ENTRY = re.compile(r"^- (?P<id>[\w-]+)(?: \[[^\]]*\])?(?P<score> -?\d+\.\d\d)?(?: #\S+)*: ")


def groups_of(text: str) -> dict[str, list[str]]:
    """The ids under each group header, checking the layout as it goes."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.split("\n"):
        m = _HEADER.match(line)
        if m and m["name"] in HEADERS:
            current = m["name"]
            assert current not in out, f"group {current} shown twice"
            assert HEADERS[current] in m["how"], line
            out[current] = []
            continue
        if line.startswith("- ") and current is not None:
            e = _ENTRY.match(line)
            assert e, f"entry without an id: {line!r}"
            scored = "score =" in HEADERS[current]
            assert bool(e["score"]) == scored, f"{current}: one kind of score per list: {line!r}"
            assert "\n" not in line
            out[current].append(e["id"])
            continue
        if not line.startswith("- "):
            current = None if not line.startswith("  ") else current
    assert list(out) == [h for h in HEADERS if h in out], f"groups out of order: {list(out)}"
    ids = [i for v in out.values() for i in v]
    assert len(ids) == len(set(ids)), "an item shown twice"
    for name, v in out.items():
        assert int(re.search(rf"^{name} \((\d+),", text, re.M)[1]) == len(v)  # type: ignore[index]
    return out
