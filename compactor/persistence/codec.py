"""The bytes of a journal and a snapshot, shared by every place that keeps or checks them (the
state dir, PostgreSQL, the doctor): the journal's header and its lines, each carrying the CRC-32
of its ops; the lock file's record of the journal; a snapshot as lines (a header, one item per
line, a trailer with the CRC-32 of every byte before it), written as chunks and read back one
item at a time; and the check of a whole snapshot's checksum.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Final

import orjson

from ..errors import StateCorruptError
from ..models import Op

# The snapshot's layout version; a newer one is refused (upgrade compactor), never rewritten.
SCHEMA_VERSION: Final = 1
# Snapshot serialisation yields the GIL between chunks so a concurrent call waits at most one
# chunk's worth of orjson work (~1-2 ms), not the whole store's.
SNAPSHOT_CHUNK_ITEMS: Final = 100

ITEMS_LINE = b',"items":[\n'  # ends a snapshot's first line; one item per line follows
ITEMS_END = b"]}"  # a snapshot's last line in the layout before checksums
CRC_TRAILER = b'],"crc32":'  # starts a snapshot's last line: `],"crc32":N}`
LINE_CRC = b'{"crc":'  # starts every journal line since journal version 2
LINE_OPS = b',"ops":'
JOURNAL_VERSION = 2  # 2: every line carries the CRC-32 of its ops
# The snapshot header's key for the saved index's reference (`Persistence.save_index`): a
# backend keeps the arrays it names for as long as the snapshot is in use.
INDEX_REF = "index_file"
RECORD_SIZE = 64  # bytes at the start of the lock file holding the journal record


class SnapshotItems:
    """A snapshot's items, parsed one line at a time; owns the open file. `close()` it if it
    is not read to the end. The trailer's checksum is verified when the last line is reached,
    so build nothing lasting from the items before they have all been read."""

    def __init__(self, fh: BinaryIO, corrupt: Callable[[object], StateCorruptError], crc: int = 0) -> None:
        self._fh = fh
        self._corrupt = corrupt
        self._read = 0
        self._crc = crc

    def __iter__(self) -> SnapshotItems:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._fh.closed:
            raise StopIteration
        try:
            line = self._fh.readline()
            if line.startswith(b"]"):
                self._finish(line)
                raise StopIteration
            if not line.endswith(b"\n"):
                raise self._corrupt("it ends before its items do")
            self._crc = zlib.crc32(line, self._crc)
            self._read += 1
            record = orjson.loads(line[:-2] if line.endswith(b",\n") else line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
            return record
        except ValueError as exc:
            self.close()
            raise self._corrupt(f"item {self._read}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def _finish(self, line: bytes) -> None:
        trailing = self._fh.read().strip()
        self.close()
        if trailing:
            raise self._corrupt("data after the end of the items")
        if line.rstrip() == ITEMS_END:
            return  # written before snapshots carried a checksum
        if not line.startswith(CRC_TRAILER) or not line.rstrip().endswith(b"}"):
            raise self._corrupt("its last line is damaged")
        try:
            recorded = int(line.rstrip()[len(CRC_TRAILER) : -1])
        except ValueError as exc:
            raise self._corrupt("its checksum is damaged") from exc
        if recorded != self._crc:
            raise self._corrupt("its checksum does not match its contents: some bytes changed after it was written")

    def close(self) -> None:
        self._fh.close()


# A snapshot's item records, one at a time, each freed once handed out: read line by line
# from the file, or from a snapshot that had to be parsed whole. Closing releases the file.
ItemRecords = SnapshotItems | Generator[dict[str, Any], None, None]


def journal_header(gen: int) -> bytes:
    return orjson.dumps({"journal": JOURNAL_VERSION, "gen": gen}) + b"\n"


def journal_header_len(gen: int) -> int:
    return len(journal_header(gen))


def journal_line(ops: list[Op]) -> bytes:
    """One call's ops as a journal line carrying the CRC-32 of the ops' bytes."""
    payload = orjson.dumps(ops)
    return LINE_CRC + str(zlib.crc32(payload)).encode() + LINE_OPS + payload + b"}\n"


def parse_line(line: bytes, version: int) -> list[Op]:
    """The ops of one journal line (without its line break); ValueError if it is damaged."""
    if line.startswith(LINE_CRC):
        split = line.find(LINE_OPS)
        if split < 0 or not line.endswith(b"}"):
            raise ValueError("a line with a checksum but no ops")
        payload = line[split + len(LINE_OPS) : -1]
        try:
            recorded = int(line[len(LINE_CRC) : split])
        except ValueError as exc:
            raise ValueError("its checksum is damaged") from exc
        if zlib.crc32(payload) != recorded:
            raise ValueError("its checksum does not match: bytes changed after it was written")
        ops = orjson.loads(payload)
    elif version >= 2:
        raise ValueError("a line without its checksum")
    else:  # journal version 1, before lines carried checksums
        entry = orjson.loads(line)
        if not isinstance(entry, dict) or "ops" not in entry:
            raise ValueError("a line without ops")
        ops = entry["ops"]
    if not isinstance(ops, list):
        raise ValueError("ops is not a list")
    return ops


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """The lock file's note of the journal: generation `gen` was `end` bytes long, of which
    `durable` were fsynced before a call was acknowledged (access-time lines are not fsynced,
    so a power loss may take them without any write being lost)."""

    gen: int
    durable: int
    end: int

    def encode(self) -> bytes:
        text = f"journal {self.gen} {self.durable} {self.end}"
        return text.encode().ljust(RECORD_SIZE - 1) + b"\n"

    @classmethod
    def parse(cls, raw: bytes) -> JournalRecord | None:
        parts = raw.split()
        if len(parts) != 4 or parts[0] != b"journal":
            return None
        try:
            return cls(int(parts[1]), int(parts[2]), int(parts[3]))
        except ValueError:
            return None


def snapshot_checksum_problem(raw: bytes) -> str | None:
    """Why a whole snapshot's bytes fail their checksum, or None (also for the older layouts
    that carry none: one line, or a last line of `]}`)."""
    cut = raw.rfind(b"\n")
    if cut < 0:
        return None
    last = raw[cut + 1 :].rstrip()
    if last == ITEMS_END:
        return None
    if not last.startswith(CRC_TRAILER) or not last.endswith(b"}"):
        return "its last line is damaged or missing (the file was cut short)"
    try:
        recorded = int(last[len(CRC_TRAILER) : -1])
    except ValueError:
        return "its checksum is damaged"
    if zlib.crc32(raw[: cut + 1]) != recorded:
        return "its checksum does not match its contents: some bytes changed after it was written"
    return None


def snapshot_chunks(header: dict[str, Any], items: list[dict[str, Any]] | list[Any]) -> Iterator[bytes]:
    """Serialise a snapshot as a stream of chunks so a writer thread can yield between them.

    One JSON object, laid out in lines: the header (settings, saved indexes) and the opening
    of the items array on the first, then one item per line (orjson writes no raw newlines),
    then a trailer line with the CRC-32 of every byte before it, so a load can parse it item
    by item (`read_snapshot_streaming`) and still tell a changed byte."""
    first = orjson.dumps(header)[:-1] + ITEMS_LINE
    crc = zlib.crc32(first)
    yield first
    for start in range(0, len(items), SNAPSHOT_CHUNK_ITEMS):
        part = b",\n".join(map(orjson.dumps, items[start : start + SNAPSHOT_CHUNK_ITEMS]))
        chunk = part if not start else b",\n" + part
        crc = zlib.crc32(chunk, crc)
        yield chunk
    if items:
        crc = zlib.crc32(b"\n", crc)
        yield b"\n"
    yield CRC_TRAILER + str(crc).encode() + b"}"
