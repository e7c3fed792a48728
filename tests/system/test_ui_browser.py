"""`compactor ui` in a real browser (Debian's Chromium driven by Playwright, no browser download)
beside a real stdio server on the same state dir: what each page shows, searching, following
lineage, pinning and forgetting, and what memory holds afterwards."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import server_command, server_env
from tests.support.stdio_client import StdioServer

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def server(state_dir: Path) -> Iterator[StdioServer]:
    srv = StdioServer("--state-dir", str(state_dir))
    yield srv
    srv.stop()


@pytest.fixture
def base(state_dir: Path, server: StdioServer) -> Iterator[str]:
    server.ok("store", content="first note, so the state dir exists")
    # Port 0: the command picks a free port and prints its address first.
    proc = subprocess.Popen(
        server_command("ui", "--state-dir", str(state_dir), "--port", "0"),
        env=server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    found = re.match(r"compactor ui: (http://127\.0\.0\.1:(\d+))/ ", first)
    assert found and found.group(2) != "0", (first, proc.stderr.read() if proc.stderr else "")
    url = found.group(1)
    urllib.request.urlopen(url + "/static/ui.css", timeout=10).close()
    yield url
    proc.terminate()
    proc.communicate(timeout=20)


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    assert shutil.which(CHROMIUM), "scripts/test installs chromium"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, args=ARGS, headless=True
        )
        ctx.set_default_timeout(15_000)
        p = ctx.new_page()
        dialogs: list[str] = []
        p.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        p.dialogs = dialogs
        yield p
        ctx.close()


def test_overview_shows_the_budget_and_items_stored_while_it_runs(base: str, server: StdioServer, page: Any):
    page.goto(base + "/")
    assert page.get_by_role("heading", name="Budget").is_visible()
    assert page.get_by_role("img", name="token budget used").count() == 1
    stored = server.ok("store", content="stored by the agent after the page opened", importance=8)
    page.reload()
    row = page.locator("table.items tr", has_text="stored by the agent after the page opened")
    assert row.locator("a.id").inner_text() == stored["id"]


def test_search_highlights_matches_and_leads_to_the_item(base: str, server: StdioServer, page: Any):
    hit = server.ok("store", content="the lexer drops a token at end of file", tags="lexer")
    server.ok("store", content="unrelated note on billing")
    page.goto(base + "/search")
    page.get_by_label("Words").fill("lexer token")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url("**/search?q=lexer+token*")
    first = page.locator("li.hit").first
    assert first.locator("a.id").inner_text() == hit["id"]
    assert {m.lower() for m in first.locator("mark").all_inner_texts()} >= {"lexer", "token"}
    assert "billing" not in page.locator("ol.hits").inner_text()
    first.locator("a.id").click()
    assert page.get_by_role("heading", level=1).inner_text().startswith(f"Item {hit['id']}")


def test_lineage_from_the_tree_down_to_an_item_and_back_up(base: str, server: StdioServer, page: Any):
    for i in range(40):
        text = f"step {i} of the migration: copy table t{i} q{i * 7} r{i * 13} and check its counts; notes z{i} "
        server.ok("store", content=text * 3)
    server.ok("configure", token_budget=1_000)
    server.ok("compact")
    page.goto(base + "/tree")
    node = page.locator("details[data-node]").first
    node_id = node.get_attribute("data-node")
    node.locator("summary").click()  # the script loads its children in place
    child = node.locator("ul.kids a.id").first
    child_id = child.inner_text()
    child.click()
    page.wait_for_url(f"**/item/{child_id}")
    page.locator("ol.lineage a.id", has_text=node_id).click()
    page.wait_for_url(f"**/item/{node_id}")
    assert page.locator("ul.lineage a.id", has_text=child_id).count() == 1
    assert node_id in server.ok("get", id=child_id)["parents"]


def test_pin_from_the_page_is_what_the_server_then_holds(base: str, server: StdioServer, page: Any):
    it = server.ok("store", content="pin this from the browser")
    page.goto(f"{base}/item/{it['id']}")
    page.get_by_role("button", name="Pin").click()
    assert page.get_by_role("status").inner_text().startswith("Pinned")
    assert server.ok("get", id=it["id"])["pinned"] is True
    page.get_by_role("button", name="Unpin").click()
    assert server.ok("get", id=it["id"])["pinned"] is False


def test_forget_asks_then_removes_for_good(base: str, server: StdioServer, page: Any):
    it = server.ok("store", content="a scratch note to forget")
    page.goto(f"{base}/item/{it['id']}")
    page.get_by_role("button", name="Forget…").click()
    assert "deletes the item for good" in page.locator("main").inner_text()
    assert server.ok("get", id=it["id"])["id"] == it["id"]  # asking changed nothing
    page.get_by_role("button", name="Forget it for good").click()
    page.wait_for_url("**/ledger*")
    assert it["id"] in page.locator("table").inner_text()
    assert "a scratch note to forget" not in page.content()
    gone = server.call("get", id=it["id"])
    assert gone.get("isError")


def test_a_script_in_an_item_is_shown_as_text(base: str, server: StdioServer, page: Any):
    it = server.ok("store", content="<script>alert(1)</script> stored by a hostile tool output")
    for path in ("/", f"/item/{it['id']}", "/search?q=alert"):
        page.goto(base + path)
        assert "<script>alert(1)</script>" in page.locator("main").inner_text(), path
    page.wait_for_timeout(200)
    assert page.dialogs == []


def test_pages_fit_a_phone_and_name_their_controls(base: str, server: StdioServer, page: Any):
    it = server.ok("store", content="a long line " + "x" * 400, tags="phone")
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/", "/search?q=line", f"/item/{it['id']}", "/tree", "/ledger"):
        page.goto(base + path)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px"
        assert page.get_by_role("navigation", name="Pages").is_visible()
        assert page.locator("h1").count() == 1
    page.goto(base + "/search")
    for label in ("Words", "Tags", "Scope"):
        assert page.get_by_label(label).count() == 1
