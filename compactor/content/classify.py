"""Content-type detection and automatic tagging for stored memory items.

Everything here is pure and regex-based: no I/O, no model calls. Every pattern is compiled once at
import time and every scan is linear, so the worst case (1 MiB of prose, where nothing fires and
every scan runs to the end) takes about 10-30 ms of CPU; typical items take microseconds.

The tags it makes are in the canonical form of tags.py. The store imports this module on its
first write, not at start: compiling its patterns is ~7 ms that a start which only reads never needs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

AUTO_TAG_LIMIT: Final = 5
# Parsing a bigger JSON blob to decide "tool output" costs more than the label is worth.
JSON_PARSE_LIMIT: Final = 4 * 1024 * 1024
# Tags come from the head: keeps auto_tags ~1 ms on a 1 MiB item; first mentions decide anyway.
TAG_SCAN_CHARS: Final = 64 * 1024


class ContentType(StrEnum):
    """What a stored item is; compaction and recall treat the kinds differently."""

    ERROR = "error"
    CODE = "code"
    DECISION = "decision"
    TOOL_OUTPUT = "tool_output"
    PROSE = "prose"


# Speed: every scan is a regex that starts with a literal, so the engine jumps from one occurrence
# of that literal to the next instead of trying each position. Line-start patterns run on
# "\n" + text with a leading "\n" (MULTILINE "^" would try every position: ~40x slower on 1 MiB).
# Where a pattern needs the start of its line to look a certain way, `_Rule.head` checks that part
# in a second step, only at the few places the literal occurs.


def _anchored(*alternatives: str) -> re.Pattern[str]:
    """Patterns that must start a line; run on the text with a "\\n" prepended."""
    return re.compile(r"\n(?:" + "|".join(alternatives) + r")", re.MULTILINE)


def _alternation(words: Iterable[str]) -> str:
    """A regex alternation of literal words, longest first so a longer word wins."""
    return "|".join(sorted((re.escape(w) for w in words), key=len, reverse=True))


@dataclass(frozen=True, slots=True)
class _Rule:
    """A pattern, and optionally what the text between its line's start and the match must be."""

    pattern: re.Pattern[str]
    head: re.Pattern[str] | None = None

    def line_starts(self, lined: str) -> Iterator[int]:
        """Position of the "\\n" that opens each line the rule fires on."""
        start, searched = 0, 0
        for m in self.pattern.finditer(lined):
            # Search back only to the previous match: one long line with many matches stays linear.
            found = lined.rfind("\n", searched, m.start() + 1)
            start = start if found < 0 else found
            searched = m.start() + 1
            if self.head is None or self.head.fullmatch(lined, start + 1, m.start()):
                yield start


def _rule(pattern: str | re.Pattern[str], head: str | None = None) -> _Rule:
    compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, re.MULTILINE)
    return _Rule(compiled, None if head is None else re.compile(head))


def _rules(*patterns: str) -> tuple[_Rule, ...]:
    """One rule per pattern: an alternation of literals would lose the literal prefix."""
    return tuple(_rule(p) for p in patterns)


def _fires(rules: Iterable[_Rule], lined: str) -> bool:
    return any(next(rule.line_starts(lined), None) is not None for rule in rules)


def _block(rules: Iterable[_Rule], lined: str, single_line: bool) -> bool:
    """Two distinct lines fire (a block), or the one line of a one-line input does."""
    need = 1 if single_line else 2
    starts: set[int] = set()
    for rule in rules:
        for start in rule.line_starts(lined):
            starts.add(start)
            if len(starts) >= need:
                return True
    return False


_IDENT = r"[A-Za-z_][\w.]*"

# --- error --------------------------------------------------------------------------------------
_ERROR_RULES = (
    _rule(
        _anchored(
            r"Traceback \(most recent call last\):",
            r"Exception in thread ",
            r"Caused by: [\w.$]+(?:Error|Exception)\b",
            r"panic: ",
            r"goroutine \d+ \[running\]:",
            # JS/TS frames "    at fn (file.js:10:5)", "    at file.js:10:5"; Java "\tat a.B(B.java:42)"
            r"[ \t]++at [^\n]*?:\d+(?::\d+)?\)?[ \t]*$",
            r"(?:fatal(?: error)?|error)(?:\[[A-Za-z]?\d+\])?:[ \t]",  # rustc, git, Go runtime
            r"(?:ERROR|FATAL|CRITICAL)\b[: \t]",
            r"FAILED\b",
            r"--- FAIL: ",
            r"FAIL[ \t]",
            r"E {2,}\S",  # pytest's failure detail lines
            r"\[exit [1-9]\d*\]",
        )
    ),
    # "ValueError: x", "pkg.mod.FooException", "Error: x" in column 0 only: indented ones are
    # usually docstrings ("Raises:" sections), and "error handling" has no colon.
    _rule(r"(?:Error|Exception)(?::[ \t]|:?[ \t]*$)", head=rf"(?:{_IDENT})?"),
    # Compiler diagnostics: "a.c:10:5: error: x", "a.ts(3,4): error TS2322: x".
    _rule(r": (?:fatal )?error\b", head=r"\S*[\d)]"),
    *_rules(
        r"npm ERR!",
        r"Segmentation fault",
        r"\(core dumped\)",
        r"exit(?:ed)?(?: with)? (?:code|status)[ :=]*[1-9]\d*\b",
        r"\*\*\* \[[^\]\n]{0,256}\] Error \d+",  # make
        r": command not found$",
        r"No such file or directory",
        r"FAILED(?<=[ \t]FAILED)(?:[ \t]+\[[ \t]*\d+%\])?[ \t]*$",  # pytest -v: "t.py::t FAILED [50%]"
    ),
)

# --- code ---------------------------------------------------------------------------------------
_CODE_STRONG = _rule(
    _anchored(
        r"[ \t]*+(?:```|~~~)",
        r"diff --git ",
        r"@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@",
        r"#include[ \t]*[<\"]",
        r"package [a-z][\w.]*;?[ \t]*$",
        r"#!/",
    )
)
_HEREDOC = _rule(r"<<-?[ \t]*['\"]?[A-Z_]{2,}['\"]?[ \t]*(?:[>|&;)]|$)")
_CODE_LINE_RULES = (
    _rule(
        _anchored(
            # The lookahead rejects most prose and log lines (capitalised words, digits) at once.
            r"[ \t]*+(?=[a-z@}\])>/\"'.]|[A-Z][A-Z])(?:"
            + "|".join(
                (
                    r"def[ \t]+\w+[ \t]*\(",
                    r"async[ \t]+(?:def|fn|function)[ \t]",
                    r"class[ \t]+\w+[ \t]*(?:\([^)\n]*\))?[ \t]*:",
                    r"class[ \t]+\w+[^\n]*\{[ \t]*$",
                    r"func[ \t]+(?:\([^)\n]*\)[ \t]*)?\w+[ \t]*\(",
                    r"fn[ \t]+\w+[ \t]*[<(]",
                    r"pub(?:\([\w ]+\))?[ \t]+(?:fn|struct|enum|mod|use|const|trait|impl)\b",
                    # "import os", "import a.b as c, d" and nothing more: "import the data" is prose.
                    r"import[ \t]+[\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*"
                    r"[ \t]*;?[ \t]*$",
                    r"import[ \t]+[^\n]{0,300}[ \t]from[ \t]+['\"][^'\"\n]+['\"];?[ \t]*$",
                    r"import[ \t]+['\"]",
                    r"from[ \t]+\.*[\w.]*[ \t]+import[ \t]+[\w*(]",
                    r"(?:const|let|var)[ \t]+[\w${}\[\], ]{1,200}?[ \t]*(?::[^=\n]{1,200})?=[^=]",
                    r"export[ \t]+(?:default|const|let|var|function|class|interface|type|enum|abstract)\b",
                    r"(?:interface|struct|enum)[ \t]+\w+[^\n]*\{[ \t]*$",
                    r"type[ \t]+\w+[ \t]+(?:struct|interface)[ \t]*\{",
                    r"(?:public|private|protected|static)[ \t]+[\w<>\[\], ]{1,120}[ \t]+\w+[ \t]*\(",
                    r"(?:public|abstract)[ \t]+class[ \t]+\w+",
                    r"for[ \t]+[\w, ()]{1,120}[ \t]+in[ \t]+[^\n]+:[ \t]*$",
                    r"(?:if|elif|while|with)[ \t]+[^\n]+:[ \t]*$",
                    r"(?:try|else|finally)[ \t]*:[ \t]*$",
                    r"except\b[^\n]*:[ \t]*$",
                    r"@[A-Za-z_][\w.]*(?:\([^\n]*\))?[ \t]*$",
                    r"[}\])]+[;,)]*[ \t]*$",
                    r">>> ",
                    r"(?:\"\"\"|\'\'\')",  # docstring delimiters
                    r"(?:SELECT|INSERT INTO|UPDATE|DELETE FROM|CREATE TABLE|ALTER TABLE)\b",
                    r"//[ \t]",
                    # Shell command lines. Tools whose names are not English words take any argument;
                    # interpreters need a flag or a file; the rest a known subcommand or a flag.
                    r"(?:sudo[ \t]+)?(?:"
                    r"(?:ls|cat|cd|echo|grep|rg|sed|awk|curl|wget|chmod|chown|mkdir|tar|xargs|pytest|npx|nl)"
                    r"[ \t]+\S"
                    r"|(?:python3?|node|ruby|perl|bash|sh|zsh)[ \t]+(?:-|[\w./-]*\.\w)"
                    r"|git[ \t]+(?:add|commit|diff|log|status|checkout|switch|branch|merge|rebase|push|pull"
                    r"|fetch|clone|stash|reset|apply|show|grep|blame|cherry-pick|restore|init|remote)\b"
                    r"|go[ \t]+(?:run|test|build|mod|get|vet|fmt|install)\b"
                    r"|cargo[ \t]+(?:build|run|test|check|add|fmt|clippy|install)\b"
                    r"|(?:npm|yarn|pnpm)[ \t]+(?:install|i|run|test|ci|start|add|exec)\b"
                    r"|pip3?[ \t]+(?:install|uninstall|show|list|freeze|download)\b"
                    r"|docker[ \t]+(?:run|build|compose|ps|exec|logs|pull|push|images|stop|rm)\b"
                    r"|kubectl[ \t]+(?:get|apply|describe|logs|delete|exec|rollout|create|edit)\b"
                    r"|(?:find|sort|head|tail|make|cp|mv|rm|touch|which|diff|patch|java|gcc|clang)"
                    r"[ \t]+-{1,2}[A-Za-z]"
                    r"|\./[\w.-]+/?[\w./-]*"
                    r")",
                )
            )
            + r")",
            # Indented, these are statements; in column 0 they are as likely to open a sentence.
            r"[ \t]++(?:return|raise|yield|assert)\b",
        )
    ),
    # "x = f(1)", "a.b[k] += 2": spaces around "=", so "PATH=/bin" (env output) is not code.
    _rule(r"=[ \t]+[^=\s]", head=rf"[ \t]*{_IDENT}(?:\[[^\]\n]*\])?[ \t]+(?:[-+*/%|&^]|//|\*\*)?"),
    _rule(r"\)[ \t]*;?[ \t]*$", head=rf"[ \t]*{_IDENT}\([^\n]*"),  # a bare call: "print(x)"
    *_rules(
        r"\{[ \t]*$",
        r";(?<=[\w)\]'\"];)[ \t]*$",
        r"\)[ \t]*=>",
        r"=>[ \t]*[{(]",
    ),
)

# --- decision -----------------------------------------------------------------------------------
# Run on the lowercased text (IGNORECASE would cost the literal prefix); the word boundary before
# each match is checked by `_any_word`, as a leading \b would too.
_APOS = "['\u2019]"
_DECISION_PATTERNS = tuple(
    re.compile(p)
    for p in (
        r"deci(?:ded\b|sion:)",
        rf"we(?: will|{_APOS}ll| are going to| should) (?:use|go with|adopt|switch to|stick with)\b",
        r"chose\b(?:(?!chose\b)[^.\n]){1,80}?\bover\b",  # stops at the next "chose": stays linear
        r"going with\b",
        rf"let(?:{_APOS}s| us) (?:use|go with|stick with)\b",
        r"instead of\b",
        r"trade[- ]?offs?\b",
        r"opted (?:for|to)\b",
        r"settled on\b",
        r"in favou?r of\b",
    )
)
_ADR = re.compile(r"ADR\b")


def _any_word(patterns: Iterable[re.Pattern[str]], text: str) -> bool:
    """Some pattern matches where the character before is not a letter or digit."""
    for pattern in patterns:
        for m in pattern.finditer(text):
            if m.start() == 0 or not text[m.start() - 1].isalnum():
                return True
    return False


# --- tool output --------------------------------------------------------------------------------
# Deliberately no "> " prompt: in column 0 that is a Markdown quote far more often.
_TOOL_STRONG_RULES = (
    _rule(
        _anchored(
            r"\$[ \t]+\S",
            r"PS [A-Z]:\\[^>\n]*> ",
            r"[-dlcbps][-rwxsStT]{9}[.@+]?[ \t]+\d+[ \t]",  # ls -l
            r"total \d+[ \t]*$",
            r"=+ [^\n]*\b\d+ (?:passed|failed|skipped|errors?|deselected|xfailed)\b[^\n]* =+[ \t]*$",
            r"Ran \d+ tests? in [\d.]+s[ \t]*$",
            r"(?:ok|FAIL)[ \t]+\S+[ \t]+[\d.]+s[ \t]*$",
            r"Tests?:[ \t]+\d+",
            r"[ \t]*+(?:"
            r"\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)+\|?[ \t]*$"  # Markdown table rule
            r"|\+(?:-{2,}\+)+[ \t]*$"  # +----+----+
            r"|[\u250c\u251c\u2514\u2554\u2560\u255a][\u2500\u2550\u252c\u253c\u2534\u2566\u256c]{3,}"
            r"|\[[ \t]*\d{1,3}%\]"  # cmake progress
            r")",
            r"-{3,}(?:[ \t]+-{3,})+[ \t]*$",
            r"={3,}(?:[ \t]+={3,})+[ \t]*$",
            r"Successfully (?:installed|built|tagged)\b",
            r"Requirement already satisfied",
            r"(?:Get|Hit|Ign):\d+ ",
            r"Reading package lists",
            r"npm (?:WARN|notice)\b",
            r"Step \d+/\d+ : ",
        )
    ),
    _rule(r"@[\w.-]++:[^\n$#@]{0,256}+[$#][ \t]", head=r"[\w.-]+"),  # user@host:~/dir$ cmd
    *_rules(
        r"passed\b(?<=\d passed)",
        r"%\|(?<=\d%\|)",  # tqdm progress bar
    ),
)
_TOOL_LINE_RULES = (
    _rule(
        _anchored(
            r"\d+[:-](?![\d\n])",  # grep -n on one file: "99:class Foo", context line "98-"
            r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}",  # timestamped log line
            # cargo / pip / go progress: "Compiling serde v1.0.1", "Collecting requests>=2".
            r"[ \t]*+(?:Compiling|Checking|Downloading|Downloaded|Installing|Linking)[ \t]+\S+[ \t]+\(?v?\d",
            r"[ \t]*+(?:Collecting|Uninstalling) [\w.\[\]-]+(?:[<>=!~]=?[\w.*]+)?[ \t]*$",
            r"[ \t]*+(?:Finished|Building wheels? for|Installing collected packages)\b",
            r"\{\"[^\n]*\}[ \t]*$",  # JSON Lines
        )
    ),
    _rule(r":\d+[:-]", head=r"[\w./-]*[\w.]"),  # grep -n: "path/to/file.py:12:"
)
_JSON_LOOSE = re.compile(r"\"[^\"\n]{1,200}\"[ \t]*:")


def _looks_like_json(stripped: str) -> bool:
    if not stripped or stripped[0] not in "{[" or stripped[-1] not in "}]":
        return False
    if len(stripped) > JSON_PARSE_LIMIT:
        return _JSON_LOOSE.search(stripped, 0, 4096) is not None
    try:
        json.loads(stripped)
    except ValueError:
        return False
    except RecursionError:  # brackets thousands deep: data, if not valid JSON, then near it
        return True
    return True


def detect_type(content: str) -> ContentType:
    """Classify `content`; when several types fire, error > code > decision > tool_output > prose."""
    stripped = content.strip()
    if not stripped:
        return ContentType.PROSE
    single_line = "\n" not in stripped
    if "\r" in content:
        content = content.replace("\r\n", "\n")  # so "$" also ends CRLF lines
    lined = "\n" + content
    if _fires(_ERROR_RULES, lined):
        return ContentType.ERROR
    if _fires((_CODE_STRONG, _HEREDOC), lined) or _block(_CODE_LINE_RULES, lined, single_line):
        return ContentType.CODE
    if _any_word(_DECISION_PATTERNS, lined.lower()) or _any_word((_ADR,), lined):
        return ContentType.DECISION
    if _fires(_TOOL_STRONG_RULES, lined) or _looks_like_json(stripped) or _block(_TOOL_LINE_RULES, lined, single_line):
        return ContentType.TOOL_OUTPUT
    return ContentType.PROSE


# --- tags ---------------------------------------------------------------------------------------
_EXTENSION_LANGUAGES: dict[str, str] = {
    "py": "python",
    "pyi": "python",
    "ipynb": "python",
    "go": "go",
    "ts": "typescript",
    "tsx": "typescript",
    "js": "javascript",
    "jsx": "javascript",
    "mjs": "javascript",
    "cjs": "javascript",
    "rs": "rust",
    "java": "java",
    "kt": "kotlin",
    "kts": "kotlin",
    "scala": "scala",
    "rb": "ruby",
    "c": "c",
    "h": "c",
    "cpp": "cpp",
    "cc": "cpp",
    "cxx": "cpp",
    "hpp": "cpp",
    "hh": "cpp",
    "cs": "csharp",
    "swift": "swift",
    "php": "php",
    "lua": "lua",
    "sh": "shell",
    "bash": "shell",
    "zsh": "shell",
    "ps1": "powershell",
    "sql": "sql",
    "yaml": "yaml",
    "yml": "yaml",
    "toml": "toml",
    "json": "json",
    "html": "html",
    "css": "css",
    "scss": "css",
    "ex": "elixir",
    "exs": "elixir",
    "erl": "erlang",
    "hs": "haskell",
    "dart": "dart",
    "r": "r",
    "jl": "julia",
    "pl": "perl",
    "proto": "protobuf",
    "vue": "vue",
    "zig": "zig",
}

_FENCE_LANGUAGES: dict[str, str] = {
    **{lang: lang for lang in set(_EXTENSION_LANGUAGES.values())},
    **{ext: lang for ext, lang in _EXTENSION_LANGUAGES.items() if len(ext) > 1},
    "python3": "python",
    "pycon": "python",
    "golang": "go",
    "node": "javascript",
    "c++": "cpp",
    "shell": "shell",
    "console": "shell",
    "shell-session": "shell",
    "sh-session": "shell",
    "dockerfile": "docker",
    "hcl": "terraform",
    "terraform": "terraform",
}

# A file name right before the dot (so "e.g." and "3.c" stay out), lowercase extension, and no
# further name characters after it ("main.py" yes, "main.pyc" no, "example.com" not listed).
_EXTENSION_RE = re.compile(r"\.(?<=[\w-]\.)(" + _alternation(_EXTENSION_LANGUAGES) + r")(?![\w-])")
_FENCE_LANG_RE = _anchored(r"[ \t]*(?:```|~~~)[ \t]*\{?\.?([\w+#-]+)")

_INFRA_ALIASES: dict[str, str] = {
    "docker": "docker",
    "dockerfile": "docker",
    "docker-compose": "docker",
    "kubernetes": "kubernetes",
    "k8s": "kubernetes",
    "kubectl": "kubernetes",
    "helm": "helm",
    "redis": "redis",
    "postgres": "postgres",
    "postgresql": "postgres",
    "psql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlite": "sqlite",
    "sqlite3": "sqlite",
    "mongodb": "mongodb",
    "mongo": "mongodb",
    "elasticsearch": "elasticsearch",
    "kafka": "kafka",
    "rabbitmq": "rabbitmq",
    "nginx": "nginx",
    "aws": "aws",
    "gcp": "gcp",
    "azure": "azure",
    "terraform": "terraform",
    "ansible": "ansible",
    "git": "git",
    "github": "github",
    "gitlab": "gitlab",
}
# Boundaries are "no letter or digit", not \b: "redis_client" is about redis, "redistribute" is not.
_INFRA_RE = re.compile(r"(?<![a-z0-9])(" + _alternation(_INFRA_ALIASES) + r")(?![a-z0-9])")
# "://" first so the engine scans for that literal; the scheme is checked behind it.
_URL_RE = re.compile(r"://(?:(?<=https://)|(?<=http://)|(?<=ftp://))[^\s/$.?#]")


def _first_seen(pairs: Iterable[tuple[int, str]]) -> list[str]:
    """Values ordered by the position they first appear at, each once."""
    first: dict[str, int] = {}
    for pos, value in pairs:
        if value not in first or pos < first[value]:
            first[value] = pos
    return sorted(first, key=lambda v: (first[v], v))


def _named_file(content: str, dot: int) -> bool:
    """The name before the extension at `dot` holds a letter: "v2.py" names a file, "3.c" does not."""
    start = dot
    while start > 0 and (content[start - 1].isalnum() or content[start - 1] in "_-"):
        start -= 1
    return any(c.isalpha() for c in content[start:dot])


def _languages(content: str) -> list[str]:
    pairs = [
        (m.start(), _EXTENSION_LANGUAGES[m.group(1)])
        for m in _EXTENSION_RE.finditer(content)
        if _named_file(content, m.start())
    ]
    for m in _FENCE_LANG_RE.finditer("\n" + content):
        lang = _FENCE_LANGUAGES.get(m.group(1).lower())
        if lang is not None:
            pairs.append((m.start(), lang))
    return _first_seen(pairs)


def _infrastructure(lowered: str) -> list[str]:
    return _first_seen((m.start(), _INFRA_ALIASES[m.group(1)]) for m in _INFRA_RE.finditer(lowered))


def auto_tags(content: str, content_type: ContentType | str) -> list[str]:
    """Up to 5 (AUTO_TAG_LIMIT) tags: the type, languages, infrastructure, then `reference` for a URL.

    Within languages and infrastructure the order is that of first mention, so the result is
    deterministic and the earliest subject comes first. Only the first TAG_SCAN_CHARS characters
    are read: with first-mention order and a cap of five, later text could only add tags to an
    item whose head names fewer than five subjects.
    """
    tags: list[str] = [str(ContentType(content_type))]
    head = content[:TAG_SCAN_CHARS]
    candidates = [*_languages(head), *_infrastructure(head.lower())]
    if _URL_RE.search(head):
        candidates.append("reference")
    for tag in candidates:
        if len(tags) >= AUTO_TAG_LIMIT:
            break
        if tag not in tags:
            tags.append(tag)
    return tags
