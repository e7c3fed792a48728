"""Buffers that read a memory map (the saved search index's file, `compactor.persistence.indexfile`):
which map a buffer reads, copying one out into this process's own memory, and dropping the
map's pages this process holds. The index reads its arrays in place from such a map and copies
out only what it grows.
"""

from __future__ import annotations

import contextlib
import mmap
from array import array
from collections.abc import Mapping
from typing import Any, Final

# The first settle after a start copies the arrays it grows out of the index file's memory
# map, this many bytes at a time with the map's pages dropped after each (`copy_out`):
# what the copy maps stays this small, and a release costs ~0.01-2 ms.
COPY_CHUNK: Final = 1 << 20


def mapping(arrays: Mapping[str, Any]) -> mmap.mmap | None:
    """The memory map that arrays from `read` view; None for arrays read any other way."""
    for value in arrays.values():
        owner = map_of(value)
        if owner is not None:
            return owner
    return None


def map_of(buf: Any) -> mmap.mmap | None:
    """The memory map `buf` reads (a view of one, or a numpy array over such a view), if any."""
    while buf is not None and not isinstance(buf, mmap.mmap):
        buf = buf.obj if isinstance(buf, memoryview) else getattr(buf, "base", None)
    return buf


def copy_out(src: Any, dst: Any) -> None:
    """Copy the buffer `src` into `dst`, a writable buffer of its size in bytes. From a memory
    map, a chunk at a time, the map's pages this process holds dropped after each (`release`):
    a whole array copied at once kept its pages resident beside the copy until the next
    release, the peak of a 10k-item server's first settle after a start (~10 MiB of ~170)."""
    source, target = memoryview(src).cast("B"), memoryview(dst).cast("B")
    if source.nbytes != target.nbytes:
        raise ValueError(f"cannot copy {source.nbytes:,} bytes into {target.nbytes:,}")
    mapped = map_of(src)
    step = COPY_CHUNK if mapped is not None else max(source.nbytes, 1)
    for lo in range(0, source.nbytes, step):
        target[lo : lo + step] = source[lo : lo + step]
        if mapped is not None:
            release(mapped)


def unmapped(buf: Any) -> Any:
    """`buf` itself, or, when it reads a memory map, a copy of it in this process's own memory
    made by `copy_out`: an array of the view's typecode (a bytearray for bytes), or a numpy
    array like it."""
    if map_of(buf) is None:
        return buf
    out: Any
    if isinstance(buf, memoryview):
        out = bytearray(buf.nbytes) if buf.format == "B" else array(buf.format, [0]) * len(buf)
    else:
        import numpy as np

        out = np.empty_like(buf)
    copy_out(buf, out)
    return out


def release(mapped: mmap.mmap) -> None:
    """Unmap this process's resident pages of `mapped`; the next read of one maps it again from
    the page cache. Each scattered read of the map maps the 64 KiB around it (the kernel's
    fault-around, whatever madvise says), so a compaction's reads of the index at 100k items
    left ~150 MiB of the file resident, counted in the process's RSS."""
    with contextlib.suppress(OSError, ValueError):  # only a hint; ValueError: already closed
        mapped.madvise(mmap.MADV_DONTNEED)
