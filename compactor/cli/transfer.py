"""export and import: every item out as JSON, Markdown or a MEMORY.md dir; items in from a
compactor JSON export, a Claude Code auto-memory dir, a MEMORY.md or one memory file."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from ..claude_code.memory_md import MEMORY_EXPORT_MIN_IMPORTANCE, MEMORY_INDEX_MAX_LINES
from ..models import Item
from ..outfile import write_private
from ..render import counted, fence, preview
from ..store import BulkStored, Store, StoreInput, TierFilter
from .common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Out,
    add_json,
    add_state_dir,
    item_json,
    opened,
    scope_note,
)
from .progress import Interrupted, Progress, interrupt_between_chunks

EXPORT_FORMAT = "compactor-export"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export", help="write every item as JSON, Markdown or a MEMORY.md dir", description=cmd_export.__doc__
    )
    add_state_dir(p)
    p.add_argument("--format", choices=["json", "markdown", "memory-md"], default="json", help="default: json")
    p.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="file to write (a dir for memory-md; default: stdout)"
    )
    p.add_argument(
        "--force", action="store_true", help="replace an existing file (never a symlink or a hand-written MEMORY.md)"
    )
    p.add_argument("--tier", choices=["active", "archived", "all"], default="all", help="default: all")
    p.add_argument(
        "--min-importance",
        type=int,
        default=MEMORY_EXPORT_MIN_IMPORTANCE,
        metavar="N",
        help="memory-md: export pinned items and those of importance N or more "
        f"(default {MEMORY_EXPORT_MIN_IMPORTANCE})",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "import", help="import a JSON export, a memory dir or a MEMORY.md", description=cmd_import.__doc__
    )
    add_state_dir(p)
    add_json(p)
    p.add_argument("path", type=Path, metavar="FILE|DIR", help="what to import")
    p.add_argument("--dry-run", action="store_true", help="show what would be imported; change nothing")
    p.set_defaults(func=cmd_import)


def all_items(store: Store, tier: str, progress: Callable[[int, int], None] | None = None) -> Iterator[Item]:
    cursor: str | None = None
    done = 0
    while True:
        page = store.export(tier=cast(TierFilter, tier), cursor=cursor)
        for item in page.items:
            # An item larger than a page comes on several pages: it is yielded whole, once.
            if page.part is None or page.part[0] != item.id or page.part[1] == 0:
                yield item
        done += len(page.items)
        if progress is not None:
            progress(done, page.total)
        cursor = page.next_cursor
        if cursor is None:
            return


def _markdown(items: list[Item]) -> str:
    parts = [
        f"# compactor export\n\n{len(items):,} items, oldest first, exported {time.strftime('%Y-%m-%d %H:%M:%S')}.\n"
    ]
    for it in items:
        head = f"## {it.id} · {it.content_type} · importance {it.importance} · {it.tier}"
        if it.pinned:
            head += " · pinned"
        if it.depth:
            head += f" · summary d{it.depth}"
        block = [head, ""]
        if it.tags:
            block += [f"Tags: {', '.join(it.tags)}", ""]
        if it.summary:
            block += [f"**Summary:** {' '.join(it.summary.split())}", ""]
        block.append(fence(it.content.rstrip("\n"), "text"))
        parts.append("\n".join(block) + "\n")
    return "\n".join(parts)


def _write(text: str, output: Path | None, force: bool) -> None:
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        return
    write_private(output, text, overwrite=force)


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    """Export every item (all pages, oldest first). json: one document with every field of
    every item, which `compactor import` reads back exactly. markdown: one section per item,
    for reading (not importable). memory-md: pinned and important items as a Claude Code
    auto-memory dir (one file each plus a MEMORY.md index, newest first, at most 200 lines);
    needs -o DIR. Files are written 0600; an existing file is replaced only with --force, a
    symlink never, and a MEMORY.md compactor did not write never."""
    if args.format == "memory-md" and args.output is None:
        raise CliError("--format memory-md writes a directory and none was given. Pass -o DIR", EXIT_USAGE)
    progress = Progress("export")
    with opened(args) as store:
        items = list(all_items(store, args.tier, progress))
        _, note = scope_note(store, args.tier, "not exported")
    progress.finish()
    if note:
        print(note, file=sys.stderr)
    if args.format == "json":
        doc = {
            "format": EXPORT_FORMAT,
            "version": 1,
            "exported_at": time.time(),
            "count": len(items),
            "items": [item_json(it) for it in items],
        }
        _write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", args.output, args.force)
    elif args.format == "markdown":
        _write(_markdown(items), args.output, args.force)
    else:
        from ..claude_code import memory_md  # YAML and all: only this format needs it, not every start of the server

        result = memory_md.export_memory_dir(items, args.output, args.min_importance, force=args.force)
        out.line(f"Wrote {counted(len(result.files), 'memory file')} and {args.output / memory_md.INDEX_NAME}.")
        if result.left_out:
            out.line(
                f"{counted(len(result.left_out), 'more item')} qualified but the index holds "
                f"{MEMORY_INDEX_MAX_LINES} lines."
            )
        return EXIT_OK
    if args.output is not None and str(args.output) != "-":
        print(f"Wrote {counted(len(items), 'item')} to {args.output}.", file=sys.stderr)
    return EXIT_OK


def _records(doc: Any) -> list[dict[str, Any]]:
    """The item records of a compactor JSON export (or of a bare list, as the MCP `export`
    tool's pages hold)."""
    records = doc.get("items") if isinstance(doc, dict) else doc
    if not isinstance(records, list):
        raise CliError("the JSON holds no items list. Import a file written by `compactor export` (--format json)")
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise CliError(f"items[{i}] is {type(rec).__name__}, not an object with the item's fields")
        if "content" not in rec:
            hint = " (a summaries_only export): export again without summaries_only" if "text" in rec else ""
            raise CliError(f"items[{i}] has no content{hint}")
        if not isinstance(rec["content"], str):
            raise CliError(f"items[{i}].content is {type(rec['content']).__name__}; it must be a string")
    return _joined(records)


def _joined(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with an item that the MCP `export` tool gave in parts (one larger than a
    page: `content_offset`, `content_chars`) joined back into one. A part missing is refused,
    never imported as the whole."""
    out: list[dict[str, Any]] = []
    open_part: dict[str, Any] | None = None
    for i, rec in enumerate(records):
        if "content_offset" not in rec and "content_chars" not in rec:
            out.append(rec)
            continue
        offset, total = rec.get("content_offset"), rec.get("content_chars")
        if not (isinstance(offset, int) and isinstance(total, int)):
            raise CliError(f"items[{i}] has content_offset and content_chars that are not both whole numbers")
        if offset == 0:
            open_part = {k: v for k, v in rec.items() if k not in ("content_offset", "content_chars")}
            open_part["content_chars"] = total
            out.append(open_part)
        elif open_part is None or open_part["id"] != rec.get("id") or len(open_part["content"]) != offset:
            raise CliError(f"items[{i}] continues an item from character {offset:,} but the part before it is missing")
        else:
            open_part["content"] += rec["content"]
    for rec in out:
        total = rec.pop("content_chars", None)
        if total is not None and len(rec["content"]) != total:
            raise CliError(
                f"item {rec.get('id')} holds {len(rec['content']):,} of its {total:,} characters: "
                "import every page of the export"
            )
    return out


# A section heading of our own markdown export (CLI or MCP tool): `## <id> · <type> · importance N · <tier>`.
_EXPORT_HEADING = re.compile(
    r"^## [a-z0-9][a-z0-9_-]{2,63} · (?:error|code|decision|tool_output|prose) · importance \d+ · (?:active|archived)",
    re.M,
)


def _refuse_markdown_export(path: Path) -> None:
    """Our markdown export is for reading: it keeps neither scope, lineage nor timestamps, and
    read as a MEMORY.md every line would become an item."""
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}. Check the path and its permissions") from exc
    if text.startswith("# compactor export") or _EXPORT_HEADING.search(text):
        raise CliError(
            f"{path} is a compactor markdown export, which cannot be imported without losing fields; "
            "export with --format json (the default) and import that file."
        )


def read_inputs(path: Path) -> tuple[str, list[dict[str, Any]] | None, list[StoreInput]]:
    """(kind, records, inputs) for whatever `path` is: the records of a JSON export (every
    field, for `Store.import_records`), else None and the inputs read from memory files."""
    if not path.exists():
        raise CliError(f"{path} does not exist. Pass a .json export, a .md file or a memory dir")
    if path.is_file() and path.suffix.lower() == ".json":
        try:
            doc = json.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark an editor added
        except ValueError as exc:
            raise CliError(f"{path} is not valid JSON ({exc}). Import a file written by `compactor export`") from exc
        except RecursionError as exc:  # the decoder's recursion: arrays in arrays, thousands deep
            raise CliError(
                f"{path} is nested too deeply to be an export. Import a file written by `compactor export`"
            ) from exc
        return "compactor export", _records(doc), []
    if path.is_file():
        _refuse_markdown_export(path)
    if path.is_dir() or path.suffix.lower() in (".md", ".markdown"):
        from ..claude_code import memory_md

        entries = memory_md.read_memory_path(path)
        kind = "memory dir" if path.is_dir() else path.name
        return kind, None, [memory_md.to_store_input(e) for e in entries]
    raise CliError(f"cannot import {path}: it is not a .json export, a .md file or a memory dir. Pass one of those")


def cmd_import(args: argparse.Namespace, out: Out) -> int:
    """Import items. FILE may be a compactor JSON export (every field kept: ids, tier, view,
    scope, lineage, timestamps; a summary node whose children are not in the file or not
    linked to it here is left out, and compaction summarises those children again), a Claude
    Code memory file (*.md with YAML frontmatter name, description, type) or a MEMORY.md
    (index lines `- [name](file.md) — text`, or flat entries starting with `- `, `## ` or a
    date). DIR is a Claude Code auto-memory dir. Memory types user, feedback, project and
    reference become tags and set importance. Importing twice adds nothing. A markdown
    export is refused: import the JSON one. On a terminal, progress shows on stderr; Ctrl-C
    stops between chunks of 1,000 items, each stored whole, and running the same command again
    finishes the import."""
    try:
        kind, records, inputs = read_inputs(args.path)
    except KeyboardInterrupt:
        raise CliError(f"interrupted while reading {args.path}; nothing was stored", EXIT_INTERRUPTED) from None
    if args.dry_run:
        rows: list[tuple[Any, Any, Any, str]] = (
            [(r["id"], r.get("summary"), r.get("tags"), r["content"]) for r in records]
            if records is not None
            else [(r.item_id, r.summary, r.tags, r.content) for r in inputs]
        )
        if out.json_mode:
            out.json({"kind": kind, "items": [{"id": i, "summary": sm, "tags": t} for i, sm, t, _ in rows]})
        else:
            out.line(f"Would import {len(rows)} items from {args.path} ({kind}):")
            for item_id, summary, _, content in rows:
                out.line(f"  {item_id}  {preview(summary or content, 90)}")
        return EXIT_OK
    if not (records or inputs):
        if out.json_mode:
            out.json({"kind": kind, "imported": [], "already_present": []})
        else:
            out.line(f"Nothing to import from {args.path}.")
        return EXIT_OK
    dropped: list[str] = []
    progress = Progress("import")
    with opened(args, create=True) as store, interrupt_between_chunks() as check:

        def step(done: int, total: int) -> None:
            progress(done, total)
            check()  # Ctrl-C stops here, between whole journaled chunks

        try:
            if records is not None:
                res = store.import_records(records, progress=step)
                result: BulkStored = res
                dropped = res.dropped_nodes
            else:
                result = store.import_items(inputs, progress=step)
        except Interrupted:
            progress.finish()
            raise CliError(
                f"interrupted after storing {progress.done:,} of {progress.total:,} items. Run the same command "
                "again to finish (items already present are skipped)",
                EXIT_INTERRUPTED,
            ) from None
        progress.finish()
    new = [it.id for it in result.items]
    if out.json_mode:
        out.json({"kind": kind, "imported": new, "already_present": result.skipped, "dropped_nodes": dropped})
        return EXIT_OK
    n, skipped = len(new), len(result.skipped)
    out.line(
        f"Imported {n} item{'' if n == 1 else 's'} from {args.path} ({kind}); "
        f"{skipped} {'was' if skipped == 1 else 'were'} already present."
    )
    if dropped:
        out.line(
            f"{len(dropped)} summary node(s) left out: their children are not in the file or not linked to them "
            "here; compaction summarises those children again."
        )
    return EXIT_OK
