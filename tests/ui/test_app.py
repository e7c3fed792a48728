"""`compactor ui` over plain HTTP: the pages, the actions through the Store, and the guards
(Host, token, same origin, CSRF) that keep another site from reading or changing memory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from compactor import constants as C
from compactor.cli import build_parser, main
from compactor.errors import InvalidArgumentError, NotFoundError
from compactor.store import Store
from compactor.ui import UIOptions, ui_app
from compactor.ui import pages as P
from compactor.ui.app import allowed_hosts, newest
from tests.conftest import FakeClock

PORT = 8766
BASE = f"http://127.0.0.1:{PORT}"
ORIGIN = {"origin": BASE}


@pytest.fixture
def mem(state_dir: Path) -> Iterator[Store]:
    s = Store(state_dir=state_dir)
    yield s
    s.close()


@pytest.fixture
def client(mem: Store, state_dir: Path) -> Iterator[TestClient]:
    app = ui_app(mem, UIOptions(host="127.0.0.1", port=PORT, token=None, source=str(state_dir), state_dir=state_dir))
    with TestClient(app, base_url=BASE, follow_redirects=False) as c:
        yield c


def csrf(client: TestClient, path: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(path).text)
    assert found, "no form on the page"
    return found.group(1)


def test_every_page_renders_what_memory_holds(client: TestClient, mem: Store):
    a = mem.store("the parser retries on timeout", tags="parser").item
    page = client.get("/")
    assert page.status_code == 200
    assert a.id in page.text and "the parser retries on timeout" in page.text
    assert "Content-Security-Policy" in page.headers
    hits = client.get("/search", params={"q": "parser"})
    assert "<mark>parser</mark>" in hits.text and a.id in hits.text
    item = client.get(f"/item/{a.id}")
    assert "the parser retries on timeout" in item.text and "stored" in item.text
    assert client.get("/tree").status_code == 200
    assert client.get("/ledger").status_code == 200
    assert client.get("/static/ui.css").headers["content-type"].startswith("text/css")


def test_a_change_made_elsewhere_shows_without_a_restart(client: TestClient, state_dir: Path):
    other = Store(state_dir=state_dir)
    try:
        b = other.store("stored by another process after the page started").item
    finally:
        other.close()
    assert b.id in client.get("/").text


def test_an_item_holding_a_script_renders_as_text(client: TestClient, mem: Store):
    it = mem.store("<script>alert(1)</script> and <img src=x onerror=alert(2)>", tags="xss").item
    for path in ("/", f"/item/{it.id}", "/search?q=alert"):
        text = client.get(path).text
        assert "<script>alert(1)" not in text and "<img src=x" not in text, path
        assert "&lt;script&gt;" in text, path


def test_a_foreign_host_is_refused_even_for_reading(client: TestClient, mem: Store):
    mem.store("secret plans")
    # A DNS-rebinding page reaches 127.0.0.1 under its own name.
    page = client.get("/", headers={"host": f"evil.example:{PORT}"})
    assert page.status_code == 421
    assert "secret plans" not in page.text


def test_a_cross_site_post_changes_nothing(client: TestClient, mem: Store):
    it = mem.store("keep me unpinned").item
    token = csrf(client, f"/item/{it.id}")
    for headers in (
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {},  # neither Origin nor Referer
        {"origin": BASE, "sec-fetch-site": "cross-site"},
        {"referer": "http://evil.example/page"},
    ):
        reply = client.post(f"/item/{it.id}/pin", data={"csrf": token}, headers=headers)
        assert reply.status_code == 403, headers
    assert not mem.get(it.id).pinned


def test_an_action_without_the_csrf_token_is_refused(client: TestClient, mem: Store):
    it = mem.store("keep me").item
    for data in ({}, {"csrf": "wrong"}, {"csrf": "", "confirm": "yes"}):
        assert client.post(f"/item/{it.id}/forget", data=data, headers=ORIGIN).status_code == 403
    assert mem.get(it.id).content == "keep me"


def test_pin_unpin_and_restore_go_through_the_store(client: TestClient, mem: Store):
    it = mem.store("pin me").item
    token = csrf(client, f"/item/{it.id}")
    reply = client.post(f"/item/{it.id}/pin", data={"csrf": token}, headers=ORIGIN)
    assert reply.status_code == 303 and reply.headers["location"] == f"/item/{it.id}?done=pin"
    assert mem.get(it.id).pinned
    assert "Pinned" in client.get(reply.headers["location"]).text
    client.post(f"/item/{it.id}/unpin", data={"csrf": token}, headers=ORIGIN)
    assert not mem.get(it.id).pinned
    # Restoring an active item is a no-op, as the tool's.
    assert client.post(f"/item/{it.id}/restore", data={"csrf": token}, headers=ORIGIN).status_code == 303


def test_forget_asks_first_and_says_what_it_removes(client: TestClient, mem: Store):
    it = mem.store("forget this text").item
    token = csrf(client, f"/item/{it.id}")
    ask = client.post(f"/item/{it.id}/forget", data={"csrf": token}, headers=ORIGIN)
    assert ask.status_code == 200 and "for good" in ask.text and "forget this text" in ask.text
    assert mem.get(it.id)  # asking changed nothing
    done = client.post(f"/item/{it.id}/forget", data={"csrf": token, "confirm": "yes"}, headers=ORIGIN)
    assert done.status_code == 303 and done.headers["location"].startswith("/ledger")
    with pytest.raises(NotFoundError):
        mem.get(it.id)
    ledger = client.get("/ledger").text
    assert it.id in ledger and "forget this text" not in ledger


def test_an_action_fails_with_the_stores_error(client: TestClient, mem: Store):
    it = mem.store("a raw item").item
    token = csrf(client, f"/item/{it.id}")
    reply = client.post(f"/item/{it.id}/dissolve", data={"csrf": token}, headers=ORIGIN)
    assert reply.status_code == 400
    assert f"{it.id} is not a summary node; only summaries can be dissolved." in reply.text
    missing = client.post("/item/nope/pin", data={"csrf": token}, headers=ORIGIN)
    assert missing.status_code == 404 and "No item with id" in missing.text


def test_long_content_is_paged_as_get_pages_it(client: TestClient, mem: Store):
    words = " ".join(f"w{i}" for i in range(C.GET_PAGE_CHARS // 3))
    it = mem.store(words).item
    first = client.get(f"/item/{it.id}").text
    later = re.search(rf'href="/item/{it.id}\?offset=(\d+)">later', first)
    assert later, "no link to the next part"
    end = int(later.group(1))
    assert 0 < end < len(words)
    second = client.get(f"/item/{it.id}", params={"offset": end}).text
    assert words[end : end + 50] in second and "earlier" in second
    assert client.get(f"/item/{it.id}", params={"offset": len(words) + 1}).status_code == 400


def test_lists_are_paged(client: TestClient, mem: Store):
    ids = [mem.store(f"note number {i}").item.id for i in range(60)]
    first = client.get("/").text
    assert ids[-1] in first and ids[0] not in first
    older = client.get("/", params={"offset": 50}).text
    assert ids[0] in older and ids[-1] not in older


def test_search_the_ledger_and_the_tree_are_paged_with_their_query(
    client: TestClient, mem: Store, monkeypatch: pytest.MonkeyPatch
):
    for i in range(45):
        mem.store(f"alpha finding number {i} " + "detail " * (i % 7), tags="alpha")
    first = client.get("/search", params={"q": "alpha", "tags": "alpha"}).text
    assert first.count('class="hit"') == 20 and "Hits 1 to 20 for “alpha” tagged alpha" in first
    nxt = re.search(r'rel="next" href="(/search\?[^"]+)"', first)
    assert nxt and "q=alpha" in nxt.group(1) and "tags=alpha" in nxt.group(1)
    second = client.get(nxt.group(1).replace("&amp;", "&")).text
    assert "Hits 21 to 40" in second and 'rel="prev"' in second and 'start="21"' in second
    third = client.get("/search", params={"q": "alpha", "tags": "alpha", "offset": 40}).text
    assert third.count('class="hit"') == 5 and 'rel="next"' not in third

    for it in mem.list_items(limit=30).items:
        mem.forget(it.id)
    ledger = client.get("/ledger").text
    assert ledger.count('<tr><td><code class="id">') == 25 and 'rel="next" href="/ledger?offset=25"' in ledger
    assert client.get("/ledger", params={"offset": 25}).text.count('<tr><td><code class="id">') == 5

    for i in range(80):
        mem.store(f"beta note {i}: " + "a longer body of words " * 10)
    mem.configure(token_budget=1_000)
    mem.compact()
    monkeypatch.setattr(P, "TREE_CHILDREN", 5)  # compaction makes nodes of up to 20 children
    node = max((it for it in mem.iter_items() if it.depth), key=lambda it: len(it.children))
    assert len(node.children) > 5
    tree = client.get("/tree", params={"root": node.id}).text
    assert f'rel="next" href="/tree?root={node.id}&amp;offset=5"' in tree
    assert 'rel="prev"' in client.get("/tree", params={"root": node.id, "offset": 5}).text
    item = client.get(f"/item/{node.id}").text
    assert f'href="/item/{node.id}?children=5"' in item and node.children[5] not in item
    later = client.get(f"/item/{node.id}", params={"children": 5}).text
    assert node.children[5] in later and f'href="/item/{node.id}?children=0"' in later


def test_a_sampled_overview_says_so(client: TestClient, mem: Store, monkeypatch: pytest.MonkeyPatch):
    from compactor.store import history
    from compactor.ui import app

    for i in range(30):
        mem.store(f"note {i}")
    assert "estimated from" not in client.get("/").text  # a small memory is read whole
    monkeypatch.setattr(app, "overview", lambda store: history.overview(store, sample=10))
    assert "estimated from an even sample of 10 of 30 items" in client.get("/").text


def test_the_newest_across_both_tiers_match_the_stores_merged_list(clock: FakeClock):
    store = Store(clock=clock)
    store.configure(auto_compact=False)
    for i in range(90):
        store.store(f"note {i} " + "word " * (5 + i % 40))
        if i % 30 == 29:  # interleave the tiers: compact, then some come back
            store.configure(token_budget=2_000)
            store.compact()
            store.configure(token_budget=100_000)
            archived = store.list_items(limit=5, tier="archived").items
            for it in archived[::2]:
                store.restore(it.id)
    merged = store.list_items(offset=0, limit=C.LIST_LIMIT_MAX, tier="all")
    assert store.status().archived_items and store.status().active_items
    for offset in range(merged.total + 2):
        for limit in (1, 7):
            items, total = newest(store, offset, limit)
            assert total == merged.total
            assert [it.id for it in items] == [it.id for it in merged.items[offset : offset + limit]], (offset, limit)
    store.close()


def test_off_loopback_needs_a_token(mem: Store, state_dir: Path):
    with pytest.raises(InvalidArgumentError, match="without a token"):
        ui_app(mem, UIOptions(host="0.0.0.0", port=PORT, token=None, source="", state_dir=state_dir))
    token = "t" * C.TOKEN_MIN_CHARS
    app = ui_app(mem, UIOptions(host="0.0.0.0", port=PORT, token=token, source="", state_dir=state_dir))
    with TestClient(app, base_url="http://10.1.2.3:8766", follow_redirects=False) as c:
        assert c.get("/").status_code == 401
        assert c.get("/", params={"token": "wrong"}).status_code == 401
        enter = c.get("/search", params={"token": token, "q": "x"})
        assert enter.status_code == 303 and enter.headers["location"] == "/search?q=x"
        assert c.get("/").status_code == 200  # the cookie carries it now


def test_allowed_hosts():
    assert allowed_hosts("127.0.0.1", 8766) == {"localhost:8766", "127.0.0.1:8766", "[::1]:8766"}
    assert allowed_hosts("::1", 80) >= {"[::1]:80", "localhost"}  # type: ignore[operator]
    assert allowed_hosts("0.0.0.0", 8766) is None


def test_the_command_refuses_another_host_without_a_token(state_dir: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["ui", "--state-dir", str(state_dir), "--host", "0.0.0.0"]) == 2
    assert "without a token" in capsys.readouterr().err


def test_the_port_parser_is_shared_and_only_the_page_takes_0(capsys: pytest.CaptureFixture[str]):
    # Serving on port 0 (and printing the port it got) is tests/system/test_ui_browser.py's fixture.
    assert build_parser().parse_args(["ui", "--port", "0"]).port == 0
    for argv, said in (
        # The page's own parser judges its --port, not the server's.
        (["ui", "--port", "65536"], "compactor ui: error: argument --port: must be from 0 to 65535"),
        (["ui", "--port", "x"], "expected a port number, got 'x'"),
        # The team server would not say which port the system picked.
        (["--transport", "streamable-http", "--port", "0"], "compactor: error: argument --port: must be from 1 to"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert said in capsys.readouterr().err, argv


def test_on_the_team_database(pg_url: str):
    agent = Store(database=pg_url)
    page_store = Store(database=pg_url)
    try:
        it = agent.store("team memory about the deploy").item
        options = UIOptions(host="127.0.0.1", port=PORT, token=None, source="db", state_dir=None, database=pg_url)
        app = ui_app(page_store, options)
        with TestClient(app, base_url=BASE, follow_redirects=False) as c:
            assert it.id in c.get("/").text
            later = agent.store("stored by the agent while the page runs").item
            assert later.id in c.get("/").text
            item = c.get(f"/item/{it.id}").text
            # The database's journal is read: each change with when it was written.
            assert re.search(r"<h3>Changes since the last snapshot</h3>.*<time [^>]*>20\d\d-.*stored", item, re.S)
            reply = c.post(f"/item/{it.id}/pin", data={"csrf": csrf(c, f"/item/{it.id}")}, headers=ORIGIN)
            assert reply.status_code == 303
        fresh = Store(database=pg_url)
        try:
            assert fresh.get(it.id).pinned
        finally:
            fresh.close()
    finally:
        page_store.close()
        agent.close()


def test_an_empty_memory_says_what_each_page_will_show(client: TestClient):
    assert "Nothing stored yet." in client.get("/").text
    assert "No summaries yet." in client.get("/tree").text
    assert "Nothing forgotten yet." in client.get("/ledger").text
    empty = client.get("/search").text
    assert "ranked as the agent's <code>query</code> tool ranks them" in empty and " autofocus>" in empty
    none = client.get("/search", params={"q": "parser", "tags": "x"}).text
    assert "Nothing in memory matches “parser” tagged x. Try fewer tags." in none
    assert " autofocus" not in none  # a page of results is for reading: no keyboard over it on a phone


def test_the_tree_says_what_each_summary_condenses_and_a_dissolve_says_so(client: TestClient, mem: Store):
    for i in range(30):
        mem.store(f"step {i} of the migration: copy table t{i} q{i * 7} r{i * 13}; notes z{i} " * 3)
    mem.configure(token_budget=1_000)
    mem.compact()
    node = next(r for r in mem.roots() if r.depth == 1)
    kids = [mem.get(c) for c in node.children]
    stands = f"{len(kids)} children · {sum(k.content_tokens for k in kids):,} → {node.view_tokens:,} tokens"
    assert stands in client.get("/tree").text
    assert stands in client.get("/tree", params={"root": node.id}).text
    # A node's headline is its first child's line, not the "[d1 summary of ...]" header.
    assert f"{node.content.splitlines()[1][2:].split(') ', 1)[1][:40]}" in client.get("/tree").text
    reply = client.post(f"/item/{node.id}/dissolve", data={"csrf": csrf(client, f"/item/{node.id}")}, headers=ORIGIN)
    assert reply.status_code == 303
    assert (
        f"Dissolved: its {len(kids)} children stand for themselves again." in client.get(reply.headers["location"]).text
    )


def test_the_ledger_says_why_in_words(client: TestClient, mem: Store):
    it = mem.store("forget me").item
    mem.forget(it.id)
    page = client.get("/ledger").text
    assert f'<code class="id">{it.id}</code>' in page and "forgotten on request" in page


def test_the_ledger_says_who_forgot_where_a_person_did(client: TestClient, mem: Store):
    from compactor.store.access import Caller

    mine, anyones = mem.store("forget me, alice").item, mem.store("forget me too").item
    with mem.serving(caller=Caller.of("alice", ["*"], write=True)):
        mem.forget(mine.id)
    mem.forget(anyones.id)
    page = client.get("/ledger").text
    assert "<th scope=col>by</th>" in page
    assert f'<code class="id">{mine.id}</code>' in page and "<td>alice</td>" in page
    assert "<td>\u2014</td>" in page


def test_a_hit_found_by_its_question_links_to_it(client: TestClient, mem: Store):
    question = mem.store("Mia: How did the home visit for the rescue dog go?").item
    reply = mem.store("Jon: Bernadette came round for the visit and checked the garden.").item
    page = client.get("/search", params={"q": "what happened at the home visit for the dog"}).text
    first = page.index(f"/item/{reply.id}")
    assert first < page.index(f"/item/{question.id}")
    assert f'answers <a class="id" href="/item/{question.id}"' in page[first:]
