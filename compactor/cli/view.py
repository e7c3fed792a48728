"""Read-only subcommands: status, list, show, query, tree."""

from __future__ import annotations

import argparse
import time
from typing import Any

from .. import constants as C
from ..models import Item
from ..render import preview
from ..report import StateFiles, ago, item_report, per_depth, status_report
from ..store import Store
from ..store.history import journal_entries
from .common import (
    EXIT_OK,
    Out,
    add_json,
    add_state_dir,
    database_of,
    has_state,
    item_json,
    opened,
    scope_note,
    state_dir_of,
    state_files,
)


def register(sub: Any) -> None:
    p = sub.add_parser("status", help="budget bar and counts per tier, type and depth", description=cmd_status.__doc__)
    add_state_dir(p)
    add_json(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("list", help="list items, newest first", description=cmd_list.__doc__)
    add_state_dir(p)
    add_json(p)
    p.add_argument("--tier", choices=["active", "archived", "all"], default="active", help="default: active")
    p.add_argument("--limit", type=_limit, default=20, help="items per page (1-200, default 20)")
    p.add_argument("--offset", type=_offset, default=0, help="skip this many of the newest first")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="one item in full: content, lineage and history", description=cmd_show.__doc__)
    add_state_dir(p)
    add_json(p)
    p.add_argument("id", help="item id")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("query", help="search memory (BM25 + retention)", description=cmd_query.__doc__)
    add_state_dir(p)
    add_json(p)
    p.add_argument("text", nargs="?", default="", help="what to look for")
    p.add_argument("--tags", help="only items with one of these tags (comma-separated)")
    p.add_argument("--limit", type=_query_limit, default=10, help="most results (1-100, default 10)")
    p.add_argument("--active-only", action="store_true", help="leave the archive out (searched by default)")
    # Before the archive was searched by default this flag asked for it; kept so scripts still run.
    p.add_argument("--archived", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("tree", help="the summary DAG, from its roots or one node", description=cmd_tree.__doc__)
    add_state_dir(p)
    add_json(p)
    p.add_argument("root", nargs="?", help="start from this node (default: every active root)")
    p.add_argument("--depth", type=_depth, default=2, help="levels to show (1-10, default 2)")
    p.set_defaults(func=cmd_tree)


def _int_in(lo: int, hi: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be from {lo} to {hi}")
        return value

    return parse


_limit = _int_in(1, C.LIST_LIMIT_MAX)
_offset = _int_in(0, 1 << 40)
_query_limit = _int_in(1, C.QUERY_LIMIT_MAX)
_depth = _int_in(1, C.TREE_DEPTH_MAX)


def cmd_status(args: argparse.Namespace, out: Out) -> int:
    """Show the token budget as a bar, and the number of items per tier, content type and
    summary depth."""
    with opened(args) as store:
        status = store.status()
        shape = store.dag_shape()
    database = database_of(args)
    if database is not None:
        p = status.persistence
        files = StateFiles(str(p["database"]), p["journal_bytes"], p.get("snapshot_bytes", 0), p.get("snapshot_at"))
    else:
        files = state_files(state_dir_of(args))
    if out.json_mode:
        out.json(
            {
                "token_budget": status.token_budget,
                "tokens_used": status.tokens_used,
                "usage_percent": round(100.0 * status.tokens_used / status.token_budget, 2)
                if status.token_budget
                else 0.0,
                "budget_source": status.settings.budget_source,
                "active_items": status.active_items,
                "archived_items": status.archived_items,
                "pinned_items": status.pinned_items,
                "per_type": status.per_type,
                "per_depth": {str(d): v for d, v in per_depth(status, shape).items()},
                "settings": status.settings.to_record(),
                "state_dir": files.path,
                "journal_bytes": files.journal_bytes,
                "snapshot_bytes": files.snapshot_bytes,
                "snapshot_at": files.snapshot_at,
                "durability_warning": status.persistence.get("durability_warning"),
            }
        )
        return EXIT_OK
    out.lines(status_report(status, shape, files, paint=out.paint, unicode=out.unicode))
    if status.persistence.get("durability_warning"):
        out.line(f"Warning: {status.persistence['durability_warning']}")
    if database is None and not has_state(state_dir_of(args)):
        out.line(f"Empty: nothing stored yet. A server started with --state-dir {files.path} keeps its memory here.")
    return EXIT_OK


def _id_width(items: list[Item]) -> int:
    return max([10, *(len(it.id) for it in items)])


def _row(out: Out, it: Item, now: float, width: int, extra: str = "") -> str:
    flags = "".join(
        flag for flag, on in (("P", it.pinned), ("A", it.tier == "archived"), ("S", it.view == "summary")) if on
    )
    kind = f"d{it.depth}" if it.depth else it.content_type
    age = ago(it.created_at, now)
    head = f"{it.id:<{width}} {kind:<11} {it.importance:>3} {it.view_tokens:>6,} {flags:<3} {age:>4}"
    room = max(20, out.width - len(head) - len(extra) - 2)
    text = preview(it.summary or it.content, room)
    return f"{out.paint(it.id, 'id')}{head[len(it.id) :]}{extra}  {text}"


def _header(out: Out, width: int, extra: str = "") -> str:
    head = f"{'ID':<{width}} {'TYPE':<11} {'IMP':>3} {'TOKENS':>6} {'FLG':<3} {'AGE':>4}{extra}  TEXT"
    return out.paint(head, "dim")


def cmd_list(args: argparse.Namespace, out: Out) -> int:
    """List items newest first, one line each. Flags: P pinned, A archived, S shown as its
    summary."""
    with opened(args) as store:
        page = store.list_items(offset=args.offset, limit=args.limit, tier=args.tier)
        hidden, note = scope_note(store, args.tier, "not listed")
    if out.json_mode:
        out.json(
            {
                "items": [item_json(it, full=False) for it in page.items],
                "total": page.total,
                "offset": page.offset,
                "next_offset": page.offset + len(page.items) if page.offset + len(page.items) < page.total else None,
                "hidden_by_scope": hidden,
            }
        )
        return EXIT_OK
    now = time.time()
    if not page.items:
        if page.total and page.offset >= page.total:
            which = "" if args.tier == "all" else f"{args.tier} "
            out.line(f"No {which}items from offset {page.offset:,}: there are {page.total:,}.")
        else:
            out.line(f"No {args.tier} items." if args.tier != "all" else "No items.")
        if note:
            out.line(note)
        return EXIT_OK
    width = _id_width(page.items)
    out.line(_header(out, width))
    for it in page.items:
        out.line(_row(out, it, now, width))
    shown_to = page.offset + len(page.items)
    footer = f"{page.offset + 1}-{shown_to} of {page.total:,} {args.tier}"
    if shown_to < page.total:
        footer += f"; next: --offset {shown_to}"
    out.line(out.paint(footer, "dim"))
    if note:
        out.line(out.paint(note, "dim"))
    return EXIT_OK


def cmd_show(args: argparse.Namespace, out: Out) -> int:
    """Show one item in full: its content and summary, its lineage (parents, children, the
    item it was merged into, the path up to its active ancestor) and its history (created,
    last accessed, access count, tier and view, and what the journal recorded since the last
    snapshot)."""
    with opened(args) as store:
        item = store.get(args.id)
        path = store.ancestors(item)
        # A database's journal history is not read here (only a state dir's file).
        journal = [] if database_of(args) else journal_entries(state_dir_of(args), item.id)
        if out.json_mode:
            record = item_json(item)
            record["active_via"] = path
            record["journal"] = journal
            out.json(record)
            return EXIT_OK
        out.lines(item_report(store, item, paint=out.paint, journal=journal))
    return EXIT_OK


def cmd_query(args: argparse.Namespace, out: Out) -> int:
    """Search memory as the agent's `query` tool does: BM25 over content, summary and tags,
    lifted a little by retention. Searches the archive too (flag A; --active-only leaves it out).
    Give TEXT, --tags, or both. Counts as an access, as the tool does."""
    with opened(args) as store:
        hits = store.query(args.text, tags=args.tags, limit=args.limit, include_archived=not args.active_only)
        covers = [path[-1] if (path := store.ancestors(h.item)) else None for h in hits]
        hidden, note = scope_note(store, "active" if args.active_only else "all", "not searched")
    if out.json_mode:
        out.json(
            {
                "items": [
                    {
                        **item_json(h.item, full=False),
                        "score": round(h.score, 4),
                        "matched": list(h.matched),
                        "covered_by": cover,
                        "reply_to": h.reply_to,
                    }
                    for h, cover in zip(hits, covers, strict=True)
                ],
                "hidden_by_scope": hidden,
            }
        )
        return EXIT_OK
    if not hits:
        out.line("No matches." + (" (--active-only left the archive out)" if args.active_only else ""))
        if note:
            out.line(note)
        return EXIT_OK
    now = time.time()
    width = _id_width([h.item for h in hits])
    out.line(_header(out, width, f" {'SCORE':>6}"))
    for h in hits:
        out.line(_row(out, h.item, now, width, f" {h.score:>6.3f}"))
    archived = [(h.item.id, cover) for h, cover in zip(hits, covers, strict=True) if h.item.tier == "archived"]
    if archived:
        covered = ", ".join(f"{i} by {c}" for i, c in archived if c)
        out.line(
            f"A = archived ({len(archived)}), read with `show ID`"
            + (f"; covered by summaries: {covered}" if covered else "")
        )
    answers = [f"{h.item.id} answers {h.reply_to}" for h in hits if h.reply_to]
    if answers:
        out.line("Found by the question they answer: " + ", ".join(answers))
    if note:
        out.line(out.paint(note, "dim"))
    return EXIT_OK


def _tree_json(store: Store, node: Item, levels: int, budget: list[int]) -> dict[str, Any]:
    budget[0] -= 1
    record: dict[str, Any] = {
        "id": node.id,
        "depth": node.depth,
        "tier": node.tier,
        "tokens": node.view_tokens,
        "quality": node.quality,
        "text": preview(node.summary or node.content, 160),
    }
    if node.depth:
        record["child_count"] = len(node.children)
        if levels > 1:
            kids: list[dict[str, Any]] = []
            for child_id in node.children:
                if budget[0] <= 0:
                    break
                try:
                    kids.append(_tree_json(store, store.get(child_id), levels - 1, budget))
                except KeyError:
                    continue
            record["children"] = kids
    return record


def cmd_tree(args: argparse.Namespace, out: Out) -> int:
    """Draw the summary DAG: each node with its depth, tokens, quality (extractive, agent,
    stale), tier, and first line; children indented under it."""
    with opened(args) as store:
        if out.json_mode:
            starts = [store.get(args.root)] if args.root else store.roots(scope=None)
            budget = [2_000]
            out.json({"roots": [_tree_json(store, n, args.depth, budget) for n in starts]})
            return EXIT_OK
        text = store.tree(root=args.root, max_depth=args.depth, scope=None)
    for line in text.splitlines():
        ident, sep, rest = line.lstrip().partition(" ")
        indent = line[: len(line) - len(line.lstrip())]
        out.line(f"{indent}{out.paint(ident, 'id')}{sep}{rest}" if sep and not ident.startswith("…") else line)
    return EXIT_OK
