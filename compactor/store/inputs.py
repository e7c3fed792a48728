"""Validation and item building: a caller's input (or an exported record) checked field by
field, credentials redacted, and made into an `Item` ready for a `put` op.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .. import bounds
from .. import constants as C
from ..content.tags import merge_tags, parse_tags
from ..errors import InvalidArgumentError
from ..models import CONTENT_TYPES, ContentType, Item
from ..search.views import detect
from .state import ALL_SCOPES, _StateOps

if TYPE_CHECKING:
    from ..content.redact import Redaction

_VALID_ID = re.compile(rf"[a-z0-9][a-z0-9_-]{{{C.ID_MIN_CHARS - 1},{C.ID_MAX_CHARS - 1}}}")
_ID_RULE = f"{C.ID_MIN_CHARS}-{C.ID_MAX_CHARS} characters of a-z, 0-9, '-' or '_'"


_ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"  # no 0/o/1/l: ids get read aloud and retyped


def redact(text: str) -> tuple[str, list[Redaction]]:
    """compactor.content.redact's, imported at the first write: its ~100 patterns take ~15 ms to compile,
    which a start that only answers queries need not pay."""
    from ..content.redact import redact as scan

    return scan(text)


def _new_id() -> str:
    # 10 characters of a 32-letter alphabet: 50 random bits from one urandom call.
    n = int.from_bytes(secrets.token_bytes(7), "big")
    return "".join(_ID_ALPHABET[(n >> (5 * i)) & 31] for i in range(10))


@dataclass(slots=True)
class StoreInput:
    """One item to store, already validated for types by the caller's schema."""

    content: str
    summary: str | None = None
    tags: str | Sequence[str] | None = None
    importance: int = C.IMPORTANCE_DEFAULT
    pinned: bool = False
    # Importers pass a content-derived id so that importing twice stores nothing new.
    item_id: str | None = None
    scope: str | None = None  # None: the store's current scope; "global": every project


def _utf8_size(text: str, field: str) -> int:
    """Bytes of `text` as UTF-8; a lone surrogate (which no file or wire can carry) is the
    caller's mistake, reported as such rather than failing later in the journal write."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"{field} contains invalid Unicode (a lone surrogate at character {exc.start}); send valid text."
        ) from exc


def _check_importance(value: int, *, optional: bool = False) -> int:
    """`optional`: the caller may leave it out (update), so the sentence says null is allowed."""
    if isinstance(value, bool) or not isinstance(value, int) or not C.IMPORTANCE_MIN <= value <= C.IMPORTANCE_MAX:
        allowed = bounds.integer(C.IMPORTANCE_MIN, C.IMPORTANCE_MAX)
        raise InvalidArgumentError(
            bounds.must_be("importance", bounds.or_null(allowed) if optional else allowed, value)
        )
    return value


def file_view_fields(content: str, summary: str | None) -> dict[str, Any]:
    """An item's file-view fields (views.detect) for its content and summary."""
    found = detect(content, summary)
    if found is None:
        return {"file_command": None, "file_paths": (), "file_lines": ()}
    return {"file_command": found.command, "file_paths": found.paths, "file_lines": found.lines or ()}


class _Inputs(_StateOps):
    """Checking inputs and building items."""

    redact_secrets: bool
    _redacted: dict[str, int]  # kind -> count, for the current call
    _known_secrets: frozenset[bytes]  # SHA-256 of each secret `add_known_secret` was given
    scope: str

    def _build(self, inp: StoreInput, seq: int, now: float) -> Item:
        """A new item from a store input, its token counts left 0 for `_count_tokens`."""
        from ..content.classify import auto_tags, detect_type  # on the first write: a start need not compile it

        content = inp.content
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgumentError("content must be a non-empty string (not only whitespace).")
        size = _utf8_size(content, "content")
        if size > C.MAX_CONTENT_BYTES:
            raise InvalidArgumentError(
                f"content is {size:,} bytes; the limit is {C.MAX_CONTENT_BYTES:,} (1 MiB). "
                "Store a summary or split it into parts."
            )
        summary = self._check_summary(inp.summary)
        content, summary = self._redact(content, summary)
        importance = _check_importance(inp.importance)
        try:
            user_tags = parse_tags(self._redact_tags(inp.tags))
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(str(exc)) from exc
        for tag in user_tags:
            _utf8_size(tag, "tags")
        ctype = cast(ContentType, str(detect_type(content)))
        tags = merge_tags(user_tags, auto_tags(content, ctype))[: C.MAX_TAGS]
        if inp.item_id is not None:
            if not _VALID_ID.fullmatch(inp.item_id):
                raise InvalidArgumentError(f"an explicit id must be {_ID_RULE}.")
            item_id = inp.item_id
        else:
            item_id = _new_id()
            while item_id in self._s.items:
                item_id = _new_id()
        return Item(
            id=item_id,
            seq=seq,
            content=content,
            summary=summary,
            tags=tuple(tags),
            importance=importance,
            content_type=ctype,
            pinned=bool(inp.pinned),
            created_at=now,
            last_accessed_at=now,
            access_count=0,
            content_tokens=0,
            summary_tokens=0,
            scope=self._project(self._check_stored_scope(inp.scope) if inp.scope is not None else self.scope),
            **file_view_fields(content, summary),
        )

    def _count_tokens(self, items: Sequence[Item]) -> None:
        """Set the token counts of items just built (`_build`, `_build_record`). Counted in one run:
        interleaved with the rest of building an item, each count took about twice as long
        (the encoding's tables are out of the CPU caches by the time the next one starts)."""
        count = self.counter.count
        for item in items:
            item.content_tokens = count(item.content)
        for item in items:
            item.summary_tokens = count(item.summary)

    def _redact(self, content: str, summary: str | None) -> tuple[str, str | None]:
        """Credentials become [REDACTED:<kind>] before anything is indexed or written."""
        if not self.redact_secrets:
            return content, summary
        content = self._redact_known(content)
        summary = self._redact_known(summary) if summary is not None else None
        content, found = redact(content)
        for r in found:
            self._redacted[r.kind] = self._redacted.get(r.kind, 0) + r.count
        if summary is not None:
            summary, found = redact(summary)
            for r in found:
                self._redacted[r.kind] = self._redacted.get(r.kind, 0) + r.count
        return content, summary

    def _redact_text(self, text: str | None) -> str | None:
        """Any other free text of an item (an imported `quality`), redacted as content is."""
        if text is None or not self.redact_secrets:
            return text
        text, found = redact(self._redact_known(text))
        for r in found:
            self._redacted[r.kind] = self._redacted.get(r.kind, 0) + r.count
        return text

    def _redact_tags(self, tags: str | Sequence[str] | None) -> str | Sequence[str] | None:
        """Tags without the ones holding a credential: such a tag is dropped, not rewritten, as
        `[redacted:github_token]` would tag nothing. Checked before parse_tags lowercases them
        (`AKIA...` is only a key in upper case)."""
        if not self.redact_secrets or tags is None:
            return tags
        raw: list[Any] = tags.strip().split(",") if isinstance(tags, str) else list(tags)
        kept: list[Any] = []
        for tag in raw:
            if isinstance(tag, str) and self._redact_known(tag) != tag:
                continue
            found = redact(tag)[1] if isinstance(tag, str) else []  # parse_tags reports a non-string
            for r in found:
                self._redacted[r.kind] = self._redacted.get(r.kind, 0) + r.count
            if not found:
                kept.append(tag)
        return kept

    def add_known_secret(self, secret: str | bytes) -> None:
        """Redact `secret` wherever it is written into memory: a literal, or (bytes) the SHA-256
        of one, as a tokens file names its people's tokens."""
        import hashlib

        digest = secret if isinstance(secret, bytes) else hashlib.sha256(secret.encode()).digest()
        self._known_secrets = self._known_secrets | {digest}

    def _redact_known(self, text: str) -> str:
        from ..content.redact import KNOWN_SECRET_KIND, redact_known

        text, count = redact_known(text, self._known_secrets, C.TOKEN_MIN_CHARS)
        if count:
            self._redacted[KNOWN_SECRET_KIND] = self._redacted.get(KNOWN_SECRET_KIND, 0) + count
        return text

    def _project(self, scope: str) -> str:
        """`scope` if the running call's caller may store into it (AccessDeniedError if not)."""
        caller = self._caller
        return scope if caller is None else caller.check_project(scope)

    def _check_stored_scope(self, scope: str) -> str:
        """A scope names a project; one that holds a credential is refused rather than stored
        (rewriting it would file the item under a different project)."""
        scope = self._check_scope(scope)
        found = [r.kind for r in redact(scope)[1]] if self.redact_secrets else []
        if self.redact_secrets and self._redact_known(scope) != scope:
            found.append("the server's token")
        if found:
            kinds = ", ".join(found)
            raise InvalidArgumentError(f"scope holds what looks like a credential ({kinds}); name the project instead.")
        return scope

    def take_redactions(self) -> dict[str, int]:
        """What the last call redacted (kind -> count), and reset."""
        out, self._redacted = self._redacted, {}
        return out

    @staticmethod
    def _check_summary(summary: str | None) -> str | None:
        if summary is None:
            return None
        if not isinstance(summary, str):
            raise InvalidArgumentError("summary must be a string.")
        summary = summary.strip()
        if not summary:
            return None
        _utf8_size(summary, "summary")
        if len(summary) > C.MAX_SUMMARY_CHARS:
            allowed = bounds.or_null(bounds.string(hi=C.MAX_SUMMARY_CHARS))
            raise InvalidArgumentError(bounds.must_be("summary", allowed, summary))
        return summary

    def _build_record(self, rec: dict[str, Any], now: float) -> Item:
        """An Item from an exported record, every field checked as `_build` checks a new one
        (token counts left 0 for `_count_tokens`)."""
        from ..content.classify import auto_tags, detect_type

        if not isinstance(rec, dict):
            raise InvalidArgumentError("an item must be a JSON object.")
        content = rec.get("content")
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgumentError("content must be a non-empty string.")
        size = _utf8_size(content, "content")
        if size > C.MAX_CONTENT_BYTES:
            raise InvalidArgumentError(f"content is {size:,} bytes; the limit is {C.MAX_CONTENT_BYTES:,}.")
        item_id = rec.get("id")
        if not isinstance(item_id, str) or not _VALID_ID.fullmatch(item_id):
            raise InvalidArgumentError(f"id must be {_ID_RULE}.")
        if "content_offset" in rec:  # a page of the export tool: `compactor import` joins them
            raise InvalidArgumentError("content is one part of a larger item; join its parts before importing.")
        summary = self._check_summary(rec.get("summary"))
        content, summary = self._redact(content, summary)
        ctype = rec.get("content_type")
        if ctype not in CONTENT_TYPES:
            ctype = str(detect_type(content))
        try:
            # A tag holding a credential is dropped, as the store tool drops it.
            tags = (
                parse_tags(self._redact_tags(rec["tags"]))
                if "tags" in rec
                else merge_tags([], auto_tags(content, ctype))
            )
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(str(exc)) from exc
        if len(tags) > C.MAX_TAGS:
            raise InvalidArgumentError(f"{len(tags)} tags; at most {C.MAX_TAGS}.")

        def pick(key: str, ok: Callable[[Any], bool], default: Any) -> Any:
            value = rec.get(key, default)
            if not ok(value):
                shown = (
                    redact(self._redact_known(repr(value)))[0] if self.redact_secrets else repr(value)
                )  # never echo a credential
                raise InvalidArgumentError(f"{key} has an invalid value: {shown}.")
            return value

        def is_time(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e11

        def is_count(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0

        def is_ids(v: Any) -> bool:
            return isinstance(v, list | tuple) and all(isinstance(x, str) and _VALID_ID.fullmatch(x) for x in v)

        def is_ref(v: Any) -> bool:
            return v is None or (isinstance(v, str) and bool(_VALID_ID.fullmatch(v)))

        scope = rec.get("scope", self.scope)
        if not isinstance(scope, str):
            raise InvalidArgumentError("scope must be a string.")
        created = float(pick("created_at", is_time, now))
        depth = pick("depth", is_count, 0)
        children = tuple(pick("children", is_ids, ()))
        if bool(depth) != bool(children or rec.get("gone_children")):
            raise InvalidArgumentError("a summary node (depth >= 1) needs children, and only a node has them.")
        return Item(
            id=item_id,
            seq=0,
            content=content,
            summary=summary,
            tags=tuple(tags),
            importance=_check_importance(rec.get("importance", C.IMPORTANCE_DEFAULT)),
            content_type=cast(ContentType, ctype),
            pinned=pick("pinned", lambda v: isinstance(v, bool), False),
            created_at=created,
            last_accessed_at=float(pick("last_accessed_at", is_time, created)),
            access_count=pick("access_count", is_count, 0),
            content_tokens=0,
            summary_tokens=0,
            tier=pick("tier", lambda v: v in ("active", "archived"), "active"),
            view=pick("view", lambda v: v in ("content", "summary"), "content"),
            merged_into=pick("merged_into", is_ref, None),
            dup_of=pick("dup_of", is_ref, None),
            depth=depth,
            children=children,
            parents=tuple(pick("parents", is_ids, ())),
            quality=self._redact_text(pick("quality", lambda v: v is None or isinstance(v, str), None)),
            gone_children=tuple(pick("gone_children", is_ids, ())),
            children_tier=pick("children_tier", lambda v: v in ("active", "archived"), "archived"),
            scope=scope if scope == "" else self._check_stored_scope(scope),
            **(file_view_fields(content, summary) if not depth else {}),
        )

    def _settle_lineage(self, built: dict[str, Item]) -> list[str]:
        """Make the imported items' links two-way with what will exist: drop (and return) the
        nodes whose children do not list them, then every link to an item that is not there."""
        have = self._s.items

        def find(item_id: str) -> Item | None:
            return built.get(item_id) or have.get(item_id)

        dropped: list[str] = []
        changed = True
        while changed:  # a dropped d1 node is a missing child of its d2 parent
            changed = False
            for node in [it for it in built.values() if it.depth]:
                gone = set(node.gone_children)
                kids = [(c, find(c)) for c in node.children]
                if any(c not in gone and (k is None or node.id not in k.parents) for c, k in kids):
                    del built[node.id]
                    dropped.append(node.id)
                    changed = True
        for item in list(built.values()):
            parents = tuple(p for p in item.parents if (par := find(p)) is not None and item.id in par.children)
            changes: dict[str, Any] = {}
            if parents != item.parents:
                changes["parents"] = parents
            for key in ("merged_into", "dup_of"):
                ref = getattr(item, key)
                if ref is not None and (ref == item.id or find(ref) is None):
                    changes[key] = None
            if changes:
                built[item.id] = item.evolve(changes)
        return dropped

    @staticmethod
    def _user_tags(item: Item) -> list[str]:
        from ..content.classify import auto_tags

        auto = set(auto_tags(item.content, item.content_type))
        return [t for t in item.tags if t not in auto]

    @staticmethod
    def _check_scope(scope: str) -> str:
        scope = scope.strip()
        if not scope or len(scope) > C.SCOPE_MAX_CHARS or any(ch in scope for ch in "\n\r\x00"):
            raise InvalidArgumentError("scope must be a non-empty single-line name (or 'global', or 'all' to read).")
        if scope == ALL_SCOPES:
            raise InvalidArgumentError("'all' is for reading; store into a project scope or 'global'.")
        return scope
