"""The people of a team server: `--tokens-file`, a TOML list of who may call and what they reach,
checked by the SDK's TokenVerifier hook, and the verified person as a tool call sees it.

    [[tokens]]
    name = "alice"                      # shown in the audit trail
    token_sha256 = "<hex sha256 of the token>"   # the file never holds a token itself
    projects = ["/home/alice/alpha"]    # scopes this token may use; ["*"] for every one
    access = "write"                    # "read" or "write"

The file is re-read on SIGHUP (`PeopleVerifier.reload`); a token is revoked by removing its
entry. A `--token-file` token is one more person, "shared", with every project and write.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from .. import constants as C
from ..errors import InvalidArgumentError
from ..store.access import Caller

log = logging.getLogger(__name__)

# A tokens file is a list of people: anything larger is not one.
TOKENS_FILE_MAX_BYTES = 1 << 20
# The person a single `--token-file` token stands for.
SHARED_NAME = "shared"
_ACCESS = ("read", "write")


@dataclass(frozen=True, slots=True)
class Person:
    caller: Caller
    digest: bytes  # SHA-256 of the person's token


class PersonToken(AccessToken):
    """The SDK's AccessToken carrying the person it was issued to (the auth middleware keeps
    it for the request; `current_caller` reads it back in the tool call)."""

    person: str
    projects: list[str]
    write: bool

    def caller(self) -> Caller:
        return Caller.of(self.person, self.projects, self.write)


def current_caller() -> Caller | None:
    """The person whose bearer token the running request carried; None without a token."""
    token = get_access_token()
    return token.caller() if isinstance(token, PersonToken) else None


def shared_person(token: str) -> Person:
    return Person(Caller.of(SHARED_NAME, ["*"], True), hashlib.sha256(token.encode()).digest())


def load_people(path: Path) -> list[Person]:
    """The people `path` lists. Raises InvalidArgumentError, in one sentence naming the file
    and the entry, for anything it cannot use (never quoting a digest)."""
    try:
        with path.open("rb") as fh:
            data = fh.read(TOKENS_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read --tokens-file {path}: {exc.strerror or exc}") from exc
    if len(data) > TOKENS_FILE_MAX_BYTES:
        raise InvalidArgumentError(f"--tokens-file {path} is over {TOKENS_FILE_MAX_BYTES // 2**20} MiB")
    try:
        doc = tomllib.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidArgumentError(f"--tokens-file {path} is not valid TOML: {exc}") from exc
    entries = doc.get("tokens")
    if not isinstance(entries, list) or not entries:
        raise InvalidArgumentError(f"--tokens-file {path} lists no [[tokens]] entries")
    people: list[Person] = []
    names: set[str] = set()
    digests: set[bytes] = set()
    for n, entry in enumerate(entries, start=1):
        people.append(_person(path, n, entry))
        if people[-1].caller.name in names or people[-1].digest in digests:
            raise InvalidArgumentError(f"--tokens-file {path}: entry {n} repeats a name or a token of another entry")
        names.add(people[-1].caller.name)
        digests.add(people[-1].digest)
    return people


def _person(path: Path, n: int, entry: Any) -> Person:
    where = f"--tokens-file {path}: entry {n}"
    if not isinstance(entry, dict):
        raise InvalidArgumentError(f"{where} is not a table")
    unknown = sorted(set(entry) - {"name", "token_sha256", "projects", "access"})
    if unknown:
        raise InvalidArgumentError(f"{where} has unknown keys: {', '.join(unknown)}")
    name, digest, projects, access = (entry.get(k) for k in ("name", "token_sha256", "projects", "access"))
    if not isinstance(name, str) or not name.strip() or len(name) > 100 or not name.isprintable():
        raise InvalidArgumentError(f"{where} needs a name: one line of up to 100 characters")
    where = f"--tokens-file {path}: {name!r}"
    try:
        raw = bytes.fromhex(digest) if isinstance(digest, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != hashlib.sha256().digest_size:
        raise InvalidArgumentError(
            f'{where} needs token_sha256: the 64 hex digits `printf %s "$TOKEN" | sha256sum` prints'
        )
    if (
        not isinstance(projects, list)
        or not projects
        or not all(isinstance(p, str) and p.strip() and len(p) <= C.SCOPE_MAX_CHARS for p in projects)
    ):
        raise InvalidArgumentError(f'{where} needs projects: a list of project scopes, or ["*"] for every one')
    if access not in _ACCESS:
        raise InvalidArgumentError(f'{where} needs access = "read" or "write"')
    return Person(Caller.of(name, [p.strip() for p in projects], access == "write"), raw)


class PeopleVerifier:
    """The SDK's TokenVerifier over the people of a tokens file (and a shared token): the
    presented token's SHA-256 is compared with every person's in constant time."""

    def __init__(self, people: list[Person], path: Path | None = None, shared: Person | None = None) -> None:
        self._path = path
        self._shared = shared
        self._people = [*people, *([shared] if shared else [])]

    @classmethod
    def from_options(cls, token: str | None, tokens_file: Path | None) -> PeopleVerifier | None:
        """None when neither is given. Raises InvalidArgumentError for a tokens file it cannot use."""
        if token is None and tokens_file is None:
            return None
        people = load_people(tokens_file) if tokens_file is not None else []
        return cls(people, tokens_file, shared_person(token) if token is not None else None)

    @property
    def digests(self) -> frozenset[bytes]:
        return frozenset(p.digest for p in self._people)

    def reload(self) -> bool:
        """Read the tokens file again (on SIGHUP); a file it cannot use keeps the people it had,
        and says why on stderr. True when the new list is in use."""
        if self._path is None:
            return False
        try:
            people = load_people(self._path)
        except InvalidArgumentError as exc:
            log.error("kept the previous tokens: %s", exc)
            return False
        self._people = [*people, *([self._shared] if self._shared else [])]
        log.warning("tokens file re-read: %d people", len(self._people))
        return True

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode()).digest()
        found: Person | None = None
        for person in self._people:  # every one compared: the time says nothing of who matched
            if hmac.compare_digest(digest, person.digest):
                found = person
        if found is None:
            return None
        caller = found.caller
        # `token` is recorded by the auth middleware for the request: keep the secret out of it.
        return PersonToken(
            token="(bearer)",
            client_id=caller.name,
            scopes=[],
            person=caller.name,
            projects=sorted(caller.projects) if caller.projects is not None else ["*"],
            write=caller.write,
        )

    def __repr__(self) -> str:
        return f"PeopleVerifier({len(self._people)} people)"
