"""Reading a state dir's journal file: its header, its lines from a byte offset as batches of
ops (a torn last line, left by a crash, told apart from a damaged one), its bytes between two
offsets, and the lines of a kept generation (`journal.prev.G.L`) between two offsets.

Only reading: appending, cutting and rotating the journal are `statedir.StateDir`'s, under the
writers' lock. A damaged line or header raises StateCorruptError naming the file, ended by the
hints the state dir gives (what to run, what to move aside)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import orjson

from ..errors import StateCorruptError
from ..models import Op
from .codec import parse_line
from .files import NOFOLLOW


class JournalReader:
    """Reads the journal at `path`; `hint` ends the errors of a bad header or an unreadable
    file, `repair_hint` those of a damaged line."""

    def __init__(self, path: Path, *, hint: str, repair_hint: str) -> None:
        self.path = path
        self.hint = hint
        self.repair_hint = repair_hint

    def open(self, path: Path | None = None) -> BinaryIO:
        return os.fdopen(os.open(path or self.path, os.O_RDONLY | NOFOLLOW), "rb")

    def bad_header(self, exc: object) -> StateCorruptError:
        return StateCorruptError(f"Journal {self.path} has a bad header ({exc}). {self.hint}")

    def parse_header(self, first: bytes) -> tuple[int, int]:
        """(version, generation) of a journal's first line."""
        try:
            if not first.endswith(b"\n"):
                raise ValueError("no complete header line")
            header = orjson.loads(first)
            gen = int(header["gen"])
            version = int(header.get("journal", 1))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise self.bad_header(exc) from exc
        return version, gen

    def read(
        self, start: int | None = None, expect_gen: int | None = None
    ) -> tuple[int, list[list[Op]], int, list[str]]:
        """Return (gen, batches from `start` (default: after the header), end offset, warnings).

        A torn final line (no line break: a crash mid-write) is reported as a warning and not
        returned; any other bad line, a line whose checksum does not match included, raises
        StateCorruptError. With `expect_gen`, a journal of another generation returns
        (gen, [], 0, []) unread: `start` is an offset into a file that no longer exists, and
        parsing from it would land mid-line.
        """
        try:
            with self.open() as fh:
                first = fh.readline()
                if not first:
                    return 0, [], 0, []
                version, gen = self.parse_header(first)
                if expect_gen is not None and gen != expect_gen:
                    return gen, [], 0, []
                pos = len(first) if start is None else start
                fh.seek(pos)
                data = fh.read()
        except FileNotFoundError:
            return 0, [], 0, []
        except OSError as exc:
            raise StateCorruptError(f"Cannot read {self.path}: {exc}. {self.hint}") from exc
        batches: list[list[Op]] = []
        at = 0
        while at < len(data):
            end = data.find(b"\n", at)
            if end < 0:
                return (
                    gen,
                    batches,
                    pos + at,
                    [f"{self.path}: skipped a torn last line ({len(data) - at} bytes) left by a crash"],
                )
            try:
                batches.append(parse_line(data[at:end], version))
            except ValueError as exc:
                lineno = self.line_number(pos + at)
                raise StateCorruptError(
                    f"Journal {self.path} line {lineno} is damaged ({exc}): compactor will not "
                    f"build on it. {self.repair_hint}"
                ) from exc
            at = end + 1
        return gen, batches, pos + at, []

    def line_number(self, offset: int) -> int:
        """The 1-based line of the journal that starts at byte `offset` (for messages only)."""
        try:
            with self.open() as fh:
                return fh.read(offset).count(b"\n") + 1
        except OSError:
            return 0

    def gen(self) -> int:
        """The journal's generation from its header; 0 if there is no journal yet."""
        try:
            with self.open() as fh:
                first = fh.readline()
        except FileNotFoundError:
            return 0
        if not first:
            return 0
        return self.parse_header(first)[1]

    def bytes_between(self, start: int, end: int) -> bytes:
        with self.open() as fh:
            fh.seek(start)
            return fh.read(max(0, end - start))

    def batches_between(self, path: Path, gen: int, start: int, upto: int) -> list[list[Op]] | None:
        """The batches of the kept generation `gen` in `path` from byte `start` to `upto` (line
        boundaries), or None if the file does not hold them whole."""
        if upto < start:
            return None
        try:
            with self.open(path) as fh:
                version, file_gen = self.parse_header(fh.readline())
                fh.seek(start)
                data = fh.read(upto - start)
        except (OSError, StateCorruptError):
            return None
        if file_gen != gen or len(data) != upto - start or (data and not data.endswith(b"\n")):
            return None
        try:
            return [parse_line(line, version) for line in data.split(b"\n")[:-1]]
        except ValueError:
            return None
