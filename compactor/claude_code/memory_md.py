"""Claude Code's MEMORY.md, both ways.

In: an auto-memory dir (`*.md` files with YAML frontmatter `name`, `description`, `type`, the
type either top-level or under `metadata:`), its `MEMORY.md` index (`- [name](file.md) — text`),
or a flat MEMORY.md whose entries start with `- `, `## ` or a date. A file's text is stored
whole, frontmatter included, so unknown keys survive and an export writes it back unchanged;
ids derive from that text, so importing twice stores nothing new.

Out: pinned and important items as such a dir plus a MEMORY.md index, newest first.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from .. import constants as C
from ..errors import InvalidArgumentError, OutputRefusedError
from ..models import Item
from ..outfile import exists_not_link, write_private
from ..render import preview
from ..store import StoreInput

# Claude Code's auto-memory types. Each file is something it chose to keep across sessions, so
# all rank above the default; the user's corrections and profile most, a reference (a pointer
# that is cheap to look up again) least. >= MEMORY_EXPORT_MIN_IMPORTANCE exports them back.
MEMORY_TYPE_IMPORTANCE: Final = {"feedback": 8, "user": 8, "project": 7, "reference": 6}
# Claude Code loads the first 200 lines of MEMORY.md; index lines stay short to be read whole.
MEMORY_INDEX_MAX_LINES: Final = 200
MEMORY_INDEX_LINE_CHARS: Final = 150
# An item this important (or pinned) is exported to a MEMORY.md dir.
MEMORY_EXPORT_MIN_IMPORTANCE: Final = 7

log = logging.getLogger(__name__)

MEMORY_TYPES = ("user", "feedback", "project", "reference")
INDEX_NAME = "MEMORY.md"
# Files a person wrote: an editor on Windows may start one with a byte-order mark, which is no
# part of the text (read off here, it stays out of the stored items).
_ENCODING = "utf-8-sig"
_FRONTMATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)
_INDEX_LINE = re.compile(
    r"^\s*[-*]\s+\[(?P<name>[^\]]+)\]\((?P<file>[^)\s]+\.md)\)\s*(?:[\u2014\u2013:-]+\s*(?P<desc>.*))?$"
)
_DATE = r"\[?\d{4}-\d{2}-\d{2}(?:[ T]\d{1,2}:\d{2}(?::\d{2})?)?\]?"
_ENTRY_START = re.compile(rf"^(?:[-*]\s+|##\s+|{_DATE}(?=[\s:.-]))")
_HEADING2 = re.compile(r"^##\s+(.*)$")
_TITLE = re.compile(r"^#\s+")
_VALID_ID = re.compile(r"[a-z0-9][a-z0-9_-]{2,63}")
ID_KEY = "compactor_id"
# First line of a MEMORY.md our export writes: how a later export knows it may replace it.
INDEX_MARKER = (
    "<!-- written by `compactor export --format memory-md`; hand-written entries belong in files of their own -->"
)


@dataclass(slots=True)
class MemoryEntry:
    """One memory as Claude Code writes it."""

    name: str
    description: str
    type: str | None
    body: str
    text: str  # what is stored as content
    extra: dict[str, Any] = field(default_factory=dict)  # frontmatter keys we do not interpret
    tags: list[str] = field(default_factory=list)
    source: str = ""
    # Set by our own export of an item that did not come from a memory file: importing the
    # file back finds the item it came from instead of storing a copy.
    compactor_id: str | None = None

    @property
    def item_id(self) -> str:
        return self.compactor_id or content_id(self.text)


def content_id(text: str) -> str:
    return "mem-" + hashlib.blake2b(_normalise(text).encode(), digest_size=10).hexdigest()


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").strip().splitlines())


def _memory_type(meta: dict[str, Any]) -> str | None:
    value = meta.get("type")
    nested = meta.get("metadata")
    if value is None and isinstance(nested, dict):
        value = nested.get("type")
    if isinstance(value, str) and value.strip().lower() in MEMORY_TYPES:
        return value.strip().lower()
    return None


class _NoAliasLoader(yaml.SafeLoader):
    """safe_load refusing aliases as it composes: frontmatter has no use for them, and nine
    levels of them ten wide are a billion strings the first time one is turned into text (a
    MemoryError at import). Checked while composing, not in a scan of its own: PyYAML scans
    deeply nested brackets in quadratic time, and composing stops at the recursion limit."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError("it uses an alias (*name)")
        return super().compose_node(parent, index)


def split_frontmatter(text: str) -> tuple[dict[str, Any] | None, str]:
    """(frontmatter mapping or None, body). Malformed YAML counts as no frontmatter."""
    m = _FRONTMATTER.match(text)
    if not m:
        return None, text
    try:
        meta = yaml.load(m.group(1), Loader=_NoAliasLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        log.warning("frontmatter is not valid YAML (%s); keeping the file as plain text", exc)
        return None, text
    except RecursionError:  # brackets thousands deep
        log.warning("frontmatter is nested too deeply to read; keeping the file as plain text")
        return None, text
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        return None, text
    return {str(k): v for k, v in meta.items()}, text[m.end() :]


def _tags_of(meta: dict[str, Any]) -> list[str]:
    raw = meta.get("tags")
    if isinstance(raw, str):
        raw = raw.split(",")
    if not isinstance(raw, list):
        return []
    return [str(t).strip() for t in raw if str(t).strip()][:10]


def parse_memory_file(text: str, source: str = "") -> MemoryEntry:
    """One topic file. Without frontmatter the file's stem is its name."""
    meta, body = split_frontmatter(text)
    stem = Path(source).stem if source else ""
    if meta is None:
        first = next((ln.strip("# ").strip() for ln in body.splitlines() if ln.strip()), "")
        return MemoryEntry(
            name=stem or preview(first, 60),
            description="",
            type=None,
            body=body.strip(),
            text=_normalise(text),
            source=source,
        )
    known = {"name", "description", "type"}
    extra = {k: v for k, v in meta.items() if k not in known}
    nested = extra.get("metadata")
    if isinstance(nested, dict) and set(nested) == {"type"}:
        extra.pop("metadata")
    name = meta.get("name")
    desc = meta.get("description")
    cid = extra.pop(ID_KEY, None)
    return MemoryEntry(
        name=str(name).strip() if name else stem,
        description=" ".join(str(desc).split()) if desc else "",
        type=_memory_type(meta),
        body=body.strip(),
        text=_normalise(text),
        extra=extra,
        tags=_tags_of(meta),
        source=source,
        compactor_id=cid if isinstance(cid, str) and _VALID_ID.fullmatch(cid) else None,
    )


def _index_entry(m: re.Match[str], source: str) -> MemoryEntry:
    name, desc = m.group("name").strip(), (m.group("desc") or "").strip()
    text = f"{name} — {desc}" if desc else name
    return MemoryEntry(name=name, description=desc, type=None, body=desc, text=text, source=source)


def parse_memory_index(text: str, base: Path | None = None, source: str = INDEX_NAME) -> list[MemoryEntry]:
    """A MEMORY.md: index lines, flat entries, or both. An index line whose file exists under
    `base` is skipped (the file itself is the memory); one whose file is missing becomes an
    entry of its own, so nothing the index says is lost."""
    entries: list[MemoryEntry] = []
    section: str | None = None
    block: list[str] = []
    block_line = 0
    preamble: list[str] = []

    def flush() -> None:
        nonlocal block
        if not block:
            return
        first = block[0]
        heading = _HEADING2.match(first)
        body_lines = [ln for ln in block[1:] if ln.strip()]
        if heading and not body_lines:
            block = []
            return  # a section heading: its bullets are the entries
        raw = "\n".join(block).strip()
        content = re.sub(r"^[-*]\s+", "", raw) if not heading else raw
        entry = MemoryEntry(
            name=preview(heading.group(1) if heading else content.splitlines()[0], 60),
            description="",
            type=None,
            body=content,
            text=_normalise(content),
            tags=[section] if section and not heading else [],
            source=f"{source}:{block_line}",
        )
        entries.append(entry)
        block = []

    for lineno, line in enumerate(text.replace("\r\n", "\n").splitlines(), start=1):
        if (_TITLE.match(line) and not block and not entries and not section) or line.startswith(INDEX_MARKER):
            continue
        index = _INDEX_LINE.match(line)
        if index:
            flush()
            if base is not None and (base / index.group("file")).is_file():
                continue
            entries.append(_index_entry(index, f"{source}:{lineno}"))
            continue
        if _ENTRY_START.match(line):
            flush()
            heading = _HEADING2.match(line)
            if heading:
                section = _slug(heading.group(1)) or None
            block, block_line = [line], lineno
            continue
        if block:
            block.append(line)
        elif line.strip() and not _TITLE.match(line):
            preamble.append(line)
    flush()
    if preamble and "".join(preamble).strip():
        intro = "\n".join(preamble).strip()
        entries.insert(
            0,
            MemoryEntry(
                name=preview(intro, 60),
                description="",
                type=None,
                body=intro,
                text=_normalise(intro),
                source=f"{source}:preamble",
            ),
        )
    return entries


def _read(path: Path) -> str:
    """A memory file's text; one that cannot be read whole stops the import before anything
    is stored (replacing what does not decode would store something else)."""
    try:
        return path.read_text(encoding=_ENCODING)
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"{path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start:,}); save it as "
            "UTF-8 and import again. Nothing was imported"
        ) from exc
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {path}: {exc.strerror or exc}. Nothing was imported") from exc


def read_memory_path(path: Path) -> list[MemoryEntry]:
    """Entries from an auto-memory dir, a MEMORY.md, or one topic file."""
    if path.is_dir():
        entries: list[MemoryEntry] = []
        index = path / INDEX_NAME
        for file in sorted(path.glob("*.md")):
            if file.name == INDEX_NAME:
                continue
            entries.append(parse_memory_file(_read(file), file.name))
        if index.is_file():
            entries.extend(parse_memory_index(_read(index), base=path))
        return entries
    text = _read(path)
    if path.name == INDEX_NAME or not _FRONTMATTER.match(text):
        if path.name != INDEX_NAME and not any(_ENTRY_START.match(ln) for ln in text.splitlines()):
            return [parse_memory_file(text, path.name)]
        return parse_memory_index(text, base=path.parent, source=path.name)
    return [parse_memory_file(text, path.name)]


def to_store_input(entry: MemoryEntry) -> StoreInput:
    tags = [entry.type] if entry.type else []
    tags += [t for t in entry.tags if t not in tags]
    summary = f"{entry.name}: {entry.description}" if entry.description else None
    importance = MEMORY_TYPE_IMPORTANCE.get(entry.type or "", C.IMPORTANCE_DEFAULT)
    return StoreInput(content=entry.text, summary=summary, tags=tags, importance=importance, item_id=entry.item_id)


# --- export ---------------------------------------------------------------------------------
@dataclass(slots=True)
class MemoryExport:
    files: list[str]
    index_lines: list[str]
    left_out: list[str]  # items that qualified but did not fit in the index


def wants_export(item: Item, min_importance: int = MEMORY_EXPORT_MIN_IMPORTANCE) -> bool:
    return not item.depth and (item.pinned or item.importance >= min_importance)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _plain(text: str) -> str:
    """For comparing a sentence with a title: case, spacing and markup ignored."""
    return " ".join(re.sub(r"[#*_`>\-:.!?…]+", " ", text).lower().split())


def describe(title: str, name: str, item: Item) -> str:
    """A one-line description that says more than the title: the first sentence of the
    summary or content that is not the title (nor part of it); failing that, what kind of
    memory it is. Never the title again."""
    seen = {_plain(title), _plain(name)}
    for source in (item.summary or "", item.content):
        for raw in source.splitlines():
            line = raw.strip()
            if not line or line.startswith(("```", "---")):
                continue
            for sentence in _SENTENCE_END.split(line.strip("#-*> ").strip()):
                plain = _plain(sentence)
                if len(plain) < 3 or plain in seen or any(t.startswith(plain) for t in seen if t):
                    continue
                return preview(" ".join(sentence.split()), 120)
    kind = next((t for t in item.tags if t in MEMORY_TYPES), "project")
    others = [t for t in item.tags if t not in MEMORY_TYPES]
    text = f"{kind} memory, importance {item.importance}" + (f"; tags: {', '.join(others)}" if others else "")
    return preview(text, 120)


def entry_from_item(item: Item) -> MemoryEntry:
    """The memory an item stands for: its own frontmatter when it came from a memory file,
    else one built from its summary, tags and content."""
    meta, _ = split_frontmatter(item.content)
    if meta is not None and (meta.get("name") or meta.get("description")):
        return parse_memory_file(item.content, f"{item.id}.md")
    kind = next((t for t in item.tags if t in MEMORY_TYPES), "project")
    first = next((ln.strip("#-* ").strip() for ln in item.content.splitlines() if ln.strip()), item.id)
    title = " ".join((item.summary or first).split())
    # "Heading: details" summaries name themselves; otherwise the title is the name.
    head, sep, rest = title.partition(": ")
    if item.summary and sep and 3 <= len(head) <= 50:
        name, description = head, rest
    else:
        name = preview(title, 50)
        description = describe(title, name, item)
    description = preview(description, 120)
    meta_out = {"name": name, "description": description, "type": kind, ID_KEY: item.id}
    text = "---\n" + _dump(meta_out) + "---\n\n" + item.content.strip() + "\n"
    return MemoryEntry(
        name=name, description=description, type=kind, body=item.content.strip(), text=text, compactor_id=item.id
    )


def _dump(meta: dict[str, Any]) -> str:
    return yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, default_flow_style=False, width=10_000)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:48]


def index_line(name: str, file: str, description: str, limit: int = MEMORY_INDEX_LINE_CHARS) -> str:
    """`- [name](file) — description`, cut to `limit` characters (description first, then name)."""
    name = " ".join(name.replace("[", "(").replace("]", ")").split())
    description = " ".join(description.split())
    line = f"- [{name}]({file})" + (f" — {description}" if description else "")
    if len(line) <= limit:
        return line
    head = f"- [{name}]({file})"
    room = limit - len(head) - 3
    if description and room >= 12:
        return head + " — " + preview(description, room)
    room = limit - len(f"- []({file})")
    return f"- [{preview(name, max(room, 8))}]({file})"[:limit]


def is_our_index(text: str) -> bool:
    """Whether a MEMORY.md was written by our export (its first line is the marker)."""
    return text.lstrip("\ufeff").startswith(INDEX_MARKER)


def _existing_text(path: Path) -> str | None:
    """The text of a file already at `path`, None if there is none; a symlink is refused."""
    if not exists_not_link(path):
        return None
    if not path.is_file():
        raise OutputRefusedError(f"{path} exists and is not a file.")
    return path.read_text(encoding="utf-8", errors="replace")


def _ours(text: str) -> bool:
    meta, _ = split_frontmatter(text)
    return meta is not None and isinstance(meta.get(ID_KEY), str)


def export_memory_dir(
    items: Iterable[Item], dest: Path, min_importance: int = MEMORY_EXPORT_MIN_IMPORTANCE, *, force: bool = False
) -> MemoryExport:
    """Write pinned and important items as topic files plus a MEMORY.md index, newest first,
    the index capped at MEMORY_INDEX_MAX_LINES lines (the marker line included).

    Nothing hand-written is replaced: a MEMORY.md without our marker line stops the export,
    and a topic file we did not write keeps its name (ours takes another). A file of ours is
    replaced only with `force`; one that already holds the same text is left as it is.
    Everything is checked before anything is written; files are 0600."""
    chosen = sorted(
        (it for it in items if wants_export(it, min_importance)),
        key=lambda it: (it.created_at, it.seq),
        reverse=True,
    )
    if exists_not_link(dest) and not dest.is_dir():
        raise OutputRefusedError(f"{dest} exists and is not a directory; memory-md writes a directory.")
    index_path = dest / INDEX_NAME
    old_index = _existing_text(index_path)
    if old_index is not None and not is_our_index(old_index):
        raise OutputRefusedError(
            f"{index_path} was not written by compactor (no marker line); refusing to replace it. "
            "Export to another directory, or move that file aside first."
        )
    used: set[str] = set()
    files: list[str] = []
    lines: list[str] = [INDEX_MARKER]
    left_out: list[str] = []
    writes: list[tuple[Path, str]] = []
    replaced: list[str] = []
    for it in chosen:
        if len(lines) >= MEMORY_INDEX_MAX_LINES:
            left_out.append(it.id)
            continue
        entry = entry_from_item(it)
        text = entry.text.rstrip("\n") + "\n"
        stem = _slug(entry.name)[:40].strip("_") or it.id
        file = f"{stem}.md"
        n = 2
        while True:
            old = _existing_text(dest / file) if file not in used else None
            if file not in used and (old is None or _normalise(old) == _normalise(text) or _ours(old)):
                break
            file = f"{stem}_{n}.md"
            n += 1
        used.add(file)
        if old is None or _normalise(old) != _normalise(text):
            writes.append((dest / file, text))
            if old is not None:
                replaced.append(file)
        files.append(file)
        lines.append(index_line(entry.name, file, entry.description))
    index_text = "\n".join(lines) + "\n"
    if old_index is not None and old_index != index_text:
        replaced.append(INDEX_NAME)
    if replaced and not force:
        raise OutputRefusedError(
            f"{dest} already holds {len(replaced)} file(s) from an earlier export ({', '.join(replaced[:3])}"
            f"{', …' if len(replaced) > 3 else ''}); pass --force to replace them."
        )
    dest.mkdir(parents=True, exist_ok=True, mode=0o700)
    for path, text in writes:
        write_private(path, text, overwrite=force)
    if old_index != index_text:
        write_private(index_path, index_text, overwrite=force)
    return MemoryExport(files=files, index_lines=lines[1:], left_out=left_out)
