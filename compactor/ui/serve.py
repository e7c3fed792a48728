"""Running `compactor ui`: bind the socket (so port 0 picks a free one), print the address,
serve until Ctrl-C, then close the Store."""

from __future__ import annotations

import dataclasses
import logging
import socket
import sys

import uvicorn

from ..store import Store
from .app import UIOptions, ui_app

log = logging.getLogger(__name__)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on `host`:`port` (0: any free port). Raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve_ui(store: Store, options: UIOptions) -> None:
    """Serve the pages until interrupted; the address goes to stdout, the first line printed."""
    host = options.host
    sock = bind(host, options.port)
    actual = sock.getsockname()[1]
    app = ui_app(store, dataclasses.replace(options, port=actual))
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    print(f"compactor ui: http://{shown}:{actual}/ (Ctrl-C stops it)", flush=True)
    if options.token is not None:
        print("Open it once with ?token=YOUR_TOKEN added to the address.", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        print("compactor ui: stopped.", file=sys.stderr, flush=True)


__all__ = ["bind", "serve_ui"]
