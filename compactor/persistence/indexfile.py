"""The saved search index as a binary file beside the snapshot, read through a memory map;
its layout (`encode`, `parse`) is also how PostgreSQL keeps it, as rows of its snapshot.

Inside the snapshot's first line the index was base64 in JSON: at 10k items ~80% of the
snapshot's bytes, all of it parsed, decoded and copied into each process at every start. Here
its arrays are raw bytes in their own file, `index.G.bin` (G: the snapshot generation that
names it): a start maps the file and reads the arrays in place, and every server on the state
dir shares the same pages through the page cache.

Layout: the magic line, one JSON line naming each array's byte offset and length, then the
arrays, each starting on an 8-byte boundary. The snapshot's header records the file's name,
size and CRC-32 (`{"name", "size", "crc32"}`), so the snapshot's own checksum covers the
reference, and a file that does not match it is never used: the index is rebuilt from the
items instead. Written under a temp name (`index.G.bin.PID.tmp`), fsynced and renamed before
the snapshot that names it; files no snapshot names any more are deleted after the next one.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import orjson

# The index file is checksummed at load in this many chunks, each read into one buffer (a
# mapping of its own, above MALLOC_MMAP_THRESHOLD, gone once read), of at least the minimum.
# A start checks it on a thread while it parses the items: each read and CRC call releases the
# GIL, and each time the thread takes it back the parse waits, so a 100k-item file (236 MB)
# read 1 MiB at a time made that start ~250 ms slower than 15 chunks of 16 MiB did; but every
# page of a fresh buffer is a page fault, and a 16 MiB buffer for a 10k-item file (27 MB) made
# its start ~15 ms slower than 1 MiB chunks did. Sixteen chunks suit both.
INDEX_FILE_CHECK_CHUNKS: Final = 16
INDEX_FILE_CHECK_MIN_CHUNK: Final = 1 << 20

MAGIC = b"compactor-index 1\n"
_ALIGN = 8
_NAME = re.compile(r"index\.\d+\.bin")


class IndexFileError(ValueError):
    """The index file is missing, cut short or changed since it was written."""


def file_name(gen: int) -> str:
    return f"index.{gen}.bin"


def encode(arrays: Mapping[str, Any]) -> list[memoryview | bytes]:
    """The arrays (bytes-like, by name) in this module's layout, as the pieces to write one
    after the other: the head, then each array and its padding. The pieces view the arrays,
    which must not change until they are written. Both backends save an index this way (the
    state dir as a file, PostgreSQL as rows of its snapshot)."""
    layout: dict[str, list[int]] = {}
    offset = 0
    views = {name: memoryview(data).cast("B") for name, data in arrays.items()}
    for name, view in views.items():
        layout[name] = [offset, view.nbytes]
        offset += -(-view.nbytes // _ALIGN) * _ALIGN
    head = MAGIC + orjson.dumps(layout) + b"\n"
    head += b"\0" * (-len(head) % _ALIGN)
    pieces: list[memoryview | bytes] = [head]
    for view in views.values():
        pieces += [view, b"\0" * (-view.nbytes % _ALIGN)]
    return pieces


def reference(name: str, pieces: list[memoryview | bytes]) -> dict[str, Any]:
    """What a snapshot's header keeps of the index saved from `pieces` under `name`."""
    crc = 0
    for piece in pieces:
        crc = zlib.crc32(piece, crc)
    return {"name": name, "size": sum(memoryview(piece).nbytes for piece in pieces), "crc32": crc}


def write(dir_: Path, gen: int, arrays: Mapping[str, Any]) -> dict[str, Any]:
    """Write the arrays (bytes-like, by name) to `index.<gen>.bin`, fsynced; returns the
    reference the snapshot header keeps."""
    pieces = encode(arrays)
    name = file_name(gen)
    tmp = dir_ / f"{name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            for piece in pieces:
                fh.write(piece)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dir_ / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return reference(name, pieces)


def read(
    dir_: Path, ref: Mapping[str, Any], opened: Mapping[str, int] | None = None, *, verify: bool = True
) -> dict[str, memoryview]:
    """The arrays of the file `ref` names, as read-only views into a shared memory map.
    IndexFileError if the file is missing or does not match the reference. `opened`: files
    already open, by name (`hold`), read from their descriptor even if since removed.
    `verify=False` skips the checksum, which reads the whole file: for one this process has
    just written and checksummed (85-330 ms at 100k items, under the lock)."""
    name = ref.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise IndexFileError(f"the snapshot names no valid index file ({name!r})")
    path = dir_ / name
    try:
        fd = os.dup(opened[name]) if opened and name in opened else os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise IndexFileError(f"{path} cannot be opened: {exc.strerror or exc}") from exc
    try:
        size = os.fstat(fd).st_size
        if size != ref.get("size") or size < len(MAGIC):
            raise IndexFileError(f"{path} is {size:,} bytes, not the {ref.get('size')!r} the snapshot recorded")
        if verify and _checksum(fd, size) != ref.get("crc32"):
            raise IndexFileError(f"{path} does not match its checksum: some bytes changed after it was written")
        mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise IndexFileError(f"{path} cannot be read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    return parse(memoryview(mapped), str(path))


def parse(view: memoryview, where: str) -> dict[str, memoryview]:
    """The arrays of an index in this module's layout (`encode`), as views of `view`;
    IndexFileError (naming `where`) if it is not one or is cut short."""
    size = view.nbytes
    end = bytes(view[: min(size, 1 << 20)]).find(b"\n", len(MAGIC))
    if view[: len(MAGIC)] != MAGIC or end < 0:
        raise IndexFileError(f"{where} is not a compactor index file")
    try:
        layout = orjson.loads(bytes(view[len(MAGIC) : end]))
    except orjson.JSONDecodeError as exc:
        raise IndexFileError(f"{where} has a damaged layout line") from exc
    base = end + 1 + (-(end + 1) % _ALIGN)
    out: dict[str, memoryview] = {}
    for key, (offset, length) in layout.items():
        if base + offset + length > size:
            raise IndexFileError(f"{where} is cut short")
        out[key] = view[base + offset : base + offset + length]
    return out


def _checksum(fd: int, size: int) -> int:
    """The CRC-32 of the whole file, read a chunk at a time into one buffer. Reads copy from
    the page cache and map nothing, so the check leaves no trace in RSS; reading the memory
    map instead faulted every page in (the file's size in RSS until each chunk was dropped),
    took a third longer, and slowed a thread parsing beside it."""
    buf = memoryview(bytearray(min(size, max(INDEX_FILE_CHECK_MIN_CHUNK, size // INDEX_FILE_CHECK_CHUNKS))))
    crc = 0
    with open(fd, "rb", buffering=0, closefd=False) as fh:  # closefd=False: read() closes it
        fh.seek(0)
        while n := fh.readinto(buf):
            crc = zlib.crc32(buf[:n], crc)
    return crc


@contextlib.contextmanager
def hold(dir_: Path) -> Iterator[dict[str, int]]:
    """Every index file in `dir_` open, by name, for as long as the context lasts. Opened under
    the lock that read a snapshot, they are still there when it is checked: a server deletes
    the file an older snapshot named off the lock, right after its next snapshot."""
    held: dict[str, int] = {}
    try:
        for path in others(dir_, None):
            with contextlib.suppress(OSError):
                held[path.name] = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        yield held
    finally:
        for fd in held.values():
            os.close(fd)


def others(dir_: Path, keep: str | None) -> list[Path]:
    """The index files no snapshot names any more (all of them but `keep`)."""
    return [path for path in dir_.glob("index.*.bin") if path.name != keep and _NAME.fullmatch(path.name)]


def remove(paths: list[Path]) -> None:
    """Delete index files `others` listed. Off the lock when it can be: freeing ~25 MB (10k
    items) holds the file system's journal, and every call's journal fsync waits behind it."""
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


def remove_others(dir_: Path, keep: str | None) -> None:
    """Delete the index files no snapshot names any more (all of them but `keep`): after a
    forget no file may still hold the forgotten item's words. A process that still maps one
    keeps reading it until it reloads."""
    remove(others(dir_, keep))


def problem(dir_: Path, ref: Any) -> str | None:
    """Why the index file a snapshot names cannot be used, or None."""
    if not isinstance(ref, dict):
        return "the snapshot's reference to its index file is damaged"
    try:
        read(dir_, ref)
    except IndexFileError as exc:
        return str(exc)
    return None
