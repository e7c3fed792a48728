"""Tests for compactor.content.redact.

tests/data/secrets.jsonl holds fake but well-formed secrets ("kind" set) and near-misses ("kind"
null). Token prefixes in that file are written as JSON \\u escapes so that secret scanners do not
flag the repository; the decoded strings are the real formats.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import FrozenInstanceError
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from compactor.content.redact import KNOWN_SECRET_KIND, REDACTION_KINDS, Redaction, placeholder, redact, redact_known
from evals.redaction import REVIEWED
from evals.secret_shapes import NEAR_MISSES as SHAPE_NEAR_MISSES
from evals.secret_shapes import SHAPES, Shape
from tests.content.heldout_secrets import HELD_OUT

DATA = Path(__file__).resolve().parents[1] / "data" / "secrets.jsonl"
# Windows of the real-agent corpus around credential-like words (`python -m evals.redaction
# --sample ...`), kept here so these tests do not need ../shared; the full corpus is measured by
# `python -m evals.redaction`.
CORPUS_SAMPLE = Path(__file__).resolve().parents[1] / "data" / "corpus_sample.jsonl"

ROWS: list[dict[str, Any]] = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
SECRETS = [row for row in ROWS if row["kind"] is not None]
NEAR_MISSES = [row for row in ROWS if row["kind"] is None]
# PEM armour assembled at run time, so that secret scanners do not flag this file.
BEGIN, END, KEY = "-----BEGIN ", "-----END ", "PRIVATE" + " KEY-----"


def test_corpus_size_and_coverage() -> None:
    print(f"\nsecrets corpus: {len(SECRETS)} secrets, {len(NEAR_MISSES)} near-misses", file=sys.stderr)
    assert len(SECRETS) >= 30
    assert len(NEAR_MISSES) >= 30
    # server_token is a literal the server names (test_known_secrets_...), not a shape.
    assert {row["kind"] for row in SECRETS} | {shape.kind for shape in SHAPES} == set(REDACTION_KINDS) - {
        KNOWN_SECRET_KIND
    }
    for row in SECRETS:
        assert row["secret"] in row["text"], row["note"]


@pytest.mark.parametrize("row", SECRETS, ids=[f"{r['kind']}: {r['note']}" for r in SECRETS])
def test_every_secret_is_caught_with_its_kind(row: dict[str, Any]) -> None:
    out, found = redact(row["text"])
    assert found == [Redaction(row["kind"], 1)]
    assert row["secret"] not in out
    assert placeholder(row["kind"]) in out


@pytest.mark.parametrize("row", NEAR_MISSES, ids=[r["note"] for r in NEAR_MISSES])
def test_near_misses_are_left_alone(row: dict[str, Any]) -> None:
    assert redact(row["text"]) == (row["text"], [])


@pytest.mark.parametrize("row", ROWS, ids=[r["note"] for r in ROWS])
def test_redact_is_idempotent(row: dict[str, Any]) -> None:
    once, _ = redact(row["text"])
    assert redact(once) == (once, [])


def test_all_rows_at_once() -> None:
    text = "\n\n".join(row["text"] for row in ROWS)
    out, found = redact(text)
    expected: dict[str, int] = {}
    for row in SECRETS:
        expected[row["kind"]] = expected.get(row["kind"], 0) + 1
    assert found == [Redaction(kind, expected[kind]) for kind in REDACTION_KINDS if kind in expected]
    assert not [row["note"] for row in SECRETS if row["secret"] in out]
    for row in NEAR_MISSES:
        assert row["text"] in out, row["note"]


# --- what is kept around a secret ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("password=Hunter2-Qx", "password=[REDACTED:password]"),
        ('  password: "Hunter2-Qx"  # db', '  password: "[REDACTED:password]"  # db'),
        ("DB_PASSWORD=Hunter2-Qx\nDB_USER=app", "DB_PASSWORD=[REDACTED:password]\nDB_USER=app"),
        (
            "postgres://app:Sup3rS3cret@db.example.com:5432/prod?sslmode=require",
            "postgres://app:[REDACTED:connection_string]@db.example.com:5432/prod?sslmode=require",
        ),
        (
            "Authorization: Bearer abcDEF0123456789ghiJKL",
            "Authorization: Bearer [REDACTED:bearer_token]",
        ),
        ("?q=1&api_key=abcDEF0123456789&page=2", "?q=1&api_key=[REDACTED:password]&page=2"),
        (
            "aws_secret_access_key=" + "wJalrXUtnFEMIK7MDENG" + "bPxRfiCYEXAMPLEKEY12",
            "aws_secret_access_key=[REDACTED:aws_secret_key]",
        ),
    ],
)
def test_only_the_secret_part_is_replaced(text: str, expected: str) -> None:
    assert redact(text)[0] == expected


def test_private_key_block_is_replaced_whole() -> None:
    body = "MIIEpAIBAAKCAQEA7bq9\nx0P3yW6yKzT1e2kQ"
    text = f"before\n{BEGIN}RSA {KEY}\n{body}\n{END}RSA {KEY}\nafter"
    assert redact(text) == ("before\n[REDACTED:private_key]\nafter", [Redaction("private_key", 1)])


def test_truncated_private_key_loses_its_body() -> None:
    text = f"{BEGIN}OPENSSH {KEY}\nb3BlbnNzaC1rZXktdjEAAAAA\nQyNTUxOQAAACDx\n[... 900 chars trimmed ...]"
    out, found = redact(text)
    assert found == [Redaction("private_key", 1)]
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in out
    assert "QyNTUxOQAAACDx" not in out


def test_anthropic_key_wins_over_openai() -> None:
    key = "sk-ant-api03-" + "a1B2c3D4e5" * 9 + "AA"
    assert redact(key) == ("[REDACTED:anthropic_key]", [Redaction("anthropic_key", 1)])


def test_counts_are_per_kind_in_kind_order() -> None:
    text = "password=Hunter2-Qx and passwd: Tr0ub4dor-3\nAKIA" + "ABCDEFGHIJ234567 AKIA" + "QRSTUVWXYZ234567"
    out, found = redact(text)
    assert found == [Redaction("aws_access_key", 2), Redaction("password", 2)]
    assert out.count("[REDACTED:") == 4


def test_redaction_is_frozen() -> None:
    r = Redaction("password", 1)
    with pytest.raises(FrozenInstanceError):
        r.count = 2  # type: ignore[misc]


def test_human_and_machine_keys_differ() -> None:
    # A person may pick a plain word as a password; a token or API key is always generated.
    assert redact("password='sunflower'")[1] == [Redaction("password", 1)]
    assert redact("token='sunflower'")[1] == []
    assert redact("token='sunFlower42x'")[1] == [Redaction("password", 1)]


def test_env_line_values_are_literal_but_code_values_are_not() -> None:
    assert redact("POSTGRES_PASSWORD=postgres")[1] == [Redaction("password", 1)]
    assert redact("connect(password=postgres)")[1] == []


def test_non_ascii_text_keeps_positions() -> None:
    # "\u0130" lowercases to two characters; matching on the lowercased text must not shift.
    text = "\u0130\u0130 password=Hunter2-Qx \u0130 token=abcDEF0123456789"
    assert redact(text)[0] == "\u0130\u0130 password=[REDACTED:password] \u0130 token=[REDACTED:password]"


# --- properties ----------------------------------------------------------------------------------

ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=300)  # no surrogates; control chars in
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _token(alphabet: str, size: int, max_size: int | None = None) -> st.SearchStrategy[str]:
    # A value holding "..." is elided ("pbkdf2_sha256$...": redact's placeholder rule), not a secret.
    text = st.text(st.sampled_from(alphabet), min_size=size, max_size=max_size or size)
    return text.filter(lambda s: "..." not in s) if "." in alphabet else text


# (line holding the secret, the secret) for every kind.
SECRET_LINES = st.one_of(
    _token("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    .filter(lambda s: len(set(s)) > 1)
    .map(lambda s: (f"key id AKIA{s} here", f"AKIA{s}")),
    _token(ALNUM, 36).map(lambda s: (f"token ghp_{s}", f"ghp_{s}")),
    _token(ALNUM + "_-", 20, 80).map(lambda s: (f"OPENAI_API_KEY=sk-proj-{s}a1", f"sk-proj-{s}a1")),
    _token(ALNUM + "_-", 20, 95).map(lambda s: (f"key: sk-ant-api03-{s}A1", f"sk-ant-api03-{s}A1")),
    _token("0123456789", 10, 13).flatmap(
        lambda n: _token(ALNUM, 24).map(lambda s: (f"SLACK=xoxb-{n}-{s}", f"xoxb-{n}-{s}"))
    ),
    _token(ALNUM + "/+", 40)
    .filter(lambda s: len(set(s)) > 2 and "AKIA" not in s and "ASIA" not in s)
    .map(lambda s: (f"aws_secret_access_key = {s}", s)),
    _token(ALNUM, 6, 30).map(lambda s: (f"DATABASE_URL=postgres://app:Q7{s}@db:5432/x", f"Q7{s}")),
    _token(ALNUM + "._~+/-", 20, 60).map(lambda s: (f"Authorization: Bearer Zz9{s}", f"Zz9{s}")),
    _token(ALNUM + "!@#^*+-_", 6, 30).map(lambda s: (f"password={'Zq9' + s}", "Zq9" + s)),
    _token(ALNUM, 12, 30).map(lambda s: (f'"api_key": "Aa1{s}"', f"Aa1{s}")),
    _token("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", 64).map(
        lambda s: (f"{BEGIN}{KEY}\n{s}\n{END}{KEY}", s)
    ),
)


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT)
def test_redact_never_crashes_and_is_idempotent(text: str) -> None:
    once, found = redact(text)
    assert all(r.kind in REDACTION_KINDS and r.count > 0 for r in found)
    assert redact(once) == (once, [])


@settings(max_examples=400, deadline=None)
@given(ANY_TEXT, SECRET_LINES, ANY_TEXT)
def test_redacted_output_never_holds_the_secret(before: str, line_and_secret: tuple[str, str], after: str) -> None:
    line, secret = line_and_secret
    assume(secret not in before and secret not in after)
    out, found = redact(f"{before}\n{line}\n{after}")
    assert secret not in out
    assert found


FRAGMENTS = st.sampled_from([row["text"] for row in ROWS] + ["\n", " ", "=", '"', ":", "@", "password", "Bearer "])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(FRAGMENTS, ANY_TEXT), max_size=8).map("".join))
def test_redact_is_idempotent_on_mixed_fragments(text: str) -> None:
    once, _ = redact(text)
    assert redact(once) == (once, [])


# --- real sessions and speed ---------------------------------------------------------------------


def test_real_sessions_redact_only_the_reviewed_literal_passwords() -> None:
    rows = [json.loads(line) for line in CORPUS_SAMPLE.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 300
    hits = {(row["traj"], row["seq"]): redact(row["text"]) for row in rows}
    hits = {where: result for where, result in hits.items() if result[1]}
    for (traj, seq), (_, found) in hits.items():
        print(f"  {traj} #{seq} {found}", file=sys.stderr)
    assert hits, "the sample holds the reviewed literal passwords"
    assert set(hits) <= REVIEWED  # anything else is a false positive
    assert all(r.kind == "password" for _, found in hits.values() for r in found)


def test_one_mebibyte_is_fast() -> None:
    rows = [json.loads(line)["text"] for line in CORPUS_SAMPLE.read_text(encoding="utf-8").splitlines()]
    text = "\n".join(rows + [shape.text for shape in SHAPES] + SHAPE_NEAR_MISSES)
    text = (text * (1 + (1 << 20) // len(text)))[: 1 << 20]
    start = time.perf_counter()
    redact(text)
    elapsed = time.perf_counter() - start
    print(f"\nredact 1 MiB of sample sessions and credentials: {elapsed * 1000:.1f} ms", file=sys.stderr)
    assert elapsed < 2.0  # catches a quadratic pattern, not scheduler noise


# --- the credential shapes of issue 12 -------------------------------------------------------------


def test_shape_table_covers_the_issue() -> None:
    assert len(SHAPES) >= 41
    assert len({shape.name for shape in SHAPES}) == len(SHAPES)


@pytest.mark.parametrize("shape", SHAPES, ids=[shape.name for shape in SHAPES])
def test_every_credential_shape_is_redacted(shape: Shape) -> None:
    out, found = redact(shape.text)
    assert shape.secret not in out
    assert found == [Redaction(shape.kind, 1)]
    assert redact(out) == (out, [])


@pytest.mark.parametrize("text", SHAPE_NEAR_MISSES)
def test_credential_near_misses_are_left_alone(text: str) -> None:
    assert redact(text) == (text, [])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("curl -u deploy:Q7x9Lm2Pz https://ci/x", "curl -u deploy:[REDACTED:cli_password] https://ci/x"),
        ("mysql -u root -pQ7x9Lm2Pz app", "mysql -u root -p[REDACTED:cli_password] app"),
        ("h.io:5432:db:app:Q7x9Lm2Pz", "h.io:5432:db:app:[REDACTED:password]"),
        ("machine h.io login me password Q7x9Lm2Pz", "machine h.io login me password [REDACTED:password]"),
        ("default login me password Q7x9Lm2Pz", "default login me password [REDACTED:password]"),
        ('password = "correct horse battery"', 'password = "[REDACTED:password]"'),
        ("AccountName=a;AccountKey=" + "Qx9+" * 10 + "==;x=y", "AccountName=a;AccountKey=[REDACTED:azure_key];x=y"),
    ],
)
def test_new_detectors_keep_the_context(text: str, expected: str) -> None:
    assert redact(text)[0] == expected


def test_passphrases_and_messages_differ() -> None:
    assert redact('password = "Please enter the new password."')[1] == []
    assert redact("'password': 'This field is required.'")[1] == []
    assert redact("password: 'two words'")[1] == [Redaction("password", 1)]


# --- issue 38: the held-out examples, literal secrets, ordinary developer text ----------------------

# Written with the tuning rows but never run while the detectors were built (see the module):
# 2 of 22 were caught before issue 38's detectors, 21 after. The miss is recorded, not hidden.
HELD_OUT_MISSED = {"fernet key in python bytes"}


@pytest.mark.parametrize("shape", HELD_OUT, ids=[shape.name for shape in HELD_OUT])
def test_held_out_credentials_are_caught(shape: Shape) -> None:
    out, found = redact(shape.text)
    if shape.name in HELD_OUT_MISSED:
        assert shape.secret in out  # still missed: when this fails, move it out of the set
        return
    assert shape.secret not in out and found
    assert redact(out) == (out, [])


def test_known_secrets_are_redacted_wherever_they_occur_whatever_they_look_like() -> None:
    token = "plainwordsonly-but-long"  # no pattern would call this a credential
    digests = frozenset({hashlib.sha256(token.encode()).digest()})
    text = f"config: {token}\nagain {token}; and {token[:-1]}"
    out, count = redact_known(text, digests)
    assert token not in out and token[:-1] in out and count == 2
    assert f"[REDACTED:{KNOWN_SECRET_KIND}]" in out and KNOWN_SECRET_KIND in REDACTION_KINDS
    assert redact_known(text, frozenset({hashlib.sha256(b"short").digest()})) == (text, 0)
    assert redact_known(out, digests) == (out, 0)


ORDINARY = [
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 (HEAD -> main, origin/main)",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "uuid = 3fa85f64-5717-4562-b3fc-2c963f66afa6",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    'fixture = base64.b64decode("TWFueSBoYW5kcyBtYWtlIGxpZ2h0IHdvcmsu")',
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7vbqajDhA deploy@ci",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE8s5DEDbHn5D1\n-----END PUBLIC KEY-----",
    "mapboxgl.accessToken = 'pk.eyJ1IjoiZXhhbXBsZSIsImEiOiJja2x2b2JvYm8wMDAwMnBvZ3h4In0.abcdefghijklmnopqrstuv';",
    "age -r age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p -o out.age in.txt",
    "Public-Lines: 6",
    "version = 1.2.3-rc.1+build.5",
    "OTM1NTY2MjUwNTg1NzYzODgw is base64 of an id, nothing else",
    "ERROR 2024-01-01T10:00:00Z worker-7 retry 3/5 after 1500ms",
    "kubeadm join 10.0.0.1:6443 --discovery-token-ca-cert-hash sha256:e3b0c44298fc1c149afbf4c8996fb924",
    "docker run -p 8080:80 -e DEBUG=1 nginx:1.25",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_developer_text_is_left_alone(text: str) -> None:
    assert redact(text) == (text, [])
