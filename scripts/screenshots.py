"""Screenshots of every page of `compactor ui`, at desktop and phone widths, in the system's
Chromium (no browser download): `python scripts/screenshots.py [--out DIR] [--state-dir DIR]`.
Without --state-dir it fills a fresh one with demo memory first. Not test fixtures: look at them."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compactor.store import Store  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def demo(state_dir: Path) -> None:
    """A memory with every kind of thing a page shows: types, tags, pins, summaries, a forget."""
    store = Store(state_dir=state_dir, budget=6_000)
    topics = ["parser", "lexer", "cache", "deploy", "auth", "billing"]
    try:
        for i in range(90):
            topic = topics[i % len(topics)]
            store.store(
                f"Decision {i}: the {topic} keeps its state per request; retry the {topic} step on timeout. "
                + f"Notes on the {topic}: "
                + "details " * 40,
                tags=[topic],
                importance=3 + i % 6,
            )
        store.store("Traceback (most recent call last):\n  File \"app.py\", line 3\nKeyError: 'user'", tags="error")
        store.store("$ sed -n 1,40p src/parser.py\ndef parse(text):\n    return tokens(text)\n", tags="parser")
        pinned = store.store("Always run scripts/test before pushing; CI runs the same script.", importance=9)
        store.pin(pinned.item.id)
        store.compact()
        gone = store.store("a scratch note to forget", tags="scratch")
        store.forget(gone.item.id)
    finally:
        store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "compactor-ui-shots")
    ap.add_argument("--state-dir", type=Path)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="compactor-ui-"))
    state_dir = args.state_dir or work / "state"
    if args.state_dir is None:
        demo(state_dir)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "compactor", "ui", "--state-dir", str(state_dir), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(base + "/static/ui.css", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        args.out.mkdir(parents=True, exist_ok=True)
        reader = Store(state_dir=state_dir)
        try:
            node = reader.roots()[0].id if reader.roots() else None
            raw = next(it.id for it in reader.iter_items() if not it.depth and it.parents) if node else None
        finally:
            reader.close()
        pages = {"overview": "/", "search": "/search?q=parser+retry", "tree": "/tree", "ledger": "/ledger"}
        if raw:
            pages["item"] = f"/item/{raw}"
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                str(work / "profile"), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            for width_name, (w, h) in WIDTHS.items():
                page = browser.new_page()
                page.set_viewport_size({"width": w, "height": h})
                for name, path in pages.items():
                    page.goto(base + path)
                    if name == "tree":
                        page.locator("details[data-node] > summary").first.click()
                        page.wait_for_selector("details[data-loaded] ul.kids li a.id")
                    shot = args.out / f"{name}-{width_name}.png"
                    page.screenshot(path=str(shot), full_page=True)
                    print(shot)
                page.close()
            # The README's picture: the top of the overview, small.
            page = browser.new_page()
            page.set_viewport_size({"width": 1000, "height": 620})
            page.goto(base + "/")
            shot = args.out / "readme-overview.png"
            page.screenshot(path=str(shot))
            print(shot)
            page.close()
            browser.close()
    finally:
        proc.terminate()
        proc.wait(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
