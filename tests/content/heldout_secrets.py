"""Issue 38's held-out credential examples: written with the tuning examples (the issue-38 rows
of evals/secret_shapes.py) but never run while the detectors were built, so that their figure
says how the detectors do on variants nobody tuned for. Other wordings, other programs of the
same family, other places in a file. Bodies are seeded random, assembled at import time."""

from __future__ import annotations

import base64
import random
import string

from evals.secret_shapes import Shape

_RNG = random.Random(38)
_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"
_LOWER36 = string.ascii_lowercase + string.digits
_BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


def _body(n: int, alphabet: str = _ALNUM) -> str:
    while True:
        s = "".join(_RNG.choice(alphabet) for _ in range(n))
        if not (any(c.isdigit() for c in alphabet) and any(c.isalpha() for c in alphabet)):
            return s
        if any(c.isdigit() for c in s) and any(c.isalpha() for c in s):
            return s


def _b64url(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _rows() -> list[tuple[str, str, str]]:
    discord_bot = (
        _b64url("9" + _body(17, string.digits)) + "." + _body(6, _ALNUM + "_-") + "." + _body(27, _ALNUM + "_-")
    )
    pem = base64.b64encode(("-----BEGIN EC " + "PRIVATE KEY-----\n" + _body(120)).encode()).decode()
    return [
        (
            "discordapp canary webhook in a call",
            "requests.post('https://canary.discordapp.com/api/webhooks/" + _body(19, string.digits) + "/{s}', json=p)",
            _body(68, _ALNUM + "_-"),
        ),
        (
            "slack webhook as a yaml value",
            "alerts:\n  webhook: https://hooks.slack.com/services/T"
            + _body(10, string.ascii_uppercase + string.digits)
            + "/B"
            + _body(10, string.ascii_uppercase + string.digits)
            + "/{s}\n",
            _body(24),
        ),
        (
            "telegram token in an api url",
            "curl -s https://api.telegram.org/bot{s}/getUpdates | jq .",
            _body(9, string.digits) + ":AA" + _body(33, _ALNUM + "_-"),
        ),
        ("discord bot authorization header", "-H 'Authorization: Bot {s}'", discord_bot),
        (
            "twilio node client",
            "const client = require('twilio')('AC" + _body(32, _HEX) + "', '{s}');",
            _body(32, _HEX),
        ),
        (
            "service bus shared access signature",
            "SharedAccessSignature sr=https%3A%2F%2Fns.servicebus.windows.net&sig={s}&se=1767225600&skn=Root",
            _body(44, _ALNUM).replace("a", "%2B") + "%3D",
        ),
        ("kubeconfig as json", '{{"name": "admin", "user": {{"client-key-data": "{s}"}}}}', pem),
        (
            "kubeadm init --token=",
            "sudo kubeadm init --token={s} --pod-network-cidr=10.244.0.0/16",
            _body(6, _LOWER36) + "." + _body(16, _LOWER36),
        ),
        (
            "podman login -p",
            "podman login quay.io -u robot+ci -p {s}",
            _body(32, string.ascii_uppercase + string.digits),
        ),
        ("sqlcmd -P quoted", 'sqlcmd -S tcp:db,1433 -d app -U app -P "{s}" -i seed.sql', _body(18, _ALNUM + "!#")),
        (
            "openssl -passin pass:",
            "openssl pkcs12 -export -in c.pem -inkey k.pem -passin pass:{s} -out b.p12",
            _body(20),
        ),
        ("ldapmodify -w quoted", "ldapmodify -H ldaps://dc1 -D 'uid=svc,ou=ops' -w '{s}' -f change.ldif", _body(14)),
        ("rabbitmqctl change_password", "rabbitmqctl change_password guest {s}", _body(18)),
        (
            "connect.sid in a cookie header",
            "Cookie: _ga=GA1.2.3; connect.sid={s}; theme=dark",
            "s%3A" + _body(32, _ALNUM + "-_") + "." + _body(43, _ALNUM + "+/"),
        ),
        ("PHPSESSID in set-cookie", "Set-Cookie: PHPSESSID={s}; path=/; HttpOnly", _body(26, _LOWER36)),
        (
            "vault batch token header",
            "curl -H 'X-Vault-Token: {s}' $VAULT_ADDR/v1/secret/data/app",
            "hvb." + _body(120, _ALNUM + "_-"),
        ),
        (
            "digitalocean refresh token flag",
            "doctl compute droplet list --access-token {s}",
            "dor_v1_" + _body(64, _HEX),
        ),
        (
            "mapbox secret token prose",
            "use {s} for the SDK download",
            "sk." + _b64url('{"u":"geo","a":"' + _body(25, _LOWER36) + '"}') + "." + _body(22, _ALNUM + "_-"),
        ),
        ("age post-quantum identity", "cat key.txt\nAGE-SECRET-KEY-PQ-1{s}\n", _body(58, _BECH32)),
        (
            "putty v2 encrypted key",
            "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: aes256-cbc\nComment: imported\nPublic-Lines: 1\n"
            + _body(60, _ALNUM + "+/")
            + "\nPrivate-Lines: 2\n"
            + _body(64, _ALNUM + "+/")
            + "\n{s}\nPrivate-MAC: "
            + _body(40, _HEX)
            + "\n",
            _body(40, _ALNUM + "+/"),
        ),
        ("fernet key in python bytes", 'fernet = Fernet(b"{s}")', _body(43, _ALNUM + "_-") + "="),
        ("jwt key in yaml", "auth:\n  JWT_KEY: {s}\n", _body(64, _HEX)),
    ]


HELD_OUT: list[Shape] = [Shape(name, "", template.format(s=secret), secret) for name, template, secret in _rows()]
