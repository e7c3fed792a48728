"""Older tokenizer versions, for tests of what a start does with an index it saved. Version 1:
words were runs of \\w (a combining mark split them), a CJK or Thai run was one term, and a
saved index did not record its version. Version 2: text was tokenized as it was typed, not in
its composed form (NFC). Version 3: words were not indexed by their stems. Version 4: a field's
length counted its terms (a path's parts, an unspaced run's characters), not its words. Version
5: an irregular form ("went") was not indexed by its base's stem ("^go")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

from compactor.search import analyze
from compactor.search import index as index_module
from compactor.search.index import BM25Index


@contextlib.contextmanager
def tokenizer_version(version: int) -> Iterator[None]:
    """Terms, lengths and saved indexes as `version` (1 to 5) made them, inside the block (this
    process only)."""
    made_now = BM25Index.to_state
    tokens_now = analyze.index_tokens

    def counted_as_terms(text: str) -> tuple[list[str], int]:
        terms, _ = tokens_now(text)
        return terms, sum(t.startswith(analyze.STEM_MARK) for t in terms)  # every other term counted

    def saved_as_older(index: BM25Index, *, binary: bool = False) -> dict[str, Any]:
        saved = made_now(index, binary=binary)
        if version == 1:
            del saved["terms"]
        else:
            saved["terms"] = version
        return saved

    analyze._cache.clear()  # it holds this version's expansions
    analyze._stem_cache.clear()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(patch.object(analyze, "IRREGULAR", {}))
            if version < 5:
                stack.enter_context(patch.object(index_module, "index_tokens", counted_as_terms))
            if version < 4:
                stack.enter_context(patch.object(analyze, "stem", lambda word: word))  # no stem terms
            if version < 3:
                stack.enter_context(patch.object(analyze, "composed", lambda text: text))
            stack.enter_context(patch.object(BM25Index, "to_state", saved_as_older))
            if version == 1:
                stack.enter_context(patch.object(analyze, "_unspaced", lambda raw: False))
                # \w alone, as version 1's
                stack.enter_context(patch.object(analyze, "_COMPOUND", analyze._COMPOUND_ASCII))
            yield
    finally:
        analyze._cache.clear()
        analyze._stem_cache.clear()
