"""Subcommands that change memory: pin, unpin, forget, dissolve, prune."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import NotFoundError
from ..render import preview
from ..store import Store
from .common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, CliError, Out, add_json, add_state_dir, item_json, opened


def register(sub: Any) -> None:
    for name, helptext, doc in (
        ("pin", "never compact these items", cmd_pin.__doc__),
        ("unpin", "let compaction move these items again", cmd_unpin.__doc__),
    ):
        p = sub.add_parser(name, help=helptext, description=doc)
        add_state_dir(p)
        add_json(p)
        p.add_argument("ids", nargs="+", metavar="ID", help="item id(s)")
        p.set_defaults(func=cmd_pin if name == "pin" else cmd_unpin)

    p = sub.add_parser("forget", help="delete items for good (asks first)", description=cmd_forget.__doc__)
    add_state_dir(p)
    add_json(p)
    p.add_argument("ids", nargs="+", metavar="ID", help="item id(s)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask; needed when stdin is not a terminal")
    p.set_defaults(func=cmd_forget)

    p = sub.add_parser(
        "prune", help="free disk: remove low-value archived items (dry run unless --yes)", description=cmd_prune.__doc__
    )
    add_state_dir(p)
    add_json(p)
    p.add_argument("-y", "--yes", "--apply", dest="yes", action="store_true", help="remove them (default: only list)")
    p.add_argument(
        "--max-archive-tokens", type=int, metavar="N", help="bring the archive down to N tokens (default: the setting)"
    )
    p.set_defaults(func=cmd_prune)

    p = sub.add_parser("dissolve", help="undo one summary node", description=cmd_dissolve.__doc__)
    add_state_dir(p)
    add_json(p)
    p.add_argument("id", help="summary node id (d1 or deeper)")
    p.set_defaults(func=cmd_dissolve)


def _each(args: argparse.Namespace, out: Out, verb: str, fn: Any) -> int:
    """Apply `fn(store, id)` to every id; a missing id is reported and the others still run."""
    done: list[dict[str, Any]] = []
    missing: list[str] = []
    shown: list[str] = []
    with opened(args) as store:
        for item_id in dict.fromkeys(args.ids):
            try:
                item = fn(store, item_id)
            except NotFoundError as exc:
                missing.append(item_id)
                shown.append(exc.shown_id)
                continue
            done.append(item_json(item, full=False))
            if not out.json_mode:
                out.line(f"{verb} {out.paint(item_id, 'id')}")
    if out.json_mode:
        out.json({verb.lower(): [d["id"] for d in done], "not_found": missing})
    for item_id in shown:
        print(
            f"compactor {args.command}: no item with id {item_id}. "
            "Find ids with `compactor list` or `compactor query`.",
            file=sys.stderr,
        )
    return EXIT_ERROR if missing else EXIT_OK


def cmd_pin(args: argparse.Namespace, out: Out) -> int:
    """Pin items: compaction never archives a pinned item and recall always shows it."""
    return _each(args, out, "Pinned", lambda store, i: store.pin(i))


def cmd_unpin(args: argparse.Namespace, out: Out) -> int:
    """Unpin items so compaction may move them again."""
    return _each(args, out, "Unpinned", lambda store, i: store.unpin(i))


def _confirm(ids: list[str]) -> bool:
    if not sys.stdin.isatty():
        raise CliError("forget is permanent and stdin is not a terminal to ask on. Pass --yes to confirm")
    sys.stderr.write(f"Forget {', '.join(ids)} for good? This cannot be undone. [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def cmd_forget(args: argparse.Namespace, out: Out) -> int:
    """Delete items permanently, from memory and from every file in the state dir. Summaries
    that covered an item record it as gone. On a summary node, forget dissolves the node
    instead: what a summary covers is never deleted by forgetting the summary."""
    if not args.yes and not _confirm(list(dict.fromkeys(args.ids))):
        print("compactor forget: nothing forgotten. Answer y to forget, or pass --yes.", file=sys.stderr)
        return EXIT_ERROR

    def forget(store: Store, item_id: str) -> Any:
        return store.forget(item_id)

    return _each(args, out, "Forgot", forget)


def cmd_dissolve(args: argparse.Namespace, out: Out) -> int:
    """Undo one summary node: the node goes and its children return to the tier they were in
    when it was made. A node covered by another summary must wait until that one is dissolved."""
    with opened(args) as store:
        kids = store.dissolve(args.id)
    if out.json_mode:
        out.json({"dissolved": args.id, "children": [item_json(k, full=False) for k in kids]})
        return EXIT_OK
    out.line(f"Dissolved {out.paint(args.id, 'id')}: {len(kids)} children are uncovered again.")
    for k in kids:
        out.line(f"  {out.paint(k.id, 'id')}  d{k.depth} {k.tier}")
    return EXIT_OK


def cmd_prune(args: argparse.Namespace, out: Out) -> int:
    """Free disk by removing the lowest-value archived raw items until the archive is within
    max_archive_tokens (or --max-archive-tokens N). Without --yes it only lists them and their
    size. With --yes they are deleted for good (memory, snapshot and journal), each id recorded
    in the forget ledger. Pinned items and summaries are never pruned; nothing else ever
    deletes an item but forget."""
    limit = args.max_archive_tokens
    if limit is not None and limit < 0:
        raise CliError("--max-archive-tokens is negative. Pass 0 or more", EXIT_USAGE)
    with opened(args) as store:
        result = store.prune(apply=bool(args.yes), max_archive_tokens=limit)
    if out.json_mode:
        out.json(
            {
                "applied": result.applied,
                "items": [it.id for it in result.items],
                "count": len(result.items),
                "bytes": result.bytes,
                "tokens": result.tokens,
                "archived_tokens": result.archived_tokens,
                "max_archive_tokens": result.max_archive_tokens,
            }
        )
        return EXIT_OK
    size = f"{len(result.items):,} items, {result.bytes:,} bytes ({result.tokens:,} tokens)"
    if not result.items:
        out.line(
            f"Nothing to prune: the archive holds {result.archived_tokens:,} tokens, "
            f"within max_archive_tokens {result.max_archive_tokens:,}."
        )
        return EXIT_OK
    if result.applied:
        out.line(f"Pruned {size}; freed {result.bytes:,} bytes. Each id is in the forget ledger.")
        return EXIT_OK
    out.line(
        f"Would remove {size} to bring the archive from {result.archived_tokens:,} to at most "
        f"{result.max_archive_tokens:,} tokens:"
    )
    for it in result.items[:50]:
        out.line(
            f"  {out.paint(it.id, 'id')}  imp {it.importance}  {it.content_tokens:,} tok  {preview(it.content, 70)}"
        )
    if len(result.items) > 50:
        out.line(f"  … {len(result.items) - 50:,} more (--json lists all)")
    out.line("Nothing was removed. Run again with --yes to delete them for good.")
    return EXIT_OK
