"""The search index a PostgreSQL snapshot saves, as rows of that snapshot (see
`compactor.persistence.postgres`): laid out as the state dir's index file
(`compactor.persistence.indexfile`), its reference at chunk INDEX_LABEL and its bytes in rows of
INDEX_ROW_BYTES below it. A start reads them in the snapshot's transaction into one buffer, which
the index then reads its arrays from in place: no base64, no copy per array."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import orjson

from . import indexfile
from .indexfile import IndexFileError
from .pg_sql import COPY_INDEX_SQL, INDEX_LABEL, INDEX_ROW_BYTES, INDEX_ROWS_SQL, import_psycopg, one_line

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import psycopg

log = logging.getLogger(__name__)

# A saved index's bytes in this process: a numpy buffer, not a bytearray, which the index would
# take for a blob of its own to grow in place (`Vocab._grown_blob`) rather than a view to copy.
Image: TypeAlias = "npt.NDArray[np.uint8]"
# An index in hand: its label row and its bytes.
Held: TypeAlias = "tuple[bytes, Image]"


def label_of(ref: Mapping[str, Any]) -> bytes:
    """The row that names a saved index: its reference, as a snapshot's header keeps it."""
    return orjson.dumps({"name": ref.get("name"), "size": ref.get("size"), "crc32": ref.get("crc32")})


def name_of(label: bytes) -> object:
    """The index name a label row gives (None if it is damaged)."""
    try:
        got = orjson.loads(label)
    except ValueError:
        return None
    return got.get("name") if isinstance(got, dict) else None


def assemble(pieces: Iterable[Any], size: int) -> Image | None:
    """One buffer of `size` bytes filled from `pieces` (bytes-like, in order) as each arrives,
    so no second copy is made; None if they add up to another size."""
    import numpy as np

    image = np.empty(size, dtype=np.uint8)
    at = 0
    for piece in pieces:
        data = np.frombuffer(piece, dtype=np.uint8)
        end = at + len(data)
        if end > size:
            return None
        image[at:end] = data
        at = end
    return image if at == size else None


def lay_out(gen: int, arrays: Mapping[str, memoryview]) -> tuple[dict[str, Any], Held]:
    """The arrays as an index file's bytes: the reference a snapshot's header keeps, and the
    index in hand until the snapshot that names it writes its rows."""
    pieces = indexfile.encode(arrays)
    ref = indexfile.reference(f"index.{gen}", pieces)
    image = assemble(pieces, ref["size"])
    assert image is not None  # the size is theirs
    return ref, (label_of(ref), image)


def open_image(image: Image, ref: Mapping[str, Any], where: str, *, verify: bool) -> dict[str, memoryview]:
    """The arrays an index's bytes hold, read in place; IndexFileError if they do not match
    the reference."""
    if len(image) != ref.get("size"):
        raise IndexFileError(f"{where} is {len(image):,} bytes, not the {ref.get('size')!r} the snapshot recorded")
    if verify and zlib.crc32(image.data) != ref.get("crc32"):
        raise IndexFileError(f"{where} does not match its checksum: some bytes changed after it was written")
    image.flags.writeable = False  # read in place, as an index file's memory map is
    return indexfile.parse(image.data, where)


def read_rows(conn: psycopg.Connection[Any], snap_id: int) -> Held | None:
    """The index the snapshot holds (its label and bytes), read a row at a time into one
    buffer; None if it holds none or its rows do not add up (`load_index` then says so)."""
    row = conn.execute(
        "SELECT data FROM compactor_snapshot_chunk WHERE snapshot_id = %s AND n = %s", (snap_id, INDEX_LABEL)
    ).fetchone()
    if row is None:
        return None
    label = bytes(row[0])
    try:
        size = orjson.loads(label)["size"]
        if not isinstance(size, int) or size < 0:
            return None
    except (ValueError, KeyError, TypeError):
        return None
    rows = conn.cursor().stream(
        "SELECT data FROM compactor_snapshot_chunk WHERE snapshot_id = %s AND n < %s ORDER BY n DESC",
        (snap_id, INDEX_LABEL),
    )
    image = assemble((data for (data,) in rows), size)
    return None if image is None else (label, image)


def write_rows(conn: psycopg.Connection[Any], snap_id: int, label: bytes, index: Held | None, where: str) -> None:
    """The index `label` names as rows of snapshot `snap_id` (inside the caller's transaction):
    from `index` when that is the one, else copied inside the server from the snapshot that
    holds it, so its bytes never cross the wire again."""
    if index is not None and index[0] == label:
        view = index[1].data
        with conn.cursor().copy("COPY compactor_snapshot_chunk (snapshot_id, n, data) FROM STDIN") as copy:
            copy.write_row((snap_id, INDEX_LABEL, label))
            for k, lo in enumerate(range(0, view.nbytes, INDEX_ROW_BYTES)):
                copy.write_row((snap_id, INDEX_LABEL - 1 - k, view[lo : lo + INDEX_ROW_BYTES]))
        return
    copied = conn.execute(COPY_INDEX_SQL, {"snap": snap_id, "label": label}).rowcount
    if not copied:
        # Dropped meanwhile (a forget, a repair): the start that reads this snapshot rebuilds it.
        log.info("the index snapshot %d names is no longer in %s", snap_id, where)


def fetch(conn: psycopg.Connection[Any], label: bytes, size: object, where: str) -> Image:
    """The index's bytes from whichever snapshot holds them (one this process did not read)."""
    psycopg = import_psycopg()
    if not isinstance(size, int) or size < 0:
        raise IndexFileError(f"{where} has no valid size in the snapshot's reference")
    try:
        with conn.cursor() as cur:
            rows = cur.stream(INDEX_ROWS_SQL, {"label": label, "snap": 0})
            image = assemble((data for (data,) in rows), size)
    except psycopg.Error as exc:
        raise IndexFileError(f"{where} cannot be read: {one_line(exc)}") from exc
    if image is None:
        raise IndexFileError(f"{where} is missing or cut short")
    return image


def drop_others(conn: psycopg.Connection[Any], name: str | None) -> None:
    """Delete the index rows of every snapshot whose index is not `name`."""
    labels = conn.execute("SELECT snapshot_id, data FROM compactor_snapshot_chunk WHERE n = %s", (INDEX_LABEL,))
    other = [int(snap) for snap, data in labels.fetchall() if name_of(bytes(data)) != name]
    if other:
        conn.execute("DELETE FROM compactor_snapshot_chunk WHERE n < 0 AND snapshot_id = ANY(%s)", (other,))
