"""Screenshots of every page of `compactor ui`, at desktop and phone widths, in the system's
Chromium (no browser download): `python scripts/screenshots.py [--out DIR] [--state-dir DIR]`.

Without --state-dir it fills a fresh one with demo memory first: three days of a team's notes
(stored by alice, changed by bob, read by carol, as a team server's tokens file names them),
compacted, one forgotten; and shoots an empty memory's pages too. Also the forget
confirmation, and the overview in dark mode. Not test fixtures: look at them."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compactor.store import Store  # noqa: E402
from compactor.store.access import Caller  # noqa: E402

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
PEOPLE = {name: Caller.of(name, ["*"], write=name != "carol") for name in ("alice", "bob", "carol")}
DEMO_SPAN_S = 3 * 86_400  # the demo's notes arrive over three days, ending now


def demo(state_dir: Path) -> str:
    """A memory with every kind of thing a page shows: types, tags, pins, summaries, a forget,
    people; the id of the item to shoot (compacted, then changed by bob and read by carol)."""
    now = [time.time() - DEMO_SPAN_S]
    store = Store(state_dir=state_dir, budget=6_000, clock=lambda: now[0])
    store.configure(auto_compact=False)
    topics = ["parser", "lexer", "cache", "deploy", "auth", "billing"]
    try:
        with store.serving(caller=PEOPLE["alice"]):
            for i in range(90):
                now[0] += DEMO_SPAN_S * 0.6 / 90
                topic = topics[i % len(topics)]
                store.store(
                    f"Decision {i}: the {topic} keeps its state per request; retry the {topic} step on timeout. "
                    + f"Notes on the {topic}: "
                    + "details " * 40,
                    tags=[topic],
                    importance=3 + i % 6,
                )
            store.compact()
        with store.serving(caller=PEOPLE["bob"]):
            for i in range(20):
                now[0] += DEMO_SPAN_S * 0.3 / 20
                store.store(f"Review note {i}: the {topics[i % 6]} change needs a test for the empty input case.")
            store.store("Traceback (most recent call last):\n  File \"app.py\", line 3\nKeyError: 'user'", tags="error")
            store.store("$ sed -n 1,40p src/parser.py\ndef parse(text):\n    return tokens(text)\n", tags="parser")
            pinned = store.store("Always run scripts/test before pushing; CI runs the same script.", importance=9)
            store.pin(pinned.item.id)
            store.compact()
        with store.serving(caller=PEOPLE["alice"]):
            now[0] += 600
            gone = store.store("a scratch note to forget", tags="scratch")
            store.forget(gone.item.id)  # rewrites the snapshot: the journal starts again here
        store.configure(auto_compact=True)  # as a server runs: the overview marks where compaction starts
        shown = next(
            it
            for it in store.iter_items()
            if not it.depth and it.parents and it.tier == "archived" and not it.merged_into
        )
        now[0] = time.time() - 1_800
        with store.serving(caller=PEOPLE["bob"]):
            store.update(shown.id, importance=8)
        with store.serving(caller=PEOPLE["carol"]):
            now[0] += 600
            store.query("parser retry")
        return shown.id
    finally:
        store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serving(state_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "compactor", "ui", "--state-dir", str(state_dir), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(base + "/static/ui.css", timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, base


def shoot(browser: Any, base: str, pages: dict[str, str], out: Path, widths: dict[str, tuple[int, int]]) -> None:
    for width_name, (w, h) in widths.items():
        page = browser.new_page()
        page.set_viewport_size({"width": w, "height": h})
        for name, path in pages.items():
            page.goto(base + path)
            if name == "tree":
                page.locator("details[data-node] > summary").first.click()
                page.wait_for_selector("details[data-loaded] ul.kids li a.id")
            if name == "forget-confirm":
                page.get_by_role("button", name="Forget…").click()
                page.wait_for_selector("text=Forget it for good")
                page.wait_for_load_state("load")  # its stylesheet applied
            shot = out / f"{name}-{width_name}.png"
            page.screenshot(path=str(shot), full_page=True)
            print(shot)
        page.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "compactor-ui-shots")
    ap.add_argument("--state-dir", type=Path)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="compactor-ui-"))
    state_dir = args.state_dir or work / "state"
    shown = demo(state_dir) if args.state_dir is None else None
    if shown is None:
        reader = Store(state_dir=state_dir)
        try:
            shown = next((it.id for it in reader.iter_items() if not it.depth and it.parents), None)
        finally:
            reader.close()
    args.out.mkdir(parents=True, exist_ok=True)
    pages = {"overview": "/", "search": "/search?q=parser+retry", "tree": "/tree", "ledger": "/ledger"}
    if shown:
        pages["item"] = f"/item/{shown}"
        pages["forget-confirm"] = f"/item/{shown}"
    servers = [serving(state_dir)]
    if args.state_dir is None:
        servers.append(serving(work / "empty"))
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(
                str(work / "profile"), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
            )
            base = servers[0][1]
            shoot(browser, base, pages, args.out, WIDTHS)
            if len(servers) > 1:
                empty = {"empty-overview": "/", "empty-search": "/search?q=parser", "empty-tree": "/tree"}
                shoot(browser, servers[1][1], {**empty, "empty-ledger": "/ledger"}, args.out, WIDTHS)
            # Dark mode (the system's preference): the overview, at desktop width.
            page = browser.new_page()
            page.emulate_media(color_scheme="dark")
            page.set_viewport_size({"width": 1280, "height": 900})
            page.goto(base + "/")
            shot = args.out / "overview-dark.png"
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
        for proc, _ in servers:
            proc.terminate()
            proc.wait(20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
