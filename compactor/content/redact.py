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

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

MIN_HUMAN_SECRET: Final = 4  # shorter `password=` values are test dummies ("x", "pw"), not credentials
MIN_MACHINE_SECRET: Final = 8  # generated keys/tokens are far longer; 8 keeps short lexer tokens out
MIN_BEARER_TOKEN: Final = 16  # OAuth/JWT bearer tokens are 20+ chars; shorter "Bearer xyz" is prose
MIN_PASSPHRASE_WORDS: Final = 2  # a quoted password with spaces: 2-5 words is a passphrase ...
MAX_PASSPHRASE_WORDS: Final = 5  # ... more reads as a message ("Please enter the new password")
MIN_RANDOM_LETTERS: Final = 20  # letters-only secrets (client_secret=AbXq...) are long; names shorter
MAX_PASSES: Final = 4  # text with secrets settles after one pass (a second one confirms); see `redact`
MIN_SESSION_COOKIE: Final = 16  # session ids are 26+ characters (PHPSESSID); shorter values are flags

REDACTION_KINDS: tuple[str, ...] = (
    "server_token",
    "private_key",
    "anthropic_key",
    "openai_key",
    "github_token",
    "slack_token",
    "aws_access_key",
    "aws_secret_key",
    "stripe_key",
    "jwt",
    "google_api_key",
    "gitlab_token",
    "huggingface_token",
    "sendgrid_key",
    "npm_token",
    "twilio_key",
    "docker_token",
    "pypi_token",
    "chat_webhook",
    "discord_token",
    "telegram_token",
    "vault_token",
    "digitalocean_token",
    "mapbox_token",
    "azure_key",
    "connection_string",
    "basic_auth",
    "bearer_token",
    "cli_password",
    "session_cookie",
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


# Keys their vendor publishes in client code: Mapbox public tokens, Stripe publishable keys.
_PUBLIC_KEY_RE = re.compile(r"pk\.eyJ|pk_(?:live|test)_")


def _is_placeholder(value: str) -> bool:
    return (
        not value
        or value.lower() in _DUMMIES
        or _PLACEHOLDER_RE.match(value) is not None
        or _PUBLIC_KEY_RE.match(value) is not None
    )


def _looks_generated(value: str, min_length: int = MIN_MACHINE_SECRET) -> bool:
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


# Vendor tokens with a fixed prefix. The lookbehind after each literal keeps the prefix at a word
# start, so `mask_live_...`, `hf_hub_download` and `npm_config_cache` are not tokens.
_STRIPE_RES = tuple(
    re.compile(rf"{prefix}(?<![A-Za-z0-9_]{prefix})[A-Za-z0-9]{{{size},247}}(?![A-Za-z0-9])")
    for prefix, size in (("sk_live_", 20), ("rk_live_", 20), ("sk_test_", 20), ("rk_test_", 20), ("whsec_", 24))
)
# header.payload.signature, the first two base64url JSON objects (`{"` encodes as `eyJ`).
_JWT_RE = re.compile(r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*")
_GOOGLE_RES = (
    re.compile(r"AIza(?<![A-Za-z0-9_-]AIza)[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
    re.compile(r"GOCSPX-(?<![A-Za-z0-9_-]GOCSPX-)[A-Za-z0-9_-]{28}(?![A-Za-z0-9_-])"),
    re.compile(r"ya29\.(?<![A-Za-z0-9_.-]ya29\.)[A-Za-z0-9_-]{30,}"),
)
_GITLAB_RE = re.compile(r"gl(?<![A-Za-z0-9_-]gl)(?:pat|dt|rt|ptt|cbt|ft|soat|imt)-[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])")
_HUGGINGFACE_RE = re.compile(r"hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{30,}(?![A-Za-z0-9_])")
_SENDGRID_RE = re.compile(r"SG\.(?<![A-Za-z0-9_.-]SG\.)[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])")
_NPM_RE = re.compile(r"npm_(?<![A-Za-z0-9_]npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9_])")
_TWILIO_RE = re.compile(r"SK(?<![A-Za-z0-9_]SK)[0-9a-f]{32}(?![A-Za-z0-9_])")
_DOCKER_RE = re.compile(r"dckr_(?:pat|oat)_(?<![A-Za-z0-9_]dckr_pat_)(?<![A-Za-z0-9_]dckr_oat_)[A-Za-z0-9_-]{27,}")
_PYPI_RE = re.compile(r"pypi-AgEIcHlwaS5vcmc(?<![A-Za-z0-9_-]pypi-AgEIcHlwaS5vcmc)[A-Za-z0-9_-]{50,}")
# Private keys that are not PEM: age identities (age-keygen(1)), the private half of a PuTTY .ppk
# file (its "Private-Lines: N" block; the public half and header stay), and a kubeconfig's
# base64 `client-key-data`.
_AGE_RE = re.compile(r"AGE-SECRET-KEY-(?<![A-Za-z0-9-]AGE-SECRET-KEY-)(?:PQ-)?1[0-9A-Z]{50,}")
_PUTTY_RE = re.compile(r"Private-Lines:[ \t]*\d+\r?\n(?P<value>[A-Za-z0-9+/=]+(?:\r?\n[A-Za-z0-9+/=]+)*)")
_CLIENT_KEY_DATA_RE = re.compile(r"client-key-data[\"']?[ \t]*:[ \t]*[\"']?(?P<value>[A-Za-z0-9+/]{40,}={0,2})")
# Chat webhooks: the URL's last part is the secret (Discord: /api/webhooks/<id>/<token>; Slack:
# hooks.slack.com/services/T.../B.../<secret>).
_DISCORD_WEBHOOK_RE = re.compile(
    r"discord(?:app)?\.com/api/(?:v\d+/)?webhooks/\d{15,21}/(?P<value>[A-Za-z0-9_-]{40,})(?![A-Za-z0-9_-])"
)
_SLACK_WEBHOOK_RE = re.compile(
    r"hooks\.slack\.com/(?:services|workflows|triggers)/(?:[A-Za-z0-9]+/){2,3}(?P<value>[A-Za-z0-9]{20,})(?![A-Za-z0-9])"
)
# A Discord bot token: base64 of the bot's numeric id, a 6-character timestamp, an HMAC.
_DISCORD_TOKEN_RE = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<id>[MNO][A-Za-z0-9_-]{22,26})\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,40}(?![A-Za-z0-9_.-])"
)
# A Telegram bot token from BotFather: the bot id, ":", 35 characters (they start with "AA").
_TELEGRAM_RE = re.compile(r"(?:(?<=/bot)|(?<![A-Za-z0-9_:]))\d{8,10}:AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])")
# HashiCorp Vault: service, batch and recovery tokens (hvs., hvb., hvr.).
_VAULT_RE = re.compile(r"hv(?<![A-Za-z0-9_.-]hv)[sbr]\.[A-Za-z0-9_-]{24,}(?![A-Za-z0-9_-])")
# DigitalOcean: personal access (dop_), OAuth access (doo_) and refresh (dor_) tokens.
_DIGITALOCEAN_RE = re.compile(r"do(?<![A-Za-z0-9_]do)[por]_v1_[a-f0-9]{64}(?![A-Za-z0-9])")
# Mapbox secret tokens (sk.<base64url JSON>.<signature>); public ones (pk.) are meant to be shown.
_MAPBOX_RE = re.compile(r"sk\.eyJ(?<![A-Za-z0-9_.]sk\.eyJ)[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}")
# Twilio's client takes the auth token as the argument after the Account SID (AC + 32 hex).
_TWILIO_POSITIONAL_RE = re.compile(
    r"AC(?<![A-Za-z0-9_]AC)[0-9a-f]{32}[\"']?[ \t]*,[ \t]*[\"']?(?P<value>[0-9a-f]{32})(?![A-Za-z0-9])"
)
# An Azure shared access signature: `sig=` among the SAS parameters (sv, sr, se, sp, skn).
_SAS_SIG_RE = re.compile(r"sig=(?<![A-Za-z0-9_]sig=)(?P<value>[A-Za-z0-9%+/=]{20,})")
_SAS_PARAM_RE = re.compile(r"(?:^|[?&;\s])(?:sv|sr|se|sp|skn)=")
# Passwords on a command line. `-p` is case-sensitive (`mysql -P3306` is a port), so these run on
# the original text; the command name must be on the same line, at most _CLI_SPAN characters before.
_CLI_SPAN = r"[^\n]{0,300}?[ \t]"
_Q = r"(?P<q>['\"]?)"
_CLI_RES = (
    *(
        re.compile(
            rf"{command}(?<![\w.-]{command})(?=[ \t])"
            + _CLI_SPAN
            + r"(?:-u|-U|--user|--proxy-user|-a|--auth)(?:[ \t]+|=)"
            + _Q
            + r"[^\s:'\"]*:(?P<value>[^\s'\"]+)"
        )
        for command in ("curl", "wget", "http", "https")
    ),
    *(
        re.compile(rf"{command}(?<![\w.-]{command})(?=[ \t])" + _CLI_SPAN + r"-p" + _Q + r"(?P<value>[^\s'\"]+)")
        for command in ("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mariadb")
    ),
    re.compile(r"sshpass[ \t]+-p[ \t]*" + _Q + r"(?P<value>[^\s'\"]+)"),
    re.compile(r"redis-cli(?=[ \t])" + _CLI_SPAN + r"-a[ \t]+" + _Q + r"(?P<value>[^\s'\"]+)"),
    re.compile(r"--pass(?:word|wd|phrase)?[ \t]+" + _Q + r"(?P<value>[^\s'\"-][^\s'\"]*)"),
    # A registry or cloud login: `docker login -u me -p PASSWORD`, `az login -u ID -p SECRET`.
    *(
        re.compile(
            rf"{command}(?<![\w.-]{command})[ \t]+login(?=[ \t])"
            + _CLI_SPAN
            + r"(?:-p|--password)(?:[ \t]+|=)"
            + _Q
            + r"(?P<value>[^\s'\"]+)"
        )
        for command in ("docker", "podman", "nerdctl", "buildah", "skopeo", "oras", "az")
    ),
    # SQL Server's tools take the password as -P (sqlcmd(1), bcp).
    *(
        re.compile(rf"{command}(?<![\w.-]{command})(?=[ \t])" + _CLI_SPAN + r"-P[ \t]*" + _Q + r"(?P<value>[^\s'\"]+)")
        for command in ("sqlcmd", "bcp")
    ),
    # OpenSSL's pass phrase arguments: `-passout pass:SECRET` (env:, file:, fd: name a place, not a secret).
    re.compile(r"-pass(?:in|out)?[ \t]+" + _Q + r"pass:(?P<value>[^\s'\"]+)"),
    # OpenLDAP's clients take the bind password as -w (-W prompts for it).
    re.compile(
        r"ldap(?:search|modify|add|delete|passwd|whoami|compare|modrdn|exop|url)?(?=[ \t])"
        + _CLI_SPAN
        + r"-w[ \t]*"
        + _Q
        + r"(?P<value>[^\s'\"]+)"
    ),
    # rabbitmqctl add_user NAME PASSWORD, change_password NAME PASSWORD.
    re.compile(
        r"rabbitmqctl(?=[ \t])[^\n]{0,200}?[ \t](?:add_user|change_password)[ \t]+(?:'[^'\n]*'|\"[^\"\n]*\"|\S+)[ \t]+"
        + _Q
        + r"(?P<value>[^\s'\"]+)"
    ),
)
# A token given to a flag with a space (`kubeadm join --token T`, `--access-token T`): `--token=T`
# is an assignment, which the keyed detectors read. Judged as a machine secret.
_TOKEN_FLAG_RE = re.compile(
    r"--(?:[a-z]+-)*(?:token|secret|api-key|apikey)[ \t]+" + _Q + r"(?P<value>[^\s'\"-][^\s'\"]*)"
)
_METAVAR_RE = re.compile(r"[A-Z][A-Z_]*")
# A .pgpass line (host:port:database:user:password) and a .netrc entry.
# Matched from the port on (a literal ":" to scan for); `_pgpass_ok` checks the host before it.
_PGPASS_RE = re.compile(r":(?:\d{1,5}|\*):[^\s:]+:[^\s:]+:(?P<value>\S+)$", re.MULTILINE)
_PGPASS_HOST_RE = re.compile(r"[A-Za-z0-9_.*-]+")
_NETRC_RES = tuple(
    re.compile(rf"{word}(?<![\w-]{word}){host}[ \t\r\n]+login[ \t\r\n]+\S+[ \t\r\n]+password[ \t]+(?P<value>\S+)")
    for word, host in (("machine", r"[ \t]+\S+"), ("default", ""))
)


def _value_ok(m: re.Match[str]) -> bool:
    return not _is_placeholder(m["value"]) and _has_digit_and_letter(m["value"])


def _discord_token_ok(m: re.Match[str]) -> bool:
    """The first part decodes to a Discord id (a snowflake: 17 to 20 digits)."""
    part = m["id"]
    try:
        decoded = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return False
    return decoded.isdigit() and 17 <= len(decoded) <= 20


def _sas_ok(m: re.Match[str]) -> bool:
    """`sig=` inside a run (no spaces or quotes) that also holds another SAS parameter."""
    text = m.string
    start = m.start()
    while start > 0 and not text[start - 1].isspace() and text[start - 1] not in "'\"<>":
        start -= 1
    end = m.end()
    while end < len(text) and not text[end].isspace() and text[end] not in "'\"<>":
        end += 1
    return _SAS_PARAM_RE.search(text, start, end) is not None and _has_digit_and_letter(m["value"])


def _token_flag_ok(m: re.Match[str]) -> bool:
    return _cli_ok(m) and _looks_generated(m["value"].rstrip(m["q"] or "\0"))


def _huggingface_ok(m: re.Match[str]) -> bool:
    return _looks_generated(m[0][3:])  # letters only, but mixed case


def _token_ok(m: re.Match[str]) -> bool:
    return _has_digit_and_letter(m[0])


def _pgpass_ok(m: re.Match[str]) -> bool:
    text = m.string
    line_start = text.rfind("\n", 0, m.start()) + 1
    return _PGPASS_HOST_RE.fullmatch(text, line_start, m.start()) is not None and _line_value_ok(m)


def _cli_ok(m: re.Match[str]) -> bool:
    value = m["value"]
    if m["q"] and value.endswith(m["q"]):
        value = value[: -len(m["q"])]
    return not (_is_placeholder(value) or value.isdigit() or _METAVAR_RE.fullmatch(value))


def _line_value_ok(m: re.Match[str]) -> bool:
    value = m["value"]
    return len(value) >= MIN_HUMAN_SECRET and not (_is_placeholder(value) or value.isdigit())


_Check = Callable[[re.Match[str]], bool] | None


def _head(pattern: re.Pattern[str]) -> tuple[str]:
    """The literal a pattern starts with, as its needle."""
    m = re.match(r"(?:[A-Za-z0-9_-]|\\\.)+", pattern.pattern)
    assert m is not None, pattern.pattern
    return (m[0].replace("\\.", "."),)


# (kind, needles, pattern, check, group): when one of `needles` is in the text (a substring test
# is ~20x cheaper than a regex scan, and most text holds none), a match of `pattern` that passes
# `check` has `group` (0: all of it) replaced.
_FORMATS: tuple[tuple[str, tuple[str, ...], re.Pattern[str], _Check, int | str], ...] = (
    ("private_key", ("PRIVATE KEY",), _PRIVATE_KEY_RE, None, 0),
    ("private_key", ("AGE-SECRET-KEY-",), _AGE_RE, None, 0),
    ("private_key", ("Private-Lines:",), _PUTTY_RE, None, "value"),
    ("private_key", ("client-key-data",), _CLIENT_KEY_DATA_RE, _value_ok, "value"),
    ("chat_webhook", ("/webhooks/",), _DISCORD_WEBHOOK_RE, _value_ok, "value"),
    ("chat_webhook", ("hooks.slack.com",), _SLACK_WEBHOOK_RE, _value_ok, "value"),
    ("telegram_token", (":AA",), _TELEGRAM_RE, None, 0),
    ("vault_token", ("hvs.", "hvb.", "hvr."), _VAULT_RE, _token_ok, 0),
    ("digitalocean_token", ("_v1_",), _DIGITALOCEAN_RE, None, 0),
    ("mapbox_token", ("sk.eyJ",), _MAPBOX_RE, None, 0),
    ("anthropic_key", ("sk-ant-",), _ANTHROPIC_RE, _anthropic_ok, 0),
    ("openai_key", ("sk-",), _OPENAI_RE, _openai_ok, 0),
    ("github_token", ("gh", "github_pat_"), _GITHUB_RE, None, 0),
    ("slack_token", ("xox", "xapp-"), _SLACK_RE, _slack_ok, 0),
    ("aws_access_key", ("AKIA", "ASIA"), _AWS_ACCESS_RE, _aws_access_ok, 0),
    *(("stripe_key", _head(p), p, _token_ok, 0) for p in _STRIPE_RES),
    ("jwt", ("eyJ",), _JWT_RE, None, 0),
    ("discord_token", ("M", "N", "O"), _DISCORD_TOKEN_RE, _discord_token_ok, 0),
    *(
        ("google_api_key", (needle,), p, None, 0)
        for needle, p in zip(("AIza", "GOCSPX-", "ya29."), _GOOGLE_RES, strict=True)
    ),
    ("gitlab_token", ("gl",), _GITLAB_RE, _token_ok, 0),
    ("huggingface_token", ("hf_",), _HUGGINGFACE_RE, _huggingface_ok, 0),
    ("sendgrid_key", ("SG.",), _SENDGRID_RE, None, 0),
    ("npm_token", ("npm_",), _NPM_RE, _token_ok, 0),
    ("twilio_key", ("SK",), _TWILIO_RE, _token_ok, 0),
    ("twilio_key", ("AC",), _TWILIO_POSITIONAL_RE, _value_ok, "value"),
    ("azure_key", ("sig=",), _SAS_SIG_RE, _sas_ok, "value"),
    ("docker_token", ("dckr_",), _DOCKER_RE, None, 0),
    ("pypi_token", ("pypi-",), _PYPI_RE, None, 0),
    ("connection_string", ("://",), _CONNECTION_RE, _connection_ok, "value"),
    *(("cli_password", _head(p), p, _cli_ok, "value") for p in _CLI_RES),
    ("cli_password", ("--",), _TOKEN_FLAG_RE, _token_flag_ok, "value"),
    ("password", (":",), _PGPASS_RE, _pgpass_ok, "value"),
    *(("password", _head(p), p, _line_value_ok, "value") for p in _NETRC_RES),
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
    rf"bearer(?<![a-z0-9]bearer)[ \t]+(?P<value>[a-z0-9._~+/-]{{{MIN_BEARER_TOKEN},}}=*)(?![a-z0-9._~+/=-])"
)
# The key ends in one of these words; whatever comes before is part of the key ("DB_PASSWORD").
_HUMAN_RE = re.compile(r"(?:pass(?:word|wd|phrase)|pwd)" + _ASSIGNED)
_MACHINE_RES = (
    re.compile(r"secret" + _ASSIGNED),
    re.compile(r"token" + _ASSIGNED),
    re.compile(r"credentials?" + _ASSIGNED),
    re.compile(
        r"key(?:(?<=api_key)|(?<=api-key)|(?<=apikey)|(?<=access_key)|(?<=access-key)|(?<=accesskey)"
        r"|(?<=private_key)|(?<=private-key)|(?<=privatekey)|(?<=secret_key)|(?<=secret-key)|(?<=secretkey)"
        r"|(?<=signing_key)|(?<=signing-key)|(?<=signingkey)|(?<=encryption_key)|(?<=encryptionkey)"
        r"|(?<=master_key)|(?<=masterkey)|(?<=client_key)|(?<=app_key)"
        # Signing and encryption keys named for what they sign (Django/Flask settings, Airflow).
        r"|(?<=jwt_key)|(?<=jwt-key)|(?<=jwtkey)|(?<=fernet_key)|(?<=fernetkey)|(?<=hmac_key)|(?<=hmac-key))"
        + _ASSIGNED
    ),
)
# `Authorization: Basic <base64 of user:password>`; the decoding check keeps "Basic usage" out.
_BASIC_RE = re.compile(r"basic(?<![a-z0-9_]basic)[ \t]+(?P<value>[a-z0-9+/]{8,}={0,2})(?![a-z0-9+/=])")
# Azure connection strings: `AccountKey=<base64>;` and `SharedAccessKey=<base64>`.
_AZURE_RE = re.compile(
    r"key(?:(?<=accountkey)|(?<=sharedaccesskey))[ \t]*=[ \t]*(?P<value>[a-z0-9+/]{20,}={0,2})(?![a-z0-9+/=])"
)
# `Authorization: token <t>` (GitHub, Django REST framework) and other non-Bearer schemes.
_AUTH_SCHEME_RE = re.compile(
    r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:token|apikey|api-key|key|sso-key)[ \t]+"
    r"(?P<value>[a-z0-9._~+/-]{16,}=*)(?![a-z0-9._~+/=-])"
)
_IDENTIFIER_RE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
# A session cookie (sessionid, PHPSESSID, JSESSIONID, connect.sid, laravel_session, ...) on a
# line that is about cookies: a Cookie/Set-Cookie header, curl's -b or --cookie, document.cookie.
_COOKIE_RE = re.compile(r"(?:sess|sid)[a-z0-9_.-]*=(?P<value>[^\s;,'\"&]+)")
_CURL_COOKIE_RE = re.compile(r"(?:^|[ \t])-b[ \t]+[\"']?$")

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


def _cookie(text: str, lowered: str, m: re.Match[str]) -> Span | None:
    name_start = _key_start(lowered, m.start())
    if name_start > 0 and lowered[name_start - 1] not in " \t;'\"=:":
        return None
    line_start = lowered.rfind("\n", 0, name_start) + 1
    line_end = lowered.find("\n", m.end())
    line = lowered[line_start : line_end if line_end >= 0 else len(lowered)]
    if "cookie" not in line and _CURL_COOKIE_RE.search(lowered, line_start, name_start) is None:
        return None
    value = text[m.start("value") : m.end("value")]
    ok = len(value) >= MIN_SESSION_COOKIE and _looks_generated(value) and not _is_placeholder(value)
    return m.span("value") if ok else None


def _azure(text: str, lowered: str, m: re.Match[str]) -> Span | None:
    return None if _is_placeholder(text[m.start("value") : m.end("value")]) else m.span("value")


def _basic(text: str, lowered: str, m: re.Match[str]) -> Span | None:
    try:
        decoded = base64.b64decode(text[m.start("value") : m.end("value")], validate=True).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return m.span("value") if sep and user and password and decoded.isprintable() else None


def _bearer(text: str, lowered: str, m: re.Match[str]) -> Span | None:
    value = text[m.start("value") : m.end("value")]
    ok = _looks_generated(value, MIN_BEARER_TOKEN) and _has_digit_and_letter(value)
    return m.span("value") if ok and not _is_placeholder(value) else None


def _assigned_value(text: str, lowered: str, m: re.Match[str], human: bool) -> Span | None:
    for quoted in ("dq", "sq"):
        if m.group(quoted) is not None:
            value = text[m.start(quoted) : m.end(quoted)]
            if _is_placeholder(value):
                return None
            if any(c.isspace() for c in value):
                # A passphrase ("correct horse battery staple"), not a message ("Enter your password:")
                return m.span(quoted) if human and _passphrase(value) else None
            ok = len(value) >= MIN_HUMAN_SECRET if human else _looks_generated(value)
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
        or (
            _IDENTIFIER_RE.fullmatch(value) is not None
            and not any(c.isdigit() for c in value)
            and not _random_letters(value)
        )
    ):
        return None  # code: a call, an index, a variable or an attribute
    ok = len(value) >= MIN_HUMAN_SECRET if human else _looks_generated(value)
    return (start, start + len(value)) if ok else None


_SENTENCE_END = frozenset(".!?:")


def _passphrase(value: str) -> bool:
    """A few words without sentence punctuation: `password = "correct horse battery staple"`."""
    words = value.split()
    return (
        MIN_PASSPHRASE_WORDS <= len(words) <= MAX_PASSPHRASE_WORDS
        and value[-1] not in _SENTENCE_END
        and not any(w.lower().strip(",;") in _DUMMIES for w in words)
    )


def _random_letters(value: str) -> bool:
    """A long run of letters with upper case scattered through it, as in a generated secret;
    a camelCase or snake_case name has one capital a word and no run of capitals."""
    if len(value) < MIN_RANDOM_LETTERS or "_" in value or "." in value:
        return False
    upper = sum(c.isupper() for c in value)
    return upper * 4 >= len(value) and upper * 4 <= len(value) * 3


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
    ("azure_key", (_AZURE_RE,), _azure),
    ("basic_auth", (_BASIC_RE,), _basic),
    ("bearer_token", (_BEARER_RE, _AUTH_SCHEME_RE), _bearer),
    ("session_cookie", (_COOKIE_RE,), _cookie),
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

    for kind, needles, pattern, check, group in _FORMATS:
        # Most formats have one needle: tested inline, as any() over a generator costs more
        # than the substring search itself on typical text.
        if (needles[0] not in text) if len(needles) == 1 else not any(needle in text for needle in needles):
            continue
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
    """`text` with every secret found replaced by `[REDACTED:<kind>]`, and what was replaced.
    The server's own tokens, which may look like anything, are `redact_known`'s."""
    counts: dict[str, int] = {}
    # A replacement can change how its neighbour reads ("x...PASSWORD=[REDACTED:password]" now
    # ends a long run at "=", which reads as a bearer token), so passes repeat until nothing
    # changes: that is what makes redact(redact(t)) == redact(t). Text without secrets takes one.
    for _ in range(MAX_PASSES):
        redacted = _redact_once(text, counts)
        if redacted == text:
            break
        text = redacted
    return text, [Redaction(kind, counts[kind]) for kind in REDACTION_KINDS if kind in counts]


# A known secret (a server's own bearer tokens, known by their SHA-256 only) is looked for in
# every run of characters a token can hold, and in its parts around "=" and ":" (`TOKEN=...`).
_TOKEN_RUN = re.compile(r"[^\s\"'`<>()\[\]{},;]{16,}")
KNOWN_SECRET_KIND: Final = "server_token"


def redact_known(text: str, digests: frozenset[bytes], min_chars: int = 16) -> tuple[str, int]:
    """`text` with every run whose SHA-256 is in `digests` replaced by
    `[REDACTED:server_token]`, and how many were. The secrets themselves need not be known."""
    import hashlib

    if not digests:
        return text, 0
    found: set[str] = set()
    for match in _TOKEN_RUN.finditer(text):
        run = match.group()
        # The run, what follows its first "=" or ":" (a padded base64 token keeps its "="),
        # each part between them, and each without the sentence's punctuation after it.
        parts = {run, *re.split(r"[=:]", run), *(run.split(sep, 1)[1] for sep in "=:" if sep in run)}
        for part in parts | {p.rstrip(".!?") for p in parts}:
            if len(part) >= min_chars and hashlib.sha256(part.encode()).digest() in digests:
                found.add(part)
    count = 0
    for secret in sorted(found, key=len, reverse=True):
        count += text.count(secret)
        text = text.replace(secret, f"[REDACTED:{KNOWN_SECRET_KIND}]")
    return text, count
