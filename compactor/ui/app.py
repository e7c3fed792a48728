"""The web app of `compactor ui`: routes over one Store, and the guards every request passes.

Guards, in order: the Host header must name this server (a DNS-rebinding page reaches us under
its own name and is refused), a token when one is set (as the team server's `--token-file`;
required off loopback), and for every change a POST from our own origin (Origin, else Referer)
carrying the page's CSRF token. Pages are server-rendered with every value escaped and a
Content-Security-Policy that allows only our own script and style."""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from .. import constants as C
from ..errors import CompactorError, InvalidArgumentError, NotFoundError
from ..mcp.http_server import is_loopback
from ..models import Item, Tier
from ..persistence.statedir import JOURNAL
from ..render import page_end
from ..store import ALL_SCOPES, Hit, Store
from ..store.history import Journal, overview, state_dir_changes
from ..store.ledger import LEDGER_MEMORY_MAX
from . import pages as P
from .html import Safe
from .journal import database_changes

log = logging.getLogger(__name__)

# A page reads the journal for an item's history only this big: a bulk load's 2 MiB took 0.8 s.
JOURNAL_PAGE_MAX_BYTES = 512 * 1024
FORM_MAX_BYTES = 16 * 1024  # an action's form is a token and a flag: anything bigger is not ours
TOKEN_COOKIE = "compactor_ui"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
DONE = {
    "pin": "Pinned: kept in full for good.",
    "unpin": "Unpinned: compaction may condense it again.",
    "restore": "Restored to the active tier.",
}
ACTIONS = ("pin", "unpin", "restore", "dissolve", "forget")


def _asset(name: str) -> bytes:
    return resources.files("compactor.ui").joinpath("static", name).read_bytes()


class Guard(BaseHTTPMiddleware):
    """Host, token and same-origin checks before any route runs."""

    def __init__(self, app: Any, *, hosts: frozenset[str] | None, token: str | None) -> None:
        super().__init__(app)
        self.hosts = hosts  # None: any Host (a token guards the server instead)
        self.token = token

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        host = request.headers.get("host", "").lower()
        if self.hosts is not None and host not in self.hosts:
            return refuse(421, f"This server does not answer to host {host or '(none)'}; open it by its own address.")
        if self.token is not None:
            given = request.query_params.get("token")
            if given is not None and request.method == "GET":
                if not hmac.compare_digest(given.encode(), self.token.encode()):
                    return refuse(401, "Wrong token.")
                # The token moves into a cookie and out of the address bar (and its history).
                rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
                target = request.url.path + (f"?{rest}" if rest else "")
                resp: Response = RedirectResponse(target, status_code=303)
                resp.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
                return resp
            cookie = request.cookies.get(TOKEN_COOKIE, "")
            bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not any(hmac.compare_digest(v.encode(), self.token.encode()) for v in (cookie, bearer) if v):
                return refuse(401, "This server needs its token: open the address with ?token=YOUR_TOKEN once.")
        if request.method not in ("GET", "HEAD") and not same_origin(request, host):
            return refuse(403, "Refused: a change must come from this server's own page.")
        response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response


def same_origin(request: Request, host: str) -> bool:
    """Whether a state-changing request comes from a page of this server: its Origin (else its
    Referer) names our host, and the browser does not call it cross-site."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin or origin == "null":
        return False
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host


def refuse(status: int, message: str) -> Response:
    resp = HTMLResponse(P.error_page(None, status, message), status_code=status)
    resp.headers.update(SECURITY_HEADERS)
    return resp


class UI:
    """The routes, over one Store shared by the server's worker threads (one lock: the pages read
    several Store calls that belong together)."""

    def __init__(self, store: Store, *, source: str, state_dir: Path | None, database: str | None = None) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.csrf = secrets.token_urlsafe(32)
        journal: Callable[[str], Journal] | None = None
        if state_dir is not None:
            journal = lambda item_id: _journal(state_dir, item_id)  # noqa: E731
        elif database is not None:
            journal = lambda item_id: database_changes(database, item_id)  # noqa: E731
        self.ctx = P.Context(csrf=self.csrf, source=source, journal=journal)

    def html(self, body: Safe, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status)

    def error(self, exc: Exception) -> HTMLResponse:
        status = 404 if isinstance(exc, NotFoundError) else 400
        return self.html(P.error_page(self.ctx, status, str(exc)), status)

    def overview(self, request: Request) -> Response:
        started = time.perf_counter()
        offset = _int(request, "offset", 0, 1 << 40)
        with self.lock:
            status = self.store.status()
            items, total = newest(self.store, offset, P.PAGE_ITEMS)
            ov = overview(self.store)
        took = (time.perf_counter() - started) * 1000
        return self.html(P.overview_page(self.ctx, status, ov, items, total, offset, took))

    def search(self, request: Request) -> Response:
        q = request.query_params.get("q", "")[: C.QUERY_MAX_CHARS]
        tags = request.query_params.get("tags", "")[: C.QUERY_MAX_CHARS]
        scope = request.query_params.get("scope", "")[:200]
        # Pages of the query tool's ranking, as far as it ranks (QUERY_LIMIT_MAX hits).
        offset = _int(request, "offset", 0, C.QUERY_LIMIT_MAX - 1)
        hits: list[tuple[Hit, str | None]] = []
        more = False
        error = None
        if q.strip() or tags.strip():
            try:
                with self.lock:
                    want = min(C.QUERY_LIMIT_MAX, offset + P.SEARCH_LIMIT + 1)  # one more: is there a next page
                    found = self.store.query(q, tags=tags or None, limit=want, scope=scope or None)
                    more = len(found) > offset + P.SEARCH_LIMIT
                    page = found[offset : offset + P.SEARCH_LIMIT]
                    hits = [(h, path[-1] if (path := self.store.ancestors(h.item)) else None) for h in page]
            except CompactorError as exc:
                error = str(exc)
        return self.html(P.search_page(self.ctx, q, tags, scope, hits, offset, more, error), 400 if error else 200)

    def item(self, request: Request, notice: Safe | None = None) -> Response:
        item_id = request.path_params["id"]
        offset = _int(request, "offset", 0, 1 << 40)
        child_offset = _int(request, "children", 0, 1 << 40)
        try:
            with self.lock:
                it = self.store.get(item_id)
                if offset > len(it.content):
                    raise InvalidArgumentError(
                        f"offset {offset:,} is past the end of {it.id}'s content ({len(it.content):,} characters)."
                    )
                end = page_end(it.content, offset, self.store.counter.count)
                covers = _items(self.store, dict.fromkeys([*it.parents, *self.store.ancestors(it)]))
                kids: list[Any] = []
                total = 0
                if it.depth:
                    _, kids, total = self.store.expand(it.id, offset=child_offset, limit=P.TREE_CHILDREN)
        except CompactorError as exc:
            return self.error(exc)
        # Outside the lock: the journal is a file or a table of its own, read without the Store.
        journal = self.ctx.journal(it.id) if self.ctx.journal is not None else None
        done = request.query_params.get("done")
        if notice is None and done in DONE:
            notice = P.note(DONE[done])
        page = P.item_page(self.ctx, self.store, it, offset, end, covers, kids, total, child_offset, notice, journal)
        return self.html(page)

    async def act(self, request: Request) -> Response:
        name = request.path_params["action"]
        item_id = request.path_params["id"]
        body = await request.body()
        if len(body) > FORM_MAX_BYTES:
            return self.html(P.error_page(self.ctx, 413, "Form too large."), 413)
        form = parse_qs(body.decode("utf-8", "replace"))
        token = (form.get("csrf") or [""])[0]
        if not hmac.compare_digest(token.encode(), self.csrf.encode()):
            return self.html(
                P.error_page(self.ctx, 403, "Refused: this form is stale or not ours; reload the page."), 403
            )
        if name not in ACTIONS:
            return self.html(P.error_page(self.ctx, 404, f"No action {name!r}."), 404)
        confirmed = (form.get("confirm") or [""])[0] == "yes"
        return await _threaded(lambda: self._act(name, item_id, confirmed))

    def _act(self, name: str, item_id: str, confirmed: bool) -> Response:
        try:
            with self.lock:
                if name == "forget" and not confirmed:
                    it = self.store.get(item_id)
                    return self.html(P.forget_confirm_page(self.ctx, it, list(it.parents)))
                if name == "pin":
                    self.store.pin(item_id)
                elif name == "unpin":
                    self.store.unpin(item_id)
                elif name == "restore":
                    self.store.restore(item_id)
                elif name == "dissolve":
                    back = self.store.dissolve(item_id)
                    return RedirectResponse(f"/tree?dissolved={len(back)}", status_code=303)
                else:
                    gone = self.store.forget(item_id)
                    target = "/tree?dissolved=1" if gone.depth else "/ledger?forgot=1"
                    return RedirectResponse(target, status_code=303)
        except CompactorError as exc:
            return self.error(exc)
        return RedirectResponse(f"/item/{item_id}?done={name}", status_code=303)

    def tree(self, request: Request) -> Response:
        offset = _int(request, "offset", 0, 1 << 40)
        root_id = request.query_params.get("root")
        dissolved = _int(request, "dissolved", 0, 1 << 20)
        notice = (
            P.note(f"Dissolved: its {P.children_count(dissolved)} stand for themselves again.")
            if "dissolved" in request.query_params
            else None
        )
        try:
            with self.lock:
                if root_id:
                    root, kids, total = self.store.expand(root_id, offset=offset, limit=P.TREE_CHILDREN)
                    stands = _stands_for(self.store, [root, *kids])
                    body = P.tree_page(self.ctx, [], 0, offset, root, kids, total, stands, notice)
                else:
                    # `roots` reads without catching up with other processes; `status` does.
                    self.store.status()
                    roots = self.store.roots(scope=None)
                    page = roots[offset : offset + P.PAGE_ITEMS]
                    stands = _stands_for(self.store, page)
                    body = P.tree_page(self.ctx, page, len(roots), offset, None, [], 0, stands, notice)
        except CompactorError as exc:
            return self.error(exc)
        return self.html(body)

    def tree_children(self, request: Request) -> Response:
        """One node's children as list items, for the page's script to put under an opened node."""
        offset = _int(request, "offset", 0, 1 << 40)
        try:
            with self.lock:
                node, kids, total = self.store.expand(request.path_params["id"], offset=offset, limit=P.TREE_CHILDREN)
                stands = _stands_for(self.store, kids)
        except CompactorError as exc:
            return PlainTextResponse(str(exc), status_code=404 if isinstance(exc, NotFoundError) else 400)
        return self.html(P.children_list(node, kids, total, offset, stands))

    def ledger(self, request: Request) -> Response:
        offset = _int(request, "offset", 0, 1 << 40)
        with self.lock:
            entries = self.store.forget_ledger(limit=LEDGER_MEMORY_MAX)
        newest = list(reversed(entries))
        notice = (
            P.note("Forgotten: its content is gone from memory and disk.")
            if request.query_params.get("forgot")
            else None
        )
        return self.html(P.ledger_page(self.ctx, newest[offset : offset + P.PAGE_ITEMS], len(newest), offset, notice))

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        kinds = {"ui.css": "text/css", "ui.js": "text/javascript"}
        if name not in kinds:
            return PlainTextResponse("Not found.", status_code=404)
        return Response(_asset(name), media_type=kinds[name], headers={"Cache-Control": "no-cache"})


async def _threaded(fn: Callable[[], Response]) -> Response:
    return await run_in_threadpool(fn)


def newest(store: Store, offset: int, limit: int) -> tuple[list[Item], int]:
    """Items `offset` to `offset + limit` of both tiers, newest first, and how many there are,
    read without merging the tiers' whole orders (what `list_items(tier="all")` does: 20 ms at
    100,000 items): a binary search finds how many of the `offset` newest are active."""
    if store.hidden_by_scope("all"):
        # A scope leaves items out: its orders are merged per call anyway, once is cheapest.
        page = store.list_items(offset=offset, limit=limit, tier="all")
        return page.items, page.total

    def seq(tier: Tier, i: int) -> int:  # the i-th newest of a tier
        return store.list_items(offset=i, limit=1, tier=tier, scope=ALL_SCOPES).items[0].seq

    n_active = store.list_items(limit=1, tier="active", scope=ALL_SCOPES).total
    n_archived = store.list_items(limit=1, tier="archived", scope=ALL_SCOPES).total
    total = n_active + n_archived
    if offset >= total:
        return [], total
    # The smallest a (active among the `offset` newest) whose next active item is older than the
    # last archived one taken; the predicate below is true up to it and false from it on.
    lo, hi = max(0, offset - n_archived), min(offset, n_active)
    while lo < hi:
        a = (lo + hi) // 2
        if seq("active", a) > seq("archived", offset - a - 1):
            lo = a + 1
        else:
            hi = a
    a, b = lo, offset - lo
    pages = [
        store.list_items(offset=a, limit=limit, tier="active", scope=ALL_SCOPES).items if a < n_active else [],
        store.list_items(offset=b, limit=limit, tier="archived", scope=ALL_SCOPES).items if b < n_archived else [],
    ]
    return sorted([*pages[0], *pages[1]], key=lambda it: -it.seq)[:limit], total


def _journal(state_dir: Path, item_id: str) -> Journal:
    try:
        size = (state_dir / JOURNAL).stat().st_size
    except OSError:
        return Journal([])
    if size > JOURNAL_PAGE_MAX_BYTES:
        return Journal(
            [], f"the journal holds {size:,} bytes, too many to read for a page (`compactor show {item_id}` reads it)"
        )
    return state_dir_changes(state_dir, item_id)


def _items(store: Store, ids: Iterable[str]) -> list[Item]:
    """The items of `ids` that are there (read without counting as an access), in that order."""
    found = []
    for item_id in ids:
        try:
            found.append(store.get(item_id))
        except NotFoundError:
            continue
    return found


def _stands_for(store: Store, nodes: Iterable[Item]) -> dict[str, int]:
    """Summary node id -> the tokens of the children it condenses (their content), for the
    nodes about to be shown (a node holds tens of children: a page reads hundreds of items)."""
    out: dict[str, int] = {}
    for node in nodes:
        if node.depth:
            _, kids, _ = store.expand(node.id, limit=C.LIST_LIMIT_MAX)
            out[node.id] = sum(k.content_tokens for k in kids)
    return out


def _int(request: Request, name: str, default: int, high: int, *, low: int = 0) -> int:
    """A whole-number query parameter, clamped to [low, high]; `default` when absent or not one."""
    try:
        value = int(request.query_params.get(name, default))
    except ValueError:
        return default
    return max(low, min(high, value))


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host headers a browser sends for this server: its loopback names, or the name it was
    bound to; None (any) for a wildcard address, which only a token may open."""
    if host in ("0.0.0.0", "::", ""):
        return None
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    names = {*LOOPBACK_NAMES, name.lower()} if is_loopback(host) else {name.lower()}
    return frozenset(f"{n}:{port}" for n in names) | (frozenset(names) if port == 80 else frozenset())


@dataclass(frozen=True)
class UIOptions:
    """What a memory page serves and where: `compactor ui`'s options, given to `ui_app` and
    `serve_ui` as one value."""

    host: str  # the address listened on, which a request's Host must name (any, for a wildcard)
    port: int  # 0 only until `serve_ui` has bound a free port
    token: str | None  # what a browser must give; required off loopback
    source: str  # where memory is kept, in words, shown on every page
    state_dir: Path | None  # whose journal tells an item's history
    database: str | None = None  # or the team database whose journal does


def ui_app(store: Store, options: UIOptions) -> Starlette:
    """The Starlette app over memory in `options.state_dir` or `options.database` (whose
    journals say who made each change). Raises InvalidArgumentError for a non-loopback host
    without a token."""
    host, token = options.host, options.token
    if token is None and not is_loopback(host):
        raise InvalidArgumentError(
            f"refusing to serve on {host} without a token: anyone who can reach it could read and change memory. "
            "Pass --token-file FILE or set COMPACTOR_TOKEN (make one with `openssl rand -hex 32`), or serve on "
            "127.0.0.1."
        )
    ui = UI(store, source=options.source, state_dir=options.state_dir, database=options.database)
    routes = [
        Route("/", ui.overview),
        Route("/search", ui.search),
        Route("/item/{id}/{action}", ui.act, methods=["POST"]),
        Route("/item/{id}", ui.item),
        Route("/tree", ui.tree),
        Route("/tree/children/{id}", ui.tree_children),
        Route("/ledger", ui.ledger),
        Route("/static/{name}", ui.static),
    ]
    middleware = [Middleware(Guard, hosts=allowed_hosts(host, options.port), token=token)]
    return Starlette(routes=routes, middleware=middleware)


__all__ = ["UIOptions", "allowed_hosts", "ui_app"]
