"""Secret redaction for text about to be stored (on by default in the server).

Each secret is replaced by `[REDACTED:<kind>]`. Where a secret is the value of something that is
not itself secret, only the value goes: `password=[REDACTED:password]`,
`postgres://app:[REDACTED:connection_string]@db:5432/x`, `Authorization: Bearer [REDACTED:...]`.

Decisions:
- `redact` returns one `Redaction(kind, count)` per kind found, in the order of REDACTION_KINDS.
  Positions are deliberately not reported: the caller only needs to know that something was
  removed, and a position plus a length would help to guess it.
- Specific token formats run first, generic `key = value` assignments last, so a GitHub token
  assigned to `password` is reported as `github_token`. A placeholder is never matched again and
  passes repeat until nothing changes, so `redact` is idempotent.
- A PEM private key cut off before its END line (a trimmed log) still loses its BEGIN line and
  the base64 and header lines after it.
- No generic entropy detector: base64 payloads (data URIs, hashes, git SHAs, UUIDs) are left
  alone. Only known formats and values assigned to secret-sounding keys are redacted.
- Keys are split in two: human-chosen ones (`password`, `passwd`, `passphrase`, `pwd`) redact
  any value that is not a placeholder; machine ones (`secret`, `api_key`, `token`, ...) only a
  value that looks generated (8+ characters mixing two of lower case, upper case and digits),
  because `token = "NAME"` in a lexer is not a secret.
- An unquoted value that is a bare identifier, an attribute (`self.password`) or an expression
  (`get_password()`, `Optional[str]`) is code, not a secret; except in an env file line
  (`DB_PASSWORD=hunter`: upper-case key, bare `=`), where values are always literal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from . import constants as C

REDACTION_KINDS: tuple[str, ...] = (
    "private_key",
    "anthropic_key",
    "openai_key",
    "github_token",
    "slack_token",
    "aws_access_key",
    "aws_secret_key",
    "connection_string",
    "bearer_token",
    "password",
)


@dataclass(frozen=True, slots=True)
class Redaction:
    """`count` secrets of one `kind` were replaced."""

    kind: str
    count: int


def placeholder(kind: str) -> str:
    return f"[REDACTED:{kind}]"


_DUMMIES = frozenset(
    {
        "secret", "password", "passwd", "pass", "pwd", "passphrase", "token", "apikey", "api_key",
        "key", "test", "testing", "example", "dummy", "fake", "foo", "bar", "baz", "changeme",
        "change_me", "redacted", "hidden", "none", "null", "nil", "undefined", "true", "false",
        "yes", "no", "required", "optional", "string", "str", "bytes", "int", "value", "xxx",
    }
)  # fmt: skip
_PLACEHOLDER_RE = re.compile(
    r"""[$<{%]                 # ${VAR}, $VAR, <password>, {{ secret }}, %(pw)s
    |\[REDACTED:               # already redacted
    |(?:\*+|x+|X+|\u2022+|\.+|\#+|-+|_+|\?+)$   # masked: ****, xxxx
    |[^\n]*(?:\.\.\.|\u2026)   # elided: "pbkdf2_sha256$..."
    |(?i:your|my[_-]|example|sample|dummy|fake|placeholder|changeme|(?:insert|enter|replace)[_-])
    """,
    re.VERBOSE,
)


def _is_placeholder(value: str) -> bool:
    return not value or value.lower() in _DUMMIES or _PLACEHOLDER_RE.match(value) is not None


def _looks_generated(value: str, min_length: int = C.MIN_MACHINE_SECRET) -> bool:
    classes = any(c.islower() for c in value) + any(c.isupper() for c in value) + any(c.isdigit() for c in value)
    return len(value) >= min_length and classes >= 2


def _has_digit_and_letter(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


# --- format-based secrets -------------------------------------------------------------------------
# Each pattern starts with a literal (word-boundary lookbehinds come after it), so the regex engine
# jumps between occurrences of that literal instead of trying every position.

_PRIVATE_KEY_RE = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9]+(?: [A-Z0-9]+)* )?PRIVATE KEY(?P<block> BLOCK)?-----"
    # Up to its END line, but never past another BEGIN: many unterminated blocks stay linear.
    r"(?:(?:(?!-----BEGIN ).)*?-----END (?P=label)?PRIVATE KEY(?P=block)?-----"
    # Cut off before its END line: take the base64 body and "Header: value" lines that follow.
    r"|(?:(?:\r?\n|\\n)(?:[A-Za-z0-9+/=]+|[\w-]+: [^\n]*))*)",
    re.DOTALL,
)
_ANTHROPIC_RE = re.compile(r"sk-ant-(?<![\w-]sk-ant-)(?P<body>[A-Za-z0-9_-]{20,})")
_OPENAI_RE = re.compile(r"sk-(?<![\w-]sk-)(?P<body>(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,})")
_GITHUB_RE = re.compile(
    r"gh[pousr]_(?<![A-Za-z0-9]gh[pousr]_)[A-Za-z0-9]{36,251}(?![A-Za-z0-9])"
    r"|github_pat_(?<![A-Za-z0-9]github_pat_)[A-Za-z0-9_]{22,255}(?![A-Za-z0-9_])"
)
_SLACK_RE = re.compile(
    r"xox[abposr]-(?<![A-Za-z0-9]xox[abposr]-)[A-Za-z0-9-]{10,}"
    r"|xapp-(?<![A-Za-z0-9]xapp-)\d-[A-Za-z0-9-]{10,}"
)
_AWS_ACCESS_RE = re.compile(r"A[KS]IA(?<![A-Za-z0-9]A[KS]IA)[A-Z0-9]{16}(?![A-Za-z0-9])")
# scheme://user:password@host. "/", "?" and "#" cannot occur in userinfo, so "host:8080/x@y" is
# safe; the password is greedy, so one holding an unescaped "@" runs to the last "@" before the host.
_CONNECTION_RE = re.compile(r"://(?<=[A-Za-z0-9]://)[^\s:/?#@'\"<>\[\]]*:(?P<value>[^\s/?#'\"<>]+)@(?=[A-Za-z0-9\[])")


def _anthropic_ok(m: re.Match[str]) -> bool:
    return _has_digit_and_letter(m["body"])


def _openai_ok(m: re.Match[str]) -> bool:
    body = m["body"]
    return not body.startswith("ant-") and _has_digit_and_letter(body)


def _slack_ok(m: re.Match[str]) -> bool:
    return any(c.isdigit() for c in m[0])


def _aws_access_ok(m: re.Match[str]) -> bool:
    return len(set(m[0][4:])) > 1  # "AKIAXXXXXXXXXXXXXXXX" is a documentation placeholder


def _connection_ok(m: re.Match[str]) -> bool:
    return not _is_placeholder(m["value"])


# (kind, pattern, check, group): a match that passes `check` has `group` (0: all of it) replaced.
_FORMATS: tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], bool] | None, int | str], ...] = (
    ("private_key", _PRIVATE_KEY_RE, None, 0),
    ("anthropic_key", _ANTHROPIC_RE, _anthropic_ok, 0),
    ("openai_key", _OPENAI_RE, _openai_ok, 0),
    ("github_token", _GITHUB_RE, None, 0),
    ("slack_token", _SLACK_RE, _slack_ok, 0),
    ("aws_access_key", _AWS_ACCESS_RE, _aws_access_ok, 0),
    ("connection_string", _CONNECTION_RE, _connection_ok, "value"),
)

# --- keyed secrets: a value after a telling word ------------------------------------------------
# Matched on the lowercased text (IGNORECASE would cost the literal prefix: 200 ms instead of a
# few on 1 MiB), whose indices equal the original's; the value itself is judged on the original.

_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _lower_aligned(text: str) -> str:
    """`text.lower()` with every index unchanged."""
    lowered = text.lower()
    if len(lowered) != len(text):  # U+0130 is the one code point that lowercases to two
        lowered = text.replace("\u0130", "i").lower()
        if len(lowered) != len(text):
            lowered = text.translate(_ASCII_LOWER)
    return lowered


_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")


def _key_start(lowered: str, end: int) -> int:
    """Start of the key-like token (letters, digits, `_.-`) that ends at `end`."""
    start = end
    while start > 0 and lowered[start - 1] in _KEY_CHARS:
        start -= 1
    return start


_SEP = r"[ \t]*(?:=>|:=|=(?![=~>])|:(?![:=]))[ \t]*"
# After the key: digits ("password2"), the key's closing quote, the separator, then a quoted value
# or one running to whitespace or a `&;,` separator (query strings, ODBC strings, lists).
_ASSIGNED = (
    r"\d*(?P<q>[\"']?)(?P<sep>" + _SEP + r")"
    r"(?:\"(?P<dq>[^\"\n\\]*(?:\\.[^\"\n\\]*)*)\"|'(?P<sq>[^'\n\\]*(?:\\.[^'\n\\]*)*)'"
    r"|(?P<bare>[^\s'\"`&;,]+))"
)

_AWS_SECRET_RE = re.compile(
    r"secret_?(?:access_?)?key[\"']?" + _SEP + r"[\"']?(?P<value>[a-z0-9/+=]{40})(?![a-z0-9/+=])"
)
_BEARER_RE = re.compile(
    rf"bearer(?<![a-z0-9]bearer)[ \t]+(?P<value>[a-z0-9._~+/-]{{{C.MIN_BEARER_TOKEN},}}=*)(?![a-z0-9._~+/=-])"
)
# The key ends in one of these words; whatever comes before is part of the key ("DB_PASSWORD").
_HUMAN_RE = re.compile(r"(?:pass(?:word|wd|phrase)|pwd)" + _ASSIGNED)
_MACHINE_RES = (
    re.compile(r"secret" + _ASSIGNED),
    re.compile(r"token" + _ASSIGNED),
    re.compile(
        r"key(?:(?<=api_key)|(?<=api-key)|(?<=apikey)|(?<=access_key)|(?<=access-key)|(?<=accesskey)"
        r"|(?<=private_key)|(?<=private-key)|(?<=privatekey)|(?<=secret_key)|(?<=secret-key)|(?<=secretkey))"
        + _ASSIGNED
    ),
)
_IDENTIFIER_RE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")

Span = tuple[int, int]


def _aws_secret(text: str, lowered: str, m: re.Match[str]) -> Span | None:
    start = m.start()
    if lowered.endswith("aws_", 0, start):
        start -= 4
    elif lowered.endswith("aws", 0, start):
        start -= 3
    elif "access" not in m[0]:
        return None  # a bare SECRET_KEY is Django's, not AWS's
    if start > 0 and lowered[start - 1].isalnum():
        return None
    return None if _is_placeholder(text[m.start("value") : m.end("value")]) else m.span("value")


def _bearer(text: str, lowered: str, m: re.Match[str]) -> Span | None:
    value = text[m.start("value") : m.end("value")]
    ok = _looks_generated(value, C.MIN_BEARER_TOKEN) and _has_digit_and_letter(value)
    return m.span("value") if ok and not _is_placeholder(value) else None


def _assigned_value(text: str, lowered: str, m: re.Match[str], human: bool) -> Span | None:
    for quoted in ("dq", "sq"):
        if m.group(quoted) is not None:
            value = text[m.start(quoted) : m.end(quoted)]
            if any(c.isspace() for c in value) or _is_placeholder(value):
                return None  # a message such as "Enter your password:", or a placeholder
            ok = len(value) >= C.MIN_HUMAN_SECRET if human else _looks_generated(value)
            return m.span(quoted) if ok else None
    start = m.start("bare")
    value = text[start : m.end("bare")].rstrip(")]}>")
    if _is_placeholder(value) or value.isdigit() or value[0] in "/~":
        return None  # "token: 42", "PWD=/home/me"
    key = text[_key_start(lowered, m.start()) : m.start("q")]
    env_line = key.isupper() and m["sep"] == "=" and not m["q"]
    if not env_line and (
        "(" in value
        or "[" in value
        or "{" in value
        or (_IDENTIFIER_RE.fullmatch(value) is not None and not any(c.isdigit() for c in value))
    ):
        return None  # code: a call, an index, a variable or an attribute
    ok = len(value) >= C.MIN_HUMAN_SECRET if human else _looks_generated(value)
    return (start, start + len(value)) if ok else None


def _human(text: str, lowered: str, m: re.Match[str]) -> Span | None:
    return _assigned_value(text, lowered, m, human=True)


def _machine(text: str, lowered: str, m: re.Match[str]) -> Span | None:
    return _assigned_value(text, lowered, m, human=False)


_Judge = Callable[[str, str, re.Match[str]], Span | None]

# (kind, patterns, judge): each match of a pattern in the lowercased text goes to `judge`, which
# returns the span of the secret value, or None. A match consumes its value, so the scan stays
# linear even on "password=password=...".
_KEYED: tuple[tuple[str, tuple[re.Pattern[str], ...], _Judge], ...] = (
    ("aws_secret_key", (_AWS_SECRET_RE,), _aws_secret),
    ("bearer_token", (_BEARER_RE,), _bearer),
    ("password", (_HUMAN_RE,), _human),
    ("password", _MACHINE_RES, _machine),
)


def _replace_spans(text: str, spans: list[Span], kind: str) -> tuple[str, int]:
    """`text` with each span replaced by the placeholder (overlapping ones once), and how many."""
    out: list[str] = []
    pos = 0
    for start, end in sorted(set(spans)):
        if start < pos:
            continue
        out.append(text[pos:start])
        out.append(placeholder(kind))
        pos = end
    out.append(text[pos:])
    return "".join(out), (len(out) - 1) // 2


def _keyed_spans(text: str, lowered: str, patterns: tuple[re.Pattern[str], ...], judge: _Judge) -> list[Span]:
    return [
        span for pattern in patterns for m in pattern.finditer(lowered) if (span := judge(text, lowered, m)) is not None
    ]


def _redact_once(text: str, counts: dict[str, int]) -> str:
    def apply(kind: str, spans: list[Span]) -> None:
        nonlocal text
        text, n = _replace_spans(text, spans, kind)
        counts[kind] = counts.get(kind, 0) + n

    for kind, pattern, check, group in _FORMATS:
        spans = [m.span(group) for m in pattern.finditer(text) if check is None or check(m)]
        if spans:
            apply(kind, spans)

    lowered = _lower_aligned(text)
    for kind, patterns, judge in _KEYED:
        spans = _keyed_spans(text, lowered, patterns, judge)
        if spans:
            apply(kind, spans)
            lowered = _lower_aligned(text)
    return text


def redact(text: str) -> tuple[str, list[Redaction]]:
    """`text` with every secret found replaced by `[REDACTED:<kind>]`, and what was replaced."""
    counts: dict[str, int] = {}
    # A replacement can change how its neighbour reads ("x...PASSWORD=[REDACTED:password]" now
    # ends a long run at "=", which reads as a bearer token), so passes repeat until nothing
    # changes: that is what makes redact(redact(t)) == redact(t). Text without secrets takes one.
    for _ in range(C.MAX_PASSES):
        redacted = _redact_once(text, counts)
        if redacted == text:
            break
        text = redacted
    return text, [Redaction(kind, counts[kind]) for kind in REDACTION_KINDS if kind in counts]
