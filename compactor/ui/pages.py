"""The pages of `compactor ui`, rendered on the server from the Store's public reads: overview,
search, item, summary tree, forgotten. Every value goes through `html.fill`/`esc`; every list is
paged. Actions are forms that POST with the CSRF token (`app.py` checks it)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
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
from ..store.history import Event, Journal, Overview, Timeline, story
from .html import Safe, fill, highlight, join

PAGE_ITEMS = 25  # rows per page of a list: a screen on a laptop, a few swipes on a phone
SEARCH_LIMIT = 20  # hits shown first; "more" asks for up to C.QUERY_LIMIT_MAX
TREE_CHILDREN = 20  # children of one node shown at once
CHART_W, CHART_H = 640, 160  # the timeline's drawing box (scaled to the page width)
# A summary node's headline: its first lines (one per child), so it reads as what it covers.
HEADLINE_BULLETS = 3
_KIND = re.compile(r"^\((?:[a-z_]+|d\d+)\) ")  # "(prose) " before each child's line in a node


@dataclass(slots=True)
class Context:
    """What every page needs besides the store: the CSRF token its forms carry, what is shown
    (a state dir or a database) and the journal reader for an item's history."""

    csrf: str
    source: str
    journal: Callable[[str], Journal] | None  # item id -> its changes since the last snapshot


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
<span class="source" title="the memory this page shows">{source}</span></header>
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


def headline(it: Item, chars: int = PREVIEW_CHARS) -> str:
    """An item in a line: its summary, else its content; a summary node's own text by its first
    lines (one per child) rather than the "[d1 summary of 26 items; ...]" header before them."""
    if it.summary or not it.depth:
        return preview(it.summary or it.content, chars)
    bullets = [_KIND.sub("", ln[2:]) for ln in it.content.splitlines()[: HEADLINE_BULLETS + 2] if ln.startswith("- ")]
    shown: list[str] = []
    for line in bullets[:HEADLINE_BULLETS]:
        if shown and len("; ".join([*shown, line])) > chars:
            break  # whole lines only, but for the first
        shown.append(line)
    return preview("; ".join(shown) or it.content, chars)


def flags(it: Item, *, tier: bool = True) -> Safe:
    """Badges for what sets the item apart; `tier`: an "archived" one (off where the tier is
    shown beside it)."""
    shown = [
        (it.pinned, "pinned", "pin"),
        (tier and it.tier == "archived", "archived", "arch"),
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
    settings = status.settings
    at = settings.auto_compact_threshold
    gauge = fill(
        """<section aria-labelledby="h-budget"><h2 id="h-budget">Budget</h2>
<p class="big">{used} of {budget} tokens <span class="muted">({pct})</span></p>
<svg class="gauge" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" aria-label="{label}">
<rect class="g-pinned" x="0" y="0" width="{pw}" height="10"></rect>
<rect class="g-used" x="{pw}" y="0" width="{uw}" height="10"></rect>{mark}</svg>
<p class="legend"><span class="entry"><span class="key k-pinned"></span> pinned: {pinned}</span> ·
<span class="entry"><span class="key k-used"></span> other active items: {other}</span>{when}</p></section>""",
        used=f"{used:,}",
        budget=f"{budget:,}",
        pct=f"{share:.0%}",
        label=f"{share:.0%} of the token budget used, {pinned_share:.0%} by pinned items",
        pw=f"{min(pinned_share, 1.0) * 100:.1f}",
        uw=f"{max(0.0, min(share, 1.0) - min(pinned_share, 1.0)) * 100:.1f}",
        mark=fill('<line class="g-mark" x1="{x}" x2="{x}" y1="0" y2="10"></line>', x=f"{at * 100:.1f}")
        if settings.auto_compact
        else Safe(""),
        pinned=counted(ov.pinned_tokens, "token"),
        other=counted(max(0, used - ov.pinned_tokens), "token"),
        when=fill(
            ' · <span class="entry"><span class="key k-mark"></span> compaction starts at {pct} ({n})</span>',
            pct=f"{at:.0%}",
            n=counted(round(budget * at), "token"),
        )
        if settings.auto_compact
        else " · automatic compaction is off",
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
<table class="counts"><thead><tr><th scope=col>type</th><th scope=col class=num>active</th>
<th scope=col class=num>archived</th></tr></thead>
<tbody>{rows}{depth_rows}</tbody>
<tfoot><tr><th scope=row>all</th><td>{a}</td><td>{r}</td></tr></tfoot></table>
<p class="muted">{pinned}{sampled}</p></section>""",
        sampled=""
        if ov.exact or not ov.per_depth
        else f" · ≈ summaries per depth: estimated from {ov.read:,} of {ov.items:,} items",
        rows=rows or Safe('<tr><td colspan=3 class="empty">none yet</td></tr>'),
        depth_rows=depth_rows,
        a=f"{status.active_items:,}",
        r=f"{status.archived_items:,}",
        pinned=f"{counted(status.pinned_items, 'item')} pinned",
    )
    now = time.time()
    newest_rows = join(
        fill(
            '<tr><td class="c-id">{link}</td><td class="c-text">{text} {flags}</td><td class="c-kind">{kind}</td>'
            '<td class=num data-label="tokens">{tokens}</td><td class=num data-label="importance">{imp}</td>'
            '<td class=num data-label="score">{score}</td><td class=num data-label="age">{age}</td></tr>',
            link=item_link(it.id),
            text=headline(it),
            flags=flags(it),
            kind=kind(it),
            tokens=f"{it.view_tokens:,}",
            imp=it.importance,
            score=f"{retention01(it, now):.2f}",
            age=ago(it.created_at, now),
        )
        for it in newest
    )
    table = (
        fill(
            """<div class="scroll"><table class="items"><thead><tr><th scope=col>id</th><th scope=col>headline</th>
<th scope=col>type</th><th scope=col class=num>tokens</th><th scope=col class=num>importance</th>
<th scope=col class=num><abbr title="retention score, 0 to 1: what compaction keeps longest">score</abbr></th>
<th scope=col class=num>age</th></tr></thead><tbody>{rows}</tbody></table></div>""",
            rows=newest_rows,
        )
        if newest
        else Safe(
            '<p class="empty">Nothing stored yet. An agent using this memory stores items with its '
            "<code>store</code> tool; reload this page to see them.</p>"
        )
        if not total
        else Safe('<p class="empty">No items this far back.</p>')
    )
    newest_html = fill(
        '<section aria-labelledby="h-newest"><h2 id="h-newest">Newest items</h2>{table}{pager}</section>',
        table=table,
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
    (items read, items held) when the line is scaled from a sample. The axes' labels are HTML
    beside the drawing (which stretches to the page's width and would stretch text too)."""
    if not tl.tokens:
        return Safe("")
    top = max(tl.tokens) or 1
    n = len(tl.tokens)
    pad = 14
    step = (CHART_W - 2 * pad) / max(1, n - 1)
    h = CHART_H - 2 * pad

    def x(i: int) -> float:
        return pad + i * step

    def y(v: int) -> float:
        return pad + h - h * v / top

    points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(tl.tokens))
    # A dot is a line of no length with round ends, drawn at a fixed width: a circle would
    # stretch with the drawing into an ellipse.
    marks = join(
        fill(
            '<g class="compaction"><line x1="{x}" x2="{x}" y1="{y0}" y2="{y1}"></line>'
            '<line class="dot" x1="{x}" x2="{x}" y1="{y1}" y2="{y1}"><title>{t}</title></line></g>',
            x=f"{x(i):.1f}",
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
<figure><div class="y-axis" aria-hidden="true">tokens held, from 0 to {top}</div>
<svg class="chart" viewBox="0 0 {w} {hh}" preserveAspectRatio="none" role="img" aria-label="{desc}">
<polyline points="{points}"></polyline>{marks}</svg>
<div class="x-axis" aria-hidden="true"><span>{start}</span><span>{end}</span></div>
<figcaption><span class="entry"><span class="key k-line"></span> tokens</span> of the items held, by when they were
stored · <span class="entry"><span class="key k-comp"></span> a compaction</span> ({made} in all){note}</figcaption>
</figure></section>""",
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
<label for="q">Words</label><input id="q" name="q" type="search" value="{q}"{focus}>
<label for="tags">Tags <span class="muted">(comma-separated)</span></label>
<input id="tags" name="tags" value="{tags}">
<label for="scope">Scope <span class="muted">(a project; empty: every one)</span></label>
<input id="scope" name="scope" value="{scope}">
<button type="submit">Search</button></form>""",
        q=q,
        tags=tags,
        scope=scope,
        # An empty search waits for words; a page of hits is for reading (a phone's keyboard
        # would cover it).
        focus=Safe("" if q or tags else " autofocus"),
    )
    asked = join(
        [
            fill("“{q}”", q=q) if q.strip() else Safe(""),
            fill(" tagged {t}", t=tags) if tags.strip() else Safe(""),
            fill(" in scope {s}", s=scope) if scope.strip() else Safe(""),
        ]
    )
    if error:
        result: Safe = fill('<p class="error" role="alert">{e}</p>', e=error)
    elif not (q.strip() or tags.strip()):
        result = Safe(
            '<p class="muted">Finds items by words, tags or both, ranked as the agent\'s <code>query</code> tool '
            "ranks them, archived items included. The address is the search: bookmark it or share it.</p>"
        )
    elif not hits:
        result = fill(
            '<h2 id="h-hits">No hits</h2><p class="empty">Nothing in memory matches {a}.{tip}</p>',
            a=asked,
            tip=" Try fewer tags." if tags.strip() else " Try other or fewer words.",
        )
    else:
        rows = join(
            fill(
                """<li class="hit"><div class="hit-head">{link} <span class="kind">{kind}</span>
<span class="tier">{tier}</span> {flags} <span class="score">score {score}</span></div>
<p class="text">{text}</p><p class="muted small">{matched}{cover}{answers}</p></li>""",
                link=item_link(h.item.id),
                score=f"{h.score:.2f}",
                tier=h.item.tier,
                kind=kind(h.item),
                flags=flags(h.item, tier=False),
                text=highlight(preview(h.item.summary or h.item.content, 320), h.matched),
                matched=fill("matched: {m}", m=", ".join(h.matched)) if h.matched else "",
                cover=fill(" · covered by summary {c}", c=item_link(cover)) if cover else "",
                answers=fill(" · answers {q}", q=item_link(h.reply_to)) if h.reply_to else "",
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
            '<h2 id="h-hits">{n} for {a}</h2><p class="muted small">Best first; a score only compares hits '
            'of one search.</p><ol class="hits" start="{start}" aria-labelledby="h-hits">{rows}</ol>{nav}',
            n=f"Hits {offset + 1:,} to {offset + len(hits):,}"
            if offset or more
            else counted(len(hits), "hit").capitalize(),
            a=asked,
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


def by(who: str | None) -> Safe:
    return fill(' by <strong class="who">{w}</strong>', w=who) if who else Safe("")


def event_line(e: Event, now: float) -> Safe:
    """One history line: when (if known), what (the item it names linked), by whom."""
    what = e.what
    if e.times > 1:
        what = f"{what} ({e.times:,} reads in all)" if what == "last read" else f"{what} {e.times:,} times"
    when = (
        fill('<time title="{ago} ago">{t}</time> ', t=fmt_time(e.at), ago=ago(e.at, now))
        if e.at is not None
        else Safe('<span class="notime" title="when is not recorded">&ndash;</span> ')
    )
    return fill(
        "<li>{when}<span>{what}{ref}{who}</span></li>",
        when=when,
        what=what,
        ref=fill(" {l}", l=item_link(e.ref)) if e.ref else Safe(""),
        who=by(e.who),
    )


def history(ctx: Context, store: Store, it: Item, journal: Journal | None) -> Safe:
    """The item's story from its fields, then what the journal records since the last snapshot
    (each change with who made it, where the team server names people)."""
    now = time.time()
    events = story(store, it)
    lines = join(event_line(e, now) for e in events)
    if journal is None:
        recent: Safe = Safe("")
    elif journal.note:
        recent = fill('<p class="muted">Changes since the last snapshot are not shown: {n}.</p>', n=journal.note)
    elif journal.events:
        untimed = any(e.at is None for e in journal.events)
        recent = fill(
            '<h3>Changes since the last snapshot</h3><p class="muted small">Oldest first{n}.</p>'
            '<ol class="history">{x}</ol>',
            n="; a state dir's journal records who made a change, not when" if untimed else "",
            x=join(event_line(e, now) for e in journal.events),
        )
    else:
        recent = Safe('<p class="muted">No change to it since the last snapshot.</p>')
    named = it.stored_by or it.changed_by or (journal is not None and any(e.who for e in journal.events))
    hint = (
        Safe("")
        if named
        else Safe(
            '<p class="muted small">Who stores and changes items is recorded when memory is served by a team '
            "server with <code>--tokens-file</code>: each person's token has a name.</p>"
        )
    )
    return fill('<h2>History</h2><ol class="history">{lines}</ol>{recent}{hint}', lines=lines, recent=recent, hint=hint)


def item_facts(it: Item, now: float) -> Safe:
    budget = (
        f"{it.view_tokens:,} tokens ({'its summary' if it.view == 'summary' and it.summary else 'its content'})"
        if it.tier == "active"
        else f"none while archived ({it.view_tokens:,} tokens if restored)"
    )
    read = (
        f"{fmt_time(it.last_accessed_at)} ({ago(it.last_accessed_at, now)} ago); "
        f"{counted(it.access_count, 'read')} in all"
        if it.access_count
        else "never"
    )
    facts: list[tuple[str, object]] = [
        ("type", kind(it)),
        ("tier", it.tier),
        ("shown as", "its summary" if it.view == "summary" and it.summary else "its content in full"),
        ("importance", f"{it.importance} (of {C.IMPORTANCE_MIN} to {C.IMPORTANCE_MAX})"),
        (
            "size",
            f"{it.content_tokens:,} tokens of content"
            + (f", {it.summary_tokens:,} of summary" if it.summary else ", no summary"),
        ),
        ("budget cost", budget),
        ("scope", it.scope or "global"),
        ("stored", join([f"{fmt_time(it.created_at)} ({ago(it.created_at, now)} ago)", by(it.stored_by)])),
    ]
    if it.changed_by:
        facts.append(("last changed", fill('by <strong class="who">{w}</strong>', w=it.changed_by)))
    facts.append(("last read", read))
    if it.tags:
        facts.append(("tags", ", ".join(it.tags)))
    if it.file_paths:
        facts.append(("file view", describe_view(it.file_command, it.file_paths, it.file_lines)))
    if it.merged_into:
        facts.append(("merged into", item_link(it.merged_into)))
    if it.dup_of:
        facts.append(("near-duplicate of", item_link(it.dup_of)))
    return join(fill("<dt>{k}</dt><dd>{v}</dd>", k=k, v=v) for k, v in facts)


def related(items: Sequence[Item], chars: int = 120) -> Safe:
    return join(
        fill(
            "<li>{l} <span class=kind>{k}</span> <span class=tier>{tier}</span> {t}</li>",
            l=item_link(c.id),
            k=kind(c),
            tier=c.tier,
            t=headline(c, chars),
        )
        for c in items
    )


def item_page(
    ctx: Context,
    store: Store,
    it: Item,
    offset: int,
    end: int,
    covers: list[Item],
    children: list[Item],
    child_total: int,
    child_offset: int,
    notice: Safe | None = None,
    journal: Journal | None = None,
) -> Safe:
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
        fill("<ol class=lineage>{x}</ol>", x=related(covers))
        if covers
        else Safe(
            '<p class="muted">No summary covers it yet: compaction condenses items once the budget runs short.</p>'
        )
    )
    down = Safe("")
    if it.depth:
        gone = (
            fill('<p class="muted">{n} forgotten since.</p>', n=counted(len(it.gone_children), "child"))
            if it.gone_children
            else Safe("")
        )
        down = fill(
            '<h3>Down: the {n} it stands for</h3><ul class="lineage">{k}</ul>{pager}{gone}',
            n=children_count(child_total),
            k=related(children),
            pager=pager(f"/item/{it.id}", {}, child_offset, len(children), child_total, TREE_CHILDREN, key="children"),
            gone=gone,
        )
    body = fill(
        """<h1>Item <code>{id}</code> {flags}</h1>{actions}
<dl class="facts">{dl}</dl>{summary}
<h2>Content</h2>{pager}<pre class="content">{content}</pre>{pager}
<h2>Lineage</h2><h3>Up: the summaries that cover it</h3>{up}{down}
{history}""",
        id=it.id,
        flags=flags(it),
        actions=actions(ctx, it),
        dl=item_facts(it, time.time()),
        summary=summary,
        pager=page_note,
        content=content or Safe('<span class="muted">(empty)</span>'),
        up=up,
        down=down,
        history=history(ctx, store, it, journal),
    )
    return layout(ctx, f"Item {it.id}", body, here="", notice=notice)


def forget_confirm_page(ctx: Context, it: Item, covers: list[str]) -> Safe:
    cover_note = (
        fill(
            "<p>The summaries that cover it ({c}) keep their text and record it as forgotten.</p>",
            c=join((item_link(c) for c in covers), ", "),
        )
        if covers
        else ""
    )
    body = fill(
        """<h1>Forget <code>{id}</code>?</h1>
<p>This deletes the item for good: its content ({chars} characters, {tokens}){also}, from memory
and from every file on disk. The list of forgotten items keeps only its id, when and why.</p>{cover}
<p class="muted small">It begins:</p><blockquote>{text}</blockquote>
<form method="post" action="/item/{id}/forget" class="confirm"><input type="hidden" name="csrf" value="{csrf}">
<input type="hidden" name="confirm" value="yes">
<button type="submit" class="danger">Forget it for good</button> <a href="/item/{id}">Cancel: keep it</a></form>""",
        id=it.id,
        chars=f"{len(it.content):,}",
        tokens=counted(it.content_tokens, "token"),
        also=", its summary and its tags" if it.summary else ", its tags" if it.tags else "",
        cover=cover_note,
        text=headline(it, 300),
        csrf=ctx.csrf,
    )
    return layout(ctx, f"Forget {it.id}?", body, here="")


# --- tree -----------------------------------------------------------------------------------


def children_count(n: int) -> str:
    return f"{n:,} child" if n == 1 else f"{n:,} children"


def tree_node(it: Item, stands: Mapping[str, int] | None = None, *, open_: bool = False) -> Safe:
    """A node of the tree: a summary says how many children it condenses, of how many tokens,
    into how many (`stands`: node id -> its children's tokens, for the nodes on the page)."""
    if not it.depth:
        size = counted(it.view_tokens, "token")
    elif stands is not None and it.id in stands:
        size = f"{children_count(len(it.children))} · {stands[it.id]:,} → {counted(it.view_tokens, 'token')}"
    else:
        size = f"{children_count(len(it.children))} in {counted(it.view_tokens, 'token')}"
    head = fill(
        "{l} <span class=kind>{k}</span> <span class=size>{t}</span> <span class=tier>{tier}</span> {text}",
        l=item_link(it.id),
        k=kind(it),
        t=size,
        tier=it.tier,
        text=headline(it, 120),
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


def children_list(
    node: Item,
    kids: list[Item],
    total: int,
    offset: int,
    stands: Mapping[str, int] | None = None,
    *,
    more_link: bool = True,
) -> Safe:
    """A node's children as list items; `more_link`: a last item linking to the rest (the page's
    script puts this list under an opened node; the tree page under a root has a pager)."""
    rows = join(tree_node(k, stands) for k in kids)
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
    ctx: Context,
    roots: list[Item],
    total: int,
    offset: int,
    root: Item | None,
    kids: list[Item],
    kid_total: int,
    stands: Mapping[str, int] | None = None,
    notice: Safe | None = None,
) -> Safe:
    if root is not None:
        body = fill(
            """<h1>Summary tree under <code>{id}</code></h1><p><a href="/tree">All roots</a></p>
<ul class="tree"><li><details open><summary>{head}</summary><ul class="kids">{kids}</ul></details></li></ul>{pager}""",
            id=root.id,
            head=tree_node(root, stands),
            kids=children_list(root, kids, kid_total, offset, stands, more_link=False),
            pager=pager("/tree", {"root": root.id}, offset, len(kids), kid_total, TREE_CHILDREN),
        )
    else:
        rows = join(tree_node(r, stands) for r in roots)
        body = fill(
            """<h1>Summary tree</h1><p class="muted">The summary nodes no other summary covers, newest first. Each
condenses its children into fewer tokens; open one to see them.</p><ul class="tree">{rows}</ul>{pager}""",
            rows=rows
            or Safe(
                '<li class="empty">No summaries yet. Compaction makes them when the active items outgrow the '
                "budget, or when an agent calls <code>compact</code>.</li>"
            ),
            pager=pager("/tree", {}, offset, len(roots), total, PAGE_ITEMS),
        )
    return layout(ctx, "Summary tree", body, here="/tree", notice=notice)


# --- ledger ---------------------------------------------------------------------------------

WHY = {
    "forget": "forgotten on request",
    "prune": "pruned: the archive was over its size cap",
}


def ledger_page(
    ctx: Context, entries: list[dict[str, Any]], total: int, offset: int, notice: Safe | None = None
) -> Safe:
    now = time.time()
    rows = join(
        fill(
            '<tr><td><code class="id">{id}</code></td><td>{at}</td><td>{why}</td><td>{by}</td></tr>',
            id=e.get("id", "?"),
            at=f"{fmt_time(float(e['at']))} ({ago(float(e['at']), now)} ago)"
            if isinstance(e.get("at"), (int, float))
            else "?",
            why=WHY.get(str(e.get("reason")), str(e.get("reason", "?"))),
            # A team server's person; anyone else (a single user, the CLI, the archive cap): a dash.
            by=str(e["by"]) if e.get("by") else "\u2014",
        )
        for e in entries
    )
    body = fill(
        """<h1>Forgotten</h1><p class="muted">What <code>forget</code> and <code>prune</code> removed, newest first:
ids, when, why and who. Their content is gone.</p>
{table}{pager}""",
        table=fill(
            """<div class="scroll"><table class="ledger"><thead><tr><th scope=col>id</th><th scope=col>when</th>
<th scope=col>why</th><th scope=col>by</th></tr></thead><tbody>{rows}</tbody></table></div>""",
            rows=rows,
        )
        if entries
        else Safe(
            '<p class="empty">Nothing forgotten yet. An item forgotten here or by an agent, or pruned from a '
            "full archive, is listed here by its id.</p>"
        )
        if not total
        else Safe('<p class="empty">No entries this far back.</p>'),
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
