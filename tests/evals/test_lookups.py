"""The strict relevance of file re-reads (evals/lookups.py): which earlier views show what the
query asks for, by the evaluation's own rules."""

from __future__ import annotations

from evals.lookups import Asked, answers, asked, asked_as, bare_query, shown, strict_relevant

GREP = 'Let\'s check `find_ordering_name`.\ngrep -n "def find_ordering_name" django/db/models/sql/compiler.py'
SED = "Read `SQLiteNumericMixin` in `django/db/models/expressions.py`.\nsed -n '18,35p' django/db/models/expressions.py"
LINES = "Let's check around line 1128.\nnl -ba lib/text.py | sed -n '1120,1140p'"


def test_what_a_query_asks_for() -> None:
    # The grep's pattern first; a name in backticks (not a path) otherwise; the lines of sed or head.
    assert asked(GREP) == Asked(("def find_ordering_name",), None)
    assert asked(SED) == Asked(("SQLiteNumericMixin",), (18, 35))
    assert asked(LINES) == Asked((), (1120, 1140))
    assert asked("Let me read it whole.\ncat pkg/mod.py") == Asked((), None)
    assert asked("head -n 20 pkg/mod.py") == Asked((), (1, 20))


def test_the_lines_a_view_shows() -> None:
    assert shown("$ nl -ba lib/text.py | sed -n '1120,1140p'\n  1120\tdef a():\n  1140\t    pass") == (1120, 1140)
    assert shown('$ grep -n "def a" lib/text.py\n1120:def a():') == (1120, 1120)
    assert shown("$ sed -n '5,9p' lib/text.py\nx = 1") == (5, 9)
    assert shown("$ cat lib/text.py\nx = 1") == (0, 0)  # the whole file
    assert shown("$ grep a lib/text.py\nx = a") is None


def test_strict_relevance_keeps_the_views_that_show_what_is_asked() -> None:
    events = {
        1: '$ grep -n "def find_ordering_name" django/db/models/sql/compiler.py\n700:    def find_ordering_name(self):',
        2: "$ sed -n '1,40p' django/db/models/sql/compiler.py\nimport collections",
        3: "$ cat django/db/models/sql/compiler.py\n    def find_ordering_name(self):",
    }
    assert strict_relevant(GREP, [1, 2, 3], events) == (1, 3)
    lines = {
        4: "$ nl -ba lib/text.py | sed -n '1,40p'\n     1\timport os\n    40\tx",
        5: "$ cat lib/text.py\nimport os",
    }
    assert strict_relevant(LINES, [4, 5], lines) == (5,)
    assert answers("anything", Asked((), None))  # a query that asks for nothing in particular
    assert strict_relevant(GREP, [2], events) == ()  # left out of the strict score


def test_a_bare_query_is_the_path_and_what_it_asks_for() -> None:
    assert (
        bare_query("django/db/models/sql/compiler.py", GREP)
        == "django/db/models/sql/compiler.py def find_ordering_name"
    )
    assert bare_query("lib/text.py", LINES) == "lib/text.py lines 1120-1140"
    assert bare_query("pkg/mod.py", "cat pkg/mod.py") is None


def test_a_revisit_asked_with_its_command_in_backticks():
    query = "The fix is in. Let me run it again.\npython repro.py --fast"
    assert asked_as("lines", query, "python repro.py --fast") == query
    assert asked_as("ticked", query, "python repro.py --fast") == (
        "The fix is in. Let me run it again. Running `python repro.py --fast` again."
    )
    assert asked_as("question", query, "python repro.py --fast") == "What did `python repro.py --fast` print last time?"
    assert asked_as("said", query, "python repro.py --fast") == (
        "The fix is in. Let me run it again. Running python repro.py --fast again."
    )
    # What backticks cannot hold, or a query that does not end with the command, stays as derived.
    heredoc = "Write it.\ncat <<'EOF' > a.py\nprint(1)\nEOF"
    assert asked_as("ticked", heredoc, "cat <<'EOF' > a.py\nprint(1)\nEOF") == heredoc
    assert asked_as("question", "echo `date`", "echo `date`") == "echo `date`"
    assert asked_as("question", "Look.\nls", "pwd") == "Look.\nls"
