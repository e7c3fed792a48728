"""`compactor ui` in a real browser (Debian's Chromium driven by Playwright, no browser download)
beside a real stdio server on the same state dir: what each page shows, searching, following
lineage, pinning and forgetting, and what memory holds afterwards; beside a team server with a
tokens file (on a state dir and on PostgreSQL), who stored and who changed an item; and the
accessibility basics of every page (a language, one h1, headings in order, a name for every
control)."""

from __future__ import annotations

import hashlib
import re
import secrets
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import server_command, server_env
from tests.support.stdio_client import StdioServer
from tests.system.test_http import call, connect
from tests.system.test_people import team_server

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


@contextmanager
def ui(*memory: str) -> Iterator[str]:
    """`compactor ui` on `memory` (--state-dir DIR or --database URL); yields its address."""
    # Port 0: the command picks a free port and prints its address first.
    proc = subprocess.Popen(
        server_command("ui", *memory, "--port", "0"),
        env=server_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        found = re.match(r"compactor ui: (http://127\.0\.0\.1:(\d+))/ ", first)
        assert found and found.group(2) != "0", (first, proc.stderr.read() if proc.stderr else "")
        url = found.group(1)
        urllib.request.urlopen(url + "/static/ui.css", timeout=10).close()
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


@pytest.fixture
def base(state_dir: Path, server: StdioServer) -> Iterator[str]:
    server.ok("store", content="first note, so the state dir exists")
    with ui("--state-dir", str(state_dir)) as url:
        yield url


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


# What every page must have, checked in the page as the browser built it.
A11Y_PROBLEMS = """() => {
  const out = [];
  if (!document.documentElement.lang) out.push("no lang attribute on <html>");
  const h1 = document.querySelectorAll("h1").length;
  if (h1 !== 1) out.push(h1 + " h1 headings");
  let last = 0;
  for (const h of document.querySelectorAll("h1, h2, h3, h4, h5, h6")) {
    const level = Number(h.tagName[1]);
    if (level > last + 1) out.push(h.tagName + " '" + h.textContent.trim() + "' skips a level after h" + last);
    last = level;
  }
  for (const el of document.querySelectorAll("input:not([type=hidden]), select, textarea")) {
    if (!(el.labels && el.labels.length) && !el.getAttribute("aria-label")) out.push("no label: " + el.outerHTML);
  }
  for (const el of document.querySelectorAll("button, a[href], summary")) {
    if (!el.textContent.trim() && !el.getAttribute("aria-label")) out.push("no name: " + el.outerHTML);
  }
  for (const el of document.querySelectorAll("[role=img]")) {
    if (!el.getAttribute("aria-label")) out.push("a picture without words: " + el.outerHTML.slice(0, 80));
  }
  return out;
}"""


def test_every_page_fits_a_phone_and_has_the_accessibility_basics(base: str, server: StdioServer, page: Any):
    it = server.ok("store", content="a long line " + "x" * 400, tags="phone")
    for i in range(30):
        server.ok("store", content=f"step {i} of the migration: copy table t{i} q{i * 7} r{i * 13}; notes z{i} " * 3)
    server.ok("configure", token_budget=1_000)
    server.ok("compact")
    node = page.context.request.get(base + "/tree").text()
    node_id = re.search(r'data-node="([^"]+)"', node)
    assert node_id, "the compaction made no summary"
    paths = ["/", "/search", "/search?q=line", f"/item/{it['id']}", f"/item/{node_id.group(1)}", "/tree"]
    paths += [f"/tree?root={node_id.group(1)}", "/ledger", "/item/nosuchid00"]
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 844})
        for path in [*paths, "forget"]:
            if path == "forget":  # the confirmation is the answer to a POST: reached by its button
                page.goto(f"{base}/item/{it['id']}")
                page.get_by_role("button", name="Forget…").click()
                page.get_by_role("button", name="Forget it for good").wait_for()
                # Its stylesheet too: measured before it applies, the page is laid out unstyled.
                page.wait_for_load_state("load")
            else:
                page.goto(base + path)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {width}px"
            assert page.get_by_role("navigation", name="Pages", exact=True).is_visible()
            assert page.evaluate(A11Y_PROBLEMS) == [], (path, width)
    page.goto(base + "/search")
    for label in ("Words", "Tags", "Scope"):
        assert page.get_by_label(label).count() == 1
    assert server.ok("get", id=it["id"])["id"] == it["id"]  # asking to forget changed nothing


def in_thread(work: Callable[[], Awaitable[Any]]) -> Any:
    """An async MCP client run to its end on a thread of its own (Playwright's sync API keeps
    an event loop on the test's thread)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = anyio.run(work)
        except BaseException as exc:
            out["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(120)
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.fixture(params=["state_dir", "database"])
def team_memory(request: pytest.FixtureRequest, tmp_path: Path) -> list[str]:
    if request.param == "database":
        return ["--database", request.getfixturevalue("pg_url")]
    return ["--state-dir", str(tmp_path / "state")]


def test_the_item_page_says_who_stored_and_who_changed_it(team_memory: list[str], tmp_path: Path, page: Any):
    tokens = {name: secrets.token_hex(32) for name in ("alice", "bob")}
    people = tmp_path / "tokens.toml"
    people.write_text(
        "\n".join(
            f'[[tokens]]\nname = "{name}"\ntoken_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
            'projects = ["*"]\naccess = "write"\n'
            for name, token in tokens.items()
        )
    )
    with team_server(team_memory, people) as (url, _):

        async def work() -> str:
            async with connect(url, tokens["alice"]) as alice:
                item_id = str((await call(alice, "store", content="the deploy key rotates monthly"))["id"])
            async with connect(url, tokens["bob"]) as bob:
                await call(bob, "pin", id=item_id)
            return item_id

        item_id = in_thread(work)
        with ui(*team_memory) as base:
            page.goto(f"{base}/item/{item_id}")
            facts = " ".join(page.locator("dl.facts").inner_text().split())
            assert re.search(r"stored 20\d\d-\S+ \S+ \(\d+s ago\) by alice", facts), facts
            assert "last changed by bob" in facts
            story, changes = (" ".join(h.inner_text().split()) for h in page.locator("ol.history").all())
            assert story.endswith("stored by alice")
            assert "pinned by bob" in changes and "stored by alice" in changes
            assert page.locator("ol.history strong.who", has_text="bob").count() == 1
