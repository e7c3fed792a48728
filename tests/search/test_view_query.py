"""What a query asks to see (search/view_query.py): the paths and lines it names, the commands
it writes on a line, in backticks or inside a sentence, and the symbols it asks for. Ranking
through the Store, the SDK client and stdio is in test_views.py. Every case is written by hand."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from compactor.search.view_query import parse_query, query_lines, tick_commands


def test_what_a_query_names():
    def q(text: str) -> tuple[tuple[str, ...], tuple[int, int] | None] | None:
        found = parse_query(text)
        return None if found is None else (found.paths, found.lines)

    assert q("django/db/models/query.py") == (("django/db/models/query.py",), None)
    assert q("query.py:120") == (("query.py",), (120, 120))
    assert q("lines 40-60 of pkg/core.py") == (("pkg/core.py",), (40, 60))
    assert q("Look again.\nnl -ba pkg/core.py | sed -n '40,60p'") == (("pkg/core.py",), (40, 60))
    assert q("pkg.core") == (("pkg.core",), None)
    # A command that runs a script or lists names asks for its output, not for the file; the
    # prose next to it says why it runs.
    assert q("Now run repro.py again.\npython repro.py") is None
    assert q("bin/test pkg/tests/test_core.py") is None
    assert q("./manage.py check --deploy") is None
    assert q("ls src/app") is None
    assert q("what did we decide about caching") is None


def test_a_command_in_backticks_inside_prose_is_asked_as_a_command_line():
    def q(text: str) -> tuple[tuple[str, ...], tuple[int, int] | None] | None:
        found = parse_query(text)
        return None if found is None else (found.paths, found.lines)

    # A command that runs something names its paths as arguments, inside a sentence as on a line.
    assert q("What did `python repro.py` print last time?") is None
    assert q("The fix is in. Running `cd /testbed && pytest tests/test_core.py -q` again.") is None
    # A reader in backticks shows its file; a file name or a program named alone is prose.
    assert q("Let me look at `sed -n '40,60p' pkg/core.py` once more") == (("pkg/core.py",), (40, 60))
    assert q("What does `repro.py` do?") == (("repro.py",), None)
    assert q("Is `pytest` installed? See pkg/core.py") == (("pkg/core.py",), None)
    assert query_lines("What did `python repro.py` print?\n$ git diff\n\n") == [
        "python repro.py",
        "What did   print?",
        "git diff",
    ]
    # A line that is a command keeps its backticks: they are the shell's.
    assert query_lines("echo `date` > stamp.txt") == ["echo `date` > stamp.txt"]


_QUERY_TEXT = st.lists(st.sampled_from([*"`$ \n-./_'\"|&;=()", "python", "cat", "a.py", "x", "sed -n"])).map("".join)


@given(_QUERY_TEXT)
@example("$  $")  # a prompt, spaces, and a dollar: the line is "$", not " $"
def test_any_query_splits_into_lines_and_ticks_without_error(text: str):
    lines = query_lines(text)
    assert all(line and "\n" not in line and line == line.strip() for line in lines)
    assert tick_commands(text, []) == text
    ticked = tick_commands(text, ["python a.py"])
    assert ticked.count("\n") == text.count("\n")
    parse_query(ticked)


def test_a_reader_a_sentence_writes_out_with_its_file_is_a_command_line():
    said = "Running sed -n '40,60p' pkg/core.py again to see the loop."
    assert query_lines(said) == ["sed -n '40,60p' pkg/core.py", "Running   again to see the loop."]
    found = parse_query(said)
    assert found is not None and (found.paths, found.lines) == (("pkg/core.py",), (40, 60))
    piped = parse_query("Let me see nl -ba pkg/core.py | sed -n '5,9p' once more.")
    assert piped is not None and piped.lines == (5, 9)
    grep = parse_query('Check where grep -n "def apply" shop/cart.py finds it.')
    assert grep is not None and grep.symbols == ("def apply",)
    # English that happens to use a reader's name names no file after it.
    for text in ("the cat sat on the mat", "grep for the error in the logs", "head -n 5 is fine", "tail of pkg"):
        assert query_lines(text) == [text], text


def test_a_command_a_sentence_names_is_ticked_for_the_parse():
    text = "Running  python repro.py again to see the failure.\ncat repro.py"
    assert tick_commands(text, ["python repro.py"]) == (
        "Running `python repro.py` again to see the failure.\ncat repro.py"
    )
    assert parse_query(tick_commands("Running python repro.py again.", ["python repro.py"])) is None
    assert parse_query("Running python repro.py again.") is not None  # repro.py, named in prose
    assert tick_commands("grep 'python repro.py' log.txt", ["python repro.py"]) == "grep 'python repro.py' log.txt"
    # One command inside another is ticked once, as the longer.
    both = tick_commands("Ran python repro.py -v twice.", ["python repro.py", "python repro.py -v"])
    assert both == "Ran `python repro.py -v` twice."


def test_the_symbols_a_query_names():
    def symbols(text: str) -> tuple[str, ...]:
        found = parse_query(text)
        assert found is not None
        return found.symbols

    # A grep's pattern, as a matching line holds it: escapes, anchors and wildcards taken out.
    assert symbols('grep -n "def find_ordering_name" django/db/models/sql/compiler.py') == ("def find_ordering_name",)
    assert symbols('nl -ba lib/contour.py | grep -C 5 "def get_paths"') == ("def get_paths",)
    assert symbols('grep -n "^class Matrix.*Base" sympy/dense.py') == ("class Matrix",)
    assert symbols('grep -n "cbook\\." lib/patches.py') == ("cbook.",)
    # Beside a reader command, the grep decides; the names in backticks when there is none.
    assert symbols("Let's read `SQLiteNumericMixin`.\nsed -n '18,35p' django/db/expressions.py") == (
        "SQLiteNumericMixin",
    )
    # In prose: names in backticks (a call's parentheses aside) and names that are code as written.
    assert symbols("`get_inlines()` and QuerySet in django/contrib/admin/options.py") == ("get_inlines", "QuerySet")
    assert symbols("shop/cart.py apply_discount getTotal") == ("apply_discount", "getTotal")
    # Plain words, short names and the file's own name are not symbols.
    assert symbols("why does shop/cart.py round the total") == ()
    assert symbols("`ab` in shop/cart.py") == ()
    assert symbols("`cart.py` in shop/cart.py") == ()
