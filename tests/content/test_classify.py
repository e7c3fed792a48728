"""Tests for compactor.content.classify: content types, automatic tags, tag parsing and merging."""

from __future__ import annotations

import random
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor import constants as C
from compactor.content import classify as classify_mod
from compactor.content.classify import ContentType, auto_tags, detect_type
from compactor.content.tags import merge_tags, normalize_tag, parse_tags

ERROR = ContentType.ERROR
CODE = ContentType.CODE
DECISION = ContentType.DECISION
TOOL = ContentType.TOOL_OUTPUT
PROSE = ContentType.PROSE

# --- detect_type: one table per type -------------------------------------------------------------

ERROR_CASES = {
    "python traceback": (
        "Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\n    main()\nKeyError: 'user'"
    ),
    "error line": "ValueError: invalid literal for int() with base 10: 'x'",
    "dotted error": "django.core.exceptions.FieldError: Cannot resolve keyword 'nme' into field.",
    "bare exception": "Exception: boom",
    "go panic": (
        "panic: runtime error: index out of range [3] with length 3\n\ngoroutine 1 [running]:\n"
        "main.main()\n\t/tmp/x.go:8 +0x1d"
    ),
    "goroutine header": "goroutine 7 [running]:\nmain.worker()",
    "js stack": (
        "Something went wrong\n    at Object.<anonymous> (/app/index.js:10:5)\n"
        "    at Module._compile (node:internal/modules/cjs/loader:1105:14)"
    ),
    "js frame without function": "request failed\n    at /app/src/server.ts:41:13",
    "java stack": ('Exception in thread "main" java.lang.NullPointerException\n\tat com.acme.App.main(App.java:14)'),
    "tsc": "src/app.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
    "gcc": "main.c:10:5: error: expected ';' before 'return'",
    "rustc": "error[E0308]: mismatched types\n --> src/main.rs:4:18",
    "git fatal": "fatal: not a git repository (or any of the parent directories): .git",
    "pytest FAILED": "FAILED tests/test_api.py::test_login - AssertionError: assert 401 == 200",
    "pytest E lines": ("    def test_x():\n>       assert f() == 2\nE       assert 1 == 2\nE        +  where 1 = f()"),
    "pytest verbose": "tests/test_a.py::test_one PASSED [ 50%]\ntests/test_a.py::test_two FAILED [100%]",
    "go test": "=== RUN   TestParse\n--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got 1",
    "npm": "npm ERR! code ELIFECYCLE\nnpm ERR! errno 1",
    "segfault": "Segmentation fault (core dumped)",
    "exit code": "Process finished with exit code 1",
    "harness exit": "$ make build\n[exit 2]\nmake: *** [Makefile:3: build] Error 1",
    "command not found": "bash: pytets: command not found",
    "no such file": "ls: cannot access 'build/': No such file or directory",
    "logging ERROR": "ERROR: could not connect to server",
}

CODE_CASES = {
    "fenced block": "Here is the fix:\n\n```python\nx = compute()\n```",
    "python function": "def total(items):\n    return sum(i.price for i in items)",
    "python imports": "from pathlib import Path\nimport os",
    "single import": "import os",
    "single def": "def f(x): return x",
    "javascript": "const add = (a, b) => {\n  return a + b;\n};",
    "go": "package main\n\nfunc main() {\n}",
    "rust": 'fn main() {\n    println!("hi");\n}',
    "c": "#include <stdio.h>\nint main(void) { return 0; }",
    "diff hunk": "@@ -1,3 +1,4 @@\n-old line\n+new line",
    "git diff": "diff --git a/x.py b/x.py\nindex 1..2 100644",
    "java": "public class App {\n    public static void main(String[] args) {\n    }\n}",
    "typescript interface": "interface User {\n  id: number;\n}",
    "sql": "SELECT id, name FROM users\nWHERE id = 1;",
    "shell command": "grep -rn TODO src/",
    "run a script": "python3 reproduce_issue.py",
    "local script": "./tests/runtests.py admin_scripts",
    "heredoc": "cat <<'EOF' > x.py\nprint(1)\nEOF",
    "decorated method": "    @property\n    def name(self):\n        return self._name",
    "shebang": "#!/usr/bin/env bash\nset -euo pipefail",
}

DECISION_CASES = {
    "we decided": "We decided to use SQLite for the archive tier because it needs no server.",
    "decision label": "Decision: summaries are stored next to their originals.",
    "we will use": "We will use orjson for serialisation.",
    "chose over": "Chose BM25 over embeddings for recall: no model download needed.",
    "going with": "Going with a per-session token budget.",
    "lets use": "Let's use the cl100k encoding everywhere.",
    "curly apostrophe": "Let\u2019s use the offline encoder.",
    "instead of": "Return an empty list instead of None.",
    "trade-off": "The trade-off is memory versus latency.",
    "tradeoff": "Main tradeoff: simplicity.",
    "adr": "See ADR-7 for the storage layout.",
    "opted": "We opted for a WAL-mode database.",
}

TOOL_CASES = {
    "ls -l": ("$ ls -la\ntotal 8\ndrwxr-xr-x 2 me me 4096 Nov 29 10:00 .\n-rw-r--r-- 1 me me  120 Nov 29 10:00 a.txt"),
    "listing alone": "drwxr-xr-x 2 me me 4096 Nov 29 10:00 src\n-rw-r--r-- 1 me me 120 Nov 29 10:00 a.txt",
    "prompt": "$ uname -a\nLinux box 6.1.0 x86_64 GNU/Linux",
    "user@host prompt": "me@box:~/proj$ make\nnothing to do",
    "pytest summary": "........ \n5 passed in 0.12s",
    "pytest banner": "============ 5 passed, 1 skipped in 0.30s ============",
    "unittest": "Ran 12 tests in 0.034s\n\nOK",
    "json object": '{"status": "ok", "items": [1, 2, 3]}',
    "json array": '[{"id": 1}, {"id": 2}]',
    "json lines": '{"a": 1}\n{"a": 2}',
    "markdown table": "| name | size |\n|------|------|\n| a    | 1    |",
    "ascii table": "+----+------+\n| id | name |\n+----+------+",
    "grep": "src/app.py:12:    return x\nsrc/util.py:40:    y = 2",
    "grep single file": ("99:class BaseModelAdmin(metaclass=forms.MediaDefiningClass):\n120:    def check(self):"),
    "pip": (
        "Collecting requests\n  Downloading requests-2.32.3-py3-none-any.whl (64 kB)\nSuccessfully installed requests"
    ),
    "cargo": "   Compiling serde v1.0.195\n   Compiling app v0.1.0 (/src/app)",
    "cmake": "[ 50%] Building CXX object src/CMakeFiles/app.dir/main.cpp.o",
    "tqdm": "100%|##########| 10/10 [00:01<00:00,  9.87it/s]",
    "log lines": "2025-11-18 10:00:01 INFO server started\n2025-11-18 10:00:02 INFO listening on :8080",
}

PROSE_CASES = {
    "sentence": "The archive keeps every item that compaction moved out of the working set.",
    "paragraphs": "First we read the file.\n\nThen the summary is written next to it.",
    "issue text": "Calling clear_denoms() on a constant poly gives a poly that prints like zero.",
    "checking": "Checking output.",
    "for example": "For example:\nthis works fine",
    "empty": "",
    "blank": "   \n\t  ",
    "passed in prose": "The tests passed and the build is green.",
}


def _cases(table: dict[str, str], expected: ContentType) -> list[object]:
    return [pytest.param(text, expected, id=name) for name, text in table.items()]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        *_cases(ERROR_CASES, ERROR),
        *_cases(CODE_CASES, CODE),
        *_cases(DECISION_CASES, DECISION),
        *_cases(TOOL_CASES, TOOL),
        *_cases(PROSE_CASES, PROSE),
    ],
)
def test_detect_type(text: str, expected: ContentType) -> None:
    assert detect_type(text) is expected


# --- known misfires ------------------------------------------------------------------------------


def test_import_inside_a_sentence_is_prose() -> None:
    assert detect_type("We need to import the customer data") is PROSE
    assert detect_type("We need to import the customer data.\nimport the rest tomorrow.") is PROSE


def test_markdown_quote_is_not_tool_output() -> None:
    assert detect_type("> some quoted text") is PROSE
    assert detect_type("> some quoted text\n> and its second line") is PROSE


@pytest.mark.parametrize(
    "text",
    [
        "localhost:8080",
        "db.example.com:5432",
        "Connect to localhost:8080 and then to db.example.com:5432.",
        "The API listens on 0.0.0.0:8000 in development.",
    ],
)
def test_host_and_port_is_not_an_error(text: str) -> None:
    assert detect_type(text) is not ERROR


def test_redistribute_is_not_tagged_redis() -> None:
    assert "redis" not in auto_tags("We redistribute the load across workers.", PROSE)
    assert "redis" in auto_tags("We cache sessions in redis.", PROSE)


@pytest.mark.parametrize(
    "text",
    ["error handling is important", "Error handling is important.", "We log every exception to a file."],
)
def test_error_words_in_a_sentence_are_prose(text: str) -> None:
    assert detect_type(text) is PROSE


def test_returns_none_is_prose() -> None:
    assert detect_type("the function returns None") is PROSE


def test_docstring_raises_section_is_not_an_error() -> None:
    doc = 'def parse(s):\n    """Parse s.\n\n    Raises:\n        ValueError: if s is empty.\n    """'
    assert detect_type(doc) is CODE


# --- priority ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("```python\nraise KeyError('x')\n```\nKeyError: 'x'", ERROR, id="error beats code"),
        pytest.param("We decided on this:\n```\nx = 1\n```", CODE, id="code beats decision"),
        pytest.param("$ pytest -q\n5 passed\nWe decided to keep it.", DECISION, id="decision beats tool"),
        pytest.param("$ make\nAll good, nothing else to say here.", TOOL, id="tool beats prose"),
        pytest.param("$ pytest\nFAILED tests/t.py::test_a\n1 failed, 5 passed", ERROR, id="error beats tool"),
    ],
)
def test_priority_when_several_types_fire(text: str, expected: ContentType) -> None:
    assert detect_type(text) is expected


def test_crlf_line_endings() -> None:
    assert detect_type("import os\r\nimport sys\r\n") is CODE
    assert detect_type("x = 1\r\ny = 2") is CODE


def test_content_type_values_are_the_wire_names() -> None:
    assert [t.value for t in ContentType] == ["error", "code", "decision", "tool_output", "prose"]
    assert ContentType("tool_output") is TOOL


# --- auto_tags -----------------------------------------------------------------------------------


def test_auto_tags_start_with_the_type() -> None:
    assert auto_tags("plain words", PROSE) == ["prose"]
    assert auto_tags("plain words", "decision") == ["decision"]


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("see app/models.py", "python"),
        ("edit main.go", "go"),
        ("the Button.tsx component", "typescript"),
        ("index.ts and", "typescript"),
        ("bundle.js is big", "javascript"),
        ("lib.rs compiles", "rust"),
        ("App.java fails", "java"),
        ("Gemfile and app.rb", "ruby"),
        ("util.c and util.h", "c"),
        ("engine.cpp", "cpp"),
        ("run deploy.sh", "shell"),
        ("schema.sql", "sql"),
        ("values.yaml", "yaml"),
        ("ci.yml", "yaml"),
        ("```rust\nfn main() {}\n```", "rust"),
        ("```py\nx = 1\n```", "python"),
        ("```bash\nls\n```", "shell"),
    ],
)
def test_auto_tags_languages(text: str, language: str) -> None:
    assert language in auto_tags(text, detect_type(text))


@pytest.mark.parametrize(
    "text",
    ["e.g. this one", "visit example.com", "the main.pyc file", "version 3.c of the spec", "Node.JS"],
)
def test_auto_tags_do_not_invent_languages(text: str) -> None:
    tags = auto_tags(text, PROSE)
    assert tags == ["prose"]


def test_auto_tags_languages_in_order_of_first_mention() -> None:
    text = "The handler in api.go calls worker.py, which reads conf.yaml; api_test.go covers it."
    assert auto_tags(text, PROSE) == ["prose", "go", "python", "yaml"]


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("docker compose up", "docker"),
        ("the Dockerfile", "docker"),
        ("kubectl apply -f x", "kubernetes"),
        ("deployed on k8s", "kubernetes"),
        ("PostgreSQL 16", "postgres"),
        ("postgres is slow", "postgres"),
        ("sqlite3 file", "sqlite"),
        ("nginx reverse proxy", "nginx"),
        ("AWS account", "aws"),
        ("terraform plan", "terraform"),
        ("a kafka topic", "kafka"),
        ("git rebase", "git"),
        ("redis_client.get", "redis"),
        ("MySQL replica", "mysql"),
    ],
)
def test_auto_tags_infrastructure(text: str, tag: str) -> None:
    assert tag in auto_tags(text, PROSE)


@pytest.mark.parametrize("text", ["digital digits", "awesome laws", "the postgresfoo", "predocker", "gitignore rules"])
def test_auto_tags_infrastructure_needs_word_boundaries(text: str) -> None:
    assert auto_tags(text, PROSE) == ["prose"]


def test_auto_tags_reference_for_a_url() -> None:
    assert auto_tags("docs at https://example.com/guide", PROSE) == ["prose", "reference"]
    assert "reference" not in auto_tags("no link here, just example.com", PROSE)


def test_auto_tags_cap_and_priority() -> None:
    text = "a.py b.go c.rs d.java e.rb with docker and redis, see https://x.io"
    tags = auto_tags(text, CODE)
    assert len(tags) == classify_mod.AUTO_TAG_LIMIT
    assert tags == ["code", "python", "go", "rust", "java"]


def test_auto_tags_infrastructure_after_languages() -> None:
    assert auto_tags("redis first, then cache.py", PROSE) == ["prose", "python", "redis"]


def test_auto_tags_no_duplicates() -> None:
    tags = auto_tags("```python\nimport x\n```\nsee a.py and b.py, docker, Docker, DOCKER", CODE)
    assert tags == ["code", "python", "docker"]


def test_auto_tags_type_tag_not_repeated() -> None:
    # "terraform" is both a fence language and infrastructure; it must appear once.
    assert auto_tags("```hcl\nresource x {}\n```\nterraform apply", CODE) == ["code", "terraform"]


# --- parse_tags / merge_tags ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, []),
        ("", []),
        ("a, b,,c ", ["a", "b", "c"]),
        (" Bug ,bug,BUG", ["bug"]),
        (["Alpha", " beta ", "", "alpha"], ["alpha", "beta"]),
        (("x",), ["x"]),
        ("ticket-1234", ["ticket-1234"]),
    ],
)
def test_parse_tags(value: str | list[str] | tuple[str, ...] | None, expected: list[str]) -> None:
    assert parse_tags(value) == expected


def test_parse_tags_accepts_the_maximum_length() -> None:
    assert parse_tags("a" * C.MAX_TAG_CHARS) == ["a" * C.MAX_TAG_CHARS]


@pytest.mark.parametrize("value", ["a" * (C.MAX_TAG_CHARS + 1), ["ok", "b" * 100]])
def test_parse_tags_rejects_long_tags(value: str | list[str]) -> None:
    with pytest.raises(ValueError, match=str(C.MAX_TAG_CHARS)):
        parse_tags(value)


@pytest.mark.parametrize("value", ["a\nb", ["ok", "two\nlines"], "tab\there", ["cr\r"]])
def test_parse_tags_rejects_newlines_and_control_characters(value: str | list[str]) -> None:
    with pytest.raises(ValueError, match="newline"):
        parse_tags(value)


def test_parse_tags_rejects_non_strings() -> None:
    with pytest.raises(TypeError, match="strings"):
        parse_tags(["ok", 3])  # type: ignore[list-item]


def test_merge_tags_keeps_user_tags_first() -> None:
    assert merge_tags(["Urgent", "auth"], ["error", "python", "auth"]) == [
        "urgent",
        "auth",
        "error",
        "python",
    ]


def test_merge_tags_dedupes_case_insensitively() -> None:
    assert merge_tags([" Python "], ["python", "PYTHON", "go"]) == ["python", "go"]


def test_merge_tags_drops_empty_tags() -> None:
    assert merge_tags(["", "  "], ["prose"]) == ["prose"]


def test_normalize_tag() -> None:
    assert normalize_tag("  MixedCase ") == "mixedcase"


# --- properties ----------------------------------------------------------------------------------

ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=400)  # no surrogates; control chars in


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT)
def test_detect_type_never_crashes(text: str) -> None:
    assert isinstance(detect_type(text), ContentType)


CODEY = st.sampled_from(
    [
        "def f(x):",
        "    return x",
        "import os",
        "$ ls",
        "```",
        "FAILED",
        "a.py",
        "docker",
        "http://x.y",
        "{",
        "}",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(ANY_TEXT, CODEY), max_size=12).map("\n".join))
def test_auto_tags_invariants(text: str) -> None:
    content_type = detect_type(text)
    tags = auto_tags(text, content_type)
    assert tags[0] == content_type.value
    assert len(tags) <= classify_mod.AUTO_TAG_LIMIT
    assert len(set(tags)) == len(tags)
    assert tags == auto_tags(text, content_type)  # deterministic
    assert all(tag == normalize_tag(tag) for tag in tags)


TAG = st.text(st.characters(codec="utf-8", exclude_categories=["Cc"], exclude_characters=","), max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(TAG, max_size=8), st.lists(TAG, max_size=8))
def test_merge_tags_invariants(user: list[str], auto: list[str]) -> None:
    merged = merge_tags(user, auto)
    assert len(set(merged)) == len(merged)
    assert "" not in merged
    wanted_user = list(dict.fromkeys(t for t in map(normalize_tag, user) if t))
    assert merged[: len(wanted_user)] == wanted_user
    assert set(merged) == {normalize_tag(t) for t in [*user, *auto]} - {""}


@settings(max_examples=200, deadline=None)
@given(st.lists(TAG, max_size=8))
def test_parse_tags_string_and_list_agree(tags: list[str]) -> None:
    assert parse_tags(",".join(tags)) == parse_tags(tags)


# --- speed ---------------------------------------------------------------------------------------

MIB = 1 << 20


def _mib_of(lines: list[str]) -> str:
    rng = random.Random(7)
    out: list[str] = []
    size = 0
    while size < MIB:
        line = rng.choice(lines)
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)[:MIB]


LARGE_INPUTS = {
    "prose": _mib_of(
        [
            "The quick brown fox jumps over the lazy dog while the agent stores its memory.",
            "Compaction moves old items to the archive tier and keeps a summary in view.",
            "Nothing here is code, an error, or the output of a tool.",
        ]
    ),
    "code": _mib_of(["def f(x):", "    y = x + 1", "    return y", "", "class A:", "    pass"]),
    "log": _mib_of(["2025-11-18 10:00:01 INFO started worker 3", "GET /api/items 200 12ms"]),
    "one long line": "word " * (MIB // 5),
}


@pytest.mark.parametrize("name", list(LARGE_INPUTS))
def test_one_mebibyte_is_fast(name: str) -> None:
    text = LARGE_INPUTS[name]
    start = time.perf_counter()
    content_type = detect_type(text)
    tags = auto_tags(text, content_type)
    elapsed = time.perf_counter() - start
    print(f"\n1 MiB {name}: {content_type.value} {tags} in {elapsed * 1000:.1f} ms", file=sys.stderr)
    assert tags[0] == content_type.value
    # Generous: catches a quadratic regex, not scheduler noise on a shared machine.
    assert elapsed < 2.0
