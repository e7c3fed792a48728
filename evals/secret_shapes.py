"""Realistic fake credentials (one per shape) and near-misses that must stay untouched.

Shared by tests/content/test_redact.py, tests/mcp/test_redaction_protocol.py and `python -m
evals.redaction`. Every fake is assembled at import time from a prefix and a seeded random body,
so no token appears literally in the source (secret scanners stay quiet) and the table is the
same on every run.
"""

from __future__ import annotations

import base64
import random
import string
from dataclasses import dataclass

_RNG = random.Random(12)
_ALNUM = string.ascii_letters + string.digits
_LOWER_HEX = "0123456789abcdef"


def _body(n: int, alphabet: str = _ALNUM) -> str:
    # Retry until it mixes letters and digits, as generated tokens do.
    while True:
        s = "".join(_RNG.choice(alphabet) for _ in range(n))
        mixed = any(c.isdigit() for c in alphabet) and any(c.isalpha() for c in alphabet)
        if not mixed or (any(c.isdigit() for c in s) and any(c.isalpha() for c in s)):
            return s


def _b64url(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    kind: str  # the kind `redact` reports
    text: str  # what an agent might store
    secret: str  # must not survive redaction

    def __post_init__(self) -> None:
        assert self.secret in self.text, self.name


def _shapes() -> list[Shape]:
    pem_body = "\n".join(_body(64, _ALNUM + "+/") for _ in range(4))
    begin, end, key = "-----BEGIN ", "-----END ", "PRIVATE" + " KEY-----"
    jwt = (
        _b64url('{"alg":"HS256","typ":"JWT"}')
        + "."
        + _b64url('{"sub":"1234567890","name":"Ada","iat":1516239022}')
        + "."
        + _body(43, _ALNUM + "_-")
    )
    basic = base64.b64encode(b"deploy:" + _body(14).encode()).decode()
    azure = _body(86, _ALNUM + "+/") + "=="
    aws_secret = _body(40, _ALNUM + "+/")
    rows = [
        (
            "aws access key id",
            "aws_access_key",
            "export AWS_ACCESS_KEY_ID={s}",
            "AKIA" + _body(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
        ),
        ("aws secret access key", "aws_secret_key", "aws_secret_access_key = {s}", aws_secret),
        ("github classic pat ghp_", "github_token", "git clone https://github.com/o/r # token {s}", "ghp_" + _body(36)),
        ("github oauth gho_", "github_token", "GITHUB_TOKEN: {s}", "gho_" + _body(36)),
        ("github fine-grained github_pat_", "github_token", "token {s}", "github_pat_" + _body(22) + "_" + _body(59)),
        (
            "slack bot xoxb-",
            "slack_token",
            "SLACK_BOT_TOKEN={s}",
            "xoxb-" + _body(12, string.digits) + "-" + _body(13, string.digits) + "-" + _body(24),
        ),
        (
            "slack user xoxp-",
            "slack_token",
            "slack token {s}",
            "xoxp-" + _body(12, string.digits) + "-" + _body(12, string.digits) + "-" + _body(32, _LOWER_HEX),
        ),
        ("openai sk-", "openai_key", "OPENAI_API_KEY={s}", "sk-" + _body(48)),
        ("openai sk-proj-", "openai_key", 'client = OpenAI(api_key="{s}")', "sk-proj-" + _body(48, _ALNUM + "_-")),
        (
            "anthropic sk-ant-",
            "anthropic_key",
            "ANTHROPIC_API_KEY={s}",
            "sk-ant-api03-" + _body(93, _ALNUM + "_-") + "AA",
        ),
        ("pem rsa private key", "private_key", f"{begin}RSA {key}\n{{s}}\n{end}RSA {key}", pem_body),
        (
            "pem openssh private key",
            "private_key",
            f"cat id\n{begin}OPENSSH {key}\n{{s}}\n{end}OPENSSH {key}\n",
            pem_body,
        ),
        (
            "url userinfo postgres",
            "connection_string",
            "DATABASE_URL=postgres://app:{s}@db.internal:5432/prod",
            _body(16),
        ),
        (
            "url userinfo mongodb+srv",
            "connection_string",
            "mongodb+srv://admin:{s}@cluster0.ab1cd.mongodb.net/test",
            _body(20),
        ),
        ("url userinfo redis empty user", "connection_string", "REDIS_URL=redis://:{s}@cache:6379/0", _body(24)),
        (
            "git credentials https user:token",
            "connection_string",
            "https://x-access-token:{s}@github.com/o/r.git",
            _body(30),
        ),
        (
            "authorization bearer",
            "bearer_token",
            'curl -H "Authorization: Bearer {s}" https://api.x.io',
            _body(40, _ALNUM + "._-"),
        ),
        ("stripe secret sk_live_", "stripe_key", "STRIPE_SECRET={s}", "sk_" + "live_" + _body(99)),
        ("stripe restricted rk_live_", "stripe_key", "stripe.api_key = '{s}'", "rk_" + "live_" + _body(99)),
        ("stripe test sk_test_", "stripe_key", "use {s} in staging", "sk_" + "test_" + _body(24)),
        ("stripe webhook whsec_", "stripe_key", "endpoint secret: {s}", "whsec_" + _body(32)),
        ("bare jwt", "jwt", "the session cookie was {s} until it expired", jwt),
        ("google api key AIza", "google_api_key", "maps key {s}", "AIza" + _body(35, _ALNUM + "_-")),
        (
            "google oauth client secret GOCSPX-",
            "google_api_key",
            "client secret {s}",
            "GOCSPX-" + _body(28, _ALNUM + "_-"),
        ),
        (
            "gitlab pat glpat-",
            "gitlab_token",
            "CI_JOB: glab auth login --token {s}",
            "glpat-" + _body(20, _ALNUM + "_-"),
        ),
        (
            "hugging face hf_",
            "huggingface_token",
            "huggingface-cli login --token {s}",
            "hf_" + _body(34, string.ascii_letters),
        ),
        (
            "sendgrid SG.",
            "sendgrid_key",
            "SENDGRID={s}",
            "SG." + _body(22, _ALNUM + "_-") + "." + _body(43, _ALNUM + "_-"),
        ),
        ("npm token npm_", "npm_token", "//registry.npmjs.org/:_authToken={s}", "npm_" + _body(36)),
        ("twilio api key SK", "twilio_key", "twilio api key {s}", "SK" + _body(32, _LOWER_HEX)),
        (
            "docker pat dckr_pat_",
            "docker_token",
            "echo {s} | docker login -u me --password-stdin",
            "dckr_pat_" + _body(27, _ALNUM + "_-"),
        ),
        ("pypi token", "pypi_token", "TWINE_PASSWORD={s}", "pypi-AgEIcHlwaS5vcmc" + _body(60, _ALNUM + "_-")),
        ("authorization basic", "basic_auth", "Authorization: Basic {s}", basic),
        (
            "azure storage AccountKey=",
            "azure_key",
            "DefaultEndpointsProtocol=https;AccountName=st1;AccountKey={s};EndpointSuffix=core.windows.net",
            azure,
        ),
        (
            "azure service bus SharedAccessKey=",
            "azure_key",
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={s}",
            _body(43, _ALNUM + "+/") + "=",
        ),
        ("curl -u user:pass", "cli_password", "curl -u deploy:{s} https://ci.example.com/api", _body(14)),
        ("curl --user 'user:pass'", "cli_password", "curl --user 'admin:{s}' -X POST https://h/x", _body(12)),
        ("mysql -pPASS", "cli_password", "mysql -h db -u root -p{s} app < dump.sql", _body(12)),
        ("sshpass -p", "cli_password", "sshpass -p '{s}' ssh ops@10.0.0.4", _body(12)),
        ("redis-cli -a", "cli_password", "redis-cli -h cache -a {s} ping", _body(20)),
        ("--password value flag", "cli_password", "psql-wrapper --user app --password {s} --db prod", _body(12)),
        (".pgpass line", "password", "$ cat ~/.pgpass\ndb.internal:5432:prod:app:{s}\n", _body(14)),
        (".netrc line", "password", "machine api.heroku.com login me@x.io password {s}\n", _body(20, _LOWER_HEX + "-")),
        ("password with spaces", "password", 'password = "{s}"', "correct horse battery staple"),
        (
            "lowercase client_secret=",
            "password",
            "grant_type=client_credentials&client_id=abc&client_secret={s}",
            _body(40, "abcdefghijklmnopqrstuvwxyz0123456789~._-"),
        ),
        ("env DB_PASSWORD=", "password", "DB_PASSWORD={s}\nDB_USER=app", "hunter2-" + _body(6)),
        ("yaml password:", "password", "database:\n  password: {s}\n", _body(16)),
        ("json api_key", "password", '{{"api_key": "{s}"}}', _body(32)),
        ("x-api-key header", "password", "-H 'X-Api-Key: {s}'", _body(32)),
        ("signing key high-entropy", "password", "JWT_SIGNING_KEY={s}", _body(48, _ALNUM + "+/")),
        ("authorization token scheme", "bearer_token", "Authorization: token {s}", _body(40, _LOWER_HEX)),
    ]
    return [Shape(name, kind, template.format(s=secret), secret) for name, kind, template, secret in rows]


SHAPES: list[Shape] = _shapes()

# Text that looks a little like a credential but is not one: must come back unchanged.
NEAR_MISSES: list[str] = [
    "The password must be at least 12 characters; we never store it in plain text.",
    "Enter your password:",
    'print("Wrong password, try again.")',
    "docker run -p 8080:80 nginx",
    "mysql -h db -P3306 -u root -p app",
    "mysql -u root -p",
    "mkdir -p build/out && pytest -p no:randomly -q",
    "ssh -p 2222 me@host",
    "git push -u origin main",
    "python -u script.py",
    "docker exec -u 1000:1000 web ls",
    "def task_live_view(request): return render(request, 'x.html')",
    "sk_test_ prefixes are Stripe's test-mode keys; see docs",
    "the mask_live_region helper and disk_test_suite",
    "commit 3f9a1c2e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a9f fixed it",
    "id 123e4567-e89b-12d3-a456-426614174000 not found",
    'data = base64.b64decode("aGVsbG8gd29ybGQgdGhpcyBpcyBub3QgYSBzZWNyZXQ=")',
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "Basic usage: call foo() first.",
    "Authorization: Bearer <token>",
    "password = get_password()",
    "token = self.next_token()",
    "client_secret = os.environ['CLIENT_SECRET']",
    "src/app/views.py:120:12: E501 line too long (99 > 88 characters)",
    "astropy/io/fits/card.py:1:2:3: nothing",
    "machine learning model login flow",
    "the hf_hub_download function caches files",
    "npm_config_cache is set by npm itself",
    "SKIP_MIGRATIONS=1 python manage.py test",
    "AIza is the prefix of Google API keys",
    "glpat- is GitLab's token prefix",
    "eyJhbGciOi is what a JWT header starts with",
    "postgres://localhost:5432/app",
    "https://user@example.com/path",
    "curl -u $USER:$TOKEN https://api",
    "mysql -p$MYSQL_PASSWORD db",
    'password = "your password here"',
    "AccountKey=<your-key>",
    "secret_key = settings.SECRET_KEY",
    "SECRET_KEY = 'django-insecure-change-me'",
]
