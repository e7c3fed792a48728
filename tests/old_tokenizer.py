"""Tokenizer version 1, for tests of what a start does with an index it saved: words were runs
of \\w (a combining mark split them), a CJK or Thai run was one term, and a saved index did not
record its version."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

from compactor import analyze
from compactor.index import BM25Index


@contextlib.contextmanager
def tokenizer_version_1() -> Iterator[None]:
    """Terms and saved indexes as version 1 made them, inside the block (this process only)."""
    made_now = BM25Index.to_state

    def saved_as_version_1(index: BM25Index, *, binary: bool = False) -> dict[str, Any]:
        saved = made_now(index, binary=binary)
        del saved["terms"]
        return saved

    analyze._cache.clear()  # it holds this version's expansions
    try:
        with (
            patch.object(analyze, "_unspaced", lambda raw: False),
            patch.object(analyze, "_COMPOUND", analyze._COMPOUND_ASCII),  # \w alone, as version 1's
            patch.object(BM25Index, "to_state", saved_as_version_1),
        ):
            yield
    finally:
        analyze._cache.clear()
