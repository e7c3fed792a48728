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
        # Issue 38: families built from each format's documentation (Discord, Slack, Telegram,
        # Twilio, Azure SAS, kubeconfig, the tools' man pages, Vault, DigitalOcean, Mapbox, PuTTY, age).
        (
            "discord webhook url",
            "chat_webhook",
            "DISCORD_WEBHOOK=https://discord.com/api/webhooks/" + _body(18, string.digits) + "/{s}",
            _body(68, _ALNUM + "_-"),
        ),
        (
            "slack incoming webhook url",
            "chat_webhook",
            "curl -X POST -d @msg.json https://hooks.slack.com/services/T"
            + _body(8, _UPPER_DIGITS)
            + "/B"
            + _body(10, _UPPER_DIGITS)
            + "/{s}",
            _body(24),
        ),
        ("telegram bot token", "telegram_token", "bot = telebot.TeleBot('{s}')", _telegram()),
        ("discord bot token", "discord_token", "client.run('{s}')", _discord()),
        (
            "twilio auth token as positional argument",
            "twilio_key",
            "client = Client('AC" + _body(32, _LOWER_HEX) + "', '{s}')",
            _body(32, _LOWER_HEX),
        ),
        (
            "azure sas sig=",
            "azure_key",
            "https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&ss=b&srt=o&sp=r"
            "&se=2026-01-01T00:00:00Z&spr=https&sig={s}",
            _body(43, _ALNUM + "+/").replace("+", "%2B").replace("/", "%2F") + "%3D",
        ),
        (
            "kubeconfig client-key-data",
            "private_key",
            "users:\n- name: admin\n  user:\n    client-certificate-data: "
            + base64.b64encode(b"-----BEGIN CERTIFICATE-----\n" + _body(60).encode()).decode()
            + "\n    client-key-data: {s}\n",
            base64.b64encode(("-----BEGIN RSA " + "PRIVATE KEY-----\n" + _body(90)).encode()).decode(),
        ),
        ("kubeconfig user token:", "password", "users:\n- name: ci\n  user:\n    token: {s}\n", _body(40, _LOWER_HEX)),
        (
            "kubeadm join --token",
            "cli_password",
            "kubeadm join 10.0.0.1:6443 --token {s} --discovery-token-ca-cert-hash sha256:" + _body(64, _LOWER_HEX),
            _body(6, _LOWER36) + "." + _body(16, _LOWER36),
        ),
        ("docker login -p", "cli_password", "docker login -u ci -p {s} registry.example.com", _body(20)),
        ("sqlcmd -P", "cli_password", "sqlcmd -S db01 -U sa -P {s} -Q 'SELECT 1'", _body(14)),
        (
            "openssl -passout pass:",
            "cli_password",
            "openssl genrsa -aes256 -passout pass:{s} -out key.pem 4096",
            _body(16),
        ),
        (
            "ldapsearch -w",
            "cli_password",
            "ldapsearch -x -H ldap://ldap -D cn=admin,dc=ex,dc=org -w {s} -b dc=ex,dc=org",
            _body(12),
        ),
        (
            "az login -p",
            "cli_password",
            "az login --service-principal -u http://ci-app -p {s} --tenant contoso.onmicrosoft.com",
            _body(34, _ALNUM + "~_.-"),
        ),
        ("rabbitmqctl add_user", "cli_password", "rabbitmqctl add_user deploy {s}", _body(16)),
        ("session cookie curl -b", "session_cookie", "curl -b 'sessionid={s}' https://app/api/me", _body(32, _LOWER36)),
        ("vault hvs. token", "vault_token", "vault login {s}", "hvs." + _body(90, _ALNUM + "_-")),
        ("digitalocean dop_v1_", "digitalocean_token", "doctl auth init -t {s}", "dop_v1_" + _body(64, _LOWER_HEX)),
        ("mapbox secret sk.", "mapbox_token", "the mapbox uploads key is {s}", _mapbox()),
        (
            "putty private key",
            "private_key",
            "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: ci\nPublic-Lines: 2\n"
            + _body(64, _ALNUM + "+/")
            + "\n"
            + _body(4, _ALNUM)
            + "\nPrivate-Lines: 1\n{s}\nPrivate-MAC: "
            + _body(64, _LOWER_HEX)
            + "\n",
            _body(44, _ALNUM + "+/"),
        ),
        (
            "age secret key",
            "private_key",
            "# created: 2021-01-02T15:30:45+01:00\n# public key: age1" + _body(58, _BECH32) + "\n{s}\n",
            "AGE-SECRET-KEY-1" + _body(58, _BECH32.upper()),
        ),
        ("FERNET_KEY= line", "password", "FERNET_KEY={s}", _body(43, _ALNUM + "_-") + "="),
        ("JWT_KEY= line", "password", "JWT_KEY={s}", _body(48, _ALNUM)),
    ]
    return [Shape(name, kind, template.format(s=secret), secret) for name, kind, template, secret in rows]


_UPPER_DIGITS = string.ascii_uppercase + string.digits
_LOWER36 = string.ascii_lowercase + string.digits
_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"  # the bech32 alphabet (age keys)


def _telegram() -> str:
    """A Telegram bot token as BotFather gives it: the bot id, a colon, 35 characters from AA."""
    return _body(10, string.digits) + ":AA" + _body(33, _ALNUM + "_-")


def _discord() -> str:
    """A Discord bot token: the base64 of the bot's numeric id, a timestamp, an HMAC."""
    bot_id = "1" + _body(18, string.digits)
    return _b64url(bot_id) + "." + _body(6, _ALNUM + "_-") + "." + _body(38, _ALNUM + "_-")


def _mapbox() -> str:
    """A Mapbox secret token: sk., a base64url JSON payload, a signature."""
    return "sk." + _b64url('{"u":"mapper","a":"' + _body(25, _LOWER36) + '"}') + "." + _body(22, _ALNUM + "_-")


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
    # Issue 38: what the new detectors must leave alone.
    "POST https://discord.com/api/webhooks/{webhook.id}/{webhook.token}",
    "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "docker login -u me --password-stdin registry.example.com",
    "openssl genrsa -aes256 -passout env:KEY_PASS -out key.pem",
    "openssl enc -d -pass file:/run/secrets/pw -in a.enc",
    "ldapsearch -x -W -D cn=admin,dc=ex,dc=org",
    "rabbitmqctl list_users",
    'rabbitmqctl add_user "$RABBIT_USER" "$RABBIT_PASS"',
    "kubeadm token list",
    "client-key-data: DATA+OMITTED",
    "    token: REDACTED",
    "session_id = request.cookies.get('sessionid')",
    "Cookie: theme=dark; lang=en-GB",
    "age1lvyvwawkr0mcnnnncaghunadrqkmuf9e6507x9y920xxpp866cnql7dp2z is the recipient",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@host",
    "the thumbnail is at https://cdn.example.com/a.png?w=200&sig=3fa9c1",
    "sqlcmd -S db01 -E -Q 'SELECT 1'",
    "pytest -p no:cacheprovider -k test_login",
]
