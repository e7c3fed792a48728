"""Long CLI work is not silent: a progress line on stderr while it runs (only when stderr is a
terminal, so pipes and logs stay clean), and Ctrl-C that stops between whole chunks of work."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TextIO

# Redraw at most this often (seconds): a terminal line per chunk of 1,000 items is plenty.
_MIN_INTERVAL = 0.1


def is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed
        return False


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s"


class Progress:
    """`progress(done, total)` draws `compactor <command>: done of total <noun> (rate/s, about
    N s left)` over itself with a carriage return; `finish()` ends the line. `step(text)` shows
    one phase of work that has no count. On anything but a terminal it draws nothing."""

    def __init__(
        self,
        command: str,
        noun: str = "items",
        stream: TextIO | None = None,
        *,
        enabled: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.command = command
        self.noun = noun
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = is_terminal(self.stream) if enabled is None else enabled
        self._clock = clock
        self._start = clock()
        self._drawn_at: float | None = None
        self._width = 0
        self.done = 0
        self.total = 0

    def __call__(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        if not self.enabled:
            return
        now = self._clock()
        if done < total and self._drawn_at is not None and now - self._drawn_at < _MIN_INTERVAL:
            return
        elapsed = now - self._start
        text = f"compactor {self.command}: {done:,} of {total:,} {self.noun}"
        if elapsed > 0 and done:
            rate = done / elapsed
            if done < total:
                text += f" ({rate:,.0f}/s, about {_duration((total - done) / rate)} left)"
            else:
                text += f" ({rate:,.0f}/s, done in {elapsed:.1f} s)"
        self._draw(text, now)

    def step(self, text: str) -> None:
        if self.enabled:
            self._draw(f"compactor {self.command}: {text}", self._clock())

    def _draw(self, text: str, now: float) -> None:
        pad = " " * max(0, self._width - len(text))
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self._width = len(text)
        self._drawn_at = now

    def finish(self) -> None:
        """End a count line with a newline (it stays as the record of the work)."""
        if self.enabled and self._drawn_at is not None:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn_at = None
            self._width = 0

    def clear(self) -> None:
        """Erase a step line: what follows replaces it."""
        if self.enabled and self._drawn_at is not None:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._drawn_at = None
            self._width = 0


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, taken at a boundary between whole chunks of work."""


@contextlib.contextmanager
def interrupt_between_chunks() -> Iterator[Callable[[], None]]:
    """Inside the block Ctrl-C is only noted; the callable it yields raises `Interrupted` if
    it was pressed, so work stops where the caller checks (after a chunk is journaled), never
    in the middle of a journal write. Pressed after the last check, it is ignored: the work
    finished. Outside the main thread it does nothing."""
    pressed: list[bool] = []

    def note(signum: int, frame: FrameType | None) -> None:
        pressed.append(True)

    def check() -> None:
        if pressed:
            raise Interrupted

    try:
        previous = signal.signal(signal.SIGINT, note)
    except ValueError:  # not the main thread
        yield lambda: None
        return
    try:
        yield check
    finally:
        signal.signal(signal.SIGINT, previous)
