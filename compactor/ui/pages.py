"""The pages of `compactor ui`, rendered on the server from the Store's public reads: overview,
search, item, summary tree, forgotten. Every value goes through `html.fill`/`esc`; every list is
paged. Actions are forms that POST with the CSRF token (`app.py` checks it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from .. import constants as C
from ..models import Item
from ..render import PREVIEW_CHARS, counted, preview
from ..report import ago, fmt_time
from ..search.scoring import retention01
from ..search.views import describe as describe_view
from ..store import Hit, Status, Store
from ..store.history import Overview, Timeline, story
from .html import Safe, fill, highlight, join

PAGE_ITEMS = 25  # rows per page of a list: a screen on a laptop, a few swipes on a phone
SEARCH_LIMIT = 20  # hits shown first; "more" asks for up to C.QUERY_LIMIT_MAX
TREE_CHILDREN = 20  # children of one node shown at once
CHART_W, CHART_H = 640, 160  # the timeline's drawing box (scaled to the page width)


@dataclass(slots=True)
class Context:
    """What every page needs besides the store: the CSRF token its forms carry, what is shown
    (a state dir or a database) and the journal reader for an item's history."""

    csrf: str
    source: str
    journal: Callable[[str], list[str]] | None  # item id -> journal lines, None for a database


NAV = (("/", "Overview"), ("/search", "Search"), ("/tree", "Summary tree"), ("/ledger", "Forgotten"))


def layout(ctx: Context, title: str, body: Safe, *, here: str, notice: Safe | None = None) -> Safe:
    links = join(
        fill('<a href="{href}"{cur}>{label}</a>', href=href, label=label, cur=Safe(' aria-current="page"'))
        if href == here
        else fill('<a href="{href}">{label}</a>', href=href, label=label)
        for href, label in NAV
    )
    return fill(
        """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · compactor</title>
<link rel="stylesheet" href="/static/ui.css">
<script src="/static/ui.js" defer></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header><span class="brand">compactor</span> <nav aria-label="Pages">{links}</nav>
<span class="source" title="what this page reads">{source}</span></header>
<main id="main">
{notice}
{body}
</main>
</body>
</html>
""",
        title=title,
        links=links,
        source=ctx.source,
        notice=notice or Safe(""),
        body=body,
    )


def pager(
    path: str, params: dict[str, str], offset: int, shown: int, total: int, per: int, *, key: str = "offset"
) -> Safe:
    """Previous / next links over a list of `total` rows, `per` to a page; `key` is the query
    parameter that carries the offset (the other `params` are carried as they are)."""
    if total <= per and offset == 0:
        return Safe("")
    parts: list[Safe] = []
    if offset > 0:
        q = urlencode({**params, key: str(max(0, offset - per))})
        parts.append(fill('<a rel="prev" href="{href}">← newer</a>', href=f"{path}?{q}"))
    span = f"{offset + 1:,} to {offset + shown:,} of {total:,}" if shown else f"none from {offset + 1:,} of {total:,}"
    parts.append(fill("<span>{span}</span>", span=span))
    if offset + shown < total:
        q = urlencode({**params, key: str(offset + shown)})
        parts.append(fill('<a rel="next" href="{href}">older →</a>', href=f"{path}?{q}"))
    return fill('<nav class="pager" aria-label="Pages of this list">{p}</nav>', p=join(parts, " "))


def item_link(item_id: str) -> Safe:
    return fill('<a class="id" href="/item/{id}">{id}</a>', id=item_id)


def kind(it: Item) -> str:
    return f"summary d{it.depth}" if it.depth else it.content_type


def flags(it: Item) -> Safe:
    shown = [
        (it.pinned, "pinned", "pin"),
        (it.tier == "archived", "archived", "arch"),
        (it.view == "summary", "shown as summary", "sum"),
    ]
    return join(fill('<span class="flag {c}">{t}</span>', c=c, t=t) for on, t, c in shown if on)


# --- overview -------------------------------------------------------------------------------


def overview_page(
    ctx: Context, status: Status, ov: Overview, newest: list[Item], total: int, offset: int, took_ms: float
) -> Safe:
    budget = status.token_budget
    used = status.tokens_used
    share = used / budget if budget else 0.0
    pinned_share = ov.pinned_tokens / budget if budget else 0.0
    gauge = fill(
        """<section aria-labelledby="h-budget"><h2 id="h-budget">Budget</h2>
<p class="big">{used} of {budget} tokens <span class="muted">({pct})</span></p>
<svg class="gauge" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" aria-label="{label}">
<rect class="g-pinned" x="0" y="0" width="{pw}" height="10"></rect>
<rect class="g-used" x="{pw}" y="0" width="{uw}" height="10"></rect></svg>
<p class="legend"><span class="key k-pinned"></span> pinned {pinned} · <span class="key k-used"></span> other active
· auto-compaction at {threshold}</p></section>""",
        used=f"{used:,}",
        budget=f"{budget:,}",
        pct=f"{share:.0%}",
        label=f"{share:.0%} of the token budget used, {pinned_share:.0%} by pinned items",
        pw=f"{min(pinned_share, 1.0) * 100:.1f}",
        uw=f"{max(0.0, min(share, 1.0) - min(pinned_share, 1.0)) * 100:.1f}",
        pinned=counted(ov.pinned_tokens, "token"),
        threshold=f"{status.settings.auto_compact_threshold:.0%}" if status.settings.auto_compact else "off",
    )
    types = sorted(status.per_type.items())
    rows = join(
        fill(
            "<tr><th scope=row>{t}</th><td>{a}</td><td>{r}</td></tr>",
            t=t,
            a=f"{v.get('active', 0):,}",
            r=f"{v.get('archived', 0):,}",
        )
        for t, v in types
        if v.get("active", 0) or v.get("archived", 0)
    )
    about = "" if ov.exact else "≈ "  # scaled from a sample (history.overview)
    depth_rows = join(
        fill(
            "<tr><th scope=row>summaries, depth {d}</th><td>{a}</td><td>{r}</td></tr>",
            d=d,
            a=f"{about}{v['active']:,}",
            r=f"{about}{v['archived']:,}",
        )
        for d, v in ov.per_depth.items()
    )
    counts = fill(
        """<section aria-labelledby="h-counts"><h2 id="h-counts">Items</h2>
<table class="counts"><thead><tr><th scope=col>type</th><th scope=col>active</th>
<th scope=col>archived</th></tr></thead>
<tbody>{rows}{depth_rows}</tbody>
<tfoot><tr><th scope=row>all</th><td>{a}</td><td>{r}</td></tr></tfoot></table>
<p class="muted">{pinned} pinned{sampled}</p></section>""",
        sampled=""
        if ov.exact or not ov.per_depth
        else f" · ≈ summaries per depth: estimated from {ov.read:,} of {ov.items:,} items",
        rows=rows,
        depth_rows=depth_rows,
        a=f"{status.active_items:,}",
        r=f"{status.archived_items:,}",
        pinned=f"{status.pinned_items:,}",
    )
    now = time.time()
    newest_rows = join(
        fill(
            "<tr><td>{link}</td><td>{text} {flags}</td><td>{kind}</td><td class=num>{tokens}</td>"
            "<td class=num>{imp}</td><td class=num>{score}</td><td class=num>{age}</td></tr>",
            link=item_link(it.id),
            text=preview(it.summary or it.content, PREVIEW_CHARS),
            flags=flags(it),
            kind=kind(it),
            tokens=f"{it.view_tokens:,}",
            imp=it.importance,
            score=f"{retention01(it, now):.2f}",
            age=ago(it.created_at, now),
        )
        for it in newest
    )
    newest_html = fill(
        """<section aria-labelledby="h-newest"><h2 id="h-newest">Newest items</h2>
<div class="scroll"><table class="items"><thead><tr><th scope=col>id</th><th scope=col>headline</th>
<th scope=col>type</th><th scope=col>tokens</th><th scope=col>importance</th>
<th scope=col><abbr title="retention score, 0 to 1: what compaction keeps longest">score</abbr></th>
<th scope=col>age</th></tr></thead><tbody>{rows}</tbody></table></div>{pager}</section>""",
        rows=newest_rows or Safe("<tr><td colspan=7>Nothing stored yet.</td></tr>"),
        pager=pager("/", {}, offset, len(newest), total, PAGE_ITEMS),
    )
    body = fill(
        '<h1>Overview</h1><div class="grid">{gauge}{counts}</div>{chart}{newest}'
        '<p class="muted small">rendered in {ms} ms</p>',
        gauge=gauge,
        counts=counts,
        chart=chart(ov.timeline, None if ov.exact else (ov.read, ov.items)),
        newest=newest_html,
        ms=f"{took_ms:.0f}",
    )
    return layout(ctx, "Overview", body, here="/")


def chart(tl: Timeline, sampled: tuple[int, int] | None = None) -> Safe:
    """Tokens stored over time as an inline SVG line, compactions as marks under it; `sampled`:
    (items read, items held) when the line is scaled from a sample."""
    if not tl.tokens:
        return Safe("")
    top = max(tl.tokens) or 1
    n = len(tl.tokens)
    step = CHART_W / max(1, n - 1)
    pad = 14
    h = CHART_H - 2 * pad

    def y(v: int) -> float:
        return pad + h - h * v / top

    points = " ".join(f"{i * step:.1f},{y(v):.1f}" for i, v in enumerate(tl.tokens))
    marks = join(
        fill(
            '<g class="compaction"><line x1="{x}" x2="{x}" y1="{y0}" y2="{y1}"></line>'
            '<circle cx="{x}" cy="{y1}" r="4"><title>{t}</title></circle></g>',
            x=f"{i * step:.1f}",
            y0=f"{pad:.1f}",
            y1=f"{CHART_H - pad / 2:.1f}",
            t=f"{counted(c, 'summary node')} made",
        )
        for i, c in enumerate(tl.compactions)
        if c
    )
    made = sum(tl.compactions)
    desc = (
        f"Tokens stored rose to {top:,} from {fmt_time(tl.start)} to {fmt_time(tl.end)}; "
        f"{counted(made, 'summary node')} made by compactions"
        + (f", estimated from a sample of {sampled[0]:,} of {sampled[1]:,} items." if sampled else ".")
    )
    return fill(
        """<section aria-labelledby="h-chart"><h2 id="h-chart">Tokens stored over time</h2>
<figure><svg class="chart" viewBox="0 0 {w} {hh}" preserveAspectRatio="none" role="img" aria-label="{desc}">
<polyline points="{points}"></polyline>{marks}</svg>
<figcaption>{start} → {end} · line: tokens of the items held, by when they were stored (up to {top}) ·
<span class="key k-comp"></span> a compaction ({made}){note}</figcaption></figure></section>""",
        note=f" · estimated from an even sample of {sampled[0]:,} of {sampled[1]:,} items" if sampled else "",
        w=CHART_W,
        hh=CHART_H,
        desc=desc,
        points=points,
        marks=marks,
        start=fmt_time(tl.start),
        end=fmt_time(tl.end),
        top=f"{top:,}",
        made=counted(made, "summary node"),
    )


# --- search ---------------------------------------------------------------------------------


def search_page(
    ctx: Context,
    q: str,
    tags: str,
    scope: str,
    hits: Sequence[tuple[Hit, str | None]],
    offset: int,
    more: bool,
    error: str | None,
) -> Safe:
    form = fill(
        """<form class="search" role="search" action="/search" method="get">
<label for="q">Words</label><input id="q" name="q" type="search" value="{q}" autofocus>
<label for="tags">Tags <span class="muted">(comma-separated)</span></label>
<input id="tags" name="tags" value="{tags}">
<label for="scope">Scope <span class="muted">(a project, or all)</span></label>
<input id="scope" name="scope" value="{scope}">
<button type="submit">Search</button></form>""",
        q=q,
        tags=tags,
        scope=scope,
    )
    if error:
        result: Safe = fill('<p class="error" role="alert">{e}</p>', e=error)
    elif not (q or tags):
        result = Safe('<p class="muted">Ranked as the agent\'s <code>query</code> tool ranks: the archive too.</p>')
    elif not hits:
        result = Safe("<p>No matches. Try other words.</p>")
    else:
        rows = join(
            fill(
                """<li class="hit"><div class="hit-head">{link} <span class="score">score {score}</span>
<span class="tier">{tier}</span> <span class="kind">{kind}</span> {flags}</div>
<p class="text">{text}</p><p class="muted small">{matched}{cover}</p></li>""",
                link=item_link(h.item.id),
                score=f"{h.score:.3f}",
                tier=h.item.tier,
                kind=kind(h.item),
                flags=flags(h.item),
                text=highlight(preview(h.item.summary or h.item.content, 320), h.matched),
                matched=fill("matched: {m}", m=", ".join(h.matched)) if h.matched else "",
                cover=fill(" · covered by summary {c}", c=item_link(cover)) if cover else "",
            )
            for h, cover in hits
        )
        params = {"q": q, "tags": tags, "scope": scope}
        links: list[Safe] = []
        if offset:
            back = urlencode({**params, "offset": str(max(0, offset - SEARCH_LIMIT))})
            links.append(fill('<a rel="prev" href="/search?{p}">← better matches</a>', p=back))
        if more:
            on = urlencode({**params, "offset": str(offset + len(hits))})
            links.append(fill('<a rel="next" href="/search?{p}">more hits →</a>', p=on))
        nav = fill('<nav class="pager" aria-label="Pages of hits">{l}</nav>', l=join(links, " ")) if links else ""
        result = fill(
            '<h2 id="h-hits">{n}</h2><ol class="hits" start="{start}" aria-labelledby="h-hits">{rows}</ol>{nav}',
            n=f"hits {offset + 1:,} to {offset + len(hits):,}" if offset or more else counted(len(hits), "hit"),
            start=offset + 1,
            rows=rows,
            nav=nav,
        )
    return layout(
        ctx, f"Search: {q}" if q else "Search", fill("<h1>Search</h1>{f}{r}", f=form, r=result), here="/search"
    )


# --- item -----------------------------------------------------------------------------------


def action(ctx: Context, item_id: str, name: str, label: str, *, danger: bool = False) -> Safe:
    return fill(
        """<form method="post" action="/item/{id}/{name}" class="inline">
<input type="hidden" name="csrf" value="{csrf}"><button type="submit"{cls}>{label}</button></form>""",
        id=item_id,
        name=name,
        csrf=ctx.csrf,
        label=label,
        cls=Safe(' class="danger"') if danger else Safe(""),
    )


def actions(ctx: Context, it: Item) -> Safe:
    buttons = [action(ctx, it.id, "unpin", "Unpin") if it.pinned else action(ctx, it.id, "pin", "Pin")]
    if it.tier == "archived":
        buttons.append(action(ctx, it.id, "restore", "Restore to active"))
    if it.depth:
        buttons.append(action(ctx, it.id, "dissolve", "Dissolve summary"))
    else:
        buttons.append(action(ctx, it.id, "forget", "Forget…", danger=True))
    return fill('<div class="actions" role="group" aria-label="Actions">{b}</div>', b=join(buttons))


def item_page(
    ctx: Context,
    store: Store,
    it: Item,
    offset: int,
    end: int,
    covers: list[str],
    children: list[Item],
    child_total: int,
    child_offset: int,
    notice: Safe | None = None,
) -> Safe:
    facts = [
        ("type", kind(it)),
        ("tier", it.tier),
        ("shown as", it.view),
        ("importance", str(it.importance)),
        ("tokens", f"{it.content_tokens:,} content · {it.summary_tokens:,} summary"),
        ("scope", it.scope or "global"),
        ("stored", fmt_time(it.created_at)),
        ("last read", f"{fmt_time(it.last_accessed_at)} ({it.access_count} reads)"),
    ]
    if it.tags:
        facts.append(("tags", ", ".join(it.tags)))
    if it.file_paths:
        facts.append(("file view", describe_view(it.file_command, it.file_paths, it.file_lines)))
    if it.merged_into:
        facts.append(("merged into", it.merged_into))
    dl = join(fill("<dt>{k}</dt><dd>{v}</dd>", k=k, v=v) for k, v in facts)
    content = it.content[offset:end]
    page_note = Safe("")
    if offset or end < len(it.content):
        links = []
        if offset:
            back = max(0, offset - C.GET_PAGE_CHARS)
            links.append(fill('<a href="/item/{id}?offset={o}">← earlier</a>', id=it.id, o=back))
        if end < len(it.content):
            links.append(fill('<a href="/item/{id}?offset={o}">later →</a>', id=it.id, o=end))
        page_note = fill(
            '<nav class="pager" aria-label="Parts of the content">characters {a} to {b} of {n} {links}</nav>',
            a=f"{offset:,}",
            b=f"{end:,}",
            n=f"{len(it.content):,}",
            links=join(links, " "),
        )
    summary = fill("<h2>Summary</h2><p>{s}</p>", s=it.summary) if it.summary else Safe("")
    up = (
        fill("<ol class=lineage>{x}</ol>", x=join(fill("<li>{l}</li>", l=item_link(c)) for c in covers))
        if covers
        else Safe('<p class="muted">No summary covers it.</p>')
    )
    down = Safe("")
    if it.depth:
        kids = join(
            fill(
                "<li>{l} <span class=kind>{k}</span> {t}</li>",
                l=item_link(c.id),
                k=kind(c),
                t=preview(c.summary or c.content, 120),
            )
            for c in children
        )
        gone = (
            fill('<p class="muted">{n} forgotten since.</p>', n=counted(len(it.gone_children), "child"))
            if it.gone_children
            else Safe("")
        )
        down = fill(
            '<h3>Down: what it stands for</h3><ul class="lineage">{k}</ul>{pager}{gone}',
            k=kids,
            pager=pager(f"/item/{it.id}", {}, child_offset, len(children), child_total, TREE_CHILDREN, key="children"),
            gone=gone,
        )
    events = join(fill("<li><time>{t}</time> {what}</li>", t=fmt_time(t), what=what) for t, what in story(store, it))
    if ctx.journal is None:
        journal: Safe = Safe(
            '<p class="muted">The team database records when each change was written, not who made it; '
            "its journal is not read here.</p>"
        )
    else:
        lines = ctx.journal(it.id)
        journal = (
            fill(
                "<h3>In the journal since the last snapshot</h3><ul>{x}</ul>",
                x=join(fill("<li>{x}</li>", x=line) for line in lines),
            )
            if lines
            else Safe(
                '<p class="muted">Nothing in the journal since the last snapshot (who made a change is not recorded '
                "in a state dir).</p>"
            )
        )
    body = fill(
        """<h1>Item <code>{id}</code> {flags}</h1>{actions}
<dl class="facts">{dl}</dl>{summary}
<h2>Content</h2>{pager}<pre class="content">{content}</pre>{pager}
<h2>Lineage</h2><h3>Up: the summaries that cover it</h3>{up}{down}
<h2>History</h2><ol class="history">{events}</ol>{journal}""",
        id=it.id,
        flags=flags(it),
        actions=actions(ctx, it),
        dl=dl,
        summary=summary,
        pager=page_note,
        content=content,
        up=up,
        down=down,
        events=events,
        journal=journal,
    )
    return layout(ctx, f"Item {it.id}", body, here="", notice=notice)


def forget_confirm_page(ctx: Context, it: Item, covers: list[str]) -> Safe:
    cover_note = (
        fill(" The summaries that cover it ({c}) keep their text and record it as forgotten.", c=", ".join(covers))
        if covers
        else ""
    )
    body = fill(
        """<h1>Forget <code>{id}</code>?</h1>
<p>This deletes the item for good: its content ({chars} characters, {tokens}), its summary and its tags, from memory
and from every file on disk. The forget ledger keeps only its id, when and why.{cover}</p>
<blockquote>{text}</blockquote>
<form method="post" action="/item/{id}/forget"><input type="hidden" name="csrf" value="{csrf}">
<input type="hidden" name="confirm" value="yes">
<button type="submit" class="danger">Forget it for good</button> <a href="/item/{id}">Cancel</a></form>""",
        id=it.id,
        chars=f"{len(it.content):,}",
        tokens=counted(it.content_tokens, "token"),
        cover=cover_note,
        text=preview(it.summary or it.content, 300),
        csrf=ctx.csrf,
    )
    return layout(ctx, f"Forget {it.id}?", body, here="")


# --- tree -----------------------------------------------------------------------------------


def tree_node(it: Item, *, open_: bool = False) -> Safe:
    head = fill(
        "{l} <span class=kind>{k}</span> <span class=num>{t}</span> <span class=tier>{tier}</span> {text}",
        l=item_link(it.id),
        k=kind(it),
        t=f"{it.view_tokens:,} tokens"
        if not it.depth
        else f"{counted(len(it.children), 'child').replace('childs', 'children')} in {it.view_tokens:,} tokens",
        tier=it.tier,
        text=preview(it.summary or it.content, 120),
    )
    if not it.depth:
        return fill("<li class=leaf>{h}</li>", h=head)
    return fill(
        '<li><details data-node="{id}"{o}><summary>{h}</summary><ul class="kids" aria-live="polite">'
        '<li><a href="/tree?root={id}">open its children</a></li></ul></details></li>',
        id=it.id,
        h=head,
        o=Safe(" open") if open_ else Safe(""),
    )


def children_list(node: Item, kids: list[Item], total: int, offset: int, *, more_link: bool = True) -> Safe:
    """A node's children as list items; `more_link`: a last item linking to the rest (the page's
    script puts this list under an opened node; the tree page under a root has a pager)."""
    rows = join(tree_node(k) for k in kids)
    more = Safe("")
    if more_link and offset + len(kids) < total:
        more = fill(
            '<li><a href="/tree?root={id}&amp;offset={o}">more children ({left} left)</a></li>',
            id=node.id,
            o=offset + len(kids),
            left=f"{total - offset - len(kids):,}",
        )
    return fill("{rows}{more}", rows=rows, more=more)


def tree_page(
    ctx: Context, roots: list[Item], total: int, offset: int, root: Item | None, kids: list[Item], kid_total: int
) -> Safe:
    if root is not None:
        body = fill(
            """<h1>Summary tree under <code>{id}</code></h1><p><a href="/tree">All roots</a></p>
<ul class="tree"><li><details open><summary>{head}</summary><ul class="kids">{kids}</ul></details></li></ul>{pager}""",
            id=root.id,
            head=tree_node(root),
            kids=children_list(root, kids, kid_total, offset, more_link=False),
            pager=pager("/tree", {"root": root.id}, offset, len(kids), kid_total, TREE_CHILDREN),
        )
    else:
        rows = join(tree_node(r) for r in roots)
        body = fill(
            """<h1>Summary tree</h1><p class="muted">The summary nodes no other summary covers, newest first;
open one to see what it stands for.</p><ul class="tree">{rows}</ul>{pager}""",
            rows=rows or Safe('<li class="muted">No summaries yet: compaction has not condensed anything.</li>'),
            pager=pager("/tree", {}, offset, len(roots), total, PAGE_ITEMS),
        )
    return layout(ctx, "Summary tree", body, here="/tree")


# --- ledger ---------------------------------------------------------------------------------


def ledger_page(
    ctx: Context, entries: list[dict[str, Any]], total: int, offset: int, notice: Safe | None = None
) -> Safe:
    rows = join(
        fill(
            "<tr><td><code>{id}</code></td><td>{at}</td><td>{why}</td></tr>",
            id=e.get("id", "?"),
            at=fmt_time(float(e["at"])) if isinstance(e.get("at"), (int, float)) else "?",
            why=e.get("reason", "?"),
        )
        for e in entries
    )
    body = fill(
        """<h1>Forgotten</h1><p class="muted">What <code>forget</code> and <code>prune</code> removed, newest first:
ids, when and why. Their content is gone.</p>
<div class="scroll"><table><thead><tr><th scope=col>id</th><th scope=col>when</th><th scope=col>why</th></tr></thead>
<tbody>{rows}</tbody></table></div>{pager}""",
        rows=rows or Safe("<tr><td colspan=3>Nothing forgotten.</td></tr>"),
        pager=pager("/ledger", {}, offset, len(entries), total, PAGE_ITEMS),
    )
    return layout(ctx, "Forgotten", body, here="/ledger", notice=notice)


def error_page(ctx: Context | None, status: int, message: str) -> Safe:
    body = fill(
        '<h1>{title}</h1><p class="error" role="alert">{m}</p><p><a href="/">Overview</a></p>',
        title="Not found" if status == 404 else "Refused" if status in (401, 403) else "Error",
        m=message,
    )
    if ctx is None:
        return fill(
            '<!doctype html><html lang="en"><meta charset="utf-8"><title>compactor</title><body><main>{b}</main>',
            b=body,
        )
    return layout(ctx, "Error", body, here="")


def note(text: str) -> Safe:
    return fill('<p class="notice" role="status">{t}</p>', t=text)


__all__ = [
    "Context",
    "chart",
    "error_page",
    "forget_confirm_page",
    "item_page",
    "ledger_page",
    "note",
    "overview_page",
    "search_page",
    "tree_page",
]
