"""The index holds only text that is in the item (ISSUE 13 point 6): a headline cut mid-word
indexed terms the item does not contain ("helioproject" of "Helioprojective")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.models import Item
from compactor.persistence.statedir import SNAPSHOT
from compactor.search.analyze import index_tokens
from compactor.store import Store, _headline
from compactor.store import state as state_mod


def _item(content: str, summary: str | None = None) -> Item:
    return Item("x", 1, content, summary, (), 5, "prose", False, 0.0, 0.0, 0, 1, 0)


def test_a_long_first_line_is_not_cut_mid_word() -> None:
    line = "Helioprojective " * 12 + "coordinates of the observer are off by one pixel in the WCS header"
    store = Store()
    item = store.store(f"{line}\nTraceback follows\n  File astropy/wcs.py").item
    assert len(line) > state_mod.HEADLINE_CHARS
    headline = _headline(item)
    assert headline is not None and line.startswith(headline) and len(headline) <= state_mod.HEADLINE_CHARS
    assert line[len(headline)].isspace()
    assert "helioproject" not in store._s.index.terms(item.id)
    assert not [h for h in store.query("helioprojec") if h.item.id == item.id]
    assert [h.item.id for h in store.query("Helioprojective")] == [item.id]


def test_a_long_first_line_without_spaces_has_no_headline() -> None:
    blob = "a" * 150 + "/" + "b" * 150
    assert _headline(_item(f"{blob}\nmore")) is None
    assert _headline(_item("short first line\nmore")) == "short first line"
    assert _headline(_item("one line only")) is None
    assert _headline(_item("anything\nmore", summary="the summary")) == "the summary"


_WORD = st.one_of(
    st.text(alphabet="abcdefXYZ019_-./é", min_size=1, max_size=30),
    st.sampled_from(["Helioprojective", "django/db/models/query.py", "parseHTTPResponse"]),
)
_SEP = st.sampled_from([" ", "  ", "\t", ", ", ": ", "(", "'", ""])
# Lines of whole words and separators, often longer than HEADLINE_CHARS.
_LINE = st.lists(st.tuples(_WORD, _SEP), min_size=1, max_size=60).map(lambda ws: "".join(w + p for w, p in ws))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(first=_LINE, rest=_LINE, summary=st.one_of(st.none(), _LINE))
def test_every_indexed_term_is_in_the_item(first: str, rest: str, summary: str | None) -> None:
    """Whatever the first line's length, the index's terms for an item are terms of its content,
    summary or tags: nothing cut short."""
    content = f"{first}\n{rest}"
    if not content.strip():
        return
    store = Store()
    item = store.store(content, summary=summary if summary and summary.strip() else None).item
    own = set(index_tokens(item.content)[0]) | set(index_tokens(item.summary or "")[0])
    for tag in item.tags:
        own |= set(index_tokens(tag)[0]) | {tag.lower()}
    extra = store._s.index.terms(item.id) - own
    assert not extra, (extra, item.content[:300])


def test_a_saved_index_of_the_older_format_is_rebuilt(state_dir: Path) -> None:
    """A snapshot written before headlines were cut at word boundaries holds an index of the
    previous format, which may index a cut word: it still loads, rebuilt from the items."""
    line = "Helioprojective " * 20
    s = Store(state_dir=state_dir)
    item = s.store(f"{line}\nbody text").item
    s.snapshot()
    s.close()
    snap_path = state_dir / SNAPSHOT
    snap = json.loads(snap_path.read_text())
    assert snap["index"]["format"] == 4  # 4: the arrays in the index file beside the snapshot
    snap["index"]["format"] = 3
    snap_path.write_text(json.dumps(snap))
    again = Store(state_dir=state_dir)
    assert again.get(item.id).content == item.content
    assert "helioproject" not in again._s.index.terms(item.id)
    assert [h.item.id for h in again.query("Helioprojective")] == [item.id]
    again.close()
