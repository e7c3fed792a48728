"""Process-wide runtime policy: the cyclic garbage collector and the GIL switch interval.

The domain core does not set these itself: a Store is handed a `Runtime` (by default
`PROCESS`, which applies them to this process) and asks it to pause collection around bulk
work and to hand the GIL back quickly while a background snapshot is written. The server
settles the heap (`settle_heap`) beside it, and tunes the C allocator once at its start
(`tune_allocator`). A caller embedding the Store in a process that sets its own policy passes
`Runtime(manage_process=False)`.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
from collections.abc import Callable, Iterator
from typing import Final

# Blocks from this size up get a mapping of their own (runtime.tune_allocator). 1 MiB: a settle's
# arrays are larger, and a 100k-item query's per-document scores (800 KB) stay on the heap, where
# reusing them costs no page faults. At 10k items it lowered a load's peak RSS by ~9 MiB.
MALLOC_MMAP_THRESHOLD: Final = 1 << 20
# The same inside a write (runtime.Runtime.write_work), where an index merge makes its arrays.
# 256 KiB: at 10k items a load's peak RSS fell from 162-164 to 159 MiB with it process-wide,
# but a 100k-item query then ran 25-50% slower, so reads keep the 1 MiB above.
WRITE_MMAP_THRESHOLD: Final = 1 << 18
# GIL switch interval while a background snapshot is written (Python's default is 5 ms): the
# longest a call on the event loop waits for the writer thread each time it needs the GIL.
SNAPSHOT_SWITCH_INTERVAL_S: Final = 0.0005


class Runtime:
    """What the Store may change about the process it runs in, and when."""

    def __init__(self, *, manage_process: bool = True) -> None:
        self.manage_process = manage_process
        self._writing = 0  # nested write_work blocks
        # glibc's mallopt once `tune_allocator` has set the threshold with it: the process
        # opted in, and `write_work` may move it.
        self._mallopt: Callable[[int, int], int] | None = None
        self._start_paused = False  # `pause_for_start` turned collection off

    def pause_for_start(self) -> None:
        """Turn the cyclic collector off until `start_done`. A server's start (the SDK's
        imports, numpy, this package, the load and the build) makes ~140k objects that live as
        long as the process and ~1k of cyclic garbage; young-generation collections walked the
        new objects again and again, ~40 ms of the imports alone. Call it before the imports."""
        if self.manage_process and gc.isenabled():
            gc.disable()
            self._start_paused = True

    def start_done(self) -> None:
        """The server is built: freeze what the start made (`settle_heap`, without the ~45 ms
        collection that would free only that ~1k), and resume collection if `pause_for_start`
        paused it."""
        settle_heap(collect=False)
        if self._start_paused:
            self._start_paused = False
            gc.enable()

    @contextlib.contextmanager
    def write_work(self) -> Iterator[None]:
        """A write, with the index merge it may make: blocks from WRITE_MMAP_THRESHOLD bytes
        up get mappings of their own inside (once `tune_allocator` has tuned the allocator).
        A merge's arrays live until the next merge frees them; at 10k items they are ~1 MiB,
        just under the threshold reads keep, and freed inside the heap they stayed resident.
        Reads keep the higher one: a 100k-item query's per-term arrays, each mapped and
        faulted in, made queries 25-50% slower."""
        mallopt = self._mallopt
        if not self.manage_process or mallopt is None:
            yield
            return
        if not self._writing:
            mallopt(_M_MMAP_THRESHOLD, WRITE_MMAP_THRESHOLD)
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
            if not self._writing:
                mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD)

    @contextlib.contextmanager
    def bulk_work(self) -> Iterator[None]:
        """No cyclic garbage collection inside: a compaction or a load makes thousands of new
        items and ops, long-lived and acyclic, and the collector's passes over them are a
        large share of the work. Collection resumes (and catches up) when it ends."""
        if not self.manage_process or not gc.isenabled():
            yield
            return
        gc.disable()
        try:
            yield
        finally:
            gc.enable()

    @contextlib.contextmanager
    def background_write(self) -> Iterator[None]:
        """While a worker thread writes a snapshot: the writer holds the GIL between its I/O
        calls, and the event loop waits up to the switch interval (5 ms by default) each time
        it wants it back, several times a call; a shorter interval bounds that wait."""
        if not self.manage_process:
            yield
            return
        interval = sys.getswitchinterval()
        sys.setswitchinterval(SNAPSHOT_SWITCH_INTERVAL_S)
        try:
            yield
        finally:
            sys.setswitchinterval(interval)


PROCESS = Runtime()


def settle_heap(*, collect: bool) -> None:
    """Move what is alive now out of the cyclic garbage collector's view (gc.freeze).

    The store is hundreds of thousands of long-lived objects with no reference cycles (they
    are freed by reference counting as usual); every full collection walks all of them, a
    long pause in the middle of some unlucky call. `collect` first collects what is not
    frozen yet, so that cyclic garbage (the SDK's, from earlier requests) is not frozen with
    it: after a freeze that is only what was made since the last one. At start it would be
    the full pause, over objects just loaded.
    """
    if collect:
        gc.collect()
    gc.freeze()


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """For what lives as long as the process (the server's store, loaded at its start): no
    cyclic collection while the block makes it, then everything frozen (`settle_heap` without
    a collection) before collection resumes. Resumed first, the next collections walked every
    object the load had made, a pause before the first reply (at 100k items, one pass of
    ~160 ms and one of ~120 ms)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        settle_heap(collect=False)
        if enabled:
            gc.enable()


# mallopt's parameter number for the mmap threshold (glibc's malloc.h).
_M_MMAP_THRESHOLD = -3


def tune_allocator() -> bool:
    """Serve blocks of MALLOC_MMAP_THRESHOLD bytes or more with their own mapping, given back
    to the system when freed. glibc otherwise raises that threshold to the largest block freed
    so far (up to 32 MiB): after the first index settle, its arrays of several MiB come from the
    heap, whose freed space the process keeps as RSS. PROCESS's writes may then lower it
    (`Runtime.write_work`). False where there is no glibc mallopt."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not mallopt(_M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD):
        return False
    PROCESS._mallopt = mallopt
    return True
