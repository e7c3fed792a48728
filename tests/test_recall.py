"""recall's layout over stdio (ISSUE 19, ISSUE 17 point 5): what a real client reads."""

from __future__ import annotations

import pytest

from compactor import constants as C
from tests.recall_layout import groups_of
from tests.stdio_client import StdioServer


@pytest.mark.slow
def test_recall_layout_over_stdio() -> None:
    with StdioServer() as srv:
        srv.ok("store", content="Always run the linter before committing.", pinned=True)
        for i in range(150):
            srv.ok(
                "store",
                content=f"$ cat src/parser_{i % 40}.py\ndef parse_{i}(raw): return raw.split() # invoice case {i}",
            )
        r = srv.ok("recall", query="invoice parser")
        text = srv.call("recall", query="invoice parser")["content"][0]["text"]
    assert text == r["text"]
    groups = groups_of(r["text"])
    assert list(groups)[:3] == ["Pinned", "Related to the task", "Recent work"]
    ids = [it["id"] for it in r["items"]]
    assert ids == [i for v in groups.values() for i in v] and len(ids) == len(set(ids))
    # One entry per file: 40 files, each shown once (its newest view), the rest left out.
    assert len(ids) == 1 + 40 and r["more"] == 150 - 40
    assert r["tokens"] <= C.RECALL_TOKENS_DEFAULT
