"""recall's layout and what it ranks (ISSUE 19, ISSUE 17 point 5): over stdio (what a real client
reads), through the SDK's in-memory client, and on the Store."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from compactor import constants as C
from compactor.content.tokens import default_counter
from compactor.mcp import build_server
from compactor.store import Store
from compactor.store.tuning import Tuning
from tests.conftest import FakeClock
from tests.support.recall_layout import groups_of
from tests.support.stdio_client import StdioServer


@pytest.mark.slow
def test_recall_layout_over_stdio() -> None:
    with StdioServer() as srv:
        srv.ok("store", content="Always run the linter before committing.", pinned=True)
        for i in range(150):
            srv.ok(
                "store",
                content=f"$ cat src/parser_{i % 40}.py\ndef parse_{i}(raw): return raw.split() # invoice case {i}",
            )
        r = srv.ok("recall", query="invoice parser")
        text = srv.call("recall", query="invoice parser")["content"][0]["text"]
    assert text == r["text"]
    groups = groups_of(r["text"])
    assert list(groups)[:3] == ["Pinned", "Related to the task", "Recent work"]
    ids = [it["id"] for it in r["items"]]
    assert ids == [i for v in groups.values() for i in v] and len(ids) == len(set(ids))
    # One entry per file: 40 files, each shown once (its newest view), the rest left out.
    assert len(ids) == 1 + 40 and r["more"] == 150 - 40
    assert r["tokens"] <= C.RECALL_TOKENS_DEFAULT


def session(store: Store, clock: FakeClock) -> dict[str, str]:
    """A small coding session: reads, a failing test fixed later, an error still open, a decision."""
    steps = {
        "read_old": "$ cat shop/cart.py\ndef total(cart): return sum(cart)  # the old view",
        "fail_fixed": "$ pytest tests/test_cart.py\n[exit 1]\nE   AssertionError: assert 3 == 4",
        "decision": "Decided: keep totals in cents (integers) instead of floats, to avoid rounding errors.",
        "read_new": "$ sed -n 1,40p shop/cart.py\ndef total(cart): return sum(i.cents for i in cart)  # newer",
        "edit": "sed -i 's/sum(cart)/sum(i.cents for i in cart)/' shop/cart.py",
        "pass": "$ pytest tests/test_cart.py\n4 passed in 0.02s",
        "open": "$ python -m shop.checkout\nTraceback (most recent call last):\nKeyError: 'currency'",
        "rerun_bare": "cat shop/cart.py",
        "retry_bare": "python -m shop.checkout",
        "note": "Checked the invoice importer: it reads cents already.",
    }
    ids = {}
    for name, content in steps.items():
        clock.advance(5)
        ids[name] = store.store(content).item.id
    return ids


def test_recall_shows_open_errors_and_the_newest_view_of_each_file(store: Store, clock: FakeClock) -> None:
    ids = session(store, clock)
    r = store.recall(query="cart total rounding")
    groups = groups_of(r.text)
    shown = [i for v in groups.values() for i in v]
    # The error nothing resolved is an open error (running its command again, with no output
    # yet, does not resolve it); the failure a later run passed is not.
    assert groups["Open errors"] == [ids["open"]]
    assert ids["pass"] in shown and ids["fail_fixed"] in shown  # settled, so not an open error
    # shop/cart.py is shown once, by its newest view, even where the task's words match the
    # older one; a bare command typed after it (no output yet) does not stand in for the view.
    assert ids["read_new"] in shown
    assert ids["read_old"] not in shown and ids["rerun_bare"] not in shown and ids["retry_bare"] not in shown
    assert ids["edit"] in shown  # an edit is not a view of the file: listed on its own
    assert ids["decision"] in shown


def test_recall_open_errors_newest_first_within_their_share(store: Store, clock: FakeClock) -> None:
    errors = []
    for i in range(40):
        clock.advance(1)
        failure = f"$ python tools/job_{i}.py\nTraceback (most recent call last):\nValueError: {i}"
        errors.append(store.store(failure).item.id)
    r = store.recall()
    open_errors = groups_of(r.text)["Open errors"]
    assert open_errors == errors[::-1][: len(open_errors)] and 0 < len(open_errors) <= 20
    share = sum(default_counter().count(ln) for ln in r.lines[: len(open_errors)])
    assert share <= C.RECALL_TOKENS_DEFAULT * Tuning().recall_errors_share


@pytest.mark.parametrize("cap", [C.RECALL_TOKENS_MIN, 300, C.RECALL_TOKENS_DEFAULT, 6_000])
def test_recall_never_passes_its_cap(store: Store, clock: FakeClock, cap: int) -> None:
    ids = session(store, clock)
    for i in range(400):
        clock.advance(1)
        store.store(f"$ cat src/mod_{i}.py\n" + "x = 1\n" * 20, tags=["observation"])
    store.configure(recall_tokens=cap)
    for query in (None, "cart total"):
        r = store.recall(query=query)
        assert r.tokens == default_counter().count(r.text) <= cap
        groups_of(r.text)
    if cap >= C.RECALL_TOKENS_DEFAULT:
        assert r.tokens >= cap * 0.8  # with material to fill it, the cap is used
    if cap == C.RECALL_TOKENS_DEFAULT:
        # Older than the recent work shown, the decision and the open error still have their groups.
        groups = groups_of(store.recall().text)
        assert groups["Decisions"] == [ids["decision"]] and groups["Open errors"] == [ids["open"]]
        assert ids["decision"] not in groups["Recent work"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_recall_groups_through_the_client(store: Store, clock: FakeClock) -> None:
    ids = session(store, clock)
    async with Client(build_server(store), mode="legacy") as c:
        with anyio.fail_after(10):
            res = await c.call_tool("recall", {"query": "cart total rounding"})
    assert not res.is_error and res.structured_content is not None
    r = res.structured_content
    groups = groups_of(r["text"])
    assert groups["Open errors"] == [ids["open"]]
    assert [it["id"] for it in r["items"]] == [i for v in groups.values() for i in v]
    assert r["tokens"] <= C.RECALL_TOKENS_DEFAULT


@pytest.mark.parametrize(
    ("command", "subject"),
    [
        ("cat a.py", "file a.py"),
        ("cat a.py 2>&1", "file a.py"),
        ("cd /testbed && cat x/y.py", "file x/y.py"),
        ("nl -ba lib/m.py | sed -n '1,5p'", "file lib/m.py"),
        ("sed -n '240,260p' a/b.py", "file a/b.py"),
        ("head -n 50 src/x.py", "file src/x.py"),
        ("cat <<'EOF' > rep.py", "file rep.py"),
        ("cat > a.py <<EOF", "file a.py"),
        # Not the whole text of one file: an in-place edit, an append, a copy, two files, a search, a run.
        ("sed -i 's/a/b/' a.py", "sed -i 's/a/b/' a.py"),
        ("cat <<EOF >> a.py", "cat <<eof >> a.py"),
        ("cat a.py > b.py", "cat a.py > b.py"),
        ("cat a.py b.py", "cat a.py b.py"),
        ("grep -n foo a.py", "grep -n foo a.py"),
        ("python  a.py", "python a.py"),
    ],
)
def test_what_an_entry_is_a_view_of(store: Store, command: str, subject: str) -> None:
    """A file's views (its readers' outputs, a here-document that wrote it) are one subject; any
    other command is its own; recall shows each subject once, by its newest view."""
    from compactor.store.recall import _subject

    output = store.store(f"$ {command}\nline one\nline two").item
    assert _subject(output) == subject
    assert _subject(store.store(command).item) == subject  # the command alone: the same subject
    assert _subject(store.store("Two notes that open alike\nare two notes.").item) == ""


def test_failures_of_one_command_are_told_apart_by_their_exception(store: Store, clock: FakeClock) -> None:
    """One entry per command, except that its failures with different exception lines are
    different facts: each is shown (by its newest occurrence), and a later success settles all."""
    run = '$ python reproduce.py\nTraceback (most recent call last):\n  File "x.py", line {n}\n{error}'
    first = store.store(run.format(n=1, error="TypeError: unsupported type at 0x7f01")).item.id
    clock.advance(1)
    other = store.store(run.format(n=2, error="KeyError: 'currency'")).item.id
    clock.advance(1)
    again = store.store(run.format(n=3, error="TypeError: unsupported type at 0x7f99")).item.id
    groups = groups_of(store.recall().text)
    assert groups["Open errors"] == [again, other] and first not in str(groups)
    clock.advance(1)
    store.store("$ python reproduce.py\nall good")
    groups = groups_of(store.recall().text)
    assert "Open errors" not in groups and {again, other} <= set(groups["Recent work"])


def test_recall_counts_what_it_left_out_in_words_that_agree(store: Store, clock: FakeClock) -> None:
    """One item left out is "1 active item", not "1 active items"."""
    store.store("$ cat shop/cart.py\ndef total(cart): return sum(cart)")
    clock.advance(1)
    store.store("$ sed -n 1,40p shop/cart.py\ndef total(cart): return sum(i.cents for i in cart)")
    text = store.recall().text
    assert "Left out: 1 active item. Reach it with query(" in text
    clock.advance(1)
    store.store("$ head shop/cart.py\ndef total(cart): return round(sum(i.cents for i in cart))")
    assert "Left out: 2 active items. Reach them with query(" in store.recall().text


def _error_then_its_fix(store: Store) -> str:
    error = store.store(
        '$ pytest tests/test_money.py\nTraceback (most recent call last):\n  File "money.py", line 9\n'
        "KeyError: 'currency'"
    ).item.id
    store.store("Fixed KeyError: 'currency' in parse_config by defaulting to USD; tests pass now.")
    return error


def _open_errors(text: str) -> str:
    if "Open errors" not in text:
        return ""
    return text.split("Open errors", 1)[1].split("\n\n", 1)[0].split(":\n", 1)[-1].split("\nRecent", 1)[0]


def test_an_error_whose_fix_was_stored_is_not_open(store: Store):
    error = _error_then_its_fix(store)
    assert error not in _open_errors(store.recall().text)
    other = store.store("$ make deploy\nValueError: no region").item.id  # no fix for this one
    assert other in _open_errors(store.recall().text)


@pytest.mark.slow
def test_an_error_whose_fix_was_stored_is_not_open_over_the_sdk_and_stdio(store: Store):
    import anyio
    from mcp import Client

    from compactor.mcp import build_server
    from tests.support.stdio_client import StdioServer

    error = _error_then_its_fix(store)

    async def go() -> str:
        async with Client(build_server(store), mode="legacy") as c:
            res = await c.call_tool("recall", {})
            return res.content[0].text  # type: ignore[union-attr]

    assert error not in _open_errors(anyio.run(go))
    with StdioServer() as server:
        error = server.ok(
            "store", content="$ pytest tests/test_money.py\nTraceback (most recent call last):\nKeyError: 'currency'"
        )["id"]
        server.ok("store", content="Fixed KeyError: 'currency' in parse_config by defaulting to USD.")
        text = server.call("recall")["content"][0]["text"]
        assert error in text or "Recent" in text
        assert error not in _open_errors(text)
