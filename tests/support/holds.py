"""A lock held by another thread while a test's block runs: another call of a server, or another
server, in the middle of its work."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any


@contextlib.contextmanager
def held_elsewhere(
    hold: Callable[[], AbstractContextManager[Any]], *, most_s: float = 10.0
) -> Iterator[threading.Event]:
    """Enter `hold()` on another thread and keep it until the block ends or sets the event
    yielded (at most `most_s`, so a test that fails never hangs)."""
    taken, release = threading.Event(), threading.Event()

    def keep() -> None:
        with hold():
            taken.set()
            release.wait(most_s)

    t = threading.Thread(target=keep)
    t.start()
    try:
        assert taken.wait(5), "the other thread never got the lock"
        yield release
    finally:
        release.set()
        t.join(5)
