"""File views (ISSUE 15.2): which tool outputs show a file's lines, and search that brings the
views of a named file back ahead of items that only mention it. Every case is written by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from compactor.mcp import build_server
from compactor.models import Item
from compactor.report import item_report
from compactor.search.view_query import parse_query
from compactor.search.views import FileView, ViewIndex, covers, detect, overlaps
from compactor.store import Store
from tests.support.sdk_calls import stored_and_ranked
from tests.support.stdio_client import StdioServer


def _numbered(first: int, last: int, width: int = 6) -> str:
    return "\n".join(f"{n:>{width}}\tline_{n} = value({n})" for n in range(first, last + 1))


# --- what is a view -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            "$ cat src/app/models.py\nimport os\n\nclass Model:\n    pass",
            FileView("cat", ("src/app/models.py",), (1, 0)),
        ),
        (
            "$ cat -n lib/util.py\n     1\timport re\n     2\t\n     3\tdef f():",
            FileView("cat", ("lib/util.py",), (1, 3)),
        ),
        (
            "$ sed -n '120,140p' pkg/core.py\n    def run(self):\n        pass",
            FileView("sed", ("pkg/core.py",), (120, 140)),
        ),
        ("$ sed -n 42p pkg/core.py\n    return x", FileView("sed", ("pkg/core.py",), (42, 42))),
        ("$ sed -n '10,+5p' pkg/core.py\nbody", FileView("sed", ("pkg/core.py",), (10, 15))),
        ("$ sed -n '/def run/,/return/p' pkg/core.py\n    def run(self):", FileView("sed", ("pkg/core.py",), None)),
        (
            f"$ nl -ba web/views.py | sed -n '580,600p'\n{_numbered(580, 600)}",
            FileView("nl", ("web/views.py",), (580, 600)),
        ),
        # The numbers the output shows win over the command: the file had only 590 lines.
        (
            f"$ nl -ba web/views.py | sed -n '580,600p'\n{_numbered(580, 590)}",
            FileView("nl", ("web/views.py",), (580, 590)),
        ),
        ("$ head -n 30 README.md\n# Title\n\ntext", FileView("head", ("README.md",), (1, 30))),
        ("$ head -5 setup.cfg\n[metadata]\nname = x", FileView("head", ("setup.cfg",), (1, 5))),
        ("$ head setup.cfg\n[metadata]", FileView("head", ("setup.cfg",), (1, 10))),
        ("$ tail -n 20 CHANGES.rst\n- fixed\n- added", FileView("tail", ("CHANGES.rst",), None)),
        ("$ tail -n +100 big.log\nline", FileView("tail", ("big.log",), (100, 0))),
        ("$ cat pkg/core.py | head -n 40\nimport os", FileView("cat", ("pkg/core.py",), (1, 40))),
        ("$ head -n 50 pkg/core.py | tail -n 10\nx", FileView("head", ("pkg/core.py",), (41, 50))),
        (
            '$ grep -n "def save" app/store.py\n88:    def save(self):\n140:    def save_all(self):',
            FileView("grep", ("app/store.py",), (88, 140)),
        ),
        ('$ grep "def save" app/store.py\n    def save(self):', FileView("grep", ("app/store.py",), None)),
        (
            '$ grep -rn "TODO" src\nsrc/a.py:12:# TODO x\nsrc/lib/b.py:3:# TODO y',
            FileView("grep", ("src/a.py", "src/lib/b.py"), None),
        ),
        ("$ rg -n 'fn main' src/main.rs\n3:fn main() {", FileView("rg", ("src/main.rs",), (3, 3))),
        ("$ rg 'fn main'\nsrc/main.rs:3:fn main() {", FileView("rg", ("src/main.rs",), None)),
        ("$ git show HEAD~1:src/app.py\nimport sys", FileView("git show", ("src/app.py",), (1, 0))),
        ("$ cd django && cat db/models/base.py\nclass Model:", FileView("cat", ("django/db/models/base.py",), (1, 0))),
        ("$ awk 'NR>=5 && NR<=9' conf/app.ini\n[db]", FileView("awk", ("conf/app.ini",), (5, 9))),
        # Redirections of stderr, and input from the file, change nothing about what is shown.
        ("$ cat conf/app.ini 2>&1\n[db]", FileView("cat", ("conf/app.ini",), (1, 0))),
        ("$ grep -n db conf/app.ini 2>/dev/null\n1:[db]", FileView("grep", ("conf/app.ini",), (1, 1))),
        ("$ cat < conf/app.ini\n[db]", FileView("cat", ("conf/app.ini",), (1, 0))),
        # The agent's own edits: a file written whole, and an edit in place.
        (
            "cat <<'EOF' > scripts/repro.py\nimport sys\nprint(sys.argv)\nEOF",
            FileView("write", ("scripts/repro.py",), (1, 0)),
        ),
        ("cat > notes/plan.md <<EOF\n# Plan\n1. fix\nEOF", FileView("write", ("notes/plan.md",), (1, 0))),
        ("sed -i '45s/old/new/' pkg/core.py", FileView("edit", ("pkg/core.py",), (45, 45))),
        ("sed -i 's/old/new/g' pkg/core.py", FileView("edit", ("pkg/core.py",), None)),
    ],
)
def test_outputs_that_show_a_file(content: str, expected: FileView):
    assert detect(content, content.split("\n", 1)[0]) == expected
    assert detect(content) == expected  # without a summary: the content's own first line


@pytest.mark.parametrize(
    "content",
    [
        "$ ls -la src\ntotal 8\n-rw-r--r-- 1 me me 10 a.py",
        "$ find . -name '*.py'\n./a.py\n./pkg/b.py",
        "$ pytest tests/test_app.py\n===== 3 passed in 0.1s =====",
        "$ git status\nOn branch main\nmodified:   src/app.py",
        "$ git diff src/app.py\n--- a/src/app.py\n+++ b/src/app.py",
        "$ python repro.py\nTraceback (most recent call last):",
        "$ grep -l TODO src/a.py src/b.py\nsrc/a.py",
        "$ grep -c TODO src/a.py\n3",
        "$ wc -l src/a.py\n120 src/a.py",
        "$ cat missing.py\n[exit 1]\ncat: missing.py: No such file or directory",
        "$ sed -n '1,10p' gone.py\nsed: can't read gone.py: No such file or directory",
        "$ cat src/a.py\n",  # printed nothing
        "$ cat src/a.py > /tmp/copy.py\n",
        "$ head -n 5 src/a.py 1> /tmp/head.txt\ndone",
        "$ cat src/a.py && python src/a.py\nimport os\nhello",
        "cat src/a.py",  # the command alone shows nothing
        "sed -n '1,20p' src/a.py\nsed -n '40,60p' src/a.py",  # a script of two commands, no output
        "The bug is in src/app.py near line 40; cat it again later.",
        'Traceback (most recent call last):\n  File "src/app.py", line 3, in <module>\nValueError: x',
    ],
)
def test_what_is_not_a_view(content: str):
    assert detect(content, content.split("\n", 1)[0]) is None


def test_a_summary_can_carry_the_command_of_an_output():
    output = "def save(self):\n    self.db.commit()"
    assert detect(output, "$ sed -n '88,89p' app/store.py") == FileView("sed", ("app/store.py",), (88, 89))
    assert detect(output, "sed -n '88,89p' app/store.py") == FileView("sed", ("app/store.py",), (88, 89))
    # A summary in prose that happens to start with a reader's name is not a command.
    assert detect(output, "cat the file to see what it does") is None


def test_line_spans_overlap_and_cover():
    assert overlaps((10, 20), (20, 30)) and not overlaps((10, 20), (21, 30))
    assert overlaps((1, 0), (500, 510))  # a whole-file view holds every region
    assert covers((1, 0), (500, 510)) and covers((10, 40), (20, 30)) and not covers((20, 30), (10, 40))
    assert not overlaps(None, (1, 2)) and not covers(None, (1, 2))


@given(st.integers(1, 10_000), st.integers(0, 500))
def test_a_sed_range_is_the_view_of_those_lines(first: int, length: int):
    last = first + length
    view = detect(f"$ sed -n '{first},{last}p' src/mod.py\nbody")
    assert view == FileView("sed", ("src/mod.py",), (first, last))
    numbered = detect(f"$ nl -ba src/mod.py | sed -n '{first},{last}p'\n{_numbered(first, last)}")
    assert numbered is not None and numbered.lines == (first, last)


def test_the_view_index_matches_a_path_however_it_is_rooted():
    index = ViewIndex()
    index.add("a", ["django/db/models/query.py"])
    index.add("b", ["django/db/models/sql/query.py"])
    index.add("c", ["/testbed/django/db/models/base.py"])
    assert index.lookup(["query.py"]) == {"a", "b"}
    assert index.lookup(["models/query.py"]) == {"a"}
    assert index.lookup(["/testbed/django/db/models/query.py"]) == {"a"}
    assert index.lookup(["django/db/models/base.py"]) == {"c"}
    assert index.lookup(["django.db.models.base"]) == {"c"}  # a module name
    assert index.lookup(["other.py"]) == set()
    index.remove("a", ["django/db/models/query.py"])
    assert index.lookup(["query.py"]) == {"b"}


# --- ranking through the Store --------------------------------------------------------------


def _put(store: Store, content: str) -> str:
    """As the replay stores an event: the summary is the first line."""
    return store.store(content, summary=content.split("\n", 1)[0]).item.id


def _top(store: Store, query: str, n: int = 3) -> list[str]:
    return [h.item.id for h in store.query(query=query, limit=10)][:n]


def test_a_path_query_brings_back_the_views_before_items_that_mention_it(store: Store):
    view = _put(store, f"$ sed -n '200,230p' shop/cart.py\n{_numbered(200, 230)}")
    _put(store, "sed -n '200,230p' shop/cart.py")  # the command alone
    _put(store, "shop/cart.py is where the cart total is computed; shop/cart.py also rounds.")
    _put(store, "I should change shop/cart.py next, after reading shop/cart.py tests.")
    _put(store, "$ python -m pytest tests/test_cart.py\nshop/cart.py:210: AssertionError\n1 failed")
    assert _top(store, "shop/cart.py", 1) == [view]
    assert _top(store, "cart.py", 1) == [view]
    assert _top(store, "shop.cart", 1) == [view]


def test_with_a_range_the_view_showing_those_lines_comes_first(store: Store):
    early = _put(store, f"$ nl -ba shop/cart.py | sed -n '1,40p'\n{_numbered(1, 40)}")
    late = _put(store, f"$ nl -ba shop/cart.py | sed -n '300,340p'\n{_numbered(300, 340)}")
    _put(store, "shop/cart.py needs a look at lines 300-340, shop/cart.py is long.")
    assert _top(store, "shop/cart.py:20", 1) == [early]
    assert _top(store, "lines 10-30 of shop/cart.py", 1) == [early]
    assert _top(store, "nl -ba shop/cart.py | sed -n '310,320p'", 1) == [late]


def test_with_a_symbol_the_view_that_shows_it_comes_first(store: Store):
    shows = _put(store, "$ sed -n '50,60p' shop/cart.py\ndef apply_discount(cart, code):\n    return cart")
    _put(store, "$ sed -n '90,100p' shop/cart.py\ndef checkout(cart):\n    pay(cart)")
    _put(store, "apply_discount is broken somewhere; shop/cart.py has it, I think.")
    assert _top(store, "shop/cart.py apply_discount", 1) == [shows]


def test_the_newest_view_of_a_region_comes_first(store: Store):
    old = _put(store, f"$ sed -n '10,30p' shop/cart.py\n{_numbered(10, 30)}")
    _put(store, "Let me fix shop/cart.py.")
    new = _put(store, f"$ sed -n '1,60p' shop/cart.py\n{_numbered(1, 60)}")
    top = _top(store, "shop/cart.py", 2)
    assert top == [new, old]


SAID_RANGE = "Running sed -n '312,318p' shop/cart.py again to see the loop."
# Two views of shop/cart.py and a note between: the first view shows lines 300-340, the newest
# other lines. A sentence asking for lines 312-318 wants the first.
_CODE = "".join(f"    total = total + item_{n}.price\n" for n in range(40))  # no line numbers in it
CART = (
    f"$ sed -n '300,340p' shop/cart.py\n{_CODE}",
    "shop/cart.py is long; the loop is somewhere past line 300.",
    f"$ sed -n '1,40p' shop/cart.py\n{_CODE}",
)


def test_a_reader_written_inside_a_sentence_asks_for_its_lines(store: Store):
    late, _, newer = [_put(store, content) for content in CART]
    assert _top(store, SAID_RANGE, 2) == [late, newer]
    assert _top(store, "Running shop/cart.py again to see the loop.", 1) == [newer]  # no lines named


def test_a_reader_written_inside_a_sentence_over_the_protocol(store: Store):
    ids, ranked = anyio.run(stored_and_ranked, store, CART, SAID_RANGE)
    assert ranked[0] == ids[0]


@pytest.mark.slow
def test_a_reader_written_inside_a_sentence_over_stdio(tmp_path: Path):
    with StdioServer("--state-dir", str(tmp_path / "state")) as srv:
        ids = [srv.ok("store", content=content)["id"] for content in CART]
        assert srv.ok("query", query=SAID_RANGE)["items"][0]["id"] == ids[0]


def test_a_command_that_runs_a_file_finds_its_runs_not_the_file(store: Store):
    _put(store, "cat <<'EOF' > repro.py\nimport shop\nprint(shop.total())\nEOF")
    run = _put(store, "$ python repro.py\n[exit 1]\nTraceback (most recent call last):\nKeyError: 'total'")
    assert _top(store, "Run repro.py again to check the fix.\npython repro.py", 1) == [run]


def test_show_names_the_file_a_view_shows(store: Store):
    item = store.get(_put(store, "$ tail -n +40 shop/cart.py\nline 40"))
    assert "shows shop/cart.py lines 40-end (tail)" in "\n".join(item_report(store, item))


def test_an_update_of_the_content_updates_the_view(store: Store):
    item_id = _put(store, "$ cat shop/cart.py\nTOTAL = 0")
    assert store.get(item_id).file_paths == ("shop/cart.py",)
    store.update(item_id, content="$ ls shop\ncart.py", summary="$ ls shop")
    updated = store.get(item_id)
    assert (updated.file_command, updated.file_paths, updated.file_lines) == (None, (), ())
    assert store.check_derived() == []


def test_views_survive_a_restart_and_a_record_without_them_loads(tmp_path: Path):
    state = tmp_path / "state"
    s = Store(state_dir=state)
    try:
        item_id = _put(s, f"$ sed -n '5,9p' shop/cart.py\n{_numbered(5, 9)}")
        _put(s, "shop/cart.py is mentioned here, shop/cart.py again.")
        s.snapshot()
        _put(s, f"$ cat shop/tax.py\n{_numbered(1, 3)}")  # in the journal after the snapshot
    finally:
        s.close()
    s = Store(state_dir=state)
    try:
        got = s.get(item_id)
        assert (got.file_command, got.file_paths, got.file_lines) == ("sed", ("shop/cart.py",), (5, 9))
        assert _top(s, "shop/cart.py", 1) == [item_id]
        assert s.get(_top(s, "shop/tax.py", 1)[0]).file_paths == ("shop/tax.py",)
        # A record written before file views existed (tests/persistence/test_migration.py loads a whole
        # state dir of that schema) comes back as no view.
        old = {k: v for k, v in got.to_record().items() if not k.startswith("file_")}
        assert Item.from_record(old).file_paths == ()
    finally:
        s.close()


async def _over_protocol(store: Store) -> tuple[dict[str, Any], str, list[str]]:
    async with Client(build_server(store), mode="legacy") as c:
        with anyio.fail_after(10):
            ids = []
            for content in (
                "shop/cart.py: the cart total lives in shop/cart.py",
                f"$ nl -ba shop/cart.py | sed -n '20,25p'\n{_numbered(20, 25)}",
                "Next I will read shop/cart.py again.",
            ):
                res = await c.call_tool("store", {"content": content, "summary": content.split("\n", 1)[0]})
                assert res.structured_content is not None
                ids.append(str(res.structured_content["id"]))
            got = await c.call_tool("get", {"id": ids[1]})
            hits = await c.call_tool("query", {"query": "shop/cart.py"})
    assert got.structured_content is not None and hits.structured_content is not None
    text = got.content[0].text  # type: ignore[union-attr]
    return got.structured_content, text, [ids[1]] + [str(h["id"]) for h in hits.structured_content["items"]]


def test_get_shows_the_view_and_query_ranks_it_first_over_the_protocol(store: Store):
    structured, text, (view, *ranked) = anyio.run(_over_protocol, store)
    assert structured["file_command"] == "nl"
    assert structured["file_paths"] == ["shop/cart.py"]
    assert structured["file_lines"] == [20, 25]
    assert "shows shop/cart.py lines 20-25 (nl)" in text
    assert ranked[0] == view


@pytest.mark.slow
def test_a_view_over_stdio(tmp_path: Path):
    with StdioServer("--state-dir", str(tmp_path / "state")) as srv:
        stored = srv.ok("store", content="$ head -n 3 shop/tax.py\nRATE = 0.2\nBASE = 1\nCAP = 9")
        item_id = stored["id"]
        srv.ok("store", content="shop/tax.py is small; shop/tax.py holds the rates.")
        got = srv.ok("get", id=item_id)
        assert (got["file_command"], got["file_paths"], got["file_lines"]) == ("head", ["shop/tax.py"], [1, 3])
        hits = srv.ok("query", query="shop/tax.py")["items"]
        assert hits[0]["id"] == item_id


# The file as macOS lists it (its accents apart from their letters, NFD) and as a person types it.
_LISTED, _TYPED = "docs/Re\u0301sume\u0301.md", "docs/R\u00e9sum\u00e9.md"


@pytest.mark.parametrize(("shown", "asked"), [(_LISTED, _TYPED), (_TYPED, _LISTED)])
def test_a_file_name_with_accents_is_one_file_however_they_were_typed(store: Store, shown: str, asked: str):
    view = _put(store, f"$ head -n 3 {shown}\n# Experience\nbuilt things\nfixed things")
    _put(store, f"{asked} needs a new section; {asked} is out of date, {asked} again.")
    assert store.get(view).file_paths == (shown,)  # shown as it was written
    found = parse_query(f"cat {asked}")
    assert found is not None and found.paths == (_TYPED,)  # read composed, as the paths it is matched against
    assert _top(store, asked, 1) == [view]
    assert _top(store, asked.rsplit("/", 1)[1], 1) == [view]


@pytest.mark.slow
def test_a_file_name_with_accents_over_stdio(tmp_path: Path):
    with StdioServer("--state-dir", str(tmp_path / "state")) as srv:
        command, mention = (
            f"$ head -n 3 {_LISTED}",
            f"{_TYPED} needs a new section; {_TYPED} is out of date, {_TYPED} again.",
        )
        view = srv.ok("store", content=f"{command}\n# Experience\nbuilt things\nfixed things", summary=command)["id"]
        srv.ok("store", content=mention, summary=mention)  # as `_put` stores each
        assert srv.ok("query", query=_TYPED)["items"][0]["id"] == view


def test_a_file_name_in_a_script_with_vowel_signs_is_one_path(store: Store):
    path = "docs/\u0921\u0947\u091f\u093e\u092c\u0947\u0938.md"  # Hindi "database": each vowel sign a mark
    view = _put(store, f"$ head -n 3 {path}\n# title\nconnection pool\nsize 5")
    _put(store, f"{path} needs a new section; {path} is out of date, {path} again.")
    assert store.get(view).file_paths == (path,)
    found = parse_query(f"cat {path}")
    assert found is not None and found.paths == (path,)
    found = parse_query(f"see {path}:12")
    assert found is not None and (found.paths, found.lines) == ((path,), (12, 12))
    assert _top(store, path, 1) == [view]


@pytest.mark.slow
def test_a_file_name_in_a_script_with_vowel_signs_over_stdio(tmp_path: Path):
    path = "docs/\u0921\u0947\u091f\u093e\u092c\u0947\u0938.md"
    with StdioServer("--state-dir", str(tmp_path / "state")) as srv:
        command, mention = f"$ head -n 3 {path}", f"{path} needs a new section; {path} is out of date, {path} again."
        view = srv.ok("store", content=f"{command}\n# title\nconnection pool\nsize 5", summary=command)["id"]
        srv.ok("store", content=mention, summary=mention)
        assert srv.ok("query", query=path)["items"][0]["id"] == view
        assert srv.ok("query", query=f"see {path}:2")["items"][0]["id"] == view


def test_a_long_numbered_output_shows_every_line_it_holds_not_the_first_2000() -> None:
    """Issue 38: an 8,999-line `cat -n` was recorded as lines 1-2000 without saying so."""
    view = detect(f"$ cat -n big/module.py\n{_numbered(1, 8999)}\n")
    assert view == FileView("cat", ("big/module.py",), (1, 8999))
    view = detect(f"$ nl -ba big/module.py | sed -n '100,5000p'\n{_numbered(100, 5000)}")
    assert view == FileView("nl", ("big/module.py",), (100, 5000))
