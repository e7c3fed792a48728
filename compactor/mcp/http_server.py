"""The streamable HTTP transport: the same tools, resources and prompt as on stdio, served by the
SDK's streamable HTTP app under uvicorn, behind a bearer token checked by the SDK's own auth hooks
(`TokenVerifier`, which its middleware turns into 401 for a missing or wrong token): one shared
token, or a tokens file's people, each with the projects they reach (people.py).

TLS is not done here: put a reverse proxy in front (README, "Team memory"). The token is compared
in constant time and never logged, nor kept in what the auth middleware records.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import orjson
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from pydantic import AnyHttpUrl

from .. import constants as C
from ..errors import InvalidArgumentError
from ..runtime import PROCESS
from ..store import Store
from .people import PeopleVerifier
from .server import build_server, snapshots

# The largest request body HTTP takes (stdio has no limit): the SDK's default, published in
# docs/team.md; a larger one gets a JSON-RPC error naming it.
MAX_BODY_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE
# Worker threads for calls at once (anyio's default is 40). A write waiting for the writers'
# lock holds a thread while using no CPU; with 40, queries queued behind waiting writes for a
# thread (64 clients on one server: query p50 92-143 ms at 40, 22-25 ms at 128).
WORKER_THREADS = 128


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server on this machine (a name other than localhost
    counts as reachable from elsewhere: it may resolve to anything)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_token(token_file: Path | None) -> str | None:
    """The bearer token from `token_file`, else from env COMPACTOR_TOKEN, else None. Raises
    InvalidArgumentError (never quoting the token) for an unreadable file or a short token."""
    if token_file is not None:
        try:
            # An editor may have put a byte-order mark first: it is no part of the token.
            token = token_file.read_text(encoding="utf-8-sig").strip()
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read --token-file {token_file}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(
                f"--token-file {token_file} is not UTF-8 text (saved as UTF-16?); write it with "
                "`openssl rand -hex 32 > FILE`"
            ) from exc
        source = f"--token-file {token_file}"
    else:
        token = os.environ.get("COMPACTOR_TOKEN", "").strip()
        source = "COMPACTOR_TOKEN"
        if not token:
            return None
    # A client sends it in an HTTP header, which carries printable ASCII only.
    if len(token) < C.TOKEN_MIN_CHARS or not (token.isascii() and token.isprintable()) or " " in token:
        raise InvalidArgumentError(
            f"the token in {source} is shorter than {C.TOKEN_MIN_CHARS} characters or holds spaces or characters "
            "other than printable ASCII; make one with `openssl rand -hex 32`"
        )
    return token


def url_host(host: str) -> str:
    """`host` as a URL or a Host header spells it: an IPv6 address in brackets."""
    bare = host.strip("[]")
    try:
        return f"[{bare}]" if ipaddress.ip_address(bare).version == 6 else bare
    except ValueError:
        return host


def transport_security(
    host: str, port: int, allowed_hosts: Sequence[str] = (), public_url: str | None = None
) -> TransportSecuritySettings | None:
    """The Host and Origin headers a request may carry (DNS rebinding protection): this
    machine's names on a loopback bind (every loopback address, not only the SDK's three), plus
    each `allowed_hosts` name (a proxy forwards the Host its client sent) and `public_url`'s.
    None, no check, on a non-loopback bind with neither: a token guards it, and its clients may
    name it anything."""
    names = [*allowed_hosts]
    if public_url:
        names.append(urlsplit(public_url).netloc)
    if not is_loopback(host) and not names:
        return None
    hosts: list[str] = []
    origins: list[str] = []
    for name in ["127.0.0.1", "localhost", "[::1]", url_host(host), *names] if is_loopback(host) else names:
        if name.endswith("]") or ":" not in name:  # no port given: any port, or the scheme's own
            hosts += [name, f"{name}:*"]
            origins += [f"{scheme}://{name}{port}" for scheme in ("http", "https") for port in ("", ":*")]
        else:
            hosts.append(name)
            origins += [f"http://{name}", f"https://{name}"]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


class BodyLimit:
    """The HTTP transport's body limit (the SDK's, `MAX_BODY_BYTES`) answered with a JSON-RPC
    error that names it, which the SDK client shows the model, instead of a bare 413."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            length = dict(scope.get("headers") or []).get(b"content-length", b"")
            if length.isdigit() and int(length) > MAX_BODY_BYTES:
                body = orjson.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": -32600,
                            "message": (
                                f"The request is {int(length) / 2**20:.1f} MiB, over the {MAX_BODY_BYTES // 2**20} "
                                "MiB limit of compactor's HTTP transport; nothing was stored. Send less per call "
                                "(split a bulk_store into several)."
                            ),
                        },
                    }
                )
                await send(
                    {
                        "type": "http.response.start",
                        "status": 413,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(
    store: Store,
    *,
    host: str,
    port: int,
    token: str | None,
    scope_fixed: bool = False,
    allowed_hosts: Sequence[str] = (),
    public_url: str | None = None,
    people: PeopleVerifier | None = None,
) -> Any:
    """The Starlette app serving MCP at /mcp; with a token (or `people`, a tokens file's) every
    request must carry one. Raises InvalidArgumentError for a non-loopback `host` without."""
    if people is None:
        people = PeopleVerifier.from_options(token, None)
    if people is None and not is_loopback(host):
        raise InvalidArgumentError(
            f"refusing to serve on {host} without a token: anyone who can reach it could read and change "
            "memory. Pass --token-file FILE or set COMPACTOR_TOKEN (make one with `openssl rand -hex 32`), "
            "or bind 127.0.0.1"
        )
    options: dict[str, Any] = {}
    if people is not None:
        options["token_verifier"] = people
        # The people's tokens written into content are redacted like any credential.
        for digest in people.digests:
            store.add_known_secret(digest)
        # No OAuth server and no protected-resource metadata: a static token is the whole story.
        issuer = public_url or f"http://{url_host(host)}:{port}"
        options["auth"] = AuthSettings(issuer_url=AnyHttpUrl(issuer), resource_server_url=None)
    mcp = build_server(store, scope_fixed=scope_fixed, **options)
    # JSON replies to POSTs rather than a one-event SSE stream each: the SDK's floor is ~2 ms a
    # call instead of ~8.5 (bench/team.py). Requests to the client (roots) use the GET stream.
    app = mcp.streamable_http_app(
        streamable_http_path=C.HTTP_PATH,
        host=host,
        json_response=True,
        max_request_body_size=MAX_BODY_BYTES,
        transport_security=transport_security(host, port, allowed_hosts, public_url),
    )
    return BodyLimit(app)


async def serve_http(
    store: Store,
    *,
    host: str,
    port: int,
    token: str | None,
    snapshot_interval: float = C.SNAPSHOT_INTERVAL_S,
    scope_fixed: bool = False,
    allowed_hosts: Sequence[str] = (),
    public_url: str | None = None,
    tokens_file: Path | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (uvicorn handles them), snapshotting in the background and
    once more on the way out. Says on stderr where it listens, what memory it serves and
    whether a token is required."""
    import uvicorn

    people = PeopleVerifier.from_options(token, tokens_file)
    app = http_app(
        store,
        host=host,
        port=port,
        token=token,
        scope_fixed=scope_fixed,
        allowed_hosts=allowed_hosts,
        public_url=public_url,
        people=people,
    )
    PROCESS.start_done()
    kept = store.status().persistence
    where = (
        f"database {kept['database']}"  # display_url: the password is never shown
        if kept.get("database")
        else f"state dir {kept['state_dir']}"
        if kept.get("state_dir")
        else "memory only (nothing is saved)"
    )
    # No access log: request lines are noise here, and nothing about a request is worth keeping.
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down gracefully on SIGTERM/SIGINT, then raises the signal again under the
        # handler that was there before it: that one only asks uvicorn to stop (a signal before
        # uvicorn takes them over stops it as well), so the final snapshot below runs and the
        # exit is clean.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: setattr(server, "should_exit", True))

    async def announce() -> None:
        """Say where it listens once it does: a client that waits for this line can connect."""
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.01)
        print(
            f"compactor: serving MCP at http://{url_host(host)}:{port}{C.HTTP_PATH}"
            + (f" (public URL {public_url})" if public_url else "")
            + f"; memory: {where}; "
            + (
                f"a bearer token is required ({len(people.digests)} people)"
                if people is not None and tokens_file is not None
                else "a bearer token is required"
                if people is not None
                else "no token required (loopback only)"
            ),
            file=sys.stderr,
            flush=True,
        )

    try:
        anyio.to_thread.current_default_thread_limiter().total_tokens = WORKER_THREADS
        async with anyio.create_task_group() as tg:
            tg.start_soon(announce)
            tg.start_soon(anyio.to_thread.run_sync, store.warm_up)  # as it starts, not in the first store
            if store.persistent:
                tg.start_soon(snapshots, store, snapshot_interval)
            if people is not None and tokens_file is not None:
                tg.start_soon(reload_on_hangup, people, store)
            await server.serve()
            tg.cancel_scope.cancel()
    finally:
        store.close_with_snapshot()


async def reload_on_hangup(people: PeopleVerifier, store: Store) -> None:
    """Re-read the tokens file on each SIGHUP: a removed entry's token opens nothing from the
    next request on."""
    with anyio.open_signal_receiver(signal.SIGHUP) as signals:
        async for _ in signals:
            if await anyio.to_thread.run_sync(people.reload):
                for digest in people.digests:
                    store.add_known_secret(digest)
