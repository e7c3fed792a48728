"""`compactor ui`: a local web page to see and steer memory (an adapter, like `mcp` and `cli`).

`app.py` holds the routes and the guards (Host, token, same origin, CSRF), `pages.py` renders
them from the Store's public reads, `html.py` escapes, `serve.py` runs them under uvicorn. The
assets in `static/` ship in the package: no build step, no CDN."""

from __future__ import annotations

from .app import UIOptions, ui_app
from .serve import serve_ui

__all__ = ["UIOptions", "serve_ui", "ui_app"]
