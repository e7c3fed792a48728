"""export and import: every item out as JSON, Markdown or a MEMORY.md dir; items in from a
compactor JSON export, a Claude Code auto-memory dir, a MEMORY.md or one memory file."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from .. import constants as C
from .. import memory_md
from ..models import Item
from ..render import preview
from ..store import Store, StoreInput, TierFilter
from .common import EXIT_OK, EXIT_USAGE, CliError, Out, add_json, add_state_dir, item_json, opened

EXPORT_FORMAT = "compactor-export"
_VALID_ID = re.compile(r"[a-z0-9][a-z0-9_-]{2,63}")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export", help="write every item as JSON, Markdown or a MEMORY.md dir", description=cmd_export.__doc__
    )
    add_state_dir(p)
    p.add_argument("--format", choices=["json", "markdown", "memory-md"], default="json", help="default: json")
    p.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="file to write (a dir for memory-md; default: stdout)"
    )
    p.add_argument("--tier", choices=["active", "archived", "all"], default="all", help="default: all")
    p.add_argument(
        "--min-importance",
        type=int,
        default=C.MEMORY_EXPORT_MIN_IMPORTANCE,
        metavar="N",
        help="memory-md: export pinned items and those of importance N or more "
        f"(default {C.MEMORY_EXPORT_MIN_IMPORTANCE})",
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


def all_items(store: Store, tier: str) -> Iterator[Item]:
    cursor: str | None = None
    while True:
        page = store.export(tier=cast(TierFilter, tier), cursor=cursor)
        yield from page.items
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
            block += [f"**Summary:** {it.summary}", ""]
        block.append(it.content.rstrip())
        parts.append("\n".join(block) + "\n")
    return "\n".join(parts)


def _write(text: str, output: Path | None) -> None:
    if output is None or str(output) == "-":
        sys.stdout.write(text)
        return
    output.write_text(text, encoding="utf-8")


def cmd_export(args: argparse.Namespace, out: Out) -> int:
    """Export every item (all pages, oldest first). json: one document with every field of
    every item, which `compactor import` reads back. markdown: one section per item.
    memory-md: pinned and important items as a Claude Code auto-memory dir (one file each
    plus a MEMORY.md index, newest first, at most 200 lines); needs -o DIR."""
    if args.format == "memory-md" and args.output is None:
        raise CliError("export --format memory-md writes a directory: pass -o DIR", EXIT_USAGE)
    with opened(args) as store:
        items = list(all_items(store, args.tier))
    if args.format == "json":
        doc = {
            "format": EXPORT_FORMAT,
            "version": 1,
            "exported_at": time.time(),
            "count": len(items),
            "items": [item_json(it) for it in items],
        }
        _write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", args.output)
    elif args.format == "markdown":
        _write(_markdown(items), args.output)
    else:
        result = memory_md.export_memory_dir(items, args.output, args.min_importance)
        out.line(f"Wrote {len(result.files)} memory files and {args.output / memory_md.INDEX_NAME}.")
        if result.left_out:
            out.line(
                f"{len(result.left_out)} more items qualified but the index holds {C.MEMORY_INDEX_MAX_LINES} lines."
            )
        return EXIT_OK
    if args.output is not None and str(args.output) != "-":
        print(f"Wrote {len(items):,} items to {args.output}.", file=sys.stderr)
    return EXIT_OK


def _from_export(doc: Any) -> list[StoreInput]:
    records = doc.get("items") if isinstance(doc, dict) else doc
    if not isinstance(records, list):
        raise CliError("the JSON holds no items list (expected a compactor export)")
    inputs: list[StoreInput] = []
    for i, rec in enumerate(records):
        if not isinstance(rec, dict) or not isinstance(rec.get("content"), str):
            raise CliError(f"items[{i}] has no content")
        if rec.get("depth"):
            continue  # summary nodes are rebuilt from their children by compaction
        item_id = rec.get("id")
        if not (isinstance(item_id, str) and _VALID_ID.fullmatch(item_id)):
            item_id = "imp-" + hashlib.blake2b(rec["content"].encode(), digest_size=10).hexdigest()
        auto = set(C.TYPE_TAGS)
        tags = [t for t in rec.get("tags") or [] if isinstance(t, str) and t not in auto]
        importance = rec.get("importance", C.IMPORTANCE_DEFAULT)
        inputs.append(
            StoreInput(
                content=rec["content"],
                summary=rec.get("summary") if isinstance(rec.get("summary"), str) else None,
                tags=tags,
                importance=importance if isinstance(importance, int) and 1 <= importance <= 10 else 5,
                pinned=bool(rec.get("pinned")),
                item_id=item_id,
            )
        )
    return inputs


def read_inputs(path: Path) -> tuple[str, list[StoreInput]]:
    """(kind, items) for whatever `path` is."""
    if not path.exists():
        raise CliError(f"{path} does not exist")
    if path.is_file() and path.suffix.lower() == ".json":
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise CliError(f"{path} is not valid JSON: {exc}") from exc
        return "compactor export", _from_export(doc)
    if path.is_dir() or path.suffix.lower() in (".md", ".markdown"):
        entries = memory_md.read_memory_path(path)
        kind = "memory dir" if path.is_dir() else path.name
        return kind, [memory_md.to_store_input(e) for e in entries]
    raise CliError(f"cannot import {path}: expected a .json export, a .md file or a memory dir")


def cmd_import(args: argparse.Namespace, out: Out) -> int:
    """Import items. FILE may be a compactor JSON export (ids kept), a Claude Code memory file
    (*.md with YAML frontmatter name, description, type) or a MEMORY.md (index lines
    `- [name](file.md) — text`, or flat entries starting with `- `, `## ` or a date). DIR is a
    Claude Code auto-memory dir. Memory types user, feedback, project and reference become
    tags and set importance. Ids derive from content: importing twice adds nothing."""
    kind, inputs = read_inputs(args.path)
    if args.dry_run:
        if out.json_mode:
            out.json({"kind": kind, "items": [{"id": i.item_id, "summary": i.summary, "tags": i.tags} for i in inputs]})
        else:
            out.line(f"Would import {len(inputs)} items from {args.path} ({kind}):")
            for inp in inputs:
                out.line(f"  {inp.item_id}  {preview(inp.summary or inp.content, 90)}")
        return EXIT_OK
    if not inputs:
        if out.json_mode:
            out.json({"kind": kind, "imported": [], "already_present": []})
        else:
            out.line(f"Nothing to import from {args.path}.")
        return EXIT_OK
    with opened(args, create=True) as store:
        result = store.import_items(inputs)
    new = [it.id for it in result.items]
    if out.json_mode:
        out.json({"kind": kind, "imported": new, "already_present": result.skipped})
        return EXIT_OK
    out.line(f"Imported {len(new)} items from {args.path} ({kind}); {len(result.skipped)} were already present.")
    return EXIT_OK
